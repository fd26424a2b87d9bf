//! The `operator_requests` table: the Idempotency-Key store of the operator API, scoped to
//! the caller, kept for `retention.operator_keys`.

use super::{Answer, KeyStore, StoredCall};
use crate::db::schema::operator_requests;
use crate::db::{dialect, DbConnection};
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// A caller's Idempotency-Key, about to be claimed.
#[derive(Debug, Insertable)]
#[diesel(table_name = operator_requests)]
pub struct OperatorKey<'a> {
    pub caller: &'a str,
    pub idempotency_key: &'a str,
    pub fingerprint: &'a str,
    pub created_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
}

impl KeyStore for OperatorKey<'_> {
    fn fingerprint(&self) -> &str {
        self.fingerprint
    }

    /// An expired row (the sweeper has not reached it yet) is removed and the key claimed.
    fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>> {
        diesel::delete(
            operator_requests::table
                .filter(operator_requests::caller.eq(self.caller))
                .filter(operator_requests::idempotency_key.eq(self.idempotency_key))
                .filter(operator_requests::expires_at.le(self.created_at)),
        )
        .execute(conn)?;
        // `status` is always `completed`: a row exists only in the transaction that stores
        // its answer.
        dialect!(conn, c => diesel::insert_into(operator_requests::table)
            .values((self, operator_requests::status.eq("completed")))
            .on_conflict((operator_requests::caller, operator_requests::idempotency_key))
            .do_nothing()
            .returning(operator_requests::id)
            .get_result(c)
            .optional())
    }

    fn stored(&self, conn: &mut DbConnection) -> QueryResult<StoredCall> {
        let (fingerprint, status, body) = operator_requests::table
            .filter(operator_requests::caller.eq(self.caller))
            .filter(operator_requests::idempotency_key.eq(self.idempotency_key))
            .select((
                operator_requests::fingerprint,
                operator_requests::response_status,
                operator_requests::response_body,
            ))
            .first::<(String, Option<i32>, Option<Vec<u8>>)>(conn)?;
        let answer = status
            .and_then(|s| u16::try_from(s).ok())
            .zip(body)
            .map(|(status, body)| Answer {
                status,
                content_type: content_type_of(status).to_owned(),
                body,
            });
        Ok(StoredCall {
            fingerprint,
            answer,
        })
    }

    fn store(&self, conn: &mut DbConnection, row: i64, answer: &Answer) -> QueryResult<()> {
        diesel::update(operator_requests::table.find(row))
            .set((
                operator_requests::response_status.eq(Some(i32::from(answer.status))),
                operator_requests::response_body.eq(Some(&answer.body)),
            ))
            .execute(conn)
            .map(drop)
    }
}

/// Operator answers are JSON, and problem+json when they refuse.
pub fn content_type_of(status: u16) -> &'static str {
    if status >= 400 {
        "application/problem+json"
    } else {
        "application/json"
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
