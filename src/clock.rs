//! Time as an injected dependency, so signature tolerance and retention can be tested
//! with a clock the test controls.

use chrono::{DateTime, Utc};
use std::sync::Mutex;

/// A stored timestamp (UTC, without offset in the database) as RFC 3339 with `Z`, to the
/// microsecond: the precision PostgreSQL keeps, so both backends print the same text.
pub fn rfc3339(at: chrono::NaiveDateTime) -> String {
    at.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Serde helpers that write stored timestamps with [`rfc3339`].
pub mod serde_rfc3339 {
    use chrono::NaiveDateTime;
    use serde::Serializer;

    pub fn serialize<S: Serializer>(at: &NaiveDateTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::rfc3339(*at))
    }

    /// For optional timestamps.
    pub mod option {
        use chrono::NaiveDateTime;
        use serde::Serializer;

        pub fn serialize<S: Serializer>(
            at: &Option<NaiveDateTime>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match at {
                Some(at) => serializer.serialize_str(&super::super::rfc3339(*at)),
                None => serializer.serialize_none(),
            }
        }
    }
}

/// A source of "now".
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The wall clock shifted by an adjustable offset: time keeps flowing (retries and leases
/// come due), and tests can jump to a signing time or past a lease or retention window.
/// A stopped clock reads the same instant until a test moves it.
#[derive(Debug, Default)]
pub struct AdjustableClock {
    offset: Mutex<chrono::Duration>,
    stopped: Option<DateTime<Utc>>,
}

impl AdjustableClock {
    /// A clock reading `at` now.
    pub fn at(at: DateTime<Utc>) -> Self {
        let clock = Self::default();
        clock.set(at);
        clock
    }

    /// A clock that reads `at` until moved with [`AdjustableClock::advance`].
    pub fn stopped_at(at: DateTime<Utc>) -> Self {
        Self {
            offset: Mutex::default(),
            stopped: Some(at),
        }
    }

    /// From now on, read `at` plus the time elapsed since.
    pub fn set(&self, at: DateTime<Utc>) {
        *self
            .offset
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = at - Utc::now();
    }

    /// Jumps forward (or back, with a negative duration).
    pub fn advance(&self, by: chrono::Duration) {
        *self
            .offset
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) += by;
    }
}

impl Clock for AdjustableClock {
    fn now(&self) -> DateTime<Utc> {
        self.stopped.unwrap_or_else(Utc::now)
            + *self
                .offset
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adjustable_clock_jumps_and_keeps_flowing() {
        let at = DateTime::from_timestamp(1_492_774_577, 0).expect("valid");
        let clock = AdjustableClock::at(at);
        let read = clock.now();
        assert!(read >= at && read - at < chrono::Duration::seconds(5));
        clock.advance(chrono::Duration::hours(1));
        assert!(clock.now() - at >= chrono::Duration::hours(1));
    }

    #[test]
    fn a_stopped_clock_moves_only_when_advanced() {
        let at = DateTime::from_timestamp(1_492_774_577, 0).expect("valid");
        let clock = AdjustableClock::stopped_at(at);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(clock.now(), at);
        clock.advance(chrono::Duration::seconds(1));
        assert_eq!(clock.now(), at + chrono::Duration::seconds(1));
    }
}
