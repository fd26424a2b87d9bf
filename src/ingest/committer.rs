//! Group commit: verified webhooks are queued for a few writer threads, each of which
//! takes everything queued (up to `database.max_group`) and commits it as one
//! transaction ([`process_group`]). There is no waiting timer: a group is whatever
//! arrived while the previous commit was in flight, so a lone webhook is committed at once
//! and a busy one shares its transaction's fixed cost — round trips, the commit and its
//! log flush — with everything that arrived beside it.
//!
//! Every webhook is answered only after its group's commit returned. A member that fails
//! for its own reason fails alone: a group the database refuses (or that crashes) is split
//! in halves and each half committed again, down to the member at fault. A group that
//! waits on a key another transaction holds gives up after [`GROUP_LOCK_WAIT`] and its
//! members are committed each alone, off the writers, with the configured
//! `lock_timeout` — so a held key delays only its own webhook. An unavailable database
//! answers every member alike.

use super::group::{process_group, Ingested};
use super::{process, Claim, IngestError};
use crate::db::{on_connection, DatabaseSettings, DbPool, StoreError};
use crate::faults::Faults;
use crate::traces::{self, Attribute, Kind, SpanContext, Traces};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;

/// How long a group waits on a key another transaction holds (PostgreSQL) before its
/// members are committed each alone: well above a normal group's commit, well below
/// `database.lock_timeout`.
pub const GROUP_LOCK_WAIT: Duration = Duration::from_millis(250);

/// The most payload bytes one group carries (a group always takes at least one webhook),
/// so that groups of large bodies stay small statements.
const GROUP_BYTES: usize = 16 * 1024 * 1024;

/// Beyond the queue's patience and the database's own timeouts, how long a webhook waits
/// for its group before it is answered 503 (a writer stuck on a vanished database).
const ANSWER_SLACK: Duration = Duration::from_secs(5);

/// The process's group committer. Dropping it lets the writers finish what is queued
/// and stop.
pub struct Committer {
    queue: Arc<Queue>,
    pool: DbPool,
    faults: Arc<Faults>,
    /// How long a webhook waits for its group's answer before it is answered 503.
    answer_within: Duration,
}

struct Job {
    claim: Claim,
    queued: Instant,
    reply: oneshot::Sender<Reply>,
}

/// What a writer answers a webhook.
enum Reply {
    Done(Ingested),
    /// Commit it alone, off the writers: its group waited on a key held elsewhere.
    Alone(Box<Claim>),
}

/// How a member of a committed (or failed) group ends.
#[derive(Clone)]
enum MemberEnd {
    Done(Ingested),
    Alone,
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
    /// How long a group waits on a held key: [`GROUP_LOCK_WAIT`], or `lock_timeout` when
    /// that is shorter.
    lock_wait: Duration,
    /// OpenTelemetry's name of the database (`db.system.name`).
    backend: &'static str,
    /// Where each group's spans go (tracing on).
    traces: Traces,
}

/// A member of a committed group, as its spans need it: its webhook's span and when it
/// was queued.
struct Member {
    webhook: SpanContext,
    queued_at: SystemTime,
}

/// The most members a group's span links to (OpenTelemetry keeps 128 links per span).
const GROUP_LINKS: usize = 128;

impl Committer {
    /// Starts `database.writers` writer threads on `pool`.
    pub fn start(
        pool: DbPool,
        faults: Arc<Faults>,
        database: &DatabaseSettings,
        traces: &Traces,
    ) -> std::io::Result<Self> {
        let queue = Arc::new(Queue::default());
        for n in 0..database.writers {
            let writer = Writer {
                queue: queue.clone(),
                pool: pool.clone(),
                faults: faults.clone(),
                max_group: usize::try_from(database.max_group).unwrap_or(1).max(1),
                patience: database.connect_timeout,
                lock_wait: database.lock_timeout.min(GROUP_LOCK_WAIT),
                backend: match database.target.backend_name() {
                    "postgres" => "postgresql",
                    other => other,
                },
                traces: traces.clone(),
            };
            std::thread::Builder::new()
                .name(format!("inlet-writer-{n}"))
                .spawn(move || writer.run())?;
        }
        let waits = database.lock_timeout.max(database.busy_timeout);
        Ok(Self {
            queue,
            pool,
            faults,
            answer_within: database.connect_timeout + waits + ANSWER_SLACK,
        })
    }

    /// Commits `claim` with whatever else is queued; its verdict once the group's
    /// transaction has committed (or failed).
    pub async fn commit(&self, claim: Claim) -> Ingested {
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
        // Answering 503 while the group may still commit is safe: the provider's retry
        // then gets the stored answer.
        match tokio::time::timeout(self.answer_within, answer).await {
            Ok(Ok(Reply::Done(verdict))) => verdict,
            Ok(Ok(Reply::Alone(claim))) => self.commit_alone(*claim).await,
            Ok(Err(_)) => Err(IngestError::Internal(
                "the writer stopped before answering".to_owned(),
            )),
            Err(_) => Err(unavailable(format!(
                "no answer from the database within {}",
                crate::duration::HumanDuration(self.answer_within)
            ))),
        }
    }

    /// The events of one batch request (Adyen's items), in one transaction of their own
    /// on a pooled connection: all of them are stored, or none. A verdict for each, in
    /// order; an error when the transaction failed (nothing of the batch is stored, or,
    /// when its COMMIT is in doubt, perhaps all of it: the provider's retry finds out).
    pub async fn commit_batch(&self, claims: Vec<Claim>) -> Result<Vec<Ingested>, IngestError> {
        let faults = self.faults.clone();
        on_connection(&self.pool, move |conn| {
            let claims: Vec<&Claim> = claims.iter().collect();
            process_group(conn, &claims, &faults, None)
        })
        .await
    }

    /// One webhook in a transaction of its own on a pooled connection, waiting up to
    /// `database.lock_timeout` on a concurrent claim of its key.
    async fn commit_alone(&self, claim: Claim) -> Ingested {
        let faults = self.faults.clone();
        on_connection(&self.pool, move |conn| process(conn, &claim, &faults)).await
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
                let n = group_length(&state.jobs, max);
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

/// How many queued jobs the next group takes: up to `max`, and up to [`GROUP_BYTES`] of
/// payload (at least one).
fn group_length(jobs: &VecDeque<Job>, max: usize) -> usize {
    let mut bytes = 0;
    let mut n = 0;
    for job in jobs.iter().take(max) {
        bytes += job.claim.payload.len();
        if n > 0 && bytes > GROUP_BYTES {
            break;
        }
        n += 1;
    }
    n
}

impl Writer {
    fn run(self) {
        while let Some(jobs) = self.queue.take(self.max_group, &self.faults) {
            let (fresh, stale): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|job| job.queued.elapsed() <= self.patience);
            for job in stale {
                let waited = crate::duration::HumanDuration(job.queued.elapsed());
                let _ = job.reply.send(Reply::Done(Err(unavailable(format!(
                    "no database write within {waited}"
                )))));
            }
            if fresh.is_empty() {
                continue;
            }
            let started = Instant::now();
            let started_at = self.traces.is_on().then(SystemTime::now);
            let claims: Vec<&Claim> = fresh.iter().map(|job| &job.claim).collect();
            let verdicts = commit(&self.pool, &claims, &self.faults, self.lock_wait);
            metrics::histogram!("inlet_ingest_group_size").record(claims.len() as f64);
            metrics::histogram!("inlet_ingest_commit_seconds")
                .record(started.elapsed().as_secs_f64());
            // Tracing on: what the spans need, read before the replies take the jobs; the
            // spans are made after the replies are sent.
            let traced = started_at.map(|at| (at, SystemTime::now(), members(&fresh)));
            for (job, settled) in fresh.into_iter().zip(verdicts) {
                let reply = match settled {
                    MemberEnd::Done(verdict) => Reply::Done(verdict),
                    MemberEnd::Alone => Reply::Alone(Box::new(job.claim)),
                };
                // A client that went away gets no answer; its event is stored all the same.
                let _ = job.reply.send(reply);
            }
            if let Some((started_at, ended_at, members)) = traced {
                self.trace_group(&members, started_at, ended_at);
            }
        }
    }
}

/// The members of a group, for its spans.
fn members(jobs: &[Job]) -> Vec<Member> {
    let now = SystemTime::now();
    (jobs.iter())
        .map(|job| Member {
            webhook: traces::context_of(job.claim.trace_parent.as_deref()),
            queued_at: now.checked_sub(job.queued.elapsed()).unwrap_or(now),
        })
        .collect()
}

impl Writer {
    /// The spans of a committed group: one for the group, linked to its members' webhook
    /// spans, and under each member's webhook span the time it waited for a writer and the
    /// commit it joined (the group's span id as an attribute, and a link). The group's
    /// span is recorded when a member's trace is: it lives in the first such member's
    /// trace.
    fn trace_group(&self, members: &[Member], started_at: SystemTime, ended_at: SystemTime) {
        let traces = &self.traces;
        let size = i64::try_from(members.len()).unwrap_or(i64::MAX);
        let backend = self.backend;
        let attributes = || {
            vec![
                Attribute::new("db.system.name", backend),
                Attribute::new("inlet.group.size", size),
            ]
        };
        let sampled: Vec<SpanContext> = (members.iter())
            .map(|m| m.webhook.clone())
            .filter(|c| c.is_sampled())
            .take(GROUP_LINKS)
            .collect();
        let Some(first) = sampled.first() else {
            return;
        };
        let parent = traces::parent(first);
        let group = traces.linked(
            "group commit",
            Kind::Internal,
            &parent,
            Some(started_at),
            attributes,
            sampled.clone(),
        );
        let group_context = group.context();
        let group_id = group_context.span_id().to_string();
        group.end_at(ended_at);
        for member in members.iter().filter(|m| m.webhook.is_sampled()) {
            let parent = traces::parent(&member.webhook);
            let queued = traces.span(
                "queued for a writer",
                Kind::Internal,
                &parent,
                Some(member.queued_at),
                Vec::new,
            );
            queued.end_at(started_at);
            let with_group = || {
                let mut all = attributes();
                all.push(Attribute::new("inlet.group.id", group_id.clone()));
                all
            };
            let links = vec![group_context.clone()];
            let commit = traces.linked(
                "commit",
                Kind::Internal,
                &parent,
                Some(started_at),
                with_group,
                links,
            );
            commit.end_at(ended_at);
        }
    }
}

fn unavailable(detail: String) -> IngestError {
    IngestError::Store(StoreError::Unavailable(detail))
}

/// One group's transaction, with its failure rules: a group the database refuses (an
/// internal error) or that crashes (a panic; its connection, with the open transaction,
/// is discarded) is split in halves, each committed again, so that only the member at
/// fault fails; a group that waited `lock_wait` on a held key has its members
/// committed each alone; an unavailable database answers every member alike.
fn commit(
    pool: &DbPool,
    claims: &[&Claim],
    faults: &Faults,
    lock_wait: Duration,
) -> Vec<MemberEnd> {
    let attempt = catch_unwind(AssertUnwindSafe(|| {
        let mut conn = pool.get().map_err(StoreError::from)?;
        process_group(&mut conn, claims, faults, Some(lock_wait))
    }));
    let failure = match attempt {
        Ok(Ok(verdicts)) => return verdicts.into_iter().map(MemberEnd::Done).collect(),
        Ok(Err(IngestError::Store(StoreError::Contended(_)))) => {
            return vec![MemberEnd::Alone; claims.len()]
        }
        Ok(Err(error)) if !error.is_internal() => {
            return vec![MemberEnd::Done(Err(error)); claims.len()]
        }
        Ok(Err(error)) => error,
        Err(_) => IngestError::Internal("the ingest transaction crashed".to_owned()),
    };
    if claims.len() == 1 {
        return vec![MemberEnd::Done(Err(failure))];
    }
    tracing::warn!(members = claims.len(), detail = %failure, "a group's transaction failed; committing each half again");
    metrics::counter!("inlet_ingest_group_retries_total").increment(1);
    let (first, second) = claims.split_at(claims.len() / 2);
    let mut settled = commit(pool, first, faults, lock_wait);
    settled.extend(commit(pool, second, faults, lock_wait));
    settled
}
