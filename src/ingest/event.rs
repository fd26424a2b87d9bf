//! The `events` table: the inbox and dedupe record, and the stored answer every duplicate
//! receives.

use crate::db::schema::events;
use crate::db::{dialect, DbConnection};
use chrono::NaiveDateTime;
use diesel::prelude::*;

/// The status of an event whose transaction committed.
pub const STATUS_PROCESSED: &str = "processed";

/// An event about to be claimed.
#[derive(Debug, Insertable)]
#[diesel(table_name = events)]
pub struct NewEvent<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    pub event_type: Option<&'a str>,
    pub fingerprint: &'a str,
    pub status: &'a str,
    pub fact_kind: &'a str,
    pub fact_key: &'a str,
    pub payload: &'a [u8],
    pub received_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
    pub content_type: Option<&'a str>,
}

impl NewEvent<'_> {
    /// Claims `(source, event_id)` with `INSERT … ON CONFLICT DO NOTHING RETURNING id`:
    /// `Some(row id)` when this request owns the event, `None` when it was already claimed.
    /// A concurrent, uncommitted claim of the same key is waited for on the unique index
    /// (PostgreSQL) or was serialized by the write lock (SQLite).
    pub fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>> {
        dialect!(conn, c => diesel::insert_into(events::table)
            .values(self)
            .on_conflict((events::source, events::event_id))
            .do_nothing()
            .returning(events::id)
            .get_result(c)
            .optional())
    }
}

/// The answer given to an event, replayed byte-for-byte to its duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Answer {
    /// Stores the answer on the claimed row, inside the claiming transaction.
    pub fn store(&self, conn: &mut DbConnection, event_row: i64) -> QueryResult<()> {
        diesel::update(events::table.find(event_row))
            .set((
                events::response_status.eq(i32::from(self.status)),
                events::response_content_type.eq(&self.content_type),
                events::response_body.eq(&self.body),
            ))
            .execute(conn)
            .map(drop)
    }
}

/// What a duplicate needs from the event row: the fingerprint to compare and the answer.
#[derive(Debug, Queryable)]
pub struct StoredEvent {
    pub fingerprint: String,
    response_status: Option<i32>,
    response_content_type: Option<String>,
    response_body: Option<Vec<u8>>,
}

impl StoredEvent {
    pub fn find(conn: &mut DbConnection, source: &str, event_id: &str) -> QueryResult<Self> {
        events::table
            .filter(events::source.eq(source))
            .filter(events::event_id.eq(event_id))
            .select((
                events::fingerprint,
                events::response_status,
                events::response_content_type,
                events::response_body,
            ))
            .first(conn)
    }

    /// The stored answer; `None` only if the row was written without one, which the
    /// single ingest transaction never does.
    pub fn answer(self) -> Option<Answer> {
        Some(Answer {
            status: u16::try_from(self.response_status?).ok()?,
            content_type: self.response_content_type?,
            body: self.response_body?,
        })
    }
}
