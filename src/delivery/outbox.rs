//! The `deliveries` table: rows written in the ingest transaction, leased by dispatchers,
//! and settled only by the holder of the current lease.
//!
//! `attempt` is the fencing token: every lease bumps it, and every settlement is
//! `WHERE id = ? AND attempt = ?` — zero rows means another dispatcher took the row over
//! after this lease expired, and the stale holder's result is discarded. Dispatchers
//! settle in groups: one statement records many rows, each still fenced on its own.

use super::gates::{read_committed, record_observations, BreakerChange, Observed};
use super::watch::{AfterCommit, SettleWatcher, SettledChanges};
use crate::db::arrays::{ArraySql, ArrayStatement};
use crate::db::schema::{deliveries, delivery_attempts};
use crate::db::{dialect, write_transaction, DbConnection};
use crate::delivery::DestinationKey;
use crate::jq::EvalError;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Binary, Bool, Integer, Nullable, Text, Timestamp};
use std::collections::HashSet;

pub const PENDING: &str = "pending";
pub const IN_PROGRESS: &str = "in_progress";
pub const DELIVERED: &str = "delivered";
pub const DEAD: &str = "dead";
/// A dead letter an operator chose not to send: kept, like a dead one, until swept.
pub const DISCARDED: &str = "discarded";

/// What is delivered for one event, to each destination. Its payload is the event row's:
/// the outbox rows refer to it rather than copying it.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub content_type: &'a str,
    /// The trace its attempts continue (the `traceparent` of the span that received it).
    pub trace_parent: Option<&'a str>,
}

/// One destination a fact is enqueued for: its name, the deadline of its delivery, and
/// — when its filter could not decide — why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub destination: String,
    pub deadline: DateTime<Utc>,
    /// The filter's failure: the row is written all the same, never skipped — dead with
    /// the reason (a bound hit, the evaluator died: the same input fails the same way), or
    /// pending when nothing was evaluated (every evaluator busy) — and its filter is
    /// evaluated again whenever a dispatcher leases it.
    pub undecided: Option<EvalError>,
}

impl Route {
    /// A destination that takes the fact (no filter, or a filter that said so).
    pub fn taken(destination: String, deadline: DateTime<Utc>) -> Self {
        Self {
            destination,
            deadline,
            undecided: None,
        }
    }
}

impl<'m> Message<'m> {
    /// One row per route, due now. Ingest calls it for a new fact in the claiming
    /// transaction; an operator replay calls it again.
    pub fn enqueue(
        &self,
        conn: &mut DbConnection,
        routes: &'m [Route],
        now: DateTime<Utc>,
    ) -> QueryResult<()> {
        NewDelivery::enqueue_all(conn, &self.rows(routes, now))
    }

    /// The rows [`Message::enqueue`] writes: one per route, due `now` — pending, or dead
    /// where its filter failed.
    pub fn rows(&self, routes: &'m [Route], now: DateTime<Utc>) -> Vec<NewDelivery<'m>> {
        let now = now.naive_utc();
        routes
            .iter()
            .map(|route| {
                let failed = route.undecided.as_ref().filter(|e| !e.is_transient());
                NewDelivery {
                    source: self.source,
                    event_id: self.event_id,
                    event_type: self.event_type,
                    destination: &route.destination,
                    payload: None,
                    content_type: self.content_type,
                    status: if failed.is_some() { DEAD } else { PENDING },
                    attempt: 0,
                    next_attempt_at: now,
                    deadline_at: route.deadline.naive_utc(),
                    created_at: now,
                    trace_parent: self.trace_parent,
                    filter_pending: route.undecided.is_some(),
                    last_error: route.undecided.as_ref().map(filter_error),
                    settled_at: failed.map(|_| now),
                }
            })
            .collect()
    }
}

/// What a delivery whose filter failed keeps as its `last_error`.
pub fn filter_error(error: &EvalError) -> String {
    match error.is_transient() {
        true => format!("filter not evaluated yet: {error}"),
        false => format!("filter failed: {error}"),
    }
}

/// The most rows one outbox `INSERT` writes: 15 bound parameters each.
const INSERT_ROWS: usize = 2_000;
/// The most payload bytes one outbox `INSERT` carries (at least one row).
const INSERT_BYTES: usize = 16 * 1024 * 1024;

/// A delivery about to be enqueued. `payload` is `None` when the event's row, written in
/// the same transaction or before, holds the bytes: one copy of each payload.
#[derive(Debug, Insertable)]
#[diesel(table_name = deliveries, treat_none_as_default_value = false)]
pub struct NewDelivery<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub destination: &'a str,
    pub payload: Option<&'a [u8]>,
    pub content_type: &'a str,
    pub status: &'a str,
    pub attempt: i32,
    pub next_attempt_at: NaiveDateTime,
    pub deadline_at: NaiveDateTime,
    pub created_at: NaiveDateTime,
    pub trace_parent: Option<&'a str>,
    pub filter_pending: bool,
    pub last_error: Option<String>,
    pub settled_at: Option<NaiveDateTime>,
}

impl NewDelivery<'_> {
    pub fn enqueue(&self, conn: &mut DbConnection) -> QueryResult<()> {
        Self::enqueue_all(conn, std::slice::from_ref(self))
    }

    /// Writes `rows` with multi-row `INSERT`s: one, unless the rows would pass
    /// [`INSERT_ROWS`] (bound parameters: SQLite allows 32,766 per statement, PostgreSQL
    /// 65,535) or [`INSERT_BYTES`] of payload.
    pub fn enqueue_all(conn: &mut DbConnection, rows: &[Self]) -> QueryResult<()> {
        let mut rest = rows;
        while !rest.is_empty() {
            let mut bytes = 0;
            let n = rest
                .iter()
                .take(INSERT_ROWS)
                .take_while(|row| {
                    bytes += row.payload.map_or(0, <[u8]>::len);
                    bytes <= INSERT_BYTES
                })
                .count()
                .max(1);
            let (chunk, later) = rest.split_at(n);
            match conn {
                DbConnection::Postgres(c) => enqueue_statement(chunk).execute(c)?,
                DbConnection::Sqlite(c) => diesel::insert_into(deliveries::table)
                    .values(chunk)
                    .execute(c)?,
            };
            rest = later;
        }
        Ok(())
    }
}

/// [`NewDelivery::enqueue_all`] on PostgreSQL: one statement text over one array per
/// column, whatever the number of rows (see `db::arrays`).
fn enqueue_statement<'a>(
    rows: &'a [NewDelivery<'a>],
) -> ArrayStatement<'a, EnqueueDeliveries, Integer> {
    let column = |f: fn(&'a NewDelivery<'a>) -> &'a str| rows.iter().map(f).collect::<Vec<_>>();
    let time = |f: fn(&NewDelivery<'_>) -> NaiveDateTime| rows.iter().map(f).collect::<Vec<_>>();
    ArrayStatement::new()
        .bind::<Text, _>(column(|r| r.source))
        .bind::<Text, _>(column(|r| r.event_id))
        .bind::<Nullable<Text>, _>(rows.iter().map(|r| r.event_type).collect::<Vec<_>>())
        .bind::<Text, _>(column(|r| r.destination))
        .bind::<Nullable<Binary>, _>(rows.iter().map(|r| r.payload).collect::<Vec<_>>())
        .bind::<Text, _>(column(|r| r.content_type))
        .bind::<Text, _>(column(|r| r.status))
        .bind::<Integer, _>(rows.iter().map(|r| r.attempt).collect::<Vec<_>>())
        .bind::<Timestamp, _>(time(|r| r.next_attempt_at))
        .bind::<Timestamp, _>(time(|r| r.deadline_at))
        .bind::<Timestamp, _>(time(|r| r.created_at))
        .bind::<Nullable<Text>, _>(rows.iter().map(|r| r.trace_parent).collect::<Vec<_>>())
        .bind::<Bool, _>(rows.iter().map(|r| r.filter_pending).collect::<Vec<_>>())
        .bind::<Nullable<Text>, _>(
            rows.iter()
                .map(|r| r.last_error.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind::<Nullable<Timestamp>, _>(rows.iter().map(|r| r.settled_at).collect::<Vec<_>>())
}

/// The enqueue statement's name in each connection's statement cache.
enum EnqueueDeliveries {}

impl ArraySql for EnqueueDeliveries {
    const SQL: &'static str =
        "INSERT INTO deliveries (source, event_id, event_type, destination, payload, \
         content_type, status, attempt, next_attempt_at, deadline_at, created_at, trace_parent, \
         filter_pending, last_error, settled_at) \
         SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::bytea[], \
         ?::text[], ?::text[], ?::int4[], ?::timestamp[], ?::timestamp[], ?::timestamp[], \
         ?::text[], ?::bool[], ?::text[], ?::timestamp[])";
}

/// A leased delivery: what the dispatcher needs to send it and to settle it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = deliveries)]
pub struct Leased {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub destination: String,
    /// The row's own copy, else the event row's bytes; `None` only if both are gone.
    #[diesel(select_expression = shared_payload())]
    #[diesel(select_expression_type = SqlLiteral<Nullable<Binary>>)]
    pub payload: Option<Vec<u8>>,
    pub content_type: String,
    /// This lease's fencing token.
    pub attempt: i32,
    pub deadline_at: NaiveDateTime,
    /// The trace its attempt continues.
    pub trace_parent: Option<String>,
    /// Its filter could not decide when it was enqueued: evaluated before it is sent.
    pub filter_pending: bool,
    /// Leases of it that sent nothing (see [`Settlement::Park`]).
    pub parked: i32,
    /// Its event's stored request headers (JSON), read only when its filter is pending:
    /// what `$headers` holds for that evaluation.
    #[diesel(select_expression = pending_headers())]
    #[diesel(select_expression_type = SqlLiteral<Nullable<Text>>)]
    pub headers: Option<String>,
}

/// The payload a leased row delivers, read in its lease statement: the row's own copy, or
/// the bytes of the event it refers to. One statement sees one snapshot, so a sweep that
/// copies the bytes into the row and deletes the event is seen wholly or not at all.
fn shared_payload() -> SqlLiteral<Nullable<Binary>> {
    diesel::dsl::sql(
        "COALESCE(deliveries.payload, (SELECT e.payload FROM events e \
         WHERE e.source = deliveries.source AND e.event_id = deliveries.event_id))",
    )
}

/// The stored headers of a leased row's event, for a row whose filter is pending (no
/// read of the event otherwise).
fn pending_headers() -> SqlLiteral<Nullable<Text>> {
    diesel::dsl::sql(
        "CASE WHEN deliveries.filter_pending THEN (SELECT e.headers FROM events e \
         WHERE e.source = deliveries.source AND e.event_id = deliveries.event_id) END",
    )
}

impl Leased {
    /// The bytes to send (empty when the payload is gone: see [`Leased::payload`]).
    pub fn body(&self) -> &[u8] {
        self.payload.as_deref().unwrap_or_default()
    }

    /// The key the destination deduplicates on: the same on every attempt and replay.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.source, self.event_id)
    }
}

/// A leased row as its lease holds it: settlements apply only `WHERE id = ? AND attempt = ?`
/// and while the row is still `in_progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fence {
    pub id: i64,
    pub attempt: i32,
}

impl Leased {
    /// Its destination's key.
    pub fn key(&self) -> DestinationKey {
        DestinationKey::stored(self.source.clone(), self.destination.clone())
    }

    /// This lease's fence.
    pub fn fence(&self) -> Fence {
        Fence {
            id: self.id,
            attempt: self.attempt,
        }
    }
}

diesel::alias!(const QUEUED: Alias<Queued> = deliveries as queued);

/// Which due rows a lease statement may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Any destination's, oldest first: one ordered range of `(status, next_attempt_at)`.
    All,
    /// One destination's: a range of `(source, destination, status, next_attempt_at)`, so
    /// rows of other destinations are never read.
    One(DestinationKey),
}

/// Leases, in one statement, the rows the subquery `$due` (over [`QUEUED`]: diesel wants
/// the table under another name there) selects. PostgreSQL: `UPDATE … WHERE id IN (SELECT
/// … FOR UPDATE SKIP LOCKED) RETURNING`, skipping rows another dispatcher is leasing (an
/// `UPDATE` that matches nothing writes nothing). SQLite: the same `UPDATE`, under the
/// write lock its caller holds.
macro_rules! lease_selected {
    ($conn:expr, $due:expr, $leasing:expr) => {
        match $conn {
            DbConnection::Postgres(c) => diesel::update(deliveries::table)
                .filter(deliveries::id.eq_any($due.for_update().skip_locked()))
                .set($leasing)
                .returning(Leased::as_returning())
                .get_results(c),
            DbConnection::Sqlite(c) => diesel::update(deliveries::table)
                .filter(deliveries::id.eq_any($due))
                .set($leasing)
                .returning(Leased::as_returning())
                .get_results(c),
        }
    };
}

/// Leases up to `limit` due deliveries until `now + lease`, oldest first, whatever their
/// destination.
pub fn lease_due(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    lease: std::time::Duration,
    limit: i64,
) -> QueryResult<Vec<Leased>> {
    let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    lease_scope(conn, now, until, &Scope::All, limit)
}

/// Leases up to `limit` rows of `scope` due at `now`, until `until`. PostgreSQL:
/// autocommitted statements. SQLite: an indexed read first, so that an idle poll never
/// takes the write lock, then one write transaction.
pub fn lease_scope(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
    scope: &Scope,
    limit: i64,
) -> QueryResult<Vec<Leased>> {
    let (now, until) = (now.naive_utc(), until.naive_utc());
    match conn {
        DbConnection::Postgres(_) => take(conn, (now, until), scope, limit),
        DbConnection::Sqlite(_) => {
            if !any_due(conn, now, scope)? {
                return Ok(Vec::new());
            }
            write_transaction(conn, |conn| take(conn, (now, until), scope, limit))
        }
    }
}

/// Whether any delivery of `scope` is due at `now`: an expired lease or a pending row
/// whose time has come.
pub fn any_due(conn: &mut DbConnection, now: NaiveDateTime, scope: &Scope) -> QueryResult<bool> {
    let mut expired = deliveries::table
        .filter(deliveries::status.eq(IN_PROGRESS))
        .filter(deliveries::locked_until.le(now))
        .select(deliveries::id)
        .into_boxed();
    let mut pending = deliveries::table
        .filter(deliveries::status.eq(PENDING))
        .filter(deliveries::next_attempt_at.le(now))
        .select(deliveries::id)
        .into_boxed();
    if let Scope::One(key) = scope {
        let (source, destination) = (key.source().to_owned(), key.name().to_owned());
        expired = expired
            .filter(deliveries::source.eq(source.clone()))
            .filter(deliveries::destination.eq(destination.clone()));
        pending = pending
            .filter(deliveries::source.eq(source))
            .filter(deliveries::destination.eq(destination));
    }
    if expired.first::<i64>(conn).optional()?.is_some() {
        return Ok(true);
    }
    Ok(pending.first::<i64>(conn).optional()?.is_some())
}

/// Destinations asked about in one [`due_among`] statement.
const DESTINATIONS_PER_DUE_CHECK: usize = 500;

/// Which of `keys` have a delivery due at `now` (as [`any_due`] reads it): one statement
/// per [`DESTINATIONS_PER_DUE_CHECK`] destinations, two probes of the `(source,
/// destination, status, …)` index each, so a lease round over thousands of configured
/// destinations visits only those with work instead of asking each on its own.
pub fn due_among(
    conn: &mut DbConnection,
    now: NaiveDateTime,
    keys: &[&DestinationKey],
) -> QueryResult<HashSet<DestinationKey>> {
    let postgres = matches!(conn, DbConnection::Postgres(_));
    let mut due = HashSet::new();
    for chunk in keys.chunks(DESTINATIONS_PER_DUE_CHECK) {
        let sql = due_sql(chunk.len(), postgres);
        let rows: Vec<DueKey> = dialect!(conn, c => {
            let mut query = diesel::sql_query(sql).into_boxed();
            for key in chunk {
                query = query.bind::<Text, _>(key.source()).bind::<Text, _>(key.name());
            }
            query.bind::<Timestamp, _>(now).bind::<Timestamp, _>(now).load(c)
        })?;
        due.extend(
            (rows.into_iter()).map(|row| DestinationKey::stored(row.source, row.destination)),
        );
    }
    Ok(due)
}

/// The statement of [`due_among`] for `keys` destinations. Placeholders are `$n` on
/// PostgreSQL, `?` on SQLite.
fn due_sql(keys: usize, postgres: bool) -> String {
    let mark = |n: usize| match postgres {
        true => format!("${n}"),
        false => "?".to_owned(),
    };
    let values: Vec<String> = (0..keys)
        .map(|key| format!("({}, {})", mark(2 * key + 1), mark(2 * key + 2)))
        .collect();
    let (pending_now, expired_now) = (mark(2 * keys + 1), mark(2 * keys + 2));
    format!(
        "WITH asked (source, destination) AS (VALUES {values}) \
         SELECT asked.source, asked.destination FROM asked \
         WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.source = asked.source \
                 AND d.destination = asked.destination AND d.status = '{PENDING}' \
                 AND d.next_attempt_at <= {pending_now}) \
            OR EXISTS (SELECT 1 FROM deliveries d WHERE d.source = asked.source \
                 AND d.destination = asked.destination AND d.status = '{IN_PROGRESS}' \
                 AND d.locked_until <= {expired_now})",
        values = values.join(", "),
    )
}

/// A destination [`due_among`] found due.
#[derive(QueryableByName)]
struct DueKey {
    #[diesel(sql_type = Text)]
    source: String,
    #[diesel(sql_type = Text)]
    destination: String,
}

/// Leases up to `limit` rows of `scope` (no transaction of its own): in-progress rows
/// whose lease expired (their holder died), then pending rows whose time has come, oldest
/// first. Each kind is one ordered index range, leased by its own statement: asked for
/// together, with an `OR`, PostgreSQL read and sorted the whole backlog on every lease.
pub fn take(
    conn: &mut DbConnection,
    (now, until): (NaiveDateTime, NaiveDateTime),
    scope: &Scope,
    limit: i64,
) -> QueryResult<Vec<Leased>> {
    let mut rows = lease_kind(conn, IN_PROGRESS, (now, until), scope, limit)?;
    let rest = limit - i64::try_from(rows.len()).unwrap_or(limit);
    if rest > 0 {
        rows.extend(lease_kind(conn, PENDING, (now, until), scope, rest)?);
    }
    rows.sort_by_key(|row| row.id);
    Ok(rows)
}

/// Leases up to `limit` due rows of one status within `scope`: `in_progress` rows whose
/// lease expired at `now`, or `pending` rows due at `now`.
fn lease_kind(
    conn: &mut DbConnection,
    status: &'static str,
    (now, until): (NaiveDateTime, NaiveDateTime),
    scope: &Scope,
    limit: i64,
) -> QueryResult<Vec<Leased>> {
    if limit <= 0 {
        return Ok(Vec::new());
    }
    let leasing = (
        deliveries::status.eq(IN_PROGRESS),
        deliveries::attempt.eq(deliveries::attempt + 1),
        deliveries::locked_until.eq(until),
    );
    let oldest = (
        QUEUED.field(deliveries::next_attempt_at),
        QUEUED.field(deliveries::id),
    );
    let id = QUEUED.field(deliveries::id);
    let of_status = QUEUED.field(deliveries::status).eq(status);
    // Two kinds (the column compared with `now`) by two scopes: one statement each.
    macro_rules! lease_where {
        ($due_now:expr) => {
            match scope {
                Scope::All => {
                    let due = QUEUED
                        .filter(of_status.and($due_now))
                        .order(oldest)
                        .limit(limit)
                        .select(id);
                    lease_selected!(conn, due, leasing)
                }
                Scope::One(key) => {
                    let due = QUEUED
                        .filter(QUEUED.field(deliveries::source).eq(key.source()))
                        .filter(QUEUED.field(deliveries::destination).eq(key.name()))
                        .filter(of_status.and($due_now))
                        .order(oldest)
                        .limit(limit)
                        .select(id);
                    lease_selected!(conn, due, leasing)
                }
            }
        };
    }
    match status {
        IN_PROGRESS => lease_where!(QUEUED.field(deliveries::locked_until).le(now)),
        _ => lease_where!(QUEUED.field(deliveries::next_attempt_at).le(now)),
    }
}

/// How a leased delivery ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    Delivered {
        at: DateTime<Utc>,
        status: u16,
    },
    Retry {
        at: DateTime<Utc>,
        status: Option<u16>,
        error: String,
    },
    Dead {
        at: DateTime<Utc>,
        status: Option<u16>,
        error: String,
    },
    /// Given back unsent, due at `at` (shutdown).
    Release {
        at: DateTime<Utc>,
    },
    /// Given back unsent until `at`, for a reason of this instance's rather than the
    /// destination's (it does not know the destination yet; no evaluator was free): the
    /// lease spends no attempt.
    Park {
        at: DateTime<Utc>,
        error: String,
    },
    /// Never sent: its destination's filter, evaluated when it was leased, does not take
    /// it. Discarded, with why.
    Filtered {
        at: DateTime<Utc>,
    },
}

/// What a delivery its filter did not take keeps as its `last_error`.
pub const NOT_TAKEN: &str = "not taken by its destination's filter (decided when it was leased)";

impl Leased {
    /// Records `settlement` if this lease still holds the row; `false` when the lease was
    /// lost.
    pub fn settle(&self, conn: &mut DbConnection, settlement: &Settlement) -> QueryResult<bool> {
        let kept = settle_all(conn, &[(self.fence(), settlement.clone())], &[])?;
        Ok(kept.first().copied().unwrap_or(false))
    }
}

/// One attempt at a delivery, as `delivery_attempts` keeps it: which lease made it, when
/// it started and how long it took (its outcome, status and error are its settlement's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptLog {
    pub fence: Fence,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i64,
}

/// A `delivery_attempts` row.
#[derive(Insertable)]
#[diesel(table_name = delivery_attempts, treat_none_as_default_value = false)]
struct NewAttempt<'a> {
    delivery_id: i64,
    attempt: i32,
    outcome: &'static str,
    status: Option<i32>,
    error: Option<&'a str>,
    started_at: NaiveDateTime,
    duration_ms: i64,
}

impl<'a> NewAttempt<'a> {
    /// The row for `log`, settled as `settlement` (a release made no attempt).
    fn of(log: &AttemptLog, settlement: &'a Settlement) -> Option<Self> {
        let (outcome, status, error) = match settlement {
            Settlement::Delivered { status, .. } => ("delivered", Some(*status), None),
            Settlement::Retry { status, error, .. } => ("retry", *status, Some(error.as_str())),
            Settlement::Dead { status, error, .. } => ("dead", *status, Some(error.as_str())),
            Settlement::Release { .. } | Settlement::Filtered { .. } | Settlement::Park { .. } => {
                return None
            }
        };
        Some(Self {
            delivery_id: log.fence.id,
            attempt: log.fence.attempt,
            outcome,
            status: status.map(i32::from),
            error,
            started_at: log.started_at.naive_utc(),
            duration_ms: log.duration_ms,
        })
    }
}

/// Records a group of settlements in one statement, each fenced on its own row, and the
/// attempts in `logs` whose settlement was recorded, in the same transaction: the answer
/// says, in order, whether each lease still held its row (`false`: another dispatcher
/// took it over, and that settlement and its attempt were refused). All or nothing on a
/// database error.
pub fn settle_all(
    conn: &mut DbConnection,
    group: &[(Fence, Settlement)],
    logs: &[AttemptLog],
) -> QueryResult<Vec<bool>> {
    let settled = settle_observed(conn, group, logs, &[], Utc::now(), None)?;
    settled.after_commit.run();
    Ok(settled.kept)
}

/// What [`settle_observed`] recorded.
pub struct SettledGroup {
    /// In the group's order, whether each lease still held its row.
    pub kept: Vec<bool>,
    /// The breakers it opened or closed.
    pub transitions: Vec<BreakerChange>,
    /// The watcher's work for after the commit (it has committed when this is returned).
    pub after_commit: AfterCommit,
}

/// Tells `watcher` of a settlement's changes in a savepoint of its transaction: when its
/// writes fail, they alone are undone — logged — and the settlement commits all the same
/// (a notice is never worth a delivery sent twice, or a breaker that does not open).
fn tell_watcher(
    conn: &mut DbConnection,
    watcher: &dyn SettleWatcher,
    changes: &SettledChanges<'_>,
) -> AfterCommit {
    match conn.transaction(|conn| watcher.settled(conn, changes)) {
        Ok(after_commit) => after_commit,
        Err(error) => {
            tracing::error!(%error, "the settlement's notices could not be written; the settlement stands");
            AfterCommit::default()
        }
    }
}

/// [`settle_all`], applying in the same transaction the attempts' bearing on their
/// destinations' breakers (`observed`, at `now`), and telling `watcher` (in that
/// transaction too) which breakers changed and which rows went dead.
pub fn settle_observed(
    conn: &mut DbConnection,
    group: &[(Fence, Settlement)],
    logs: &[AttemptLog],
    observed: &[Observed],
    now: DateTime<Utc>,
    watcher: Option<&dyn SettleWatcher>,
) -> QueryResult<SettledGroup> {
    if group.is_empty() && observed.is_empty() {
        return Ok(SettledGroup {
            kept: Vec::new(),
            transitions: Vec::new(),
            after_commit: AfterCommit::default(),
        });
    }
    let postgres = matches!(conn, DbConnection::Postgres(_));
    let (kept, transitions, after_commit) = write_transaction(conn, |conn| {
        if !observed.is_empty() {
            read_committed(conn)?;
        }
        let kept = match group.is_empty() {
            true => HashSet::new(),
            false => settle_rows(conn, group, postgres)?,
        };
        record_attempts(conn, group, logs, &kept)?;
        let transitions = record_observations(conn, observed, now)?;
        let dead: Vec<i64> = group
            .iter()
            .filter(|(fence, settlement)| {
                matches!(settlement, Settlement::Dead { .. })
                    && kept.contains(&(fence.id, fence.attempt))
            })
            .map(|(fence, _)| fence.id)
            .collect();
        let changes = SettledChanges {
            transitions: &transitions,
            dead: &dead,
            now,
        };
        let after_commit = match watcher {
            Some(watcher) if !changes.is_empty() => tell_watcher(conn, watcher, &changes),
            _ => AfterCommit::default(),
        };
        Ok::<_, diesel::result::Error>((kept, transitions, after_commit))
    })?;
    let kept = group
        .iter()
        .map(|(fence, _)| kept.contains(&(fence.id, fence.attempt)))
        .collect();
    Ok(SettledGroup {
        kept,
        transitions,
        after_commit,
    })
}

/// The settling statement: the `(id, attempt)` of every row it settled. Keyed on the
/// fence: a stale lease of the same row in the group is not kept.
fn settle_rows(
    conn: &mut DbConnection,
    group: &[(Fence, Settlement)],
    postgres: bool,
) -> QueryResult<HashSet<(i64, i32)>> {
    let sql = settle_sql(group.len(), postgres);
    let kept: Vec<SettledId> = dialect!(conn, c => {
        let mut query = diesel::sql_query(sql).into_boxed();
        for (fence, settlement) in group {
            let row = SettledRow::of(settlement);
            query = query
                .bind::<BigInt, _>(fence.id)
                .bind::<Integer, _>(fence.attempt)
                .bind::<Text, _>(row.status)
                .bind::<Nullable<Timestamp>, _>(row.next_attempt_at)
                .bind::<Nullable<Timestamp>, _>(row.delivered_at)
                .bind::<Nullable<Timestamp>, _>(row.settled_at)
                .bind::<Nullable<Integer>, _>(row.last_status)
                .bind::<Nullable<Text>, _>(row.last_error)
                .bind::<Bool, _>(row.keeps_last)
                .bind::<Bool, _>(row.parks);
        }
        query.load(c)
    })?;
    Ok(kept.into_iter().map(|row| (row.id, row.attempt)).collect())
}

/// Inserts the attempts whose settlement was recorded (one statement).
fn record_attempts(
    conn: &mut DbConnection,
    group: &[(Fence, Settlement)],
    logs: &[AttemptLog],
    kept: &HashSet<(i64, i32)>,
) -> QueryResult<()> {
    let rows: Vec<NewAttempt<'_>> = logs
        .iter()
        .filter(|log| kept.contains(&(log.fence.id, log.fence.attempt)))
        .filter_map(|log| {
            let (_, settlement) = group.iter().find(|(fence, _)| *fence == log.fence)?;
            NewAttempt::of(log, settlement)
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    dialect!(conn, c => diesel::insert_into(delivery_attempts::table)
        .values(&rows)
        .execute(c))?;
    Ok(())
}

/// The columns of one settled row, as bound into [`settle_sql`]'s `VALUES` (`None` keeps
/// the row's current value; `keeps_last` keeps `last_status` and `last_error`).
struct SettledRow<'a> {
    status: &'static str,
    next_attempt_at: Option<NaiveDateTime>,
    delivered_at: Option<NaiveDateTime>,
    settled_at: Option<NaiveDateTime>,
    last_status: Option<i32>,
    last_error: Option<&'a str>,
    keeps_last: bool,
    /// The lease sent nothing: counted in `parked`.
    parks: bool,
}

impl<'a> SettledRow<'a> {
    fn of(settlement: &'a Settlement) -> Self {
        let row = |status| SettledRow {
            status,
            next_attempt_at: None,
            delivered_at: None,
            settled_at: None,
            last_status: None,
            last_error: None,
            keeps_last: false,
            parks: false,
        };
        let code = |status: Option<u16>| status.map(i32::from);
        match settlement {
            Settlement::Delivered { at, status } => SettledRow {
                delivered_at: Some(at.naive_utc()),
                last_status: Some(i32::from(*status)),
                ..row(DELIVERED)
            },
            Settlement::Retry { at, status, error } => SettledRow {
                next_attempt_at: Some(at.naive_utc()),
                last_status: code(*status),
                last_error: Some(error),
                ..row(PENDING)
            },
            Settlement::Dead { at, status, error } => SettledRow {
                settled_at: Some(at.naive_utc()),
                last_status: code(*status),
                last_error: Some(error),
                ..row(DEAD)
            },
            Settlement::Release { at } => SettledRow {
                next_attempt_at: Some(at.naive_utc()),
                keeps_last: true,
                ..row(PENDING)
            },
            Settlement::Park { at, error } => SettledRow {
                next_attempt_at: Some(at.naive_utc()),
                last_error: Some(error),
                parks: true,
                ..row(PENDING)
            },
            Settlement::Filtered { at } => SettledRow {
                settled_at: Some(at.naive_utc()),
                last_error: Some(NOT_TAKEN),
                ..row(DISCARDED)
            },
        }
    }
}

/// The columns of [`SettledRow`], in bind order.
const SETTLED_COLUMNS: [&str; 10] = [
    "id",
    "attempt",
    "status",
    "next_attempt_at",
    "delivered_at",
    "settled_at",
    "last_status",
    "last_error",
    "keeps_last",
    "parks",
];

/// One `UPDATE … FROM (VALUES …)` for `rows` settlements, each fenced on `(id, attempt)`
/// and on the row still being in progress (a row given back or already settled by this
/// very lease is not settled twice). Placeholders are `$n` on PostgreSQL, `?` on SQLite.
fn settle_sql(rows: usize, postgres: bool) -> String {
    let width = SETTLED_COLUMNS.len();
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let marks: Vec<String> = (1..=width)
                .map(|column| match postgres {
                    true => format!("${}", row * width + column),
                    false => "?".to_owned(),
                })
                .collect();
            format!("({})", marks.join(", "))
        })
        .collect();
    format!(
        "WITH settled ({columns}) AS (VALUES {values}) \
         UPDATE deliveries SET \
           status = settled.status, \
           next_attempt_at = COALESCE(settled.next_attempt_at, deliveries.next_attempt_at), \
           delivered_at = COALESCE(settled.delivered_at, deliveries.delivered_at), \
           settled_at = COALESCE(settled.settled_at, deliveries.settled_at), \
           locked_until = NULL, \
           last_status = CASE WHEN settled.keeps_last THEN deliveries.last_status \
                         ELSE settled.last_status END, \
           last_error = CASE WHEN settled.keeps_last THEN deliveries.last_error \
                        ELSE settled.last_error END, \
           parked = deliveries.parked + CASE WHEN settled.parks THEN 1 ELSE 0 END \
         FROM settled \
         WHERE deliveries.id = settled.id AND deliveries.attempt = settled.attempt \
           AND deliveries.status = '{IN_PROGRESS}' \
         RETURNING deliveries.id, deliveries.attempt",
        columns = SETTLED_COLUMNS.join(", "),
        values = values.join(", "),
    )
}

/// A row [`settle_all`] settled.
#[derive(QueryableByName)]
struct SettledId {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Integer)]
    attempt: i32,
}

/// Makes the parked rows of each destination in `keys` due at `now`: a reload that adds a
/// destination ends the wait of the rows parked while this instance did not know it.
pub fn unpark(
    conn: &mut DbConnection,
    keys: &[DestinationKey],
    now: DateTime<Utc>,
) -> QueryResult<usize> {
    let now = now.naive_utc();
    write_transaction(conn, |conn| {
        let mut unparked = 0;
        for key in keys {
            unparked += diesel::update(
                deliveries::table
                    .filter(deliveries::source.eq(key.source()))
                    .filter(deliveries::destination.eq(key.name()))
                    .filter(deliveries::status.eq(PENDING))
                    .filter(deliveries::parked.gt(0))
                    .filter(deliveries::next_attempt_at.gt(now)),
            )
            .set(deliveries::next_attempt_at.eq(now))
            .execute(conn)?;
        }
        Ok(unparked)
    })
}

/// Deliveries not yet delivered nor dead (for the `inlet_outbox_pending` gauge and tests).
pub fn count_by_status(conn: &mut DbConnection, status: &str) -> QueryResult<i64> {
    deliveries::table
        .filter(deliveries::status.eq(status))
        .count()
        .get_result(conn)
}

/// One destination's deliveries leased and not yet settled, across every instance.
pub(in crate::delivery) fn in_flight_of(
    conn: &mut DbConnection,
    key: &DestinationKey,
    now: NaiveDateTime,
) -> QueryResult<i64> {
    deliveries::table
        .filter(deliveries::source.eq(key.source()))
        .filter(deliveries::destination.eq(key.name()))
        .filter(deliveries::status.eq(IN_PROGRESS))
        .filter(deliveries::locked_until.gt(now))
        .count()
        .get_result(conn)
}
