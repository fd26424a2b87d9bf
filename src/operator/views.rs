//! What the operator console reads: events newest first with their outcome, every event
//! of a fact, the delivery backlog per destination, and a destination's recent record.
//! Every listing is keyset-paged on the primary key (`id < before`, newest first), so a
//! page costs the same at the millionth row as at the first.

use super::actions::{
    filter_deliveries, filter_events, DeliveryFilter, DeliverySummary, EventFilter, EventSummary,
};
use crate::db::schema::{deliveries, events, facts};
use crate::db::DbConnection;
use crate::delivery::{DEAD, IN_PROGRESS, PENDING};
use chrono::NaiveDateTime;
use diesel::dsl::{count_star, exists};
use diesel::prelude::*;

/// What became of a stored event: it recorded its fact, or found it already recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredOutcome {
    Accepted,
    DuplicateFact,
}

impl StoredOutcome {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "accepted" => Some(Self::Accepted),
            "duplicate_fact" => Some(Self::DuplicateFact),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::DuplicateFact => "duplicate_fact",
        }
    }
}

/// The console's event search: the API's filter, an outcome, and an event id or fact key.
#[derive(Debug, Clone, Default)]
pub struct EventSearch {
    pub filter: EventFilter,
    pub outcome: Option<StoredOutcome>,
    /// An event id or a fact key, looked up in every configured source (by index).
    pub text: Option<String>,
    /// The configured sources (the lookup names each, to use the unique index).
    pub sources: Vec<String>,
}

/// An event as listed, with whether it recorded its fact.
#[derive(Debug)]
pub struct ListedEvent {
    pub summary: EventSummary,
    pub outcome: StoredOutcome,
}

/// Events matching `search`, newest first, older than `before` (an id), `limit` of them.
pub fn recent_events(
    conn: &mut DbConnection,
    search: &EventSearch,
    before: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<ListedEvent>> {
    let recorded_fact = exists(
        facts::table
            .filter(facts::source.eq(events::source))
            .filter(facts::kind.eq(events::fact_kind))
            .filter(facts::fact_key.eq(events::fact_key))
            .filter(facts::first_event_id.eq(events::event_id)),
    );
    let mut query = events::table
        .select((EventSummary::as_select(), recorded_fact))
        .order(events::id.desc())
        .limit(limit)
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(events::id.lt(before));
    }
    match search.outcome {
        Some(StoredOutcome::Accepted) => query = query.filter(recorded_fact),
        Some(StoredOutcome::DuplicateFact) => query = query.filter(diesel::dsl::not(recorded_fact)),
        None => {}
    }
    if let Some(text) = &search.text {
        query = query
            .filter(events::source.eq_any(search.sources.clone()))
            .filter(
                events::event_id
                    .eq(text.clone())
                    .or(events::fact_key.eq(text.clone())),
            );
    }
    let rows: Vec<(EventSummary, bool)> = filter_events(query, &search.filter).load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(summary, first)| ListedEvent {
            summary,
            outcome: if first {
                StoredOutcome::Accepted
            } else {
                StoredOutcome::DuplicateFact
            },
        })
        .collect())
}

/// Every stored event that carried the fact `(source, kind, key)`, oldest first (at most
/// `limit`).
pub fn events_of_fact(
    conn: &mut DbConnection,
    source: &str,
    kind: &str,
    key: &str,
    limit: i64,
) -> QueryResult<Vec<EventSummary>> {
    events::table
        .filter(events::source.eq(source))
        .filter(events::fact_key.eq(key))
        .filter(events::fact_kind.eq(kind))
        .order(events::id)
        .limit(limit)
        .select(EventSummary::as_select())
        .load(conn)
}

/// Deliveries matching `filter`, newest first, older than `before`.
pub fn recent_deliveries(
    conn: &mut DbConnection,
    filter: &DeliveryFilter,
    before: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<DeliverySummary>> {
    let mut query = deliveries::table
        .select(DeliverySummary::as_select())
        .order(deliveries::id.desc())
        .limit(limit)
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(deliveries::id.lt(before));
    }
    filter_deliveries(query, filter).load(conn)
}

/// Unfinished work per destination: `(source, destination, status, count)` for pending,
/// in-progress and dead deliveries (read through the `(status, next_attempt_at)` index).
pub fn backlog(conn: &mut DbConnection) -> QueryResult<Vec<(String, String, String, i64)>> {
    deliveries::table
        .filter(deliveries::status.eq_any([PENDING, IN_PROGRESS, DEAD]))
        .group_by((
            deliveries::source,
            deliveries::destination,
            deliveries::status,
        ))
        .select((
            deliveries::source,
            deliveries::destination,
            deliveries::status,
            count_star(),
        ))
        .load(conn)
}

/// A destination's recent record: how its last deliveries ended.
#[derive(Debug, Clone, Default)]
pub struct DestinationRecord {
    /// Deliveries looked at (the most recent, at most the sample).
    pub sampled: usize,
    pub delivered: usize,
    pub dead: usize,
    /// The newest error any of them recorded, and when that delivery was made.
    pub last_error: Option<(String, NaiveDateTime)>,
    pub last_delivered_at: Option<NaiveDateTime>,
}

impl DestinationRecord {
    /// Delivered among those that finished, in percent.
    pub fn success_rate(&self) -> Option<f64> {
        let finished = self.delivered + self.dead;
        (finished > 0).then(|| 100.0 * self.delivered as f64 / finished as f64)
    }
}

/// How the last `sample` deliveries of one destination went.
pub fn destination_record(
    conn: &mut DbConnection,
    source: &str,
    destination: &str,
    sample: i64,
) -> QueryResult<DestinationRecord> {
    let rows: Vec<(String, Option<String>, NaiveDateTime, Option<NaiveDateTime>)> =
        deliveries::table
            .filter(deliveries::source.eq(source))
            .filter(deliveries::destination.eq(destination))
            .order(deliveries::id.desc())
            .limit(sample)
            .select((
                deliveries::status,
                deliveries::last_error,
                deliveries::created_at,
                deliveries::delivered_at,
            ))
            .load(conn)?;
    let mut record = DestinationRecord {
        sampled: rows.len(),
        ..DestinationRecord::default()
    };
    for (status, error, created_at, delivered_at) in rows {
        match status.as_str() {
            crate::delivery::DELIVERED => record.delivered += 1,
            DEAD => record.dead += 1,
            _ => {}
        }
        if record.last_error.is_none() {
            record.last_error = error.map(|error| (error, created_at));
        }
        record.last_delivered_at = record.last_delivered_at.max(delivered_at);
    }
    Ok(record)
}
