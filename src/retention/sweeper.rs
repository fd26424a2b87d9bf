//! The sweeper: deletes expired `events` rows, delivered `deliveries` rows older than the
//! event window, and dead or discarded deliveries older than `retention.dead_letters`, in
//! batches of `sweep_batch`, one short transaction per batch, so ingestion never waits on
//! it for longer than one batch. It never touches `facts`, nor a delivery that is still
//! pending or in progress.
//!
//! With several Inlet instances on one PostgreSQL database, one sweeps at a time: every
//! batch's transaction first takes the sweep's advisory lock for itself (a transaction's
//! lock, so it works through a transaction pooler), and an instance that finds it held
//! ends its round as skipped — another instance is sweeping.

use super::RetentionSettings;
use crate::clock::Clock;
use crate::db::schema::{bulk_actions, console_sessions, deliveries, delivery_attempts, events};
use crate::db::{read_committed, write_transaction, AdvisoryLock, DbConnection, DbPool};
use crate::delivery::{DEAD, DELIVERED, DISCARDED};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};

type Backend = <DbConnection as diesel::Connection>::Backend;
use crate::traces::{self, Attribute, Kind, Span, Traces};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// What a round did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub dry_run: bool,
    /// Another instance held the sweep lock: this round stopped where it found it held.
    pub skipped: bool,
    pub events: u64,
    /// Delivered deliveries older than the event window.
    pub deliveries: u64,
    /// Dead or discarded deliveries older than `retention.dead_letters`.
    pub dead_letters: u64,
    pub operator_requests: u64,
    /// Rows of the audit trail older than `retention.audit`.
    pub audit: u64,
    /// Bulk actions finished before `retention.audit`.
    pub bulk_actions: u64,
    /// Console sessions that expired.
    pub sessions: u64,
    pub batches: u64,
}

/// When the sweeper last succeeded, for readiness.
#[derive(Debug, Clone)]
pub struct SweeperHealth {
    /// Unix seconds of the last successful round (the start time before the first).
    last_success: Arc<AtomicI64>,
    /// A round has succeeded (here, or skipped because another instance swept).
    succeeded_once: Arc<std::sync::atomic::AtomicBool>,
    interval: std::time::Duration,
}

impl SweeperHealth {
    /// When the last round succeeded; `None` before the first.
    pub fn last_success(&self) -> Option<DateTime<Utc>> {
        if !self.succeeded_once.load(Ordering::Relaxed) {
            return None;
        }
        DateTime::from_timestamp(self.last_success.load(Ordering::Relaxed), 0)
    }

    fn succeeded(&self, at: i64) {
        self.last_success.store(at, Ordering::Relaxed);
        self.succeeded_once.store(true, Ordering::Relaxed);
    }

    /// When the last round succeeded (the start, before the first), if that is more than
    /// three intervals before `now` ([`SweeperHealth::stalled_for`]).
    pub fn stalled_since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.stalled_for(now)?;
        DateTime::from_timestamp(self.last_success.load(Ordering::Relaxed), 0)
    }

    /// `None` when healthy; otherwise how long it has been since the last success, when
    /// that is more than three intervals.
    pub fn stalled_for(&self, now: DateTime<Utc>) -> Option<chrono::Duration> {
        let since = now.timestamp() - self.last_success.load(Ordering::Relaxed);
        let allowed = 3 * i64::try_from(self.interval.as_secs()).unwrap_or(i64::MAX / 3);
        (since > allowed.max(60)).then(|| chrono::Duration::seconds(since))
    }
}

/// Deletes expired rows.
pub struct Sweeper {
    pool: DbPool,
    clock: Arc<dyn Clock>,
    settings: RetentionSettings,
    health: SweeperHealth,
    traces: Traces,
}

impl Sweeper {
    pub fn new(pool: DbPool, clock: Arc<dyn Clock>, settings: RetentionSettings) -> Self {
        let health = SweeperHealth {
            last_success: Arc::new(AtomicI64::new(clock.now().timestamp())),
            succeeded_once: Arc::default(),
            interval: settings.sweep_interval,
        };
        Self {
            pool,
            clock,
            settings,
            health,
            traces: Traces::default(),
        }
    }

    /// Records a span per sweep with `traces`.
    pub fn with_traces(mut self, traces: Traces) -> Self {
        self.traces = traces;
        self
    }

    pub fn health(&self) -> SweeperHealth {
        self.health.clone()
    }

    /// One round: every expired row, batch by batch (blocking; call off the executor).
    pub fn sweep(&self, dry_run: bool) -> anyhow::Result<SweepReport> {
        let now = self.clock.now();
        let cutoffs = Cutoffs {
            events: now.naive_utc(),
            deliveries: (now - self.settings.events.0).naive_utc(),
            dead_letters: (now - self.settings.dead_letters.0).naive_utc(),
            audit: (now - self.settings.audit_trail.0).naive_utc(),
        };
        // A connection per step, never across batches: with SQLite's single connection,
        // webhooks get their turn between any two batches.
        let pool = &self.pool;
        let report = SweepReport {
            dry_run,
            ..SweepReport::default()
        };
        if dry_run {
            return count_all(&mut *pool.get()?, &cutoffs, report);
        }
        let mut round = Round {
            pool,
            batch: i64::from(self.settings.sweep_batch),
            report,
        };
        let batch = round.batch;
        round.report.events = round.table("events", |c| {
            delete_expired_events(c, cutoffs.events, batch)
        })?;
        round.report.deliveries = round.table("deliveries", |c| {
            delete_finished(c, Finished::Delivered, &cutoffs, batch)
        })?;
        let dead_letters = round.table("dead_letters", |c| {
            delete_finished(c, Finished::DeadLetters, &cutoffs, batch)
        })?;
        if dead_letters > 0 {
            // Undelivered facts leave the outbox here: say so where operators look.
            tracing::warn!(
                rows = dead_letters,
                window = %self.settings.dead_letters,
                "swept dead and discarded deliveries older than retention.dead_letters"
            );
        }
        round.report.dead_letters = dead_letters;
        round.report.operator_requests = round.table("operator_requests", |c| {
            crate::idempotency::delete_expired_operator_keys(c, cutoffs.events, batch)
        })?;
        round.report.audit = round.table("audit", |c| delete_old_audit(c, cutoffs.audit, batch))?;
        round.report.bulk_actions = round.table("bulk_actions", |c| {
            delete_finished_bulk_actions(c, cutoffs.audit, batch)
        })?;
        round.report.sessions = round.table("console_sessions", |c| {
            delete_expired_sessions(c, cutoffs.events, batch)
        })?;
        Ok(round.report)
    }

    /// Sweeps every `sweep_interval` until `shutdown` (a dropped sender also stops it).
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let this = self.clone();
            let mut span =
                (self.traces).span("sweep", Kind::Internal, &traces::root(), None, Vec::new);
            let swept = tokio::task::spawn_blocking(move || this.sweep(false)).await;
            trace_sweep(&mut span, &swept);
            match swept {
                Ok(Ok(report)) if report.skipped => {
                    // Another instance sweeps: the work is being done.
                    self.health.succeeded(self.clock.now().timestamp());
                    metrics::counter!("inlet_sweeper_runs_total", "result" => "skipped")
                        .increment(1);
                    tracing::debug!("another instance is sweeping; skipped this round");
                }
                Ok(Ok(report)) => {
                    let now = self.clock.now().timestamp();
                    self.health.succeeded(now);
                    metrics::counter!("inlet_sweeper_runs_total", "result" => "ok").increment(1);
                    metrics::gauge!("inlet_sweeper_last_success_timestamp_seconds").set(now as f64);
                    tracing::info!(
                        events = report.events,
                        deliveries = report.deliveries,
                        dead_letters = report.dead_letters,
                        batches = report.batches,
                        "sweep finished"
                    );
                }
                Ok(Err(error)) => {
                    metrics::counter!("inlet_sweeper_runs_total", "result" => "error").increment(1);
                    tracing::warn!(%error, "sweep failed; retrying next interval");
                }
                Err(error) => tracing::warn!(%error, "the sweep task was aborted"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.sweep_interval) => {}
                changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { break },
            }
        }
    }
}

/// What a sweep did, on its span: rows deleted per table, or why it failed.
fn trace_sweep(
    span: &mut Span,
    swept: &Result<anyhow::Result<SweepReport>, tokio::task::JoinError>,
) {
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    match swept {
        Ok(Ok(report)) => {
            span.set(Attribute::new("inlet.sweep.skipped", report.skipped));
            span.set(Attribute::new("inlet.sweep.events", count(report.events)));
            span.set(Attribute::new(
                "inlet.sweep.deliveries",
                count(report.deliveries),
            ));
            span.set(Attribute::new(
                "inlet.sweep.dead_letters",
                count(report.dead_letters),
            ));
            span.set(Attribute::new("inlet.sweep.audit", count(report.audit)));
        }
        Ok(Err(error)) => span.fail("sweep_failed", &error.to_string()),
        Err(error) => span.fail("sweep_aborted", &error.to_string()),
    }
}

/// One round's progress: once it finds the sweep lock held, every later table is left
/// to the instance holding it.
struct Round<'a> {
    pool: &'a DbPool,
    batch: i64,
    report: SweepReport,
}

impl Round<'_> {
    /// Runs `delete_batch` in its own short write transaction, holding the sweep lock,
    /// until a batch comes back short; returns the rows deleted.
    fn table(
        &mut self,
        table: &'static str,
        delete_batch: impl Fn(&mut DbConnection) -> QueryResult<u64>,
    ) -> anyhow::Result<u64> {
        let mut deleted = 0;
        while !self.report.skipped {
            let batch = write_transaction(&mut *self.pool.get()?, |c| {
                // The payload copy reads the deliveries a replay committed while this
                // batch waited for its event locks: each statement its own snapshot.
                read_committed(c)?;
                if !holds_sweep_lock(c)? {
                    return Ok(None);
                }
                delete_batch(c).map(Some)
            })?;
            let Some(count) = batch else {
                self.report.skipped = true;
                break;
            };
            metrics::counter!("inlet_sweeper_deleted_total", "table" => table).increment(count);
            deleted += count;
            self.report.batches += 1;
            if count < self.batch.unsigned_abs() {
                break;
            }
        }
        Ok(deleted)
    }
}

/// Takes the sweep lock for this transaction: `false` when another instance's batch holds
/// it. SQLite's write lock already excludes other writers.
fn holds_sweep_lock(conn: &mut DbConnection) -> QueryResult<bool> {
    match conn {
        DbConnection::Postgres(pg) => AdvisoryLock::Sweep.try_in_transaction(pg),
        DbConnection::Sqlite(_) => Ok(true),
    }
}

struct Cutoffs {
    /// Events whose `expires_at` is at or before this.
    events: NaiveDateTime,
    /// Delivered rows delivered at or before this.
    deliveries: NaiveDateTime,
    /// Dead or discarded rows settled at or before this.
    dead_letters: NaiveDateTime,
    /// Audit rows written at or before this.
    audit: NaiveDateTime,
}

/// Deliveries that are done with.
#[derive(Debug, Clone, Copy)]
enum Finished {
    /// Delivered before the event window.
    Delivered,
    /// Dead or discarded before the dead-letter window.
    DeadLetters,
}

type DeliveryPredicate =
    Box<dyn BoxableExpression<deliveries::table, Backend, SqlType = Nullable<Bool>>>;

impl Finished {
    fn predicate(self, cutoffs: &Cutoffs) -> DeliveryPredicate {
        match self {
            Self::Delivered => Box::new(
                deliveries::status
                    .eq(DELIVERED)
                    .and(deliveries::delivered_at.le(cutoffs.deliveries)),
            ),
            Self::DeadLetters => Box::new(
                deliveries::status
                    .eq_any([DEAD, DISCARDED])
                    .and(deliveries::settled_at.le(cutoffs.dead_letters)),
            ),
        }
    }
}

fn count_finished(conn: &mut DbConnection, kind: Finished, cutoffs: &Cutoffs) -> QueryResult<u64> {
    deliveries::table
        .filter(kind.predicate(cutoffs))
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

fn count_expired_events(conn: &mut DbConnection, cutoff: NaiveDateTime) -> QueryResult<u64> {
    events::table
        .filter(events::expires_at.le(cutoff))
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

/// Deletes up to `batch` audit rows written at or before `cutoff`: nothing else ever
/// deletes one.
fn delete_old_audit(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<u64> {
    use crate::db::schema::audit;
    let ids: Vec<i64> = audit::table
        .filter(audit::at.le(cutoff))
        .order(audit::id)
        .limit(batch)
        .select(audit::id)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::delete(audit::table.filter(audit::id.eq_any(&ids)))
        .execute(conn)
        .map(|n| n as u64)
}

fn count_old_audit(conn: &mut DbConnection, cutoff: NaiveDateTime) -> QueryResult<u64> {
    use crate::db::schema::audit;
    audit::table
        .filter(audit::at.le(cutoff))
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

/// Bulk actions finished (done or failed: a running one has no `finished_at`) at or before
/// `cutoff`: `retention.audit`, as long as the audit trail keeps what they did.
fn finished_bulk_actions(
    cutoff: NaiveDateTime,
) -> diesel::dsl::Filter<
    bulk_actions::table,
    diesel::dsl::LtEq<bulk_actions::finished_at, NaiveDateTime>,
> {
    bulk_actions::table.filter(bulk_actions::finished_at.le(cutoff))
}

fn delete_finished_bulk_actions(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<u64> {
    let ids: Vec<i64> = finished_bulk_actions(cutoff)
        .order(bulk_actions::id)
        .limit(batch)
        .select(bulk_actions::id)
        .load(conn)?;
    diesel::delete(bulk_actions::table.filter(bulk_actions::id.eq_any(&ids)))
        .execute(conn)
        .map(|n| n as u64)
}

fn count_finished_bulk_actions(conn: &mut DbConnection, cutoff: NaiveDateTime) -> QueryResult<u64> {
    finished_bulk_actions(cutoff)
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

/// Deletes up to `batch` rows of console sessions that expired by `now`: nobody may sign
/// in or out for a long time, and rows are otherwise swept only then.
fn delete_expired_sessions(
    conn: &mut DbConnection,
    now: NaiveDateTime,
    batch: i64,
) -> QueryResult<u64> {
    let ids: Vec<String> = console_sessions::table
        .filter(console_sessions::expires_at.le(now))
        .limit(batch)
        .select(console_sessions::id)
        .load(conn)?;
    diesel::delete(console_sessions::table.filter(console_sessions::id.eq_any(&ids)))
        .execute(conn)
        .map(|n| n as u64)
}

fn count_expired_sessions(conn: &mut DbConnection, now: NaiveDateTime) -> QueryResult<u64> {
    console_sessions::table
        .filter(console_sessions::expires_at.le(now))
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

fn count_expired_keys(conn: &mut DbConnection, cutoff: NaiveDateTime) -> QueryResult<u64> {
    crate::db::schema::operator_requests::table
        .filter(crate::db::schema::operator_requests::expires_at.le(cutoff))
        .count()
        .get_result::<i64>(conn)
        .map(|n| n.unsigned_abs())
}

/// Deletes a batch of expired events. Their payloads go first into every delivery still
/// referring to them that may yet be sent (pending, in flight, a dead letter that can be
/// requeued): no delivery ever loses its body. On PostgreSQL the events are locked before
/// the copy, so a replay enqueuing a delivery of one of them (it locks the event too)
/// either commits before the copy, which then sees its row, or finds the event gone.
fn delete_expired_events(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<u64> {
    let oldest: Vec<i64> = events::table
        .filter(events::expires_at.le(cutoff))
        .order(events::expires_at)
        .limit(batch)
        .select(events::id)
        .load(conn)?;
    // Locked in id order, like a replay locks them: two lockers never wait on each other
    // in a circle.
    let locked = events::table
        .filter(events::id.eq_any(&oldest))
        .filter(events::expires_at.le(cutoff))
        .order(events::id)
        .select(events::id);
    let ids: Vec<i64> = match conn {
        DbConnection::Postgres(c) => locked.for_update().load(c)?,
        DbConnection::Sqlite(_) => oldest,
    };
    if ids.is_empty() {
        return Ok(0);
    }
    keep_payloads(conn, &ids)?;
    diesel::delete(
        events::table
            .filter(events::id.eq_any(&ids))
            .filter(events::expires_at.le(cutoff)),
    )
    .execute(conn)
    .map(|n| n as u64)
}

/// Copies the payloads of the events `ids` into the deliveries that refer to them without
/// a copy of their own and are not delivered (a delivered row is never sent again).
fn keep_payloads(conn: &mut DbConnection, ids: &[i64]) -> QueryResult<usize> {
    let set_from_event = format!(
        "UPDATE deliveries SET payload = e.payload FROM events e \
         WHERE deliveries.payload IS NULL AND deliveries.status <> '{DELIVERED}' \
         AND e.source = deliveries.source AND e.event_id = deliveries.event_id"
    );
    match conn {
        DbConnection::Postgres(c) => {
            diesel::sql_query(format!("{set_from_event} AND e.id = ANY($1)"))
                .bind::<Array<BigInt>, _>(ids)
                .execute(c)
        }
        DbConnection::Sqlite(c) => {
            // The ids as one JSON array: a statement of one shape whatever the batch.
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            diesel::sql_query(format!(
                "{set_from_event} AND e.id IN (SELECT value FROM json_each(?))"
            ))
            .bind::<Text, _>(format!("[{}]", ids.join(",")))
            .execute(c)
        }
    }
}

fn delete_finished(
    conn: &mut DbConnection,
    kind: Finished,
    cutoffs: &Cutoffs,
    batch: i64,
) -> QueryResult<u64> {
    let ids: Vec<i64> = deliveries::table
        .filter(kind.predicate(cutoffs))
        .limit(batch)
        .select(deliveries::id)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    // A delivery's attempts go with it (`sweep_table` runs each batch in one transaction).
    let deleted = diesel::delete(
        deliveries::table
            .filter(deliveries::id.eq_any(&ids))
            .filter(kind.predicate(cutoffs)),
    )
    .execute(conn)?;
    let remaining = deliveries::table
        .filter(deliveries::id.eq_any(&ids))
        .select(deliveries::id);
    diesel::delete(
        delivery_attempts::table
            .filter(delivery_attempts::delivery_id.eq_any(&ids))
            .filter(diesel::dsl::not(
                delivery_attempts::delivery_id.eq_any(remaining),
            )),
    )
    .execute(conn)?;
    Ok(deleted as u64)
}

/// A dry run's round: what a sweep would delete now, counted and not deleted.
fn count_all(
    conn: &mut DbConnection,
    cutoffs: &Cutoffs,
    mut report: SweepReport,
) -> anyhow::Result<SweepReport> {
    report.events = count_expired_events(conn, cutoffs.events)?;
    report.deliveries = count_finished(conn, Finished::Delivered, cutoffs)?;
    report.dead_letters = count_finished(conn, Finished::DeadLetters, cutoffs)?;
    report.operator_requests = count_expired_keys(conn, cutoffs.events)?;
    report.audit = count_old_audit(conn, cutoffs.audit)?;
    report.bulk_actions = count_finished_bulk_actions(conn, cutoffs.audit)?;
    report.sessions = count_expired_sessions(conn, cutoffs.events)?;
    Ok(report)
}
