//! What the operator API reads and does, on a connection. Replay, requeue and discard run
//! inside the caller's Idempotency-Key transaction.

use super::OperatorError;
use crate::clock::serde_rfc3339;
use crate::db::schema::{deliveries, delivery_attempts, events, facts};
use crate::db::DbConnection;
use crate::delivery::filters::{self, Subject};
use crate::delivery::Destinations;
use crate::delivery::{Message, Route, DEAD, DELIVERED, DISCARDED, IN_PROGRESS, PENDING};
use crate::identity::{EventKey, MAX_IDENTITY_BYTES};
use crate::ingest::STATUS_PROCESSED;
use crate::jq::{EvalError, Lane};
use crate::ledger::{FactIdentity, NewFact};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Datelike, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Filters over events (listing and replay by filter).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventFilter {
    pub source: Option<String>,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub status: Option<String>,
    #[serde(default, deserialize_with = "time_bound")]
    pub since: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "time_bound")]
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
    #[serde(with = "serde_rfc3339")]
    pub received_at: NaiveDateTime,
    #[serde(with = "serde_rfc3339")]
    pub expires_at: NaiveDateTime,
    /// How it arrived: `webhook`, or `recovered` from its provider's own record.
    #[serde(serialize_with = "arrival")]
    pub arrival: Option<String>,
}

/// An event's arrival as the API says it (the column holds NULL for a webhook).
fn arrival<S: serde::Serializer>(stored: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(stored.as_deref().unwrap_or("webhook"))
}

/// The most characters a filter or path value may hold: as many as a stored name or id
/// holds bytes. Characters, as the OpenAPI document's `maxLength` counts them: a value
/// of more than [`MAX_IDENTITY_BYTES`] bytes matches nothing, and is no error.
pub const MAX_FILTER_CHARS: usize = MAX_IDENTITY_BYTES;

/// Refuses a filter value no query should see: over [`MAX_FILTER_CHARS`], or holding a
/// control character (PostgreSQL refuses NUL in text).
pub fn check_text(name: &str, value: Option<&str>) -> Result<(), OperatorError> {
    match value {
        Some(text)
            if text.chars().count() > MAX_FILTER_CHARS || text.chars().any(char::is_control) =>
        {
            Err(OperatorError::Invalid(format!(
                "{name} is at most {MAX_FILTER_CHARS} characters of printable text"
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a stored name or id that cannot be one: empty, or refused by [`check_text`].
pub fn check_stored_id(name: &str, value: &str) -> Result<(), OperatorError> {
    if value.is_empty() {
        return Err(OperatorError::Invalid(format!("{name} is empty")));
    }
    check_text(name, Some(value))
}

/// The earliest and the latest time both databases store.
fn storable_times() -> (DateTime<Utc>, DateTime<Utc>) {
    let at = |y, mo, d, h, mi, s| {
        chrono::NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|day| day.and_hms_opt(h, mi, s))
            .map(|t| t.and_utc())
            .unwrap_or_default()
    };
    (at(1, 1, 1, 0, 0, 0), at(9999, 12, 31, 23, 59, 59))
}

/// An optional time bound of a filter, as the API takes it: an RFC 3339 time (a year of
/// four digits, as the document's `date-time` says; chrono alone would read `-262143-…`
/// too). One before the year 1 or after 9999 in UTC (only an offset at the very edge
/// makes one) is read as the earliest or latest time stored: it selects the same rows.
pub fn time_bound<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let at = DateTime::parse_from_rfc3339(&text)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not an RFC 3339 time: {e}")))?;
    let (first, last) = storable_times();
    Ok(Some(at.with_timezone(&Utc).clamp(first, last)))
}

/// Refuses a time outside the years 1 to 9999 (both databases store those).
pub fn check_time(name: &str, value: Option<DateTime<Utc>>) -> Result<(), OperatorError> {
    match value {
        Some(at) if !(1..=9999).contains(&at.year()) => Err(OperatorError::Invalid(format!(
            "{name} must fall in the years 1 to 9999"
        ))),
        _ => Ok(()),
    }
}

/// Refuses a value outside `allowed` (a status no row can have, an unknown outcome).
pub fn check_one_of(
    name: &str,
    value: Option<&str>,
    allowed: &[&str],
) -> Result<(), OperatorError> {
    match value {
        Some(given) if !allowed.contains(&given) => Err(OperatorError::Invalid(format!(
            "{name} is one of {}",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

impl EventFilter {
    /// Checks every value before any query runs.
    pub fn validate(&self) -> Result<(), OperatorError> {
        check_text("source", self.source.as_deref())?;
        check_text("type", self.event_type.as_deref())?;
        check_one_of("status", self.status.as_deref(), &[STATUS_PROCESSED])?;
        check_time("since", self.since)?;
        check_time("until", self.until)
    }
}

impl DeliveryFilter {
    /// Checks every value before any query runs.
    pub fn validate(&self) -> Result<(), OperatorError> {
        let statuses = [PENDING, IN_PROGRESS, DELIVERED, DEAD, DISCARDED];
        check_one_of("status", self.status.as_deref(), &statuses)?;
        check_text("source", self.source.as_deref())?;
        check_text("destination", self.destination.as_deref())
    }
}

/// The backend of either database, for boxed queries.
pub type Backend = <DbConnection as diesel::Connection>::Backend;

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
    filter_events(query, filter).load(conn)
}

/// `query` narrowed to the events `filter` names.
pub fn filter_events<'a, ST: 'a>(
    mut query: events::BoxedQuery<'a, Backend, ST>,
    filter: &EventFilter,
) -> events::BoxedQuery<'a, Backend, ST> {
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
    query
}

/// Bytes as JSON: text when they are UTF-8, base64 otherwise.
fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "encoding": "utf8", "data": text }),
        Err(_) => json!({ "encoding": "base64", "data": BASE64.encode(bytes) }),
    }
}

/// Serializes stored bytes as [`bytes_json`] writes them.
fn serialize_bytes<S: serde::Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    bytes_json(bytes).serialize(serializer)
}

/// Serializes optional stored bytes as [`bytes_json`] writes them, or null.
fn serialize_option_bytes<S: serde::Serializer>(
    bytes: &Option<Vec<u8>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    bytes.as_deref().map(bytes_json).serialize(serializer)
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
    #[serde(with = "serde_rfc3339")]
    pub next_attempt_at: NaiveDateTime,
    #[serde(with = "serde_rfc3339")]
    pub deadline_at: NaiveDateTime,
    #[serde(with = "serde_rfc3339")]
    pub created_at: NaiveDateTime,
    #[serde(with = "serde_rfc3339::option")]
    pub delivered_at: Option<NaiveDateTime>,
    /// When it became dead or was discarded.
    #[serde(with = "serde_rfc3339::option")]
    pub settled_at: Option<NaiveDateTime>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

/// Filters over deliveries (listing and requeue by filter).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
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
    filter_deliveries(query, filter).load(conn)
}

/// `query` narrowed to the deliveries `filter` names.
pub fn filter_deliveries<'a, ST: 'a>(
    mut query: deliveries::BoxedQuery<'a, Backend, ST>,
    filter: &DeliveryFilter,
) -> deliveries::BoxedQuery<'a, Backend, ST> {
    if let Some(status) = &filter.status {
        query = query.filter(deliveries::status.eq(status.clone()));
    }
    if let Some(source) = &filter.source {
        query = query.filter(deliveries::source.eq(source.clone()));
    }
    if let Some(destination) = &filter.destination {
        query = query.filter(deliveries::destination.eq(destination.clone()));
    }
    query
}

/// What is known of one event.
#[derive(Debug)]
pub enum EventLookup {
    /// Everything: metadata, payload, stored answer, fact, deliveries with attempts.
    Stored(Box<StoredEvent>),
    /// Its row was swept after the retention window; the fact it recorded remains.
    Swept(SweptFact),
    /// No such event was ever received (or it recorded no fact before it was swept).
    Unknown,
}

/// Everything stored about one event, as the API encodes it (bodies as
/// `{"encoding", "data"}`) and the console shows it.
#[derive(Debug, Serialize)]
pub struct StoredEvent {
    pub event: EventSummary,
    /// The body's digest.
    pub fingerprint: String,
    /// The request's headers by name, credentials redacted (none: stored before Inlet
    /// kept them).
    pub headers: Option<Vec<(String, String)>>,
    #[serde(serialize_with = "serialize_bytes")]
    pub payload: Vec<u8>,
    pub response: StoredResponse,
    pub fact: Option<RecordedFact>,
    /// Oldest first.
    pub deliveries: Vec<DeliveryAttempts>,
    pub trace_id: Option<String>,
}

/// The answer stored for an event.
#[derive(Debug, Serialize)]
pub struct StoredResponse {
    pub status: Option<i32>,
    pub content_type: Option<String>,
    #[serde(serialize_with = "serialize_option_bytes")]
    pub body: Option<Vec<u8>>,
}

/// The fact a stored event records, and which event recorded it first.
#[derive(Debug, Serialize)]
pub struct RecordedFact {
    pub kind: String,
    pub key: String,
    pub first_event_id: String,
    #[serde(with = "serde_rfc3339")]
    pub created_at: NaiveDateTime,
}

/// A delivery with its attempts, oldest first.
#[derive(Debug, Serialize)]
pub struct DeliveryAttempts {
    #[serde(flatten)]
    pub delivery: DeliverySummary,
    pub attempts: Vec<AttemptSummary>,
}

/// The fact a swept event recorded first.
#[derive(Debug)]
pub struct SweptFact {
    pub kind: String,
    pub key: String,
}

/// Everything about one event, as far as it is still stored.
pub fn show_event(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
) -> QueryResult<EventLookup> {
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
            (events::headers, events::trace_parent),
        ))
        .first::<(
            EventSummary,
            String,
            Vec<u8>,
            Option<i32>,
            Option<String>,
            Option<Vec<u8>>,
            (Option<String>, Option<String>),
        )>(conn)
        .optional()?;
    let Some((summary, fingerprint, payload, status, content_type, body, (headers, trace_parent))) =
        row
    else {
        return Ok(swept_event_fact(conn, source, event_id)?
            .map_or(EventLookup::Unknown, EventLookup::Swept));
    };
    let fact = event_fact(conn, source, &summary)?;
    // Indexed by deliveries_event_idx (source, event_id).
    let deliveries = deliveries::table
        .filter(deliveries::source.eq(source))
        .filter(deliveries::event_id.eq(event_id))
        .order(deliveries::id)
        .select(DeliverySummary::as_select())
        .load(conn)?;
    let deliveries = with_attempts(conn, deliveries)?;
    Ok(EventLookup::Stored(Box::new(StoredEvent {
        event: summary,
        fingerprint,
        headers: headers.and_then(|h| serde_json::from_str(&h).ok()),
        payload,
        response: StoredResponse {
            status,
            content_type,
            body,
        },
        fact,
        deliveries,
        trace_id: trace_parent.as_deref().and_then(crate::traces::trace_id_of),
    })))
}

/// The fact a stored event records (none when the event recorded none).
fn event_fact(
    conn: &mut DbConnection,
    source: &str,
    summary: &EventSummary,
) -> QueryResult<Option<RecordedFact>> {
    let fact = facts::table
        .filter(facts::source.eq(source))
        .filter(facts::kind.eq(&summary.fact_kind))
        .filter(facts::fact_key.eq(&summary.fact_key))
        .select((facts::first_event_id, facts::created_at))
        .first::<(String, NaiveDateTime)>(conn)
        .optional()?;
    Ok(fact.map(|(first_event_id, created_at)| RecordedFact {
        kind: summary.fact_kind.clone(),
        key: summary.fact_key.clone(),
        first_event_id,
        created_at,
    }))
}

/// The fact a swept event recorded first, which outlives it (none: an unknown event).
fn swept_event_fact(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
) -> QueryResult<Option<SweptFact>> {
    let fact = facts::table
        .filter(facts::source.eq(source))
        .filter(facts::first_event_id.eq(event_id))
        .select((facts::kind, facts::fact_key))
        .first::<(String, String)>(conn)
        .optional()?;
    Ok(fact.map(|(kind, key)| SweptFact { kind, key }))
}

/// One attempt at a delivery.
#[derive(Debug, Serialize, Queryable, Selectable)]
#[diesel(table_name = delivery_attempts)]
pub struct AttemptSummary {
    #[serde(skip)]
    pub delivery_id: i64,
    pub attempt: i32,
    /// `delivered`, `retry` or `dead`.
    pub outcome: String,
    pub status: Option<i32>,
    pub error: Option<String>,
    #[serde(with = "serde_rfc3339")]
    pub started_at: NaiveDateTime,
    pub duration_ms: i64,
}

/// Each delivery with its attempts, oldest first (indexed by
/// `delivery_attempts (delivery_id, attempt)`).
fn with_attempts(
    conn: &mut DbConnection,
    deliveries: Vec<DeliverySummary>,
) -> QueryResult<Vec<DeliveryAttempts>> {
    let ids: Vec<i64> = deliveries.iter().map(|d| d.id).collect();
    let mut attempts: Vec<AttemptSummary> = delivery_attempts::table
        .filter(delivery_attempts::delivery_id.eq_any(&ids))
        .order((delivery_attempts::delivery_id, delivery_attempts::attempt))
        .select(AttemptSummary::as_select())
        .load(conn)?;
    Ok(deliveries
        .into_iter()
        .map(|delivery| {
            let (mine, rest) = attempts
                .drain(..)
                .partition(|a| a.delivery_id == delivery.id);
            attempts = rest;
            DeliveryAttempts {
                delivery,
                attempts: mine,
            }
        })
        .collect())
}

/// The events named by a replay request.
pub fn events_matching(
    conn: &mut DbConnection,
    filter: &EventFilter,
    limit: i64,
) -> QueryResult<Vec<EventKey>> {
    Ok(list_events(conn, filter, None, limit)?
        .into_iter()
        .map(|e| EventKey::new(e.source, e.event_id))
        .collect())
}

/// What replaying one event does (or, in a preview, would do).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RedeliveryResult {
    pub source: String,
    pub event_id: String,
    /// `requeued`, `duplicate_fact`, `already_pending` (every destination it is routed to
    /// still has it pending or in flight), `no_destinations` (no destination's `events`
    /// filter takes its type), `not_routed` (a bulk replay to one destination: that one
    /// does not take it or still has it pending), `expired`, `not_found` or
    /// `unknown_source`.
    pub result: String,
    /// For `duplicate_fact`: the event that first recorded this event's fact, and so the
    /// one whose replay delivers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_event_id: Option<String>,
    pub deliveries: usize,
    /// The destinations that get a delivery: those whose `events` filter takes the event's
    /// stored type and whose `filter` takes the stored event, as at ingest.
    pub destinations: Vec<String>,
    /// What each type-routed destination with a `filter` decides (with today's
    /// configuration): `enqueue`, `skip` or `error`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<FilterVerdict>,
}

/// A destination's `filter` on one event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FilterVerdict {
    pub destination: String,
    pub decision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Totals of a replay: events by result, and deliveries per destination.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RedeliverySummary {
    pub events: usize,
    pub results: BTreeMap<String, usize>,
    pub deliveries: BTreeMap<String, usize>,
}

impl RedeliverySummary {
    pub fn of(results: &[RedeliveryResult]) -> Self {
        let mut summary = Self {
            events: results.len(),
            ..Self::default()
        };
        for result in results {
            *summary.results.entry(result.result.clone()).or_default() += 1;
            for destination in &result.destinations {
                *summary.deliveries.entry(destination.clone()).or_default() += 1;
            }
        }
        summary
    }
}

/// A stored event that replay would deliver again.
struct Redelivery {
    event_type: Option<String>,
    fact: FactIdentity,
    content_type: Option<String>,
    /// What its destinations' filters read.
    payload: Vec<u8>,
    headers: Option<String>,
    /// The webhook's trace, which the replayed deliveries continue.
    trace_parent: Option<String>,
    /// The destinations whose filter could not decide, and why.
    undecided: HashMap<String, EvalError>,
}

/// Decides, reading only, what replaying each event does. A replay is routed like the
/// webhook was: to the destinations whose `events` filter takes the event's stored type
/// (with today's configuration). A delivery belongs to its fact:
/// only the event that first recorded the fact is delivered again — under that event's
/// Idempotency-Key, the one the application has already seen — and replaying a later event
/// of the same fact delivers nothing and names the first one (`duplicate_fact`).
fn plan_redelivery(
    conn: &mut DbConnection,
    destinations: &Destinations,
    items: &[EventKey],
) -> QueryResult<Vec<(RedeliveryResult, Option<Redelivery>)>> {
    let mut planned = Vec::with_capacity(items.len());
    for EventKey { source, event_id } in items {
        let outcome = |result: &str, first_event_id, destinations: Vec<String>| RedeliveryResult {
            source: source.clone(),
            event_id: event_id.clone(),
            result: result.to_owned(),
            first_event_id,
            deliveries: destinations.len(),
            destinations,
            filters: Vec::new(),
        };
        if !destinations.knows(source) {
            planned.push((outcome("unknown_source", None, Vec::new()), None));
            continue;
        }
        let Some(mut redelivery) = stored_redelivery(conn, source, event_id)? else {
            let result = if fact_first_recorded_by(conn, source, event_id)? {
                "expired"
            } else {
                "not_found"
            };
            planned.push((outcome(result, None, Vec::new()), None));
            continue;
        };
        // A fact missing from the ledger (it is permanent; only a hand edit removes it) is
        // recorded again by this event when the replay runs.
        let first = crate::ledger::find_first_event_id(conn, source, &redelivery.fact)?
            .unwrap_or_else(|| event_id.clone());
        if &first != event_id {
            planned.push((outcome("duplicate_fact", Some(first), Vec::new()), None));
            continue;
        }
        let (routed, filters) = filter_routed(destinations, source, event_id, &mut redelivery);
        if routed.is_empty() {
            let mut result = outcome("no_destinations", None, Vec::new());
            result.filters = filters;
            planned.push((result, None));
            continue;
        }
        // A destination that still has this fact pending or in flight gets it anyway.
        let mut names = Vec::with_capacity(routed.len());
        for name in routed {
            if !outstanding(conn, source, event_id, &name)? {
                names.push(name);
            }
        }
        let (result, redelivery) = if names.is_empty() {
            (outcome("already_pending", None, names), None)
        } else {
            (outcome("requeued", None, names), Some(redelivery))
        };
        planned.push((RedeliveryResult { filters, ..result }, redelivery));
    }
    Ok(planned)
}

/// The destinations a replay of the stored event goes to — its `events` type routing,
/// then each `filter` on the stored payload and headers — and what each filter decided.
/// A filter that could not decide does not skip its destination: the replay's delivery
/// is written failed (or pending), as at ingest, and keeps why in the redelivery.
fn filter_routed(
    destinations: &Destinations,
    source: &str,
    event_id: &str,
    redelivery: &mut Redelivery,
) -> (Vec<String>, Vec<FilterVerdict>) {
    let subject = Subject {
        source: source.to_owned(),
        event_id: event_id.to_owned(),
        event_type: redelivery.event_type.clone(),
        payload: bytes::Bytes::from(redelivery.payload.clone()),
        headers: redelivery.headers.clone(),
    };
    let mut routed = Vec::new();
    let mut verdicts = Vec::new();
    for destination in destinations.routed(source, redelivery.event_type.as_deref()) {
        let route = Route::taken(destination.name.clone(), DateTime::UNIX_EPOCH);
        let (route, decision) =
            filters::route_blocking(destinations, destination, &subject, route, Lane::Tools);
        if destination.filter.is_some() {
            verdicts.push(FilterVerdict::of(&destination.name, &decision));
        }
        if let Some(route) = route {
            if let Some(error) = route.undecided {
                redelivery
                    .undecided
                    .insert(route.destination.clone(), error);
            }
            routed.push(destination.name.clone());
        }
    }
    (routed, verdicts)
}

impl FilterVerdict {
    pub fn of(destination: &str, decision: &crate::jq::Decision) -> Self {
        let (decision, error) = match decision {
            Ok(true) => ("enqueue", None),
            Ok(false) => ("skip", None),
            Err(error) => ("error", Some(error.to_string())),
        };
        Self {
            destination: destination.to_owned(),
            decision: decision.to_owned(),
            error,
        }
    }
}

fn stored_redelivery(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
) -> QueryResult<Option<Redelivery>> {
    let row = events::table
        .filter(events::source.eq(source))
        .filter(events::event_id.eq(event_id))
        .select((
            events::event_type,
            events::fact_kind,
            events::fact_key,
            events::content_type,
            events::payload,
            events::headers,
            events::trace_parent,
        ))
        .first::<StoredRedelivery>(conn)
        .optional()?;
    Ok(row.map(
        |(event_type, kind, key, content_type, payload, headers, trace_parent)| Redelivery {
            event_type,
            fact: FactIdentity { kind, key },
            content_type,
            payload,
            headers,
            trace_parent,
            undecided: HashMap::new(),
        },
    ))
}

type StoredRedelivery = (
    Option<String>,
    String,
    String,
    Option<String>,
    Vec<u8>,
    Option<String>,
    Option<String>,
);

/// Whether `destination` has a delivery of this event that is pending or in flight.
fn outstanding(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
    destination: &str,
) -> QueryResult<bool> {
    let count: i64 = deliveries::table
        .filter(deliveries::source.eq(source))
        .filter(deliveries::event_id.eq(event_id))
        .filter(deliveries::destination.eq(destination))
        .filter(deliveries::status.eq_any([PENDING, IN_PROGRESS]))
        .count()
        .get_result(conn)?;
    Ok(count > 0)
}

/// Whether the ledger holds a fact first recorded by this event (its row may be swept).
fn fact_first_recorded_by(
    conn: &mut DbConnection,
    source: &str,
    event_id: &str,
) -> QueryResult<bool> {
    let count: i64 = facts::table
        .filter(facts::source.eq(source))
        .filter(facts::first_event_id.eq(event_id))
        .count()
        .get_result(conn)?;
    Ok(count > 0)
}

/// What replaying `items` would do, without doing it (to `only` that destination, when
/// named).
pub fn preview_redelivery(
    conn: &mut DbConnection,
    destinations: &Destinations,
    items: &[EventKey],
    only: Option<&str>,
) -> QueryResult<Vec<RedeliveryResult>> {
    Ok(plan_for(conn, destinations, items, only)?
        .into_iter()
        .map(|(result, _)| result)
        .collect())
}

/// [`plan_redelivery`], narrowed to the destination `only` when one is named: an event
/// that would have gone elsewhere alone delivers nothing (`not_routed`).
fn plan_for(
    conn: &mut DbConnection,
    destinations: &Destinations,
    items: &[EventKey],
    only: Option<&str>,
) -> QueryResult<Vec<(RedeliveryResult, Option<Redelivery>)>> {
    let mut planned = plan_redelivery(conn, destinations, items)?;
    if let Some(only) = only {
        for (result, redelivery) in &mut planned {
            result.destinations.retain(|name| name == only);
            result.deliveries = result.destinations.len();
            if result.destinations.is_empty() && redelivery.take().is_some() {
                "not_routed".clone_into(&mut result.result);
            }
        }
    }
    Ok(planned)
}

/// Replays each event: the fact is already in the ledger (no second fact), and each
/// destination gets a new delivery under the fact's Idempotency-Key.
pub fn redeliver(
    conn: &mut DbConnection,
    destinations: &Destinations,
    items: &[EventKey],
    only: Option<&str>,
    now: DateTime<Utc>,
) -> QueryResult<Vec<RedeliveryResult>> {
    lock_events(conn, items)?;
    let planned = plan_for(conn, destinations, items, only)?;
    let mut results = Vec::with_capacity(planned.len());
    for (result, redelivery) in planned {
        if let Some(redelivery) = redelivery {
            NewFact {
                source: &result.source,
                kind: &redelivery.fact.kind,
                fact_key: &redelivery.fact.key,
                first_event_id: &result.event_id,
                created_at: now.naive_utc(),
            }
            .record(conn)?;
            Message {
                source: &result.source,
                event_id: &result.event_id,
                event_type: redelivery.event_type.as_deref(),
                content_type: redelivery
                    .content_type
                    .as_deref()
                    .unwrap_or("application/json"),
                trace_parent: redelivery.trace_parent.as_deref(),
            }
            .enqueue(conn, &routes(destinations, &result, &redelivery, now), now)?;
        }
        results.push(result);
    }
    Ok(results)
}

/// Locks the rows of the events about to be replayed (PostgreSQL: `FOR SHARE`, until this
/// transaction ends): the sweeper, which locks an event before it copies its payload into
/// the deliveries still referring to it and deletes it, then either waits for this replay's
/// deliveries to commit, or has deleted the event already and the replay finds it gone.
/// SQLite's transactions take turns anyway.
fn lock_events(conn: &mut DbConnection, items: &[EventKey]) -> QueryResult<()> {
    let DbConnection::Postgres(c) = conn else {
        return Ok(());
    };
    // One statement, in id order, as the sweeper locks them (the rows of every source ×
    // id pair asked about: a few more than the items at worst, locked for share only).
    let sources: HashSet<&str> = items.iter().map(|key| key.source.as_str()).collect();
    let ids: Vec<&str> = items.iter().map(|key| key.event_id.as_str()).collect();
    events::table
        .filter(events::source.eq_any(sources))
        .filter(events::event_id.eq_any(ids))
        .order(events::id)
        .select(events::id)
        .for_share()
        .load::<i64>(c)?;
    Ok(())
}

/// The routes of the destinations a redelivery goes to (routed when it was planned), each
/// with its deadline and whether its filter decided.
fn routes(
    destinations: &Destinations,
    result: &RedeliveryResult,
    redelivery: &Redelivery,
    now: DateTime<Utc>,
) -> Vec<Route> {
    result
        .destinations
        .iter()
        .filter_map(|name| destinations.find(&result.source, name))
        .map(|d| Route {
            undecided: redelivery.undecided.get(&d.name).cloned(),
            ..Route::taken(d.name.clone(), now + d.policy.deadline)
        })
        .collect()
}

/// What an operator action did to one dead delivery.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterResult {
    pub id: i64,
    /// `requeued` or `discarded`; `not_dead`, `not_found`, `unknown_destination`, or
    /// `not_routed` (the destination's `events` filter no longer takes the event's type).
    pub result: String,
}

/// Dead deliveries matching a filter (requeue or discard by filter).
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

/// A dead delivery, as an action on it sees it.
pub struct DeadLetter {
    pub id: i64,
    pub source: String,
    pub destination: String,
    pub event_type: Option<String>,
}

/// Runs `act` on each of `ids` that is a dead delivery; answers `not_found` or `not_dead`
/// for the others. `act` updates the row only `WHERE status = 'dead'`.
fn on_dead_letters(
    conn: &mut DbConnection,
    ids: &[i64],
    mut act: impl FnMut(&mut DbConnection, DeadLetter) -> QueryResult<&'static str>,
) -> QueryResult<Vec<DeadLetterResult>> {
    let mut results = Vec::with_capacity(ids.len());
    for &id in ids {
        let row = deliveries::table
            .find(id)
            .select((
                deliveries::source,
                deliveries::destination,
                deliveries::status,
                deliveries::event_type,
            ))
            .first::<(String, String, String, Option<String>)>(conn)
            .optional()?;
        let result = match row {
            None => "not_found",
            Some((_, _, status, _)) if status != DEAD => "not_dead",
            Some((source, destination, _, event_type)) => act(
                conn,
                DeadLetter {
                    id,
                    source,
                    destination,
                    event_type,
                },
            )?,
        };
        results.push(DeadLetterResult {
            id,
            result: result.to_owned(),
        });
    }
    Ok(results)
}

/// The dead row `id`, for an update that applies only while it is dead.
fn still_dead(
    id: i64,
) -> diesel::dsl::Filter<
    diesel::dsl::Find<deliveries::table, i64>,
    diesel::dsl::Eq<deliveries::status, &'static str>,
> {
    deliveries::table
        .find(id)
        .filter(deliveries::status.eq(DEAD))
}

/// Gives dead deliveries a fresh start: pending, due now, a new deadline. `attempt` keeps
/// growing (it is the fencing token). A destination whose `events` filter was changed
/// since to leave out the delivery's type is not sent it (`not_routed`), as a replay would
/// not.
pub fn requeue(
    conn: &mut DbConnection,
    destinations: &Destinations,
    ids: &[i64],
    now: DateTime<Utc>,
) -> QueryResult<Vec<DeadLetterResult>> {
    on_dead_letters(conn, ids, |conn, dead| {
        let Some(destination) = destinations.find(&dead.source, &dead.destination) else {
            return Ok("unknown_destination");
        };
        if !destination.events.matches(dead.event_type.as_deref()) {
            return Ok("not_routed");
        }
        let deadline = now + destination.policy.deadline;
        let changed = diesel::update(still_dead(dead.id))
            .set((
                deliveries::status.eq(PENDING),
                deliveries::next_attempt_at.eq(now.naive_utc()),
                deliveries::deadline_at.eq(deadline.naive_utc()),
                deliveries::locked_until.eq(None::<NaiveDateTime>),
                deliveries::settled_at.eq(None::<NaiveDateTime>),
            ))
            .execute(conn)?;
        // Zero rows: a concurrent call or the sweeper changed it since it was read.
        Ok(if changed == 1 { "requeued" } else { "not_dead" })
    })
}

/// Marks dead deliveries `discarded`: never sent, no longer counted as dead letters, kept
/// until the sweeper removes them after `retention.dead_letters`.
pub fn discard(
    conn: &mut DbConnection,
    ids: &[i64],
    now: DateTime<Utc>,
) -> QueryResult<Vec<DeadLetterResult>> {
    on_dead_letters(conn, ids, |conn, dead| {
        let changed = diesel::update(still_dead(dead.id))
            .set((
                deliveries::status.eq(DISCARDED),
                deliveries::settled_at.eq(Some(now.naive_utc())),
            ))
            .execute(conn)?;
        Ok(if changed == 1 {
            "discarded"
        } else {
            "not_dead"
        })
    })
}
