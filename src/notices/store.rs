//! A notice written like any event: claimed on `(source, event_id)` with `ON CONFLICT DO
//! NOTHING`, its fact recorded in the ledger, and its outbox row for the notices
//! destination — in the caller's transaction, with the change it tells of where there is
//! one. A second observation of the same occurrence (another instance, a re-sent body)
//! finds the id claimed and writes nothing. Also what the notices read back of events:
//! a notice already written, and which events were themselves notices sent back to Inlet.

use super::notice::Notice;
use super::settings::{is_notice_delivery, DESTINATION, SOURCE};
use crate::db::schema::events;
use crate::db::DbConnection;
use crate::delivery::{DeadLetter, Message, Route};
use crate::ingest::{claim_all, fingerprint, read_stored_headers, NewEvent, STATUS_PROCESSED};
use crate::ledger::{record_all, NewFact};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::QueryResult;
use std::collections::HashSet;
use std::time::Duration;

/// The stored request headers of a notice: it came with none.
const NO_HEADERS: &str = "[]";
const CONTENT_TYPE: &str = "application/json";

/// How a notice is kept and delivered: `retention.events` and the notices destination's
/// delivery deadline.
#[derive(Debug, Clone, Copy)]
pub struct Keeping {
    pub retention: Duration,
    pub deadline: Duration,
}

/// Writes `notice` (no transaction of its own): `true` when it is new, `false` when its
/// id was claimed before.
pub fn write(conn: &mut DbConnection, notice: &Notice, keeping: Keeping) -> QueryResult<bool> {
    let body = notice.body();
    let digest = fingerprint(&body);
    let kind = notice.kind.as_str();
    let at = notice.at;
    let later = |span: Duration| {
        chrono::Duration::from_std(span)
            .ok()
            .and_then(|span| at.checked_add_signed(span))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    };
    let event = NewEvent {
        source: SOURCE,
        event_id: &notice.id,
        event_type: Some(kind),
        fingerprint: &digest,
        status: STATUS_PROCESSED,
        fact_kind: kind,
        fact_key: &notice.id,
        payload: &body,
        received_at: at.naive_utc(),
        expires_at: later(keeping.retention).naive_utc(),
        content_type: Some(CONTENT_TYPE),
        headers: Some(NO_HEADERS),
        arrival: None,
        response_status: None,
        response_content_type: None,
        response_body: None,
        trace_parent: None,
    };
    if claim_all(conn, std::slice::from_ref(&event))?.is_empty() {
        return Ok(false);
    }
    let fact = NewFact {
        source: SOURCE,
        kind,
        fact_key: &notice.id,
        first_event_id: &notice.id,
        created_at: at.naive_utc(),
    };
    // Facts are permanent: a notice told once is not told again after its event expired.
    if record_all(conn, std::slice::from_ref(&fact))?.is_empty() {
        return Ok(false);
    }
    let deadline: DateTime<Utc> = later(keeping.deadline);
    let message = Message {
        source: SOURCE,
        event_id: &notice.id,
        event_type: Some(kind),
        content_type: CONTENT_TYPE,
        trace_parent: None,
    };
    message.enqueue(conn, &[Route::taken(DESTINATION.to_owned(), deadline)], at)?;
    Ok(true)
}

/// The `in_window` of the dead-letter notice `id` (0 when its body does not say); `None`
/// when no such notice was written.
pub fn counted_in_window(conn: &mut DbConnection, id: &str) -> QueryResult<Option<i64>> {
    let payload: Option<Vec<u8>> = events::table
        .filter(events::source.eq(SOURCE))
        .filter(events::event_id.eq(id))
        .select(events::payload)
        .first(conn)
        .optional()?;
    Ok(payload.map(|payload| {
        let body = serde_json::from_slice::<serde_json::Value>(&payload).ok();
        body.and_then(|b| b["in_window"].as_i64()).unwrap_or(0)
    }))
}

/// Those of the events of `dead` that arrived as one of Inlet's notices (their stored
/// request headers carry the mark every notice delivery does), by `(source, event_id)`.
pub fn notices_among(
    conn: &mut DbConnection,
    dead: &[DeadLetter],
) -> QueryResult<HashSet<(String, String)>> {
    let ids: Vec<&str> = dead.iter().map(|row| row.event_id.as_str()).collect();
    let sources: Vec<&str> = dead.iter().map(|row| row.source.as_str()).collect();
    let stored: Vec<(String, String, Option<String>)> = events::table
        .filter(events::event_id.eq_any(ids))
        .filter(events::source.eq_any(sources))
        .select((events::source, events::event_id, events::headers))
        .load(conn)?;
    Ok(stored
        .into_iter()
        .filter(|(_, _, headers)| {
            let headers = read_stored_headers(headers.as_deref().unwrap_or("[]"));
            is_notice_delivery(headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())))
        })
        .map(|(source, event_id, _)| (source, event_id))
        .collect())
}
