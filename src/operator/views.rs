//! What the operator console reads: events newest first with their outcome, every event
//! of a fact, the delivery backlog per destination, and a destination's recent record.
//! Every listing is keyset-paged on the primary key (`id < before`, newest first), so a
//! page costs the same at the millionth row as at the first.

use super::actions::{
    filter_deliveries, filter_events, Backend, DeliveryFilter, DeliverySummary, EventFilter,
    EventSummary,
};
use super::calls::{Ground, UseCases};
use super::OperatorError;
use crate::db::schema::{deliveries, delivery_attempts, events, facts};
use crate::db::DbConnection;
use crate::delivery::{GateView, DEAD, IN_PROGRESS, PENDING};
use chrono::NaiveDateTime;
use diesel::dsl::{count_star, exists};
use diesel::prelude::*;
use diesel::sql_types::{Binary, Bool, Text};
use std::collections::{BTreeSet, HashMap};

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

/// The console's event search: the API's filter, an outcome, and a text: an event id or a
/// fact key (found through their indexes, however old), or a value in the payloads and
/// headers of the newest [`SEARCH_SCAN`] events the filter selects.
#[derive(Debug, Clone, Default)]
pub struct EventSearch {
    pub filter: EventFilter,
    pub outcome: Option<StoredOutcome>,
    pub text: Option<String>,
    /// The configured sources (the lookup names each, to use the unique index).
    pub sources: Vec<String>,
}

/// How many of the newest matching events a payload or header search reads at most: a
/// bounded scan (no index: one would cost every ingest), narrowed by the time range.
pub const SEARCH_SCAN: i64 = 10_000;
/// Up to how many matches are counted exactly; beyond, "more than".
pub const COUNT_CAP: i64 = 1_000;

/// An event as listed, with whether it recorded its fact.
#[derive(Debug)]
pub struct ListedEvent {
    pub summary: EventSummary,
    pub outcome: StoredOutcome,
}

/// A page of the search, and what it looked at.
#[derive(Debug)]
pub struct Found {
    pub rows: Vec<ListedEvent>,
    /// Matches in all (at most [`COUNT_CAP`] + 1: more than the cap).
    pub count: i64,
    /// The payload and header search stopped at [`SEARCH_SCAN`] events: older ones with
    /// the value were not looked at.
    pub scan_bounded: bool,
}

type EventsQuery<'a, ST> = events::BoxedQuery<'a, Backend, ST>;

/// Which of a search's lookups a query runs: with a text, the indexed lookup by event id
/// or fact key and the bounded scan of payloads and headers run apart (each on its own
/// index: an `OR` of the two would read the whole table) and their rows are merged.
#[derive(Debug, Clone, Copy)]
enum Lookup {
    /// No text: the filters alone.
    Filters,
    /// The text is an event id or a fact key.
    ById,
    /// The text is in the payload or the headers of an event from this id on.
    Inside(i64),
}

/// Events matching `search`, newest first, older than `before` (an id), `limit` of them,
/// with the count of every match.
pub fn recent_events(
    conn: &mut DbConnection,
    search: &EventSearch,
    before: Option<i64>,
    limit: i64,
) -> QueryResult<Found> {
    let floor = scan_floor(conn, search)?;
    let lookups = match floor {
        None => vec![Lookup::Filters],
        Some(floor) => vec![Lookup::ById, Lookup::Inside(floor)],
    };
    let mut rows: Vec<(EventSummary, bool)> = Vec::new();
    let mut ids = BTreeSet::new();
    for lookup in lookups {
        let mut query = narrowed(
            events::table
                .select((EventSummary::as_select(), recorded_fact()))
                .into_boxed(),
            conn,
            search,
            lookup,
        );
        if let Some(before) = before {
            query = query.filter(events::id.lt(before));
        }
        rows.extend(
            query
                .order(events::id.desc())
                .limit(limit)
                .load::<(EventSummary, bool)>(conn)?,
        );
        let counted = narrowed(
            events::table.select(events::id).into_boxed(),
            conn,
            search,
            lookup,
        );
        ids.extend(counted.limit(COUNT_CAP + 1).load::<i64>(conn)?);
    }
    rows.sort_by_key(|(summary, _)| std::cmp::Reverse(summary.id));
    rows.dedup_by_key(|(summary, _)| summary.id);
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let rows = (rows.into_iter())
        .map(|(summary, first)| ListedEvent {
            summary,
            outcome: if first {
                StoredOutcome::Accepted
            } else {
                StoredOutcome::DuplicateFact
            },
        })
        .collect();
    Ok(Found {
        rows,
        count: ids.len() as i64,
        scan_bounded: floor.is_some_and(|floor| floor > 0),
    })
}

/// The fact key is `key` and is not the event's own id: the predicate of the partial index
/// `events_fact_idx` (migration 000190), spelled as the index is, so that PostgreSQL and
/// SQLite both see the query implies it.
#[diesel::dsl::auto_type(no_type_alias)]
fn fact_key_other_than_id(key: String) -> _ {
    events::fact_key
        .eq(key)
        .and(events::fact_key.ne(events::event_id))
}

/// Whether the event recorded its fact (the ledger names it first).
#[diesel::dsl::auto_type(no_type_alias)]
fn recorded_fact() -> _ {
    exists(
        facts::table
            .filter(facts::source.eq(events::source))
            .filter(facts::kind.eq(events::fact_kind))
            .filter(facts::fact_key.eq(events::fact_key))
            .filter(facts::first_event_id.eq(events::event_id)),
    )
}

/// With a text to search: the lowest id the payload and header scan reads (0: every
/// matching event, fewer than [`SEARCH_SCAN`]).
fn scan_floor(conn: &mut DbConnection, search: &EventSearch) -> QueryResult<Option<i64>> {
    if search.text.is_none() {
        return Ok(None);
    }
    let query = filter_events(
        events::table.select(events::id).into_boxed(),
        &search.filter,
    );
    let floor = query
        .order(events::id.desc())
        .offset(SEARCH_SCAN - 1)
        .limit(1)
        .first::<i64>(conn)
        .optional()?;
    Ok(Some(floor.unwrap_or(0)))
}

/// `query` narrowed to `search`'s filter and outcome, and to `lookup`: the text as an
/// event id or fact key (by index), or as a byte string in the payload or headers of the
/// events from the scan's floor on (the floor first: a range of the primary key).
fn narrowed<'a, ST: 'a>(
    mut query: EventsQuery<'a, ST>,
    conn: &DbConnection,
    search: &EventSearch,
    lookup: Lookup,
) -> EventsQuery<'a, ST> {
    match search.outcome {
        Some(StoredOutcome::Accepted) => query = query.filter(recorded_fact()),
        Some(StoredOutcome::DuplicateFact) => {
            query = query.filter(diesel::dsl::not(recorded_fact()))
        }
        None => {}
    }
    let text = search.text.clone().unwrap_or_default();
    match lookup {
        Lookup::Filters => {}
        Lookup::ById => {
            query = query
                .filter(events::source.eq_any(search.sources.clone()))
                // The fact key's own index holds only keys other than the event id
                // (the UNIQUE (source, event_id) index serves the rest).
                .filter(
                    events::event_id
                        .eq(text.clone())
                        .or(fact_key_other_than_id(text)),
                )
        }
        Lookup::Inside(floor) => {
            query = query
                .filter(events::id.ge(floor))
                .filter(contains(conn, &text))
        }
    }
    filter_events(query, &search.filter)
}

/// `text` occurs in the event's payload bytes or its stored headers: `instr` on SQLite,
/// `position`/`strpos` on PostgreSQL (the payload is bytes, the headers text).
fn contains(
    conn: &DbConnection,
    text: &str,
) -> Box<dyn BoxableExpression<events::table, Backend, SqlType = Bool>> {
    // Both read `(<payload test> ? … OR <headers test> ? …)`: the bytes, then the text.
    let (payload, headers) = match conn {
        DbConnection::Postgres(_) => (
            "(position(",
            " in events.payload) > 0 OR strpos(events.headers, ",
        ),
        DbConnection::Sqlite(_) => ("(instr(events.payload, ", ") > 0 OR instr(events.headers, "),
    };
    Box::new(
        diesel::dsl::sql::<Bool>(payload)
            .bind::<Binary, _>(text.as_bytes().to_vec())
            .sql(headers)
            .bind::<Text, _>(text.to_owned())
            .sql(") > 0)"),
    )
}

/// Where one destination's delivery of a listed event stands (its newest delivery).
#[derive(Debug, Clone)]
pub struct DeliveryState {
    pub destination: String,
    pub status: String,
    pub last_error: Option<String>,
}

/// The deliveries of the listed events, newest per destination, by (source, event id)
/// (through `deliveries_event_idx`).
pub fn delivery_states(
    conn: &mut DbConnection,
    listed: &[(String, String)],
) -> QueryResult<HashMap<(String, String), Vec<DeliveryState>>> {
    let sources: BTreeSet<&str> = listed.iter().map(|(s, _)| s.as_str()).collect();
    let ids: Vec<&str> = listed.iter().map(|(_, e)| e.as_str()).collect();
    let rows: Vec<(String, String, String, String, Option<String>)> = deliveries::table
        .filter(deliveries::source.eq_any(sources))
        .filter(deliveries::event_id.eq_any(ids))
        .order(deliveries::id)
        .select((
            deliveries::source,
            deliveries::event_id,
            deliveries::destination,
            deliveries::status,
            deliveries::last_error,
        ))
        .load(conn)?;
    let mut states: HashMap<(String, String), Vec<DeliveryState>> = HashMap::new();
    for (source, event_id, destination, status, last_error) in rows {
        let list = states.entry((source, event_id)).or_default();
        let state = DeliveryState {
            destination,
            status,
            last_error,
        };
        match list.iter_mut().find(|s| s.destination == state.destination) {
            Some(older) => *older = state,
            None => list.push(state),
        }
    }
    Ok(states)
}

/// Every stored event that carried the fact `(source, kind, key)`, oldest first (at most
/// `limit`). Two lookups, one per index, merged: the event whose fact is itself (its id is
/// the key: the UNIQUE (source, event_id) index) and the events whose fact key differs from
/// their id (the partial index `events_fact_idx`). One statement with an `OR` would leave
/// SQLite's planner to scan the source's events newest-first instead.
pub fn events_of_fact(
    conn: &mut DbConnection,
    source: &str,
    kind: &str,
    key: &str,
    limit: i64,
) -> QueryResult<Vec<EventSummary>> {
    let own: Option<EventSummary> = events::table
        .filter(events::source.eq(source))
        .filter(events::event_id.eq(key))
        .filter(events::fact_key.eq(key))
        .filter(events::fact_kind.eq(kind))
        .select(EventSummary::as_select())
        .first(conn)
        .optional()?;
    let mut found: Vec<EventSummary> = events::table
        .filter(events::source.eq(source))
        .filter(fact_key_other_than_id(key.to_owned()))
        .filter(events::fact_kind.eq(kind))
        .order(events::id)
        .limit(limit)
        .select(EventSummary::as_select())
        .load(conn)?;
    found.extend(own);
    found.sort_by_key(|event| event.id);
    found.truncate(usize::try_from(limit).unwrap_or(0));
    Ok(found)
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

/// A destination's last hour of attempts: how many, how many delivered, and the response
/// time at the 50th and 99th percentile.
#[derive(Debug, Clone, Default)]
pub struct HourRecord {
    pub attempts: usize,
    pub delivered: usize,
    pub p50_ms: Option<i64>,
    pub p99_ms: Option<i64>,
}

impl HourRecord {
    /// Delivered attempts among all, in percent.
    pub fn success_rate(&self) -> Option<f64> {
        (self.attempts > 0).then(|| 100.0 * self.delivered as f64 / self.attempts as f64)
    }
}

/// Attempts a destination's hour reads at most (the newest).
const HOUR_SAMPLE: i64 = 10_000;

/// The attempts `source`/`destination` made since `since` (through
/// `delivery_attempts_started_idx`, at most [`HOUR_SAMPLE`]).
pub fn last_hour(
    conn: &mut DbConnection,
    source: &str,
    destination: &str,
    since: NaiveDateTime,
) -> QueryResult<HourRecord> {
    let rows: Vec<(String, i64)> = delivery_attempts::table
        .inner_join(deliveries::table.on(deliveries::id.eq(delivery_attempts::delivery_id)))
        .filter(delivery_attempts::started_at.ge(since))
        .filter(deliveries::source.eq(source))
        .filter(deliveries::destination.eq(destination))
        .order(delivery_attempts::started_at.desc())
        .limit(HOUR_SAMPLE)
        .select((delivery_attempts::outcome, delivery_attempts::duration_ms))
        .load(conn)?;
    let mut durations: Vec<i64> = rows.iter().map(|(_, ms)| *ms).collect();
    durations.sort_unstable();
    let at = |q: f64| {
        let last = durations.len().checked_sub(1)?;
        durations.get(((last as f64) * q).round() as usize).copied()
    };
    Ok(HourRecord {
        attempts: rows.len(),
        delivered: rows
            .iter()
            .filter(|(o, _)| o == crate::delivery::DELIVERED)
            .count(),
        p50_ms: at(0.50),
        p99_ms: at(0.99),
    })
}

/// What the overview shows of the database: the unfinished work per destination
/// ([`backlog`]'s rows) and every gated destination's breaker and limits.
#[derive(Debug)]
pub struct Overview {
    pub backlog: Vec<(String, String, String, i64)>,
    pub gates: Vec<GateView>,
}

/// A page of the event search, and where each listed event's deliveries stand by
/// (source, event id).
#[derive(Debug)]
pub struct EventsPage {
    pub found: Found,
    pub states: HashMap<(String, String), Vec<DeliveryState>>,
}

/// Each destination's recent record and its last hour, by (source, destination).
pub type Records = HashMap<(String, String), (DestinationRecord, HourRecord)>;

/// What the sources page shows of the database: every configured destination's record,
/// every gated destination's breaker and limits, and the hook secrets established (by
/// source, when).
#[derive(Debug)]
pub struct SourcesPage {
    pub records: Records,
    pub gates: Vec<GateView>,
    pub established: Vec<(String, NaiveDateTime)>,
}

/// The console's reads, each on one connection under the request's snapshot and time.
impl<S: Ground> UseCases<S> {
    /// The delivery backlog and the destinations' gates.
    pub async fn overview(&self) -> Result<Overview, OperatorError> {
        let gated = self.settings.destinations().gated();
        let now = self.now;
        self.read(move |c, _| {
            Ok(Overview {
                backlog: backlog(c)?,
                gates: crate::delivery::gate_views(c, &gated, now)?,
            })
        })
        .await
    }

    /// Events matching `search`, newest first, older than `before`, `limit` of them, and
    /// where their deliveries stand.
    pub async fn search_events(
        &self,
        search: EventSearch,
        before: Option<i64>,
        limit: i64,
    ) -> Result<EventsPage, OperatorError> {
        self.read(move |c, _| {
            let found = recent_events(c, &search, before, limit)?;
            let keys: Vec<(String, String)> = (found.rows.iter())
                .map(|r| (r.summary.source.clone(), r.summary.event_id.clone()))
                .collect();
            let states = delivery_states(c, &keys)?;
            Ok(EventsPage { found, states })
        })
        .await
    }

    /// Deliveries matching `filter`, newest first, older than `before`.
    pub async fn recent_deliveries(
        &self,
        filter: DeliveryFilter,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<DeliverySummary>, OperatorError> {
        self.read(move |c, _| Ok(recent_deliveries(c, &filter, before, limit)?))
            .await
    }

    /// Every configured destination's record over its last `sample` deliveries and its
    /// last hour, the gates, and the hook secrets established.
    pub async fn sources_page(&self, sample: i64) -> Result<SourcesPage, OperatorError> {
        let destinations = self.settings.destinations();
        let pairs: Vec<(String, String)> = (destinations.iter())
            .map(|(source, d)| (source.to_owned(), d.name.clone()))
            .collect();
        let gated = destinations.gated();
        let now = self.now;
        let hour_ago = (now - chrono::Duration::hours(1)).naive_utc();
        self.read(move |c, _| {
            let records = (pairs.into_iter())
                .map(|(source, name)| {
                    let record = destination_record(c, &source, &name, sample)?;
                    let hour = last_hour(c, &source, &name, hour_ago)?;
                    Ok(((source, name), (record, hour)))
                })
                .collect::<QueryResult<Records>>()?;
            let gates = crate::delivery::gate_views(c, &gated, now)?;
            let established = crate::hook_secrets::established(c)?;
            Ok(SourcesPage {
                records,
                gates,
                established,
            })
        })
        .await
    }
}
