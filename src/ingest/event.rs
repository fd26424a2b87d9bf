//! The `events` table: the inbox and dedupe record — the key store of webhooks, holding
//! the stored answer every duplicate receives.

use crate::db::schema::events;
use crate::db::{dialect, DbConnection};
use crate::idempotency::{Answer, KeyStore, StoredCall};
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

impl KeyStore for NewEvent<'_> {
    fn fingerprint(&self) -> &str {
        self.fingerprint
    }

    /// Claims `(source, event_id)` with `INSERT … ON CONFLICT DO NOTHING RETURNING id`.
    fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>> {
        dialect!(conn, c => diesel::insert_into(events::table)
            .values(self)
            .on_conflict((events::source, events::event_id))
            .do_nothing()
            .returning(events::id)
            .get_result(c)
            .optional())
    }

    fn stored(&self, conn: &mut DbConnection) -> QueryResult<StoredCall> {
        let (fingerprint, status, content_type, body) = events::table
            .filter(events::source.eq(self.source))
            .filter(events::event_id.eq(self.event_id))
            .select((
                events::fingerprint,
                events::response_status,
                events::response_content_type,
                events::response_body,
            ))
            .first::<(String, Option<i32>, Option<String>, Option<Vec<u8>>)>(conn)?;
        let answer = (|| {
            Some(Answer {
                status: u16::try_from(status?).ok()?,
                content_type: content_type?,
                body: body?,
            })
        })();
        Ok(StoredCall {
            fingerprint,
            answer,
        })
    }

    fn store(&self, conn: &mut DbConnection, row: i64, answer: &Answer) -> QueryResult<()> {
        diesel::update(events::table.find(row))
            .set((
                events::response_status.eq(i32::from(answer.status)),
                events::response_content_type.eq(&answer.content_type),
                events::response_body.eq(&answer.body),
            ))
            .execute(conn)
            .map(drop)
    }
}
