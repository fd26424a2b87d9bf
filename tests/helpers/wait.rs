//! Waiting for something to hold, never for a fixed time: every poll in the suites goes
//! through here, so a busy machine makes a test slower, not red, and a timeout says what
//! was awaited.
//!
//! A fixed sleep is left only where a test must let real time pass (a negative check:
//! "nothing more arrived"); those say so with a `// Real time must pass:` comment.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`eventually`] waits.
pub const EVENTUALLY: Duration = Duration::from_secs(15);

/// Time between two checks.
const POLL: Duration = Duration::from_millis(50);

/// Waits (up to 15 s) until `check` holds.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(what, EVENTUALLY, check).await
}

/// Waits up to `limit` until `check` holds: for work whose size, not its speed, is what
/// a test is about (hundreds of deliveries on a busy machine).
pub async fn eventually_within<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(what, limit, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Waits up to `limit` until `check` gives a value, and returns it; panics naming `what`
/// once the deadline has passed.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match first_within(limit, check).await {
        Some(value) => value,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Whether `check` holds within `limit`, for a test that acts again when it does not
/// (moves its clock once more, say).
pub async fn holds_within<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    first_within(limit, || {
        let holds = check();
        async move { holds.await.then_some(()) }
    })
    .await
    .is_some()
}

/// The first value `check` gives within `limit`, checking every 50 ms; `None` when the
/// deadline passed, for a test that says more than [`wait_for`] can in its panic.
pub async fn first_within<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // The poll interval between checks: the deadline above bounds the wait.
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_for`] for a thread outside the runtime (a process, a cluster's script).
pub fn wait_for_blocking<T>(what: &str, limit: Duration, check: impl FnMut() -> Option<T>) -> T {
    match first_within_blocking(limit, POLL, check) {
        Some(value) => value,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// [`first_within`] for a thread outside the runtime, checking `every` so often: a check
/// that runs a cluster's script is not run twenty times a second.
pub fn first_within_blocking<T>(
    limit: Duration,
    every: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // The poll interval between checks: the deadline above bounds the wait.
        std::thread::sleep(every);
    }
}
