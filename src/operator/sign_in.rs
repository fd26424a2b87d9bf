//! Failed console sign-ins: after a few wrong operator tokens in a row, the next
//! attempts must wait, longer each time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed sign-ins in a row before the next attempts must wait.
const FREE_FAILURES: u32 = 3;
/// The longest wait after repeated failures.
const MAX_LOCKOUT: Duration = Duration::from_secs(30);

/// Consecutive failed sign-ins on this instance, and when the next attempt may be made.
#[derive(Debug, Default)]
pub struct SignInGuard(Mutex<Failures>);

#[derive(Debug, Default)]
struct Failures {
    count: u32,
    wait_until: Option<Instant>,
}

impl SignInGuard {
    /// How long until a sign-in may be tried again, when attempts must wait.
    pub fn wait_left(&self) -> Option<Duration> {
        let failures = self.0.lock().ok()?;
        failures
            .wait_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Counts a failure; after [`FREE_FAILURES`] each one doubles the wait, up to
    /// [`MAX_LOCKOUT`].
    pub fn failed(&self) {
        if let Ok(mut failures) = self.0.lock() {
            failures.count = failures.count.saturating_add(1);
            if failures.count > FREE_FAILURES {
                let doublings = (failures.count - FREE_FAILURES - 1).min(5);
                let wait = Duration::from_secs(1 << doublings).min(MAX_LOCKOUT);
                failures.wait_until = Some(Instant::now() + wait);
            }
        }
    }

    pub fn succeeded(&self) {
        if let Ok(mut failures) = self.0.lock() {
            *failures = Failures::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_starts_after_three_failures_and_ends_with_a_success() {
        let guard = SignInGuard::default();
        for _ in 0..FREE_FAILURES {
            guard.failed();
            assert!(guard.wait_left().is_none());
        }
        guard.failed();
        assert!(guard
            .wait_left()
            .is_some_and(|left| left <= Duration::from_secs(1)));
        guard.succeeded();
        assert!(guard.wait_left().is_none());
    }
}
