//! One log line when a destination starts failing and one when it recovers. A destination
//! whose deliveries keep being retried (no answer, a timeout, 408, 429, 5xx) is logged
//! once, at WARN, with the cause; while it stays down, once more every [`REMINDER`] with
//! how many attempts failed; and once when a delivery to it succeeds again — never a line
//! per attempt. Each instance logs what its own dispatcher sees.

use super::gates::Health;
use super::guard::lock;
use crate::delivery::DestinationKey;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// How often a destination that stays down is logged again.
pub(super) const REMINDER: chrono::Duration = chrono::Duration::minutes(10);

/// The destinations this instance has seen failing, by `(source, name)`.
#[derive(Default)]
pub(super) struct FailureLog {
    failing: Mutex<HashMap<DestinationKey, Failing>>,
}

/// A destination down: since when, how many attempts failed, when it was last logged.
struct Failing {
    since: DateTime<Utc>,
    failures: u64,
    said: DateTime<Utc>,
}

impl FailureLog {
    /// An attempt at `key` whose bearing on its health is `health` (`None`: says nothing
    /// of it, as a 409 or a filter's failure), with `error`, at `now`.
    pub(super) fn observe(
        &self,
        key: &DestinationKey,
        health: Option<Health>,
        error: Option<&str>,
        now: DateTime<Utc>,
    ) {
        let (source, destination) = (key.source(), key.name());
        let key = key.clone();
        let mut failing = lock(&self.failing);
        match health {
            Some(Health::Failed) => {
                let cause = error.unwrap_or("no answer");
                let Some(down) = failing.get_mut(&key) else {
                    tracing::warn!(source, destination, cause, "destination failing: its deliveries are retried (logged again every 10 minutes while it stays down, and when it recovers)");
                    let down = Failing {
                        since: now,
                        failures: 1,
                        said: now,
                    };
                    failing.insert(key, down);
                    return;
                };
                down.failures += 1;
                if now - down.said >= REMINDER {
                    down.said = now;
                    let (failures, since) = (down.failures, down.since.to_rfc3339());
                    tracing::warn!(source, destination, failures, %since, cause, "destination still failing");
                }
            }
            Some(Health::Answered) => {
                if let Some(down) = failing.remove(&key) {
                    let seconds = (now - down.since).num_seconds();
                    let failures = down.failures;
                    tracing::warn!(
                        source,
                        destination,
                        failures,
                        down_for_secs = seconds,
                        "destination recovered: it answers again"
                    );
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_is_logged_once_failing_once_recovered_and_forgotten() {
        let log = FailureLog::default();
        let key = DestinationKey::stored("stripe".to_owned(), "app".to_owned());
        let start = DateTime::UNIX_EPOCH;
        for minute in 0..25 {
            let at = start + chrono::Duration::minutes(minute);
            log.observe(&key, Some(Health::Failed), Some("connection refused"), at);
        }
        let down = lock(&log.failing).get(&key).map(|d| (d.failures, d.said));
        assert_eq!(down, Some((25, start + chrono::Duration::minutes(20))));
        log.observe(&key, None, None, start);
        assert!(lock(&log.failing).contains_key(&key), "a 409 says nothing");
        log.observe(&key, Some(Health::Answered), None, start);
        assert!(lock(&log.failing).is_empty());
    }
}
