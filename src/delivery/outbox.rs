//! The `deliveries` table: rows written in the ingest transaction, leased by dispatchers,
//! and settled only by the holder of the current lease.
//!
//! `attempt` is the fencing token: every lease bumps it, and every settlement is
//! `WHERE id = ? AND attempt = ?` — zero rows means another dispatcher took the row over
//! after this lease expired, and the stale holder's result is discarded.

use crate::db::schema::deliveries;
use crate::db::{dialect, write_transaction, DbConnection};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

pub const PENDING: &str = "pending";
pub const IN_PROGRESS: &str = "in_progress";
pub const DELIVERED: &str = "delivered";
pub const DEAD: &str = "dead";
/// A dead letter an operator chose not to send: kept, like a dead one, until swept.
pub const DISCARDED: &str = "discarded";

/// What is delivered for one event, to each destination.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub payload: &'a [u8],
    pub content_type: &'a str,
}

impl<'m> Message<'m> {
    /// One pending row per destination (name, delivery deadline), due now. Ingest calls it
    /// for a new fact in the claiming transaction; an operator replay calls it again.
    pub fn enqueue(
        &self,
        conn: &mut DbConnection,
        destinations: &'m [(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> QueryResult<()> {
        NewDelivery::enqueue_all(conn, &self.rows(destinations, now))
    }

    /// The pending rows [`Message::enqueue`] writes: one per destination, due `now`.
    pub fn rows(
        &self,
        destinations: &'m [(String, DateTime<Utc>)],
        now: DateTime<Utc>,
    ) -> Vec<NewDelivery<'m>> {
        let now = now.naive_utc();
        destinations
            .iter()
            .map(|(destination, deadline)| NewDelivery {
                source: self.source,
                event_id: self.event_id,
                event_type: self.event_type,
                destination,
                payload: self.payload,
                content_type: self.content_type,
                status: PENDING,
                attempt: 0,
                next_attempt_at: now,
                deadline_at: deadline.naive_utc(),
                created_at: now,
            })
            .collect()
    }
}

/// The most rows one outbox `INSERT` writes: 11 bound parameters each.
const INSERT_ROWS: usize = 2_000;
/// The most payload bytes one outbox `INSERT` carries (at least one row).
const INSERT_BYTES: usize = 16 * 1024 * 1024;

/// A delivery about to be enqueued.
#[derive(Debug, Insertable)]
#[diesel(table_name = deliveries, treat_none_as_default_value = false)]
pub struct NewDelivery<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub destination: &'a str,
    pub payload: &'a [u8],
    pub content_type: &'a str,
    pub status: &'a str,
    pub attempt: i32,
    pub next_attempt_at: NaiveDateTime,
    pub deadline_at: NaiveDateTime,
    pub created_at: NaiveDateTime,
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
                    bytes += row.payload.len();
                    bytes <= INSERT_BYTES
                })
                .count()
                .max(1);
            let (chunk, later) = rest.split_at(n);
            // Multi-row inserts are per backend in diesel: the one dialect difference here.
            dialect!(conn, c => diesel::insert_into(deliveries::table)
                .values(chunk)
                .execute(c))?;
            rest = later;
        }
        Ok(())
    }
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
    pub payload: Vec<u8>,
    pub content_type: String,
    /// This lease's fencing token.
    pub attempt: i32,
    pub deadline_at: NaiveDateTime,
}

impl Leased {
    /// The key the destination deduplicates on: the same on every attempt and replay.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.source, self.event_id)
    }
}

/// Leases up to `limit` due deliveries until `now + lease`: pending rows whose time has
/// come, and in-progress rows whose lease expired (their holder died). PostgreSQL skips
/// rows another dispatcher is leasing (`FOR UPDATE SKIP LOCKED`); SQLite serializes
/// leasing under the write lock.
pub fn lease_due(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    lease: std::time::Duration,
    limit: i64,
) -> QueryResult<Vec<Leased>> {
    let now = now.naive_utc();
    let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    let due = || {
        deliveries::table
            .filter(
                deliveries::status
                    .eq(PENDING)
                    .and(deliveries::next_attempt_at.le(now))
                    .or(deliveries::status
                        .eq(IN_PROGRESS)
                        .and(deliveries::locked_until.le(now))),
            )
            .order((deliveries::next_attempt_at, deliveries::id))
            .limit(limit)
            .select(deliveries::id)
    };
    // An idle poll is one indexed read: it never takes SQLite's write lock.
    let any_due: Option<i64> = due().limit(1).first(conn).optional()?;
    if any_due.is_none() {
        return Ok(Vec::new());
    }
    write_transaction(conn, |conn| {
        // The one dialect difference: PostgreSQL skips rows other dispatchers are leasing.
        let ids: Vec<i64> = match conn {
            DbConnection::Postgres(c) => due().for_update().skip_locked().load(c)?,
            DbConnection::Sqlite(c) => due().load(c)?,
        };
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        diesel::update(deliveries::table.filter(deliveries::id.eq_any(&ids)))
            .set((
                deliveries::status.eq(IN_PROGRESS),
                deliveries::attempt.eq(deliveries::attempt + 1),
                deliveries::locked_until.eq(until),
            ))
            .execute(conn)?;
        deliveries::table
            .filter(deliveries::id.eq_any(&ids))
            .order((deliveries::next_attempt_at, deliveries::id))
            .select(Leased::as_select())
            .load(conn)
    })
}

/// The row as held by this lease: `WHERE id = ? AND attempt = ?`.
type Fenced = diesel::dsl::Filter<
    deliveries::table,
    diesel::dsl::And<
        diesel::dsl::Eq<deliveries::id, i64>,
        diesel::dsl::Eq<deliveries::attempt, i32>,
    >,
>;

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
}

/// The fenced settlements. Each returns `false` when the lease was lost.
impl Leased {
    /// Records `settlement` if this lease still holds the row.
    pub fn settle(&self, conn: &mut DbConnection, settlement: &Settlement) -> QueryResult<bool> {
        match settlement {
            Settlement::Delivered { at, status } => self.mark_delivered(conn, *at, *status),
            Settlement::Retry { at, status, error } => self.reschedule(conn, *at, *status, error),
            Settlement::Dead { at, status, error } => self.mark_dead(conn, *at, *status, error),
            Settlement::Release { at } => self.release(conn, *at),
        }
    }

    fn fenced(&self) -> Fenced {
        deliveries::table.filter(
            deliveries::id
                .eq(self.id)
                .and(deliveries::attempt.eq(self.attempt)),
        )
    }

    fn mark_delivered(
        &self,
        conn: &mut DbConnection,
        now: DateTime<Utc>,
        status: u16,
    ) -> QueryResult<bool> {
        diesel::update(self.fenced())
            .set((
                deliveries::status.eq(DELIVERED),
                deliveries::delivered_at.eq(Some(now.naive_utc())),
                deliveries::locked_until.eq(None::<NaiveDateTime>),
                deliveries::last_status.eq(Some(i32::from(status))),
                deliveries::last_error.eq(None::<String>),
            ))
            .execute(conn)
            .map(|rows| rows == 1)
    }

    fn reschedule(
        &self,
        conn: &mut DbConnection,
        at: DateTime<Utc>,
        status: Option<u16>,
        error: &str,
    ) -> QueryResult<bool> {
        diesel::update(self.fenced())
            .set((
                deliveries::status.eq(PENDING),
                deliveries::next_attempt_at.eq(at.naive_utc()),
                deliveries::locked_until.eq(None::<NaiveDateTime>),
                deliveries::last_status.eq(status.map(i32::from)),
                deliveries::last_error.eq(Some(error)),
            ))
            .execute(conn)
            .map(|rows| rows == 1)
    }

    fn mark_dead(
        &self,
        conn: &mut DbConnection,
        at: DateTime<Utc>,
        status: Option<u16>,
        error: &str,
    ) -> QueryResult<bool> {
        diesel::update(self.fenced())
            .set((
                deliveries::status.eq(DEAD),
                deliveries::settled_at.eq(Some(at.naive_utc())),
                deliveries::locked_until.eq(None::<NaiveDateTime>),
                deliveries::last_status.eq(status.map(i32::from)),
                deliveries::last_error.eq(Some(error)),
            ))
            .execute(conn)
            .map(|rows| rows == 1)
    }

    fn release(&self, conn: &mut DbConnection, now: DateTime<Utc>) -> QueryResult<bool> {
        diesel::update(self.fenced())
            .set((
                deliveries::status.eq(PENDING),
                deliveries::next_attempt_at.eq(now.naive_utc()),
                deliveries::locked_until.eq(None::<NaiveDateTime>),
            ))
            .execute(conn)
            .map(|rows| rows == 1)
    }
}

/// Deliveries not yet delivered nor dead (for the `inlet_outbox_pending` gauge and tests).
pub fn count_by_status(conn: &mut DbConnection, status: &str) -> QueryResult<i64> {
    deliveries::table
        .filter(deliveries::status.eq(status))
        .count()
        .get_result(conn)
}
