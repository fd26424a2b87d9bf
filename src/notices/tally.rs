//! Dead letters told once per destination per `[notices] window`, with the count of what
//! each notice stands for — so a destination that dead-letters everything (or a notices
//! URL that feeds Inlet its own notices) sends one notice a window, not one per delivery.
//!
//! Windows are aligned on the Unix epoch, so every instance computes the same one, and a
//! destination's notice of a window has an id naming both: the first dead letter of the
//! window writes it (the claim on the id decides, across instances), and the others of
//! that window find it written. What a notice stands for is counted in the `deliveries`
//! table: its own window's dead letters so far (`in_window`), and those of the windows
//! since the destination's previous notice that it did not count. The dead letters that
//! follow a notice in its window are told by the destination's next one — the next dead
//! letter's, or the one the periodic checks write once the window is over
//! ([`Pending`]). A requeued dead letter is no longer dead, and one dead when it was
//! written (a filter that failed) is counted with the window it fell in: the counts are
//! those of the table when each notice is written.

use super::notice::{Notice, Tally};
use super::store::counted_in_window;
use crate::db::DbConnection;
use crate::delivery::DestinationKey;
use crate::delivery::{count_dead_between, latest_dead, DeadLetter};
use chrono::{DateTime, Utc};
use diesel::QueryResult;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// The most earlier windows looked at for a destination's previous notice.
const MAX_LOOKBACK: i64 = 64;

/// The windows and how often the checks run.
#[derive(Debug, Clone, Copy)]
pub struct Spans {
    /// `[notices] window`: one notice per destination per window.
    pub window: Duration,
    /// `[notices] check_interval`: how late the checks may look at an ended window.
    pub check_interval: Duration,
}

impl Spans {
    fn window(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.window).unwrap_or(chrono::Duration::MAX)
    }

    /// The start of the window `at` falls in.
    pub fn window_start(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        let span = i64::try_from(self.window.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let millis = at.timestamp_millis();
        DateTime::from_timestamp_millis(millis - millis.rem_euclid(span)).unwrap_or(at)
    }

    /// How many earlier windows may hold the destination's previous notice that the checks
    /// have not followed yet: those of a check interval and a window, twice over.
    fn lookback(&self) -> i64 {
        let window = self.window.as_millis().max(1);
        let span = 2 * (self.window.as_millis() + self.check_interval.as_millis());
        i64::try_from(span.div_ceil(window)).map_or(MAX_LOOKBACK, |n| n.clamp(1, MAX_LOOKBACK))
    }
}

/// The notice of `destination`'s dead letters at `now`, unless its window has one already
/// or there is nothing to tell; `latest` the dead letter it describes (else the
/// destination's last one).
pub fn dead_letters_notice(
    conn: &mut DbConnection,
    destination: &DestinationKey,
    latest: Option<&DeadLetter>,
    spans: Spans,
    now: DateTime<Utc>,
) -> QueryResult<Option<Notice>> {
    let (source, name) = (destination.source(), destination.name());
    let window_start = spans.window_start(now);
    if counted_in_window(conn, &Notice::dead_lettered_id(source, name, window_start))?.is_some() {
        return Ok(None);
    }
    let (since, counted) = previous(conn, destination, window_start, spans)?;
    let earlier = count_dead_between(conn, destination, since, Some(window_start))?;
    let in_window = count_dead_between(conn, destination, window_start, None)?;
    let dead_letters = (earlier - counted).max(0) + in_window;
    if dead_letters == 0 {
        return Ok(None);
    }
    let latest = match latest {
        Some(latest) => latest.clone(),
        None => match latest_dead(conn, destination)? {
            Some(latest) => latest,
            None => return Ok(None),
        },
    };
    let tally = Tally {
        window_start,
        since,
        dead_letters,
        in_window,
    };
    Ok(Some(Notice::dead_lettered(&latest, tally, now)))
}

/// The start of the window of `destination`'s previous notice and how many of that
/// window it counted; without one in the windows looked at, the window before
/// `window_start` and none (a dead letter settled just before the window turned is then
/// still counted).
fn previous(
    conn: &mut DbConnection,
    destination: &DestinationKey,
    window_start: DateTime<Utc>,
    spans: Spans,
) -> QueryResult<(DateTime<Utc>, i64)> {
    let (source, name) = (destination.source(), destination.name());
    let mut earlier = window_start;
    for _ in 0..spans.lookback() {
        earlier -= spans.window();
        let id = Notice::dead_lettered_id(source, name, earlier);
        if let Some(counted) = counted_in_window(conn, &id)? {
            return Ok((earlier, counted));
        }
    }
    Ok((window_start - spans.window(), 0))
}

/// The destinations whose dead letters this instance saw settle, by the window they
/// settled in: once that window is over, the checks write the notice that tells the ones
/// its first notice did not. Lost with the process: the destination's next notice counts
/// them then.
#[derive(Debug, Default)]
pub struct Pending(Mutex<HashMap<DestinationKey, DateTime<Utc>>>);

impl Pending {
    /// `destination` had dead letters settle in the window starting at `window_start`.
    pub fn saw(&self, destination: &DestinationKey, window_start: DateTime<Utc>) {
        self.0.lock().insert(destination.clone(), window_start);
    }

    /// The destinations whose window has ended before `window_start`, forgotten here.
    pub fn over_before(&self, window_start: DateTime<Utc>) -> Vec<DestinationKey> {
        let mut pending = self.0.lock();
        let over: Vec<DestinationKey> = (pending.iter())
            .filter(|(_, seen)| **seen < window_start)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &over {
            pending.remove(key);
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(window: u64, check_interval: u64) -> Spans {
        Spans {
            window: Duration::from_secs(window),
            check_interval: Duration::from_secs(check_interval),
        }
    }

    #[test]
    fn windows_are_aligned_on_the_epoch_and_looked_back_over() {
        let minute = spans(60, 30);
        // 1,800,000,000 is a whole number of minutes since the epoch.
        let at = DateTime::from_timestamp(1_800_000_119, 999_000_000).unwrap_or_default();
        let start = minute.window_start(at);
        assert_eq!(start.timestamp(), 1_800_000_060);
        assert_eq!(minute.window_start(start), start);
        assert_eq!(minute.lookback(), 3);
        assert_eq!(spans(1, 30).lookback(), 62);
        assert_eq!(spans(1, 3600).lookback(), MAX_LOOKBACK);
        assert_eq!(spans(86_400, 30).lookback(), 3);
    }

    #[test]
    fn a_destination_is_pending_until_its_window_is_over() {
        let pending = Pending::default();
        let at = |secs| DateTime::from_timestamp(secs, 0).unwrap_or_default();
        let app = DestinationKey::stored("stripe".to_owned(), "app".to_owned());
        pending.saw(&app, at(60));
        assert!(pending.over_before(at(60)).is_empty());
        assert_eq!(pending.over_before(at(120)), [app]);
        assert!(pending.over_before(at(180)).is_empty(), "told once");
    }
}
