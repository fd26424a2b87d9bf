//! Group commit: verified webhooks are queued for a few writer threads, each of which
//! takes everything queued (up to `database.max_group`) and commits it as one
//! transaction ([`process_group`]). There is no waiting timer: a group is whatever
//! arrived while the previous commit was in flight, so a lone webhook is committed at once
//! and a busy one shares its transaction's fixed cost — round trips, the commit and its
//! log flush — with everything that arrived beside it.
//!
//! Every webhook is answered only after its group's commit returned. A member that fails
//! for its own reason (the database refuses its row) fails alone: the group is committed
//! again member by member. A failure of the database itself answers every member alike.

use super::group::{process_group, Verdict};
use super::Claim;
use crate::db::{DatabaseSettings, DbPool};
use crate::error::{Problem, Reason};
use crate::faults::Faults;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The process's group committer. Dropping it lets the writers finish what is queued
/// and stop.
pub struct Committer {
    queue: Arc<Queue>,
}

struct Job {
    claim: Claim,
    queued: Instant,
    reply: oneshot::Sender<Verdict>,
}

#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: VecDeque<Job>,
    closed: bool,
}

/// What a writer needs besides the queue.
struct Writer {
    queue: Arc<Queue>,
    pool: DbPool,
    faults: Arc<Faults>,
    max_group: usize,
    /// A webhook queued longer than this is answered 503 without touching the database:
    /// the database is not keeping up (or is away), and the provider will retry.
    patience: Duration,
}

impl Committer {
    /// Starts `database.writers` writer threads on `pool`.
    pub fn start(
        pool: DbPool,
        faults: Arc<Faults>,
        database: &DatabaseSettings,
    ) -> std::io::Result<Self> {
        let queue = Arc::new(Queue::default());
        for n in 0..database.writers {
            let writer = Writer {
                queue: queue.clone(),
                pool: pool.clone(),
                faults: faults.clone(),
                max_group: usize::try_from(database.max_group).unwrap_or(1).max(1),
                patience: database.connect_timeout,
            };
            std::thread::Builder::new()
                .name(format!("inlet-writer-{n}"))
                .spawn(move || writer.run())?;
        }
        Ok(Self { queue })
    }

    /// Commits `claim` with whatever else is queued; its verdict once the group's
    /// transaction has committed (or failed).
    pub async fn commit(&self, claim: Claim) -> Verdict {
        let (reply, answer) = oneshot::channel();
        {
            let mut state = self.queue.state.lock();
            state.jobs.push_back(Job {
                claim,
                queued: Instant::now(),
                reply,
            });
        }
        self.queue.ready.notify_one();
        answer
            .await
            .unwrap_or_else(|_| Err(Problem::internal("the writer stopped before answering")))
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.queue.state.lock().closed = true;
        self.queue.ready.notify_all();
    }
}

impl Queue {
    /// Waits for work and takes up to `max` queued jobs; `None` once closed and empty.
    fn take(&self, max: usize, faults: &Faults) -> Option<Vec<Job>> {
        let mut state = self.state.lock();
        loop {
            if !state.jobs.is_empty() {
                let quorum = faults.group_quorum();
                if state.jobs.len() < quorum.min(max) && !state.closed {
                    // Tests only: hold the group until it has this many members.
                    if !self
                        .ready
                        .wait_for(&mut state, Duration::from_secs(10))
                        .timed_out()
                    {
                        continue;
                    }
                }
                let n = state.jobs.len().min(max);
                faults.group_taken(n);
                return Some(state.jobs.drain(..n).collect());
            }
            if state.closed {
                return None;
            }
            self.ready.wait(&mut state);
        }
    }
}

impl Writer {
    fn run(self) {
        while let Some(jobs) = self.queue.take(self.max_group, &self.faults) {
            let (fresh, stale): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|job| job.queued.elapsed() <= self.patience);
            for job in stale {
                let waited = crate::duration::HumanDuration(job.queued.elapsed());
                let _ = job.reply.send(Err(Problem::unavailable(format!(
                    "no database write within {waited}"
                ))));
            }
            if fresh.is_empty() {
                continue;
            }
            let started = Instant::now();
            let claims: Vec<&Claim> = fresh.iter().map(|job| &job.claim).collect();
            let verdicts = commit(&self.pool, &claims, &self.faults);
            metrics::histogram!("inlet_ingest_group_size").record(claims.len() as f64);
            metrics::histogram!("inlet_ingest_commit_seconds")
                .record(started.elapsed().as_secs_f64());
            for (job, verdict) in fresh.into_iter().zip(verdicts) {
                // A client that went away gets no answer; its event is stored all the same.
                let _ = job.reply.send(verdict);
            }
        }
    }
}

/// One group's transaction, with its failure rules: a statement the database refuses
/// (an internal error) is retried member by member, so the member it was about fails
/// alone; an unavailable database or a lock timeout answers every member alike; a crash
/// inside the transaction (a panic) answers every member 500 and the connection, with its
/// open transaction, is discarded.
fn commit(pool: &DbPool, claims: &[&Claim], faults: &Faults) -> Vec<Verdict> {
    let attempt = catch_unwind(AssertUnwindSafe(|| {
        let mut conn = pool.get()?;
        process_group(&mut conn, claims, faults)
    }));
    match attempt {
        Ok(Ok(verdicts)) => verdicts,
        Ok(Err(problem)) if problem.reason == Reason::Internal && claims.len() > 1 => {
            tracing::warn!(members = claims.len(), detail = %problem.detail, "a group's transaction failed; committing its members one by one");
            metrics::counter!("inlet_ingest_group_retries_total").increment(1);
            claims
                .iter()
                .flat_map(|claim| commit(pool, &[claim], faults))
                .collect()
        }
        Ok(Err(problem)) => vec![Err(problem); claims.len()],
        Err(_) => {
            let crashed = Problem::internal("the ingest transaction crashed");
            vec![Err(crashed); claims.len()]
        }
    }
}
