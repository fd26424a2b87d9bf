//! What the operator API reads and does, on a connection. Replay and requeue run inside
//! the caller's Idempotency-Key transaction.

use crate::config::Settings;
use crate::db::schema::{deliveries, events, facts};
use crate::db::DbConnection;
use crate::delivery::{Message, DEAD, PENDING};
use crate::ledger::{FactIdentity, NewFact};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Filters over events (listing and replay by filter).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    pub source: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub status: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Queryable, Selectable)]
#[diesel(table_name = events)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub status: String,
    pub fact_kind: String,
    pub fact_key: String,
    pub received_at: NaiveDateTime,
    pub expires_at: NaiveDateTime,
}

/// One page of events in id order after `cursor`. Ids only grow, so paging never shows a
/// row twice, and every row committed before the first page is on some page.
pub fn list_events(
    conn: &mut DbConnection,
    filter: &EventFilter,
    cursor: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<EventSummary>> {
    let mut query = events::table
        .select(EventSummary::as_select())
        .order(events::id)
        .limit(limit)
        .into_boxed();
    if let Some(cursor) = cursor {
        query = query.filter(events::id.gt(cursor));
    }
    if let Some(source) = &filter.source {
        query = query.filter(events::source.eq(source.clone()));
    }
    if let Some(event_type) = &filter.event_type {
        query = query.filter(events::event_type.eq(event_type.clone()));
    }
    if let Some(status) = &filter.status {
        query = query.filter(events::status.eq(status.clone()));
    }
    if let Some(since) = filter.since {
        query = query.filter(events::received_at.ge(since.naive_utc()));
    }
    if let Some(until) = filter.until {
        query = query.filter(events::received_at.lt(until.naive_utc()));
    }
    query.load(conn)
}

/// Bytes as JSON: text when they are UTF-8, base64 otherwise.
fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "encoding": "utf8", "data": text }),
        Err(_) => json!({ "encoding": "base64", "data": BASE64.encode(bytes) }),
    }
}

#[derive(Debug, Serialize, Queryable, Selectable)]
#[diesel(table_name = deliveries)]
pub struct DeliverySummary {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub destination: String,
    pub status: String,
    pub attempt: i32,
    pub next_attempt_at: NaiveDateTime,
    pub deadline_at: NaiveDateTime,
    pub created_at: NaiveDateTime,
    pub delivered_at: Option<NaiveDateTime>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

/// Filters over deliveries (listing and requeue by filter).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryFilter {
    pub status: Option<String>,
    pub source: Option<String>,
    pub destination: Option<String>,
}

pub fn list_deliveries(
    conn: &mut DbConnection,
    filter: &DeliveryFilter,
    cursor: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<DeliverySummary>> {
    let mut query = deliveries::table
        .select(DeliverySummary::as_select())
        .order(deliveries::id)
        .limit(limit)
        .into_boxed();
    if let Some(cursor) = cursor {
        query = query.filter(deliveries::id.gt(cursor));
    }
    if let Some(status) = &filter.status {
        query = query.filter(deliveries::status.eq(status.clone()));
    }
    if let Some(source) = &filter.source {
        query = query.filter(deliveries::source.eq(source.clone()));
    }
    if let Some(destination) = &filter.destination {
        query = query.filter(deliveries::destination.eq(destination.clone()));
    }
    query.load(conn)
}

/// Everything about one event, or `None` when it is unknown. `Some(Err(fact))` when its
/// row was swept but its fact remains.
pub fn show_event(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
) -> QueryResult<Option<Result<Value, Value>>> {
    let row = events::table
        .filter(events::source.eq(source))
        .filter(events::event_id.eq(event_id))
        .select((
            EventSummary::as_select(),
            events::fingerprint,
            events::payload,
            events::response_status,
            events::response_content_type,
            events::response_body,
        ))
        .first::<(
            EventSummary,
            String,
            Vec<u8>,
            Option<i32>,
            Option<String>,
            Option<Vec<u8>>,
        )>(conn)
        .optional()?;
    let Some((summary, fingerprint, payload, status, content_type, body)) = row else {
        let fact = facts::table
            .filter(facts::source.eq(source))
            .filter(facts::first_event_id.eq(event_id))
            .select((facts::kind, facts::fact_key, facts::created_at))
            .first::<(String, String, NaiveDateTime)>(conn)
            .optional()?;
        return Ok(fact.map(|(kind, key, created_at)| {
            Err(json!({ "kind": kind, "key": key, "first_event_id": event_id, "created_at": created_at }))
        }));
    };
    let fact = facts::table
        .filter(facts::source.eq(source))
        .filter(facts::kind.eq(&summary.fact_kind))
        .filter(facts::fact_key.eq(&summary.fact_key))
        .select((facts::first_event_id, facts::created_at))
        .first::<(String, NaiveDateTime)>(conn)
        .optional()?;
    let deliveries = list_deliveries(
        conn,
        &DeliveryFilter {
            source: Some(source.to_owned()),
            ..DeliveryFilter::default()
        },
        None,
        1000,
    )?
    .into_iter()
    .filter(|d| d.event_id == event_id)
    .collect::<Vec<_>>();
    Ok(Some(Ok(json!({
        "event": summary,
        "fingerprint": fingerprint,
        "payload": bytes_json(&payload),
        "response": {
            "status": status,
            "content_type": content_type,
            "body": body.as_deref().map(bytes_json),
        },
        "fact": fact.map(|(first_event_id, created_at)| json!({
            "first_event_id": first_event_id,
            "created_at": created_at,
        })),
        "deliveries": deliveries,
    }))))
}

/// The events named by a replay request.
pub fn events_matching(
    conn: &mut DbConnection,
    filter: &EventFilter,
    limit: i64,
) -> QueryResult<Vec<(String, String)>> {
    Ok(list_events(conn, filter, None, limit)?
        .into_iter()
        .map(|e| (e.source, e.event_id))
        .collect())
}

/// The outcome of replaying one event.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayResult {
    pub source: String,
    pub event_id: String,
    /// `requeued`, `no_destinations`, `expired`, `not_found` or `unknown_source`.
    pub result: &'static str,
    pub deliveries: usize,
}

/// Re-runs the effect path of each event: the fact (already in the ledger: no second
/// fact), and one new delivery per destination, with the same Idempotency-Key as before.
pub fn replay(
    conn: &mut DbConnection,
    settings: &Settings,
    items: &[(String, String)],
    now: DateTime<Utc>,
) -> QueryResult<Vec<ReplayResult>> {
    let mut results = Vec::with_capacity(items.len());
    for (source, event_id) in items {
        let outcome = |result, deliveries| ReplayResult {
            source: source.clone(),
            event_id: event_id.clone(),
            result,
            deliveries,
        };
        let Some(settings) = settings.source(source) else {
            results.push(outcome("unknown_source", 0));
            continue;
        };
        let row = events::table
            .filter(events::source.eq(source))
            .filter(events::event_id.eq(event_id))
            .select((
                events::event_type,
                events::fact_kind,
                events::fact_key,
                events::payload,
                events::content_type,
            ))
            .first::<(Option<String>, String, String, Vec<u8>, Option<String>)>(conn)
            .optional()?;
        let Some((event_type, fact_kind, fact_key, payload, content_type)) = row else {
            let swept = facts::table
                .filter(facts::source.eq(source))
                .filter(facts::first_event_id.eq(event_id))
                .count()
                .get_result::<i64>(conn)?
                > 0;
            results.push(outcome(if swept { "expired" } else { "not_found" }, 0));
            continue;
        };
        let fact = FactIdentity {
            kind: fact_kind,
            key: fact_key,
        };
        NewFact {
            source,
            kind: &fact.kind,
            fact_key: &fact.key,
            first_event_id: event_id,
            created_at: now.naive_utc(),
        }
        .record(conn)?;
        if settings.destinations.is_empty() {
            results.push(outcome("no_destinations", 0));
            continue;
        }
        let destinations = settings.delivery_deadlines(now);
        Message {
            source,
            event_id,
            event_type: event_type.as_deref(),
            payload: &payload,
            content_type: content_type.as_deref().unwrap_or("application/json"),
        }
        .enqueue(conn, &destinations, now)?;
        results.push(outcome("requeued", destinations.len()));
    }
    Ok(results)
}

/// The outcome of requeueing one dead delivery.
#[derive(Debug, Clone, Serialize)]
pub struct RequeueResult {
    pub id: i64,
    /// `requeued`, `not_dead`, `not_found` or `unknown_destination`.
    pub result: &'static str,
}

/// Dead deliveries matching a filter (requeue by filter).
pub fn dead_matching(
    conn: &mut DbConnection,
    filter: &DeliveryFilter,
    limit: i64,
) -> QueryResult<Vec<i64>> {
    let filter = DeliveryFilter {
        status: Some(DEAD.to_owned()),
        ..filter.clone()
    };
    Ok(list_deliveries(conn, &filter, None, limit)?
        .into_iter()
        .map(|d| d.id)
        .collect())
}

/// Gives dead deliveries a fresh start: pending, due now, a new deadline. `attempt` keeps
/// growing (it is the fencing token).
pub fn requeue(
    conn: &mut DbConnection,
    settings: &Settings,
    ids: &[i64],
    now: DateTime<Utc>,
) -> QueryResult<Vec<RequeueResult>> {
    let mut results = Vec::with_capacity(ids.len());
    for id in ids {
        let row = deliveries::table
            .find(id)
            .select((
                deliveries::source,
                deliveries::destination,
                deliveries::status,
            ))
            .first::<(String, String, String)>(conn)
            .optional()?;
        let result = match row {
            None => "not_found",
            Some((_, _, status)) if status != DEAD => "not_dead",
            Some((source, destination, _)) => {
                let deadline = settings
                    .source(&source)
                    .and_then(|s| s.destinations.iter().find(|d| d.name == destination))
                    .map(|d| now + d.policy.deadline);
                match deadline {
                    None => "unknown_destination",
                    Some(deadline) => {
                        diesel::update(
                            deliveries::table
                                .find(id)
                                .filter(deliveries::status.eq(DEAD)),
                        )
                        .set((
                            deliveries::status.eq(PENDING),
                            deliveries::next_attempt_at.eq(now.naive_utc()),
                            deliveries::deadline_at.eq(deadline.naive_utc()),
                            deliveries::locked_until.eq(None::<NaiveDateTime>),
                        ))
                        .execute(conn)?;
                        "requeued"
                    }
                }
            }
        };
        results.push(RequeueResult { id: *id, result });
    }
    Ok(results)
}
