//! Wrong operator tokens, per client address — at the console's sign-in and on the
//! operator API's bearer check alike (one limiter): after `operator.lockout_after` in a row
//! from one address (3 by default), that address must wait before trying again, longer
//! each time.
//! Other addresses are not held up (one client cannot lock the operator out), and a
//! client's failures are forgotten only after a quiet [`FORGET_AFTER`] — a right token
//! does not forget them, or anyone holding one could guess at another's without waiting.
//! IPv6 clients are counted by their /64: one host holds a whole /64 and could otherwise
//! step to a fresh address for every guess. Time is the instance's clock (the caller's
//! `now`), so a test can wait out a lockout exactly as `Retry-After` tells it.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// The longest wait after repeated failures.
const MAX_LOCKOUT: Duration = Duration::from_secs(30);
/// A client with no failure for this long starts afresh.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Clients remembered at most; the quietest are forgotten first beyond it.
const MAX_CLIENTS: usize = 10_000;

/// Wrong tokens by client address on this instance.
#[derive(Debug, Default)]
pub struct SignInGuard(Mutex<HashMap<Option<IpAddr>, Failures>>);

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: DateTime<Utc>,
    wait_until: Option<DateTime<Utc>>,
}

/// `later - earlier`, or zero when the clock was set back between them.
fn since(earlier: DateTime<Utc>, later: DateTime<Utc>) -> Duration {
    (later - earlier).to_std().unwrap_or_default()
}

impl SignInGuard {
    /// How long `client` must wait at `now` before trying again, when it must. A clock
    /// set back since the last failure ends the wait rather than lengthening it.
    pub fn wait_left(&self, client: Option<IpAddr>, now: DateTime<Utc>) -> Option<Duration> {
        let client = client.map(counted_as);
        let clients = self.0.lock().ok()?;
        let failures = clients.get(&client).filter(|f| now >= f.last)?;
        let left = (failures.wait_until? - now).to_std().ok()?;
        (!left.is_zero()).then_some(left)
    }

    /// Counts a failure of `client` at `now`; after `free` of them each one doubles its
    /// wait, up to [`MAX_LOCKOUT`].
    pub fn failed(&self, client: Option<IpAddr>, free: u32, now: DateTime<Utc>) {
        let client = client.map(counted_as);
        let Ok(mut clients) = self.0.lock() else {
            return;
        };
        clients.retain(|_, f| since(f.last, now) < FORGET_AFTER);
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            if let Some(quietest) = clients.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k) {
                clients.remove(&quietest);
            }
        }
        let failures = clients.entry(client).or_insert(Failures {
            count: 0,
            last: now,
            wait_until: None,
        });
        failures.count = failures.count.saturating_add(1);
        failures.last = now;
        if failures.count > free {
            let doublings = (failures.count - free - 1).min(5);
            let wait = Duration::from_secs(1 << doublings).min(MAX_LOCKOUT);
            failures.wait_until = chrono::Duration::from_std(wait)
                .ok()
                .and_then(|wait| now.checked_add_signed(wait));
        }
    }
}

/// The address a client's failures are counted under: itself for IPv4 (an IPv4-mapped
/// IPv6 address as the IPv4 one), its /64 for IPv6.
fn counted_as(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FREE_FAILURES: u32 = 3;

    fn at(millis: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + millis).unwrap_or_default()
    }

    #[test]
    fn a_wait_ends_at_its_time_and_a_clock_set_back_never_lengthens_it() {
        let guard = SignInGuard::default();
        let one = Some([10, 0, 0, 1].into());
        for _ in 0..=FREE_FAILURES {
            guard.failed(one, FREE_FAILURES, at(0));
        }
        assert_eq!(
            guard.wait_left(one, at(250)),
            Some(Duration::from_millis(750))
        );
        assert_eq!(guard.wait_left(one, at(1000)), None, "over at its time");
        assert_eq!(
            guard.wait_left(one, at(-3_600_000)),
            None,
            "the clock was set back"
        );
    }

    #[test]
    fn a_client_waits_after_three_failures_and_others_do_not() {
        let guard = SignInGuard::default();
        let (one, other) = (Some([10, 0, 0, 1].into()), Some([10, 0, 0, 2].into()));
        for _ in 0..FREE_FAILURES {
            guard.failed(one, FREE_FAILURES, at(0));
            assert!(guard.wait_left(one, at(0)).is_none());
        }
        guard.failed(one, FREE_FAILURES, at(0));
        assert!(guard
            .wait_left(one, at(0))
            .is_some_and(|left| left <= Duration::from_secs(1)));
        assert!(
            guard.wait_left(other, at(0)).is_none(),
            "another client is not held up"
        );
    }

    #[test]
    fn lockout_after_sets_how_many_failures_are_free() {
        let guard = SignInGuard::default();
        let one = Some([10, 0, 0, 1].into());
        for _ in 0..10 {
            guard.failed(one, 10, at(0));
            assert!(guard.wait_left(one, at(0)).is_none());
        }
        guard.failed(one, 10, at(0));
        assert!(guard.wait_left(one, at(0)).is_some());
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64() {
        let guard = SignInGuard::default();
        for host in 1..=FREE_FAILURES + 1 {
            let address: IpAddr = format!("2001:db8:1:2::{host}").parse().unwrap();
            guard.failed(Some(address), FREE_FAILURES, at(0));
        }
        let next: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert!(
            guard.wait_left(Some(next), at(0)).is_some(),
            "the same /64 waits"
        );
        let elsewhere: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(guard.wait_left(Some(elsewhere), at(0)).is_none());
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(counted_as(mapped), IpAddr::from([10, 0, 0, 1]));
    }
}
