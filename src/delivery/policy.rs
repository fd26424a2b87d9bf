//! The decisions of delivery, as pure functions of their inputs (clock and randomness are
//! passed in): which outcomes are retried, how long to wait, and how many retries a
//! destination may receive per second.

use chrono::{DateTime, Utc};
use std::time::Duration;

/// Backoff settings of one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub base: Duration,
    pub cap: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// No retry is scheduled later than this after the delivery was created.
    pub deadline: Duration,
}

impl RetryPolicy {
    /// Full jitter: a delay uniformly drawn from `[0, min(cap, base·2^attempt)]`, where
    /// `attempt` counts the attempts made so far (1 after the first). `random` is a
    /// uniform draw from `[0, 1)`.
    pub fn delay_for(&self, attempt: u32, random: f64) -> Duration {
        let exponential = self
            .base
            .checked_mul(2u32.saturating_pow(attempt.min(31)))
            .unwrap_or(Duration::MAX);
        let ceiling = exponential.min(self.cap);
        ceiling.mul_f64(random.clamp(0.0, 1.0))
    }

    /// When to try again after attempt `attempt` failed at `now`, or `None` when the
    /// delivery is exhausted (attempt cap reached, or the retry would pass the deadline).
    /// A `Retry-After` from the destination is honoured, capped at `cap`.
    pub fn next_attempt(
        &self,
        attempt: u32,
        now: DateTime<Utc>,
        deadline_at: DateTime<Utc>,
        retry_after: Option<Duration>,
        random: f64,
    ) -> Option<DateTime<Utc>> {
        if attempt >= self.max_attempts {
            return None;
        }
        let wait = self
            .delay_for(attempt, random)
            .max(retry_after.map_or(Duration::ZERO, |r| r.min(self.cap)));
        let at = now + chrono::Duration::from_std(wait).ok()?;
        (at <= deadline_at).then_some(at)
    }
}

/// What an attempt's result means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Delivered,
    /// Transient: try again (after at least `retry_after` when the destination said so).
    Retry {
        retry_after: Option<Duration>,
    },
    /// Permanent: straight to the dead letters.
    Dead,
    /// Never sent: its destination's filter, evaluated when it was leased, does not take
    /// it.
    Filtered,
    /// Not sent: its filter or transform could not be evaluated now (every evaluator
    /// busy); again later, as a retry. Says nothing of the destination's health.
    Unevaluated,
}

/// Classifies an HTTP status. Transient failures are retried: 408, 429, 500, 502, 503,
/// 504 — and 409, which an application that honours `Idempotency-Key` answers while an
/// earlier attempt with the same key is still running (that delivery is in flight, not
/// failed). Every other non-2xx status is permanent.
pub fn classify_status(status: u16, retry_after: Option<Duration>) -> Verdict {
    match status {
        200..=299 => Verdict::Delivered,
        408 | 409 | 429 | 500 | 502 | 503 | 504 => Verdict::Retry { retry_after },
        _ => Verdict::Dead,
    }
}

/// Parses `Retry-After`: delay-seconds or an HTTP date (a date in the past is zero).
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at: DateTime<Utc> = httpdate::parse_http_date(value).ok()?.into();
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// A per-destination budget for retries (a token bucket in its virtual-scheduling form,
/// GCRA): at most `burst` retries at once, then `rate` per second. A retry over budget is
/// postponed to the next free slot — never dropped — so an outage is not amplified by
/// every delivery retrying at the same moment.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next conforming retry.
    next_free: Option<DateTime<Utc>>,
}

impl RetryBudget {
    pub fn new(rate_per_sec: f64, burst: u32) -> Self {
        let interval = Duration::from_secs_f64(1.0 / rate_per_sec.max(1e-6));
        Self {
            interval,
            tolerance: interval.saturating_mul(burst),
            next_free: None,
        }
    }

    /// Reserves a slot for a retry wanted at `at`: returns `at` when within budget, a
    /// later time otherwise.
    pub fn reserve(&mut self, at: DateTime<Utc>) -> DateTime<Utc> {
        let interval = chrono::Duration::from_std(self.interval).unwrap_or(chrono::Duration::MAX);
        let tolerance = chrono::Duration::from_std(self.tolerance).unwrap_or(chrono::Duration::MAX);
        let theoretical = self.next_free.map_or(at, |t| t.max(at));
        let slot = at.max(theoretical - tolerance);
        self.next_free = Some(theoretical.max(slot) + interval);
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(3600),
            max_attempts: 12,
            deadline: Duration::from_secs(3 * 86_400),
        }
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).expect("valid")
    }

    #[test]
    fn statuses_are_classified_as_documented() {
        for status in [200, 201, 204] {
            assert_eq!(classify_status(status, None), Verdict::Delivered);
        }
        for status in [408, 409, 429, 500, 502, 503, 504] {
            assert!(
                matches!(classify_status(status, None), Verdict::Retry { .. }),
                "{status}"
            );
        }
        for status in [301, 400, 401, 403, 404, 410, 422, 501] {
            assert_eq!(classify_status(status, None), Verdict::Dead, "{status}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let now = at(0);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        let later = httpdate::fmt_http_date((now + chrono::Duration::seconds(90)).into());
        assert_eq!(
            parse_retry_after(&later, now),
            Some(Duration::from_secs(90))
        );
        let earlier = httpdate::fmt_http_date((now - chrono::Duration::seconds(90)).into());
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn retry_after_is_honoured_but_capped() {
        let policy = RetryPolicy {
            cap: Duration::from_secs(60),
            ..policy()
        };
        let next = policy.next_attempt(1, at(0), at(86_400), Some(Duration::from_secs(30)), 0.0);
        assert_eq!(next, Some(at(30)));
        let next = policy.next_attempt(1, at(0), at(86_400), Some(Duration::from_secs(7200)), 0.0);
        assert_eq!(next, Some(at(60)));
    }

    #[test]
    fn the_budget_lets_a_burst_through_then_spaces_retries() {
        let mut budget = RetryBudget::new(2.0, 3);
        let slots: Vec<_> = (0..6).map(|_| budget.reserve(at(0))).collect();
        // Burst of 3 (plus the conforming first) at once, then one every 0.5 s.
        assert_eq!(&slots[..4], &[at(0); 4]);
        assert_eq!(slots[4], at(0) + chrono::Duration::milliseconds(500));
        assert_eq!(slots[5], at(1));
        // After a quiet period the budget is full again.
        assert_eq!(budget.reserve(at(100)), at(100));
    }

    proptest! {
        #[test]
        fn delays_stay_within_full_jitter_bounds(attempt in 0u32..64, random in 0.0f64..1.0) {
            let policy = policy();
            let delay = policy.delay_for(attempt, random);
            let ceiling = policy.base.checked_mul(2u32.saturating_pow(attempt.min(31))).unwrap_or(Duration::MAX).min(policy.cap);
            prop_assert!(delay <= ceiling);
        }

        #[test]
        fn retries_never_pass_the_deadline_and_stop_at_the_cap(
            seed in any::<u64>(),
            deadline_secs in 1i64..(4 * 86_400),
            retry_after in proptest::option::of(0u64..10_000),
        ) {
            let policy = policy();
            let mut rng = fastrand::Rng::with_seed(seed);
            let deadline = at(deadline_secs);
            let mut now = at(0);
            let mut attempts = 1;
            while let Some(next) = policy.next_attempt(attempts, now, deadline, retry_after.map(Duration::from_secs), rng.f64()) {
                prop_assert!(next <= deadline);
                prop_assert!(next >= now);
                now = next;
                attempts += 1;
            }
            prop_assert!(attempts <= policy.max_attempts);
        }

        #[test]
        fn the_budget_never_schedules_before_the_wish_nor_faster_than_its_rate(
            wishes in proptest::collection::vec(0i64..100, 1..200),
        ) {
            let mut budget = RetryBudget::new(5.0, 10);
            let mut sorted = wishes.clone();
            sorted.sort_unstable();
            let slots: Vec<_> = sorted.iter().map(|w| budget.reserve(at(*w))).collect();
            for (wish, slot) in sorted.iter().zip(&slots) {
                prop_assert!(*slot >= at(*wish));
            }
            // In any window, no more than burst + rate·window retries.
            for (i, start) in slots.iter().enumerate() {
                let within = slots[i..].iter().filter(|s| **s < *start + chrono::Duration::seconds(1)).count();
                prop_assert!(within <= 10 + 5 + 1);
            }
        }
    }
}
