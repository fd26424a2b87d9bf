//! The inbox table (the same one the Python library creates, so services in both languages
//! can share it), its DDL per dialect, and the purge window.

use chrono::{DateTime, Utc};
use std::time::Duration;

/// The table every adapter uses.
pub const TABLE: &str = "inlet_inbox";

/// How long a claimed row is kept. A row is what makes a late copy a duplicate, so it must
/// outlive the last copy Inlet can send. The latest: an operator replays an event on the
/// last day Inlet keeps it (`retention.events`, default 35 days); that delivery fails until
/// its `deadline` (default 3 days) and becomes a dead letter, which keeps its own copy of
/// the payload and can be requeued for `retention.dead_letters` after it died (default 30
/// days), even once the event is swept: 68 days after the claim by default. So the window
/// must be longer than `retention.events + deadline + retention.dead_letters`; 75 days
/// leaves a week of margin over the defaults. Raise it with any of the three. (A requeued
/// dead letter that dies again starts its 30 days afresh: requeueing the same letter over
/// months outruns any window.)
pub const DEFAULT_PURGE_WINDOW: Duration = Duration::from_secs(75 * 24 * 3600);

/// The shortest window a purge accepts: a floor against a unit mistake (seconds for days),
/// not a safe value. Safe is longer than `retention.events + deadline +
/// retention.dead_letters`.
pub const MIN_PURGE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The databases the claim works on (it relies on `ON CONFLICT DO NOTHING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

/// The statements that create the inbox table and its purge index, one per item (drivers
/// that run one statement at a time can take them); each is idempotent.
pub fn ddl(dialect: Dialect) -> [&'static str; 2] {
    let table = match dialect {
        Dialect::Postgres => {
            "CREATE TABLE IF NOT EXISTS inlet_inbox (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
)"
        }
        // SQLite keeps the time as UTC text ('YYYY-MM-DD HH:MM:SS'), which sorts as it reads.
        Dialect::Sqlite => {
            "CREATE TABLE IF NOT EXISTS inlet_inbox (
    consumer   TEXT NOT NULL,
    message_id TEXT NOT NULL,
    claimed_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (consumer, message_id)
)"
        }
    };
    [
        table,
        "CREATE INDEX IF NOT EXISTS inlet_inbox_claimed_at ON inlet_inbox (claimed_at)",
    ]
}

/// A purge window under [`MIN_PURGE_WINDOW`], or past any date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeWindowTooShort(pub Duration);

impl std::fmt::Display for PurgeWindowTooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 < MIN_PURGE_WINDOW {
            true => write!(
                f,
                "a purge window of {} s is shorter than a day; it must exceed Inlet's \
                 retention.events + deadline + retention.dead_letters (68 days by default)",
                self.0.as_secs()
            ),
            false => write!(
                f,
                "a purge window of {} s reaches past any date",
                self.0.as_secs()
            ),
        }
    }
}

impl std::error::Error for PurgeWindowTooShort {}

/// The purge's cutoff: rows claimed before it go. `now` is the caller's, so a test moves
/// time instead of waiting 40 days.
pub fn purge_cutoff(
    older_than: Duration,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, PurgeWindowTooShort> {
    if older_than < MIN_PURGE_WINDOW {
        return Err(PurgeWindowTooShort(older_than));
    }
    let window =
        chrono::Duration::from_std(older_than).map_err(|_| PurgeWindowTooShort(older_than))?;
    Ok(now - window)
}

/// A time as SQLite stores `claimed_at` (`CURRENT_TIMESTAMP`'s text), for a purge of your own.
pub fn sqlite_time(moment: DateTime<Utc>) -> String {
    moment.format("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_under_a_day_is_refused_as_a_unit_mistake() {
        let now = Utc::now();
        assert!(purge_cutoff(Duration::from_secs(3600), now).is_err());
        let cutoff = purge_cutoff(DEFAULT_PURGE_WINDOW, now).expect("40 days");
        assert_eq!((now - cutoff).num_days(), 75);
        assert!(
            purge_cutoff(Duration::from_secs(u64::MAX), now).is_err(),
            "no overflow"
        );
    }

    #[test]
    fn sqlite_times_sort_as_current_timestamp_writes_them() {
        let moment = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z")
            .expect("a time")
            .with_timezone(&Utc);
        assert_eq!(sqlite_time(moment), "2026-01-02 03:04:05");
    }
}
