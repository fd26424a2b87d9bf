//! The `operator_requests` table: the Idempotency-Key store of the operator API.
//!
//! A mutating call claims `(caller, key)` with `INSERT … ON CONFLICT DO NOTHING RETURNING`
//! in the same transaction that performs its effect and stores its response — exactly the
//! ingest path. A concurrent call with the same key waits on the unique index (PostgreSQL)
//! or the write lock (SQLite) and then receives the stored response; if it cannot wait
//! (`lock_timeout`), it gets 409. A crash leaves nothing behind, so a retry starts afresh.

use crate::db::schema::operator_requests;
use crate::db::{dialect, DbConnection};
use chrono::NaiveDateTime;
use diesel::prelude::*;

pub const COMPLETED: &str = "completed";

/// A key about to be claimed.
#[derive(Debug, Insertable)]
#[diesel(table_name = operator_requests)]
pub struct NewOperatorRequest<'a> {
    pub caller: &'a str,
    pub idempotency_key: &'a str,
    pub fingerprint: &'a str,
    pub status: &'a str,
    pub created_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
}

impl NewOperatorRequest<'_> {
    /// `Some(row id)` when this call owns the key, `None` when a live row holds it. An
    /// expired row (the sweeper has not reached it yet) is removed and the key claimed.
    pub fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>> {
        diesel::delete(
            operator_requests::table
                .filter(operator_requests::caller.eq(self.caller))
                .filter(operator_requests::idempotency_key.eq(self.idempotency_key))
                .filter(operator_requests::expires_at.le(self.created_at)),
        )
        .execute(conn)?;
        dialect!(conn, c => diesel::insert_into(operator_requests::table)
            .values(self)
            .on_conflict((operator_requests::caller, operator_requests::idempotency_key))
            .do_nothing()
            .returning(operator_requests::id)
            .get_result(c)
            .optional())
    }
}

/// A completed call: what every retry with the same key receives.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct StoredCall {
    pub fingerprint: String,
    pub status: Option<i32>,
    pub body: Option<Vec<u8>>,
}

impl StoredCall {
    pub fn find(conn: &mut DbConnection, caller: &str, key: &str) -> QueryResult<Self> {
        operator_requests::table
            .filter(operator_requests::caller.eq(caller))
            .filter(operator_requests::idempotency_key.eq(key))
            .select((
                operator_requests::fingerprint,
                operator_requests::response_status,
                operator_requests::response_body,
            ))
            .first(conn)
    }

    pub fn store(conn: &mut DbConnection, row: i64, status: u16, body: &[u8]) -> QueryResult<()> {
        diesel::update(operator_requests::table.find(row))
            .set((
                operator_requests::status.eq(COMPLETED),
                operator_requests::response_status.eq(Some(i32::from(status))),
                operator_requests::response_body.eq(Some(body)),
            ))
            .execute(conn)
            .map(drop)
    }
}

/// Deletes up to `batch` expired keys (the sweeper).
pub fn delete_expired(
    conn: &mut DbConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<u64> {
    let ids: Vec<i64> = operator_requests::table
        .filter(operator_requests::expires_at.le(cutoff))
        .limit(batch)
        .select(operator_requests::id)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::delete(operator_requests::table.filter(operator_requests::id.eq_any(&ids)))
        .execute(conn)
        .map(|n| n as u64)
}
