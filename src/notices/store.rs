//! A notice written like any event: claimed on `(source, event_id)` with `ON CONFLICT DO
//! NOTHING`, its fact recorded in the ledger, and its outbox row for the notices
//! destination — in the caller's transaction, with the change it tells of where there is
//! one. A second observation of the same occurrence (another instance, a re-sent body)
//! finds the id claimed and writes nothing.

use super::notice::Notice;
use super::settings::{DESTINATION, SOURCE};
use crate::db::DbConnection;
use crate::delivery::{Message, Route};
use crate::ingest::{claim_all, fingerprint, NewEvent, STATUS_PROCESSED};
use crate::ledger::{record_all, NewFact};
use chrono::{DateTime, Utc};
use diesel::QueryResult;
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
