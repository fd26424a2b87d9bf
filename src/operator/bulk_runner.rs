//! Works bulk actions through, in every instance: one takes a running action's lease,
//! then acts on [`BATCH`] rows at a time in id order. Each batch's effect (the replays
//! enqueued, the dead letters requeued or discarded), the advance of the action's cursor
//! and its counts commit in one transaction, which first locks the action's row and checks
//! that this runner still holds the lease — so two instances never act on one batch, an
//! instance that dies mid-batch leaves nothing of it behind, and whichever instance takes
//! the lease after [`LEASE`] resumes after the last whole batch: each row is acted on once.

use super::actions::{self, DeadLetterResult, RedeliveryResult};
use super::bulk::{find, select, Bulk, BulkKind, Selected, DONE, FAILED, RUNNING};
use super::calls::Ground;
use super::OperatorError;
use crate::clock::Clock;
use crate::db::schema::bulk_actions;
use crate::db::{read_committed, write_transaction, CommitInDoubt, DbConnection, DbPool};
use crate::delivery::Destinations;
use crate::faults::Faults;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

/// Rows one batch acts on (one transaction).
pub const BATCH: i64 = 100;
/// How long a runner holds an action between batches; one that stops answering loses it.
pub const LEASE: chrono::Duration = chrono::Duration::seconds(5);
/// Batches of one action that may fail in a row before it is given up as `failed` (each
/// is retried once its lease expires).
pub const MAX_FAILURES: i32 = 5;
/// How often an idle runner looks for work.
const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// The settings in force now (they change on reload; each batch takes a snapshot).
pub type CurrentSettings<S> = Arc<dyn Fn() -> Arc<S> + Send + Sync>;

/// This instance's bulk-action runner.
pub struct BulkRunner<S> {
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
    pub settings: CurrentSettings<S>,
    pub faults: Arc<Faults>,
    /// Wakes the dispatcher after a batch enqueued deliveries.
    pub waker: Option<Arc<Notify>>,
    /// This runner's name on the leases it takes.
    pub holder: String,
}

/// How a batch ended.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    More,
    Finished,
    /// Another runner holds the action now, or it is no longer running.
    Lost,
}

/// Why a batch did not commit.
#[derive(Debug)]
enum Failure {
    /// A test's fault: this runner "dies" mid-batch, holding the lease.
    Crashed,
    Failed(OperatorError),
}

impl From<OperatorError> for Failure {
    fn from(error: OperatorError) -> Self {
        Self::Failed(error)
    }
}

impl From<diesel::result::Error> for Failure {
    fn from(error: diesel::result::Error) -> Self {
        Self::Failed(error.into())
    }
}

impl From<CommitInDoubt> for Failure {
    fn from(error: CommitInDoubt) -> Self {
        Self::Failed(error.into())
    }
}

/// Counts by result, and deliveries enqueued per destination.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    results: BTreeMap<String, i64>,
    deliveries: BTreeMap<String, i64>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        for (name, n) in other.results {
            *self.results.entry(name).or_default() += n;
        }
        for (name, n) in other.deliveries {
            *self.deliveries.entry(name).or_default() += n;
        }
    }

    fn of_replays(results: &[RedeliveryResult]) -> Self {
        let mut tally = Self::default();
        for result in results {
            *tally.results.entry(result.result.clone()).or_default() += 1;
            for name in &result.destinations {
                *tally.deliveries.entry(name.clone()).or_default() += 1;
            }
        }
        tally
    }

    fn of_dead_letters(results: &[DeadLetterResult]) -> Self {
        let mut tally = Self::default();
        for result in results {
            *tally.results.entry(result.result.clone()).or_default() += 1;
        }
        tally
    }
}

impl<S: Ground> BulkRunner<S> {
    /// Looks for work every [`POLL`] until `stopped`.
    pub async fn run(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                changed = stopped.changed() => if changed.is_err() || *stopped.borrow() { break },
            }
            let (this, stop) = (self.clone(), stopped.clone());
            match tokio::task::spawn_blocking(move || this.work(&stop)).await {
                Ok(Ok(())) => {}
                Ok(Err(Failure::Crashed)) => return,
                Ok(Err(Failure::Failed(error))) => {
                    metrics::counter!("inlet_bulk_batch_errors_total").increment(1);
                    tracing::warn!(%error, "a bulk action's batch failed; it is retried");
                }
                Err(error) => tracing::warn!(%error, "the bulk action task was aborted"),
            }
        }
    }

    /// Takes one running action whose lease is free and works it through, until it is
    /// done, lost, or this instance stops (then the lease is given back).
    fn work(&self, stopped: &watch::Receiver<bool>) -> Result<(), Failure> {
        let mut conn = self.pool.get().map_err(OperatorError::from)?;
        let Some(id) = self.claim(&mut conn)? else {
            return Ok(());
        };
        tracing::info!(id, "working a bulk action through");
        loop {
            if *stopped.borrow() {
                return Ok(self.release(&mut conn, id)?);
            }
            match self.batch(&mut conn, id) {
                Ok(Step::More) => {}
                Ok(Step::Finished) => {
                    tracing::info!(id, "bulk action done");
                    return Ok(());
                }
                Ok(Step::Lost) => return Ok(()),
                Err(Failure::Failed(error)) => {
                    self.failed(&mut conn, id, &error)?;
                    return Err(Failure::Failed(error));
                }
                Err(crashed) => return Err(crashed),
            }
        }
    }

    /// Running, and no lease in force.
    fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>> {
        let now = self.clock.now().naive_utc();
        let candidate = bulk_actions::table
            .filter(bulk_actions::status.eq(RUNNING))
            .filter(free(now))
            .order(bulk_actions::id)
            .select(bulk_actions::id)
            .first::<i64>(conn)
            .optional()?;
        let Some(id) = candidate else {
            return Ok(None);
        };
        let taken = diesel::update(bulk_actions::table.find(id).filter(free(now)))
            .set((
                bulk_actions::lease_holder.eq(&self.holder),
                bulk_actions::locked_until.eq(now + LEASE),
            ))
            .execute(conn)?;
        Ok((taken == 1).then_some(id))
    }

    /// A batch failed: its error is kept on the action, and after [`MAX_FAILURES`] in a
    /// row the action is `failed` (the lease stays, so the next try waits for it).
    fn failed(&self, conn: &mut DbConnection, id: i64, error: &OperatorError) -> QueryResult<()> {
        let now = self.clock.now().naive_utc();
        write_transaction(conn, |conn| {
            diesel::update(mine(id, &self.holder))
                .set((
                    bulk_actions::failures.eq(bulk_actions::failures + 1),
                    bulk_actions::error.eq(format!("a batch failed: {error}")),
                    bulk_actions::updated_at.eq(now),
                ))
                .execute(conn)?;
            diesel::update(mine(id, &self.holder))
                .filter(bulk_actions::failures.ge(MAX_FAILURES))
                .set((
                    bulk_actions::status.eq(FAILED),
                    bulk_actions::locked_until.eq(None::<NaiveDateTime>),
                    bulk_actions::finished_at.eq(Some(now)),
                ))
                .execute(conn)
                .map(drop)
        })
    }

    fn release(&self, conn: &mut DbConnection, id: i64) -> QueryResult<()> {
        diesel::update(mine(id, &self.holder))
            .set(bulk_actions::locked_until.eq(None::<NaiveDateTime>))
            .execute(conn)
            .map(drop)
    }

    /// One batch, in one transaction: lock the row, check the lease, act, advance.
    fn batch(&self, conn: &mut DbConnection, id: i64) -> Result<Step, Failure> {
        let settings = (self.settings)();
        let now = self.clock.now();
        let step = write_transaction(conn, |conn| {
            read_committed(conn)?;
            lock(conn, id)?;
            let row = find(conn, id)?;
            if !row.running() || row.lease_holder.as_deref() != Some(&self.holder) {
                return Ok(Step::Lost);
            }
            let bulk = match bulk_of(&row) {
                Ok(bulk) => bulk,
                Err(error) => {
                    finish(conn, id, now, Some(&error.to_string()))?;
                    return Ok(Step::Finished);
                }
            };
            // Never more rows than it counted when created (what its preview counted):
            // rows that came to match below its newest one since are left alone.
            let left = row.matched - row.processed;
            let selected = match left > 0 {
                true => select(conn, &bulk, (row.cursor_id, row.upper_id), BATCH.min(left))?,
                false => Selected::DeadLetters(Vec::new()),
            };
            let Some(last) = selected.last_id() else {
                finish(conn, id, now, None)?;
                return Ok(Step::Finished);
            };
            let (rows, tally) = act(conn, &bulk, selected, settings.destinations(), now)?;
            if self.faults.bulk_batch_crashes() {
                return Err(Failure::Crashed);
            }
            let mut results: Tally = serde_json::from_str(&row.results).unwrap_or_default();
            for (name, n) in &tally.results {
                metrics::counter!("inlet_bulk_rows_total", "action" => bulk.kind.as_str(), "result" => name.clone())
                    .increment(u64::try_from(*n).unwrap_or_default());
            }
            results.add(tally);
            advance(conn, id, (last, row.processed + rows), &results, now)?;
            Ok::<_, Failure>(Step::More)
        })?;
        if step == Step::More {
            if let Some(waker) = &self.waker {
                waker.notify_one();
            }
        }
        Ok(step)
    }
}

/// No lease in force at `now`.
fn free(
    now: NaiveDateTime,
) -> diesel::dsl::Or<
    diesel::dsl::IsNull<bulk_actions::locked_until>,
    diesel::dsl::Lt<bulk_actions::locked_until, NaiveDateTime>,
> {
    bulk_actions::locked_until
        .is_null()
        .or(bulk_actions::locked_until.lt(now))
}

/// The action `id` while `holder` holds it.
fn mine(
    id: i64,
    holder: &str,
) -> diesel::dsl::Filter<
    diesel::dsl::Find<bulk_actions::table, i64>,
    diesel::dsl::Eq<bulk_actions::lease_holder, &str>,
> {
    bulk_actions::table
        .find(id)
        .filter(bulk_actions::lease_holder.eq(holder))
}

/// PostgreSQL: the action's row, locked until this batch commits (another runner's batch
/// waits, then finds the lease is not its own). SQLite's write transactions take turns.
fn lock(conn: &mut DbConnection, id: i64) -> QueryResult<()> {
    if let DbConnection::Postgres(c) = conn {
        bulk_actions::table
            .find(id)
            .select(bulk_actions::id)
            .for_update()
            .first::<i64>(c)?;
    }
    Ok(())
}

/// The action's request, as stored.
fn bulk_of(row: &super::bulk::BulkRow) -> Result<Bulk, OperatorError> {
    let kind = BulkKind::parse(&row.action);
    let filter = serde_json::from_str(&row.filter).ok();
    match (kind, filter) {
        (Some(kind), Some(filter)) => Ok(Bulk {
            kind,
            filter,
            dry_run: false,
            // Its row keeps what it acts on: up to `upper_id`, `matched` rows at most.
            expect: None,
        }),
        _ => Err(OperatorError::Internal(format!(
            "bulk action {} is stored in a form this version cannot read",
            row.id
        ))),
    }
}

/// Acts on one batch: how many rows, and what became of them.
fn act(
    conn: &mut DbConnection,
    bulk: &Bulk,
    selected: Selected,
    destinations: &Destinations,
    now: DateTime<Utc>,
) -> QueryResult<(i64, Tally)> {
    match selected {
        Selected::Events(rows) => {
            let items: Vec<_> = rows.into_iter().map(|(_, key)| key).collect();
            let only = bulk.filter.destination.as_deref();
            let results = actions::redeliver(conn, destinations, &items, only, now)?;
            Ok((items.len() as i64, Tally::of_replays(&results)))
        }
        Selected::DeadLetters(ids) => {
            let results = match bulk.kind {
                BulkKind::Requeue => actions::requeue(conn, destinations, &ids, now)?,
                _ => actions::discard(conn, &ids, now)?,
            };
            Ok((ids.len() as i64, Tally::of_dead_letters(&results)))
        }
    }
}

/// The batch is done: the cursor moves past it, the counts grow, the lease is renewed.
fn advance(
    conn: &mut DbConnection,
    id: i64,
    (cursor, processed): (i64, i64),
    results: &Tally,
    now: DateTime<Utc>,
) -> Result<(), OperatorError> {
    let results = serde_json::to_string(results)
        .map_err(|e| OperatorError::Internal(format!("cannot encode the counts: {e}")))?;
    diesel::update(bulk_actions::table.find(id))
        .set((
            bulk_actions::cursor_id.eq(cursor),
            bulk_actions::processed.eq(processed),
            bulk_actions::results.eq(results),
            bulk_actions::failures.eq(0),
            bulk_actions::error.eq(None::<String>),
            bulk_actions::locked_until.eq(now.naive_utc() + LEASE),
            bulk_actions::updated_at.eq(now.naive_utc()),
        ))
        .execute(conn)?;
    Ok(())
}

/// The action is over: done, or failed with `error`.
fn finish(
    conn: &mut DbConnection,
    id: i64,
    now: DateTime<Utc>,
    error: Option<&str>,
) -> QueryResult<()> {
    diesel::update(bulk_actions::table.find(id))
        .set((
            bulk_actions::status.eq(if error.is_some() { FAILED } else { DONE }),
            bulk_actions::error.eq(error),
            bulk_actions::locked_until.eq(None::<NaiveDateTime>),
            bulk_actions::updated_at.eq(now.naive_utc()),
            bulk_actions::finished_at.eq(Some(now.naive_utc())),
        ))
        .execute(conn)
        .map(drop)
}
