//! The `events` table: the inbox and dedupe record — the key store of webhooks, holding
//! the stored answer every duplicate receives. A group's claims are one statement.

use crate::db::arrays::{ArraySql, ArrayStatement};
use crate::db::schema::events;
use crate::db::DbConnection;
use crate::idempotency::{Answer, StoredCall};
use crate::identity::EventKey;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, Timestamp};
use std::collections::{HashMap, HashSet};

/// The status of an event whose transaction committed.
pub const STATUS_PROCESSED: &str = "processed";

/// An event about to be claimed, with the answer it gets if its fact turns out new (the
/// common case, so that storing the answer costs no second write of the row).
#[derive(Debug, Insertable)]
#[diesel(table_name = events, treat_none_as_default_value = false)]
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
    pub headers: Option<&'a str>,
    pub response_status: Option<i32>,
    pub response_content_type: Option<&'a str>,
    pub response_body: Option<&'a [u8]>,
    pub trace_parent: Option<&'a str>,
    /// How it arrived: `None` for a webhook, `Some("recovered")` from its provider's record.
    pub arrival: Option<&'a str>,
}

/// Claims every event of a group with one `INSERT … ON CONFLICT (source, event_id) DO
/// NOTHING RETURNING`: the row id of each event this group now owns. The rest were
/// claimed before (a concurrent, uncommitted claim is waited for on the unique index).
/// `rows` must hold each key once, sorted, so concurrent groups lock keys in one order.
/// PostgreSQL: one statement text whatever the group's size ([`claim_statement`]).
pub fn claim_all(
    conn: &mut DbConnection,
    rows: &[NewEvent<'_>],
) -> QueryResult<HashMap<EventKey, i64>> {
    let claimed: Vec<(i64, String, String)> = match conn {
        DbConnection::Postgres(c) => claim_statement(rows).get_results(c)?,
        DbConnection::Sqlite(c) => diesel::insert_into(events::table)
            .values(rows)
            .on_conflict((events::source, events::event_id))
            .do_nothing()
            .returning((events::id, events::source, events::event_id))
            .get_results(c)?,
    };
    Ok(claimed
        .into_iter()
        .map(|(id, source, event_id)| (EventKey { source, event_id }, id))
        .collect())
}

/// The claim on PostgreSQL, over one array per column. `unnest` yields the rows in the
/// arrays' order, so keys are still locked sorted.
fn claim_statement<'a>(
    rows: &'a [NewEvent<'a>],
) -> ArrayStatement<'a, ClaimEvents, (BigInt, Text, Text)> {
    let column = |f: fn(&'a NewEvent<'a>) -> &'a str| rows.iter().map(f).collect::<Vec<_>>();
    let optional =
        |f: fn(&'a NewEvent<'a>) -> Option<&'a str>| rows.iter().map(f).collect::<Vec<_>>();
    let time = |f: fn(&NewEvent<'_>) -> NaiveDateTime| rows.iter().map(f).collect::<Vec<_>>();
    ArrayStatement::new()
        .bind::<Text, _>(column(|r| r.source))
        .bind::<Text, _>(column(|r| r.event_id))
        .bind::<Nullable<Text>, _>(optional(|r| r.event_type))
        .bind::<Text, _>(column(|r| r.fingerprint))
        .bind::<Text, _>(column(|r| r.status))
        .bind::<Text, _>(column(|r| r.fact_kind))
        .bind::<Text, _>(column(|r| r.fact_key))
        .bind::<Binary, _>(rows.iter().map(|r| r.payload).collect::<Vec<_>>())
        .bind::<Timestamp, _>(time(|r| r.received_at))
        .bind::<Timestamp, _>(time(|r| r.expires_at))
        .bind::<Nullable<Text>, _>(optional(|r| r.content_type))
        .bind::<Nullable<Text>, _>(optional(|r| r.headers))
        .bind::<Nullable<Integer>, _>(rows.iter().map(|r| r.response_status).collect::<Vec<_>>())
        .bind::<Nullable<Text>, _>(optional(|r| r.response_content_type))
        .bind::<Nullable<Binary>, _>(rows.iter().map(|r| r.response_body).collect::<Vec<_>>())
        .bind::<Nullable<Text>, _>(optional(|r| r.trace_parent))
        .bind::<Nullable<Text>, _>(optional(|r| r.arrival))
}

/// The claim statement's name in each connection's statement cache.
enum ClaimEvents {}

impl ArraySql for ClaimEvents {
    const SQL: &'static str =
        "INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, \
         fact_key, payload, received_at, expires_at, content_type, headers, response_status, \
         response_content_type, response_body, trace_parent, arrival) \
         SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], \
         ?::text[], ?::bytea[], ?::timestamp[], ?::timestamp[], ?::text[], ?::text[], ?::int4[], \
         ?::text[], ?::bytea[], ?::text[], ?::text[]) \
         ON CONFLICT (source, event_id) DO NOTHING RETURNING id, source, event_id";
}

/// The stored calls that hold `keys`: their fingerprints and answers, in one read.
pub fn stored_calls(
    conn: &mut DbConnection,
    keys: &[&EventKey],
) -> QueryResult<HashMap<EventKey, StoredCall>> {
    let wanted: HashSet<(&str, &str)> = keys
        .iter()
        .map(|key| (key.source.as_str(), key.event_id.as_str()))
        .collect();
    let sources: HashSet<&str> = keys.iter().map(|key| key.source.as_str()).collect();
    let ids: Vec<&str> = keys.iter().map(|key| key.event_id.as_str()).collect();
    let rows = events::table
        .filter(events::source.eq_any(sources))
        .filter(events::event_id.eq_any(ids))
        .select((
            events::source,
            events::event_id,
            events::fingerprint,
            events::response_status,
            events::response_content_type,
            events::response_body,
        ))
        .load::<(
            String,
            String,
            String,
            Option<i32>,
            Option<String>,
            Option<Vec<u8>>,
        )>(conn)?;
    Ok(rows
        .into_iter()
        .filter(|(source, id, ..)| wanted.contains(&(source.as_str(), id.as_str())))
        .map(|(source, id, fingerprint, status, content_type, body)| {
            let answer = (|| {
                Some(Answer {
                    status: u16::try_from(status?).ok()?,
                    content_type: content_type?,
                    body: body?,
                })
            })();
            let call = StoredCall {
                fingerprint,
                answer,
            };
            (EventKey::new(source, id), call)
        })
        .collect())
}

/// Replaces the answer a claimed row was inserted with (its fact was not new after all).
pub fn store_answer(conn: &mut DbConnection, row: i64, answer: &Answer) -> QueryResult<()> {
    diesel::update(events::table.find(row))
        .set((
            events::response_status.eq(i32::from(answer.status)),
            events::response_content_type.eq(&answer.content_type),
            events::response_body.eq(&answer.body),
        ))
        .execute(conn)
        .map(drop)
}
