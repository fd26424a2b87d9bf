//! The evaluator threads. Expressions never run on the ingest writers, the async runtime or
//! the dispatcher: each evaluation is handed to one of a few dedicated threads with a large
//! stack, and the caller waits at most the time bound plus a margin. A caller that gives
//! up leaves the thread to finish (or be unwound by its own bound) and, so the others
//! keep flowing, starts one more thread, up to a cap; a thread retires after an
//! evaluation that exhausted its stack or memory bound, which returns its pages.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Each evaluator thread's stack: deep enough for jaq's recursive built-ins on values an
/// expression built within its step bound. Only the pages touched are ever resident.
pub const STACK_BYTES: usize = 256 << 20;

/// The share of the stack an evaluation's own recursion may use; the rest is headroom for
/// built-ins that recurse without being metered.
pub const METERED_STACK_BYTES: usize = 160 << 20;

type Job = Box<dyn FnOnce() + Send>;

/// A few threads that evaluate expressions.
pub struct Pool {
    shared: Arc<Shared>,
    sender: mpsc::Sender<Job>,
}

struct Shared {
    jobs: Mutex<mpsc::Receiver<Job>>,
    /// Threads alive now.
    alive: AtomicUsize,
    /// Threads kept when idle.
    target: usize,
    /// Threads at most (stuck ones included).
    cap: usize,
}

thread_local! {
    /// Set by an evaluation that should not leave its pages to the next one.
    static RETIRE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Asks the current evaluator thread to exit after its evaluation.
pub fn retire_after_this() {
    RETIRE.with(|r| r.set(true));
}

impl Pool {
    pub fn new(threads: usize) -> Self {
        let (sender, receiver) = mpsc::channel();
        let target = threads.max(1);
        let shared = Arc::new(Shared {
            jobs: Mutex::new(receiver),
            alive: AtomicUsize::new(0),
            target,
            cap: target * 4,
        });
        for _ in 0..target {
            Shared::spawn(&shared);
        }
        Self { shared, sender }
    }

    /// Runs `job` on an evaluator thread: its result, or `None` when it did not answer
    /// within `wait`.
    pub async fn run<T: Send + 'static>(
        &self,
        wait: Duration,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.submit(Box::new(move || {
            let _ = tx.send(job());
        }));
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => Some(result),
            _ => self.gave_up(),
        }
    }

    /// [`Pool::run`] for a caller on a blocking thread.
    pub fn run_blocking<T: Send + 'static>(
        &self,
        wait: Duration,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(Box::new(move || {
            let _ = tx.send(job());
        }));
        match rx.recv_timeout(wait) {
            Ok(result) => Some(result),
            Err(_) => self.gave_up(),
        }
    }

    fn submit(&self, job: Job) {
        if self.sender.send(job).is_err() {
            // Every thread is gone (none can be, since one replaces another): start one.
            Shared::spawn(&self.shared);
        }
    }

    /// A caller stopped waiting: one thread may be stuck, so add one while under the cap.
    fn gave_up<T>(&self) -> Option<T> {
        metrics::counter!("inlet_jq_timeouts_total").increment(1);
        if self.shared.alive.load(Ordering::Relaxed) < self.shared.cap {
            Shared::spawn(&self.shared);
        }
        None
    }
}

impl Shared {
    fn spawn(shared: &Arc<Self>) {
        let worker = Arc::clone(shared);
        worker.alive.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("inlet-jq".to_owned())
            .stack_size(STACK_BYTES)
            .spawn(move || worker.work());
        if let Err(e) = spawned {
            shared.alive.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(error = %e, "could not start a jq evaluator thread");
        }
    }

    fn work(self: Arc<Self>) {
        loop {
            let job = self.jobs.lock().recv();
            let Ok(job) = job else { break };
            // An evaluation catches its own panics; this catches one anywhere else in a
            // job (reading the payload, say), so the thread and its count stay true.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("a jq evaluation job panicked; its caller gets a timeout");
            }
            if RETIRE.with(|r| r.replace(false)) {
                Self::spawn(&self);
                break;
            }
            // Threads started for stuck callers leave once they are idle again.
            let above = |n: usize| (n > self.target).then(|| n - 1);
            if (self.alive)
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, above)
                .is_ok()
            {
                return;
            }
        }
        self.alive.fetch_sub(1, Ordering::Relaxed);
    }
}
