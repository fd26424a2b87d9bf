//! Bulk actions by filter — after an outage the backlog is thousands: replay every event a
//! filter names (to one destination or to all it is routed to), requeue or discard every
//! dead letter it names. A preview counts first (per destination, with a sample) and
//! changes nothing; the action is then created by one call under one Idempotency-Key (a
//! re-sent form or a retried call gets the same action, never a second) and worked
//! through in batches by [`super::bulk_runner`]. A confirmation carries what its preview
//! counted (`expect`: the count and the newest row it looked at): the action takes no row
//! above that one and never more rows than that count, and a confirmation whose preview
//! no longer holds (more or fewer rows match up to that row now) is refused with a fresh
//! preview. Without one, the action counts when it is created and keeps to that.

use super::actions::{self, check_text, check_time, filter_events, Backend, EventFilter};
use super::calls::{Answered, Encode, Ground, KeyedRequest, Summary, UseCases};
use super::OperatorError;
use crate::db::schema::{bulk_actions, deliveries, events};
use crate::db::{dialect, DbConnection};
use crate::delivery::{Destinations, DEAD};
use crate::identity::EventKey;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::dsl::{count_star, max};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The route a bulk action is created on (the Idempotency-Key fingerprint covers it).
pub const BULK_ROUTE: &str = "POST /admin/bulk";
/// Events a replay's preview plans (routing, filters) to count its deliveries.
pub const PREVIEW_PLANNED: i64 = 1000;
/// Rows a preview shows as its sample.
const SAMPLE: i64 = 10;

/// What a bulk action does to each row it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkKind {
    /// Every matching event, replayed (to `destination` alone when one is named).
    Replay,
    /// Every matching dead letter, back to pending.
    Requeue,
    /// Every matching dead letter, set aside.
    Discard,
}

impl BulkKind {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "replay" => Some(Self::Replay),
            "requeue" => Some(Self::Requeue),
            "discard" => Some(Self::Discard),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Requeue => "requeue",
            Self::Discard => "discard",
        }
    }

    /// The audit trail's name for it.
    pub fn audit_name(self) -> &'static str {
        match self {
            Self::Replay => "bulk_replay",
            Self::Requeue => "bulk_requeue",
            Self::Discard => "bulk_discard",
        }
    }
}

/// Which rows: events by source, type and time received (replay), or dead letters by
/// source, destination, type and time they died (requeue, discard).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Replay: the one destination that gets the events; else: the dead letters'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(
        default,
        deserialize_with = "super::actions::time_bound",
        skip_serializing_if = "Option::is_none"
    )]
    pub since: Option<DateTime<Utc>>,
    #[serde(
        default,
        deserialize_with = "super::actions::time_bound",
        skip_serializing_if = "Option::is_none"
    )]
    pub until: Option<DateTime<Utc>>,
}

impl BulkFilter {
    fn events(&self) -> EventFilter {
        EventFilter {
            source: self.source.clone(),
            event_type: self.event_type.clone(),
            status: None,
            since: self.since,
            until: self.until,
        }
    }
}

/// A bulk action as the API takes it (JSON) and the console fills it in.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub action: String,
    #[serde(default, deserialize_with = "super::as_documented::object")]
    pub filter: BulkFilter,
    #[serde(default)]
    pub dry_run: bool,
    /// What the preview this confirms counted: the action acts on at most that.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::as_documented::option_object"
    )]
    pub expect: Option<Previewed>,
}

/// What a preview counted: `matched` rows, none newer than `upper_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Previewed {
    #[serde(deserialize_with = "super::as_documented::i64_value")]
    pub matched: i64,
    #[serde(deserialize_with = "super::as_documented::i64_value")]
    pub upper_id: i64,
}

impl BulkRequest {
    /// The audit trail's name of the action asked for (a refusal before it is checked is
    /// written as a requeue when the action is not one).
    pub fn audit_name(&self) -> &'static str {
        BulkKind::parse(&self.action)
            .unwrap_or(BulkKind::Requeue)
            .audit_name()
    }
}

/// A checked bulk action.
#[derive(Debug, Clone)]
pub struct Bulk {
    pub kind: BulkKind,
    pub filter: BulkFilter,
    pub dry_run: bool,
    pub expect: Option<Previewed>,
}

impl Bulk {
    /// Checks `request` before anything is read.
    pub fn parse(request: BulkRequest) -> Result<Self, OperatorError> {
        let kind = BulkKind::parse(&request.action).ok_or_else(|| {
            OperatorError::Invalid("action is replay, requeue or discard".to_owned())
        })?;
        let filter = request.filter;
        check_text("source", filter.source.as_deref())?;
        check_text("destination", filter.destination.as_deref())?;
        check_text("type", filter.event_type.as_deref())?;
        check_time("since", filter.since)?;
        // A window that ends before it starts is no error (the document could not say
        // so): it matches nothing.
        check_time("until", filter.until)?;
        if let Some(expect) = request.expect.filter(|e| e.matched < 0 || e.upper_id < 0) {
            return Err(OperatorError::Invalid(format!(
                "expect: matched and upper_id are counts and ids, not {} and {}",
                expect.matched, expect.upper_id
            )));
        }
        Ok(Self {
            kind,
            filter,
            dry_run: request.dry_run,
            expect: request.expect,
        })
    }
}

impl Bulk {
    /// A replay names configured things: its source, and its destination (of that source,
    /// or of any). Dead letters may outlive their destination's configuration, so a
    /// requeue or discard may name one that is gone.
    fn check_names(&self, destinations: &Destinations) -> Result<(), OperatorError> {
        if self.kind != BulkKind::Replay {
            return Ok(());
        }
        let filter = &self.filter;
        if let Some(source) = filter.source.as_deref().filter(|s| !destinations.knows(s)) {
            return Err(OperatorError::Invalid(format!(
                "no source {source} is configured"
            )));
        }
        let Some(name) = filter.destination.as_deref() else {
            return Ok(());
        };
        let known = match filter.source.as_deref() {
            Some(source) => destinations.find(source, name).is_some(),
            None => destinations.iter().any(|(_, d)| d.name == name),
        };
        if known {
            Ok(())
        } else {
            Err(OperatorError::Invalid(format!(
                "no destination {name} is configured{}",
                filter
                    .source
                    .as_deref()
                    .map(|s| format!(" for source {s}"))
                    .unwrap_or_default()
            )))
        }
    }
}

/// What a bulk action would do: how many rows match, per destination, and a sample.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkPreview {
    pub action: BulkKind,
    pub filter: BulkFilter,
    /// Matching rows (events for a replay, dead letters otherwise).
    pub matched: i64,
    /// Deliveries per destination: dead letters by destination; for a replay, what the
    /// first `planned` events would enqueue (routing and filters, today's configuration).
    pub destinations: BTreeMap<String, i64>,
    /// Replay: the events planned to count `destinations` (all, or the first
    /// [`PREVIEW_PLANNED`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned: Option<i64>,
    /// The newest row the preview looked at: a confirmation sends it back with `matched`
    /// (as `expect`), and the action takes nothing newer.
    pub upper_id: i64,
    /// The first matching rows.
    pub sample: Vec<Value>,
}

/// A bulk action and how far it got.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = bulk_actions)]
pub struct BulkRow {
    pub id: i64,
    pub action: String,
    pub filter: String,
    pub operator: String,
    pub status: String,
    /// The newest row it takes, and the last it is done with (the runner's).
    pub upper_id: i64,
    pub cursor_id: i64,
    pub matched: i64,
    pub processed: i64,
    pub results: String,
    pub error: Option<String>,
    /// Who works it through now (the runner's).
    pub lease_holder: Option<String>,
    pub created_at: NaiveDateTime,
    pub updated_at: NaiveDateTime,
    pub finished_at: Option<NaiveDateTime>,
}

impl BulkRow {
    /// As the API shows it: the filter and the results as JSON, not text.
    pub fn to_json(&self) -> Value {
        let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
        let results = parse(&self.results);
        json!({
            "id": self.id,
            "action": self.action,
            "filter": parse(&self.filter),
            "operator": self.operator,
            "status": self.status,
            "matched": self.matched,
            "processed": self.processed,
            "results": results["results"],
            "deliveries": results["deliveries"],
            "error": self.error,
            "created_at": crate::clock::rfc3339(self.created_at),
            "updated_at": crate::clock::rfc3339(self.updated_at),
            "finished_at": self.finished_at.map(crate::clock::rfc3339),
        })
    }

    pub fn running(&self) -> bool {
        self.status == RUNNING
    }
}

/// A bulk action's states.
pub const RUNNING: &str = "running";
pub const DONE: &str = "done";
/// Its stored request could not be read (a later version's form): nothing more is done.
pub const FAILED: &str = "failed";

/// What the creating call answers: the new action, as [`BulkRow::to_json`] shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkCreated {
    pub action: Value,
}

impl BulkCreated {
    /// The new action's id.
    pub fn id(&self) -> Option<i64> {
        self.action["id"].as_i64()
    }
}

impl Summary for BulkCreated {
    /// E.g. `202: bulk action 3 (requeue of 500 dead letters)`.
    fn summary(&self, status: u16) -> String {
        let row = &self.action;
        let noun = if row["action"] == BulkKind::Replay.as_str() {
            "events"
        } else {
            "dead letters"
        };
        format!(
            "{status}: bulk action {} ({} of {} {noun})",
            row["id"],
            row["action"].as_str().unwrap_or_default(),
            row["matched"]
        )
    }
}

/// The rows a bulk action selects, in id order, after `after` and up to `upper`.
pub(super) enum Selected {
    Events(Vec<(i64, EventKey)>),
    DeadLetters(Vec<i64>),
}

impl Selected {
    pub(super) fn last_id(&self) -> Option<i64> {
        match self {
            Self::Events(rows) => rows.last().map(|(id, _)| *id),
            Self::DeadLetters(ids) => ids.last().copied(),
        }
    }
}

/// Dead deliveries narrowed to `filter` (`since`/`until`: when they died).
fn dead_letters<'a, ST: 'a>(
    mut query: deliveries::BoxedQuery<'a, Backend, ST>,
    filter: &BulkFilter,
) -> deliveries::BoxedQuery<'a, Backend, ST> {
    query = query.filter(deliveries::status.eq(DEAD));
    if let Some(source) = &filter.source {
        query = query.filter(deliveries::source.eq(source.clone()));
    }
    if let Some(destination) = &filter.destination {
        query = query.filter(deliveries::destination.eq(destination.clone()));
    }
    if let Some(event_type) = &filter.event_type {
        query = query.filter(deliveries::event_type.eq(event_type.clone()));
    }
    if let Some(since) = filter.since {
        query = query.filter(deliveries::settled_at.ge(since.naive_utc()));
    }
    if let Some(until) = filter.until {
        query = query.filter(deliveries::settled_at.lt(until.naive_utc()));
    }
    query
}

/// The next `limit` rows of `bulk` after `after`, up to `upper`.
pub(super) fn select(
    conn: &mut DbConnection,
    bulk: &Bulk,
    (after, upper): (i64, i64),
    limit: i64,
) -> QueryResult<Selected> {
    if bulk.kind == BulkKind::Replay {
        let query = events::table
            .select((events::id, events::source, events::event_id))
            .filter(events::id.gt(after))
            .filter(events::id.le(upper))
            .order(events::id)
            .limit(limit)
            .into_boxed();
        let rows: Vec<(i64, String, String)> =
            filter_events(query, &bulk.filter.events()).load(conn)?;
        return Ok(Selected::Events(
            (rows.into_iter())
                .map(|(id, source, event_id)| (id, EventKey::new(source, event_id)))
                .collect(),
        ));
    }
    let query = deliveries::table
        .select(deliveries::id)
        .filter(deliveries::id.gt(after))
        .filter(deliveries::id.le(upper))
        .order(deliveries::id)
        .limit(limit)
        .into_boxed();
    Ok(Selected::DeadLetters(
        dead_letters(query, &bulk.filter).load(conn)?,
    ))
}

/// How many rows `bulk` selects up to `upper` (with `destination`, dead letters of that
/// destination only).
fn count(
    conn: &mut DbConnection,
    bulk: &Bulk,
    upper: i64,
    destination: Option<&str>,
) -> QueryResult<i64> {
    if bulk.kind == BulkKind::Replay {
        let query = events::table
            .select(count_star())
            .filter(events::id.le(upper))
            .into_boxed();
        return filter_events(query, &bulk.filter.events()).get_result(conn);
    }
    let mut query = deliveries::table
        .select(count_star())
        .filter(deliveries::id.le(upper))
        .into_boxed();
    if let Some(destination) = destination {
        query = query.filter(deliveries::destination.eq(destination.to_owned()));
    }
    dead_letters(query, &bulk.filter).get_result(conn)
}

/// The newest row a bulk action of `kind` could select now.
fn upper_id(conn: &mut DbConnection, kind: BulkKind) -> QueryResult<i64> {
    let newest: Option<i64> = match kind {
        BulkKind::Replay => events::table.select(max(events::id)).first(conn)?,
        _ => deliveries::table.select(max(deliveries::id)).first(conn)?,
    };
    Ok(newest.unwrap_or(0))
}

/// The preview: counts per destination and the first rows, reading only.
fn preview(
    conn: &mut DbConnection,
    bulk: &Bulk,
    destinations: &Destinations,
) -> QueryResult<BulkPreview> {
    let upper = upper_id(conn, bulk.kind)?;
    let matched = count(conn, bulk, upper, None)?;
    let mut per_destination = BTreeMap::new();
    let mut planned = None;
    let sample = match select(conn, bulk, (0, upper), PREVIEW_PLANNED.min(matched.max(1)))? {
        Selected::Events(rows) => {
            let items: Vec<EventKey> = rows.into_iter().map(|(_, key)| key).collect();
            let only = bulk.filter.destination.as_deref();
            // In chunks: planning holds each event's payload until its chunk is decided.
            let mut results = Vec::with_capacity(items.len());
            for chunk in items.chunks(100) {
                results.extend(actions::preview_redelivery(
                    conn,
                    destinations,
                    chunk,
                    only,
                )?);
            }
            for name in results.iter().flat_map(|r| &r.destinations) {
                *per_destination.entry(name.clone()).or_default() += 1;
            }
            planned = Some(items.len() as i64);
            let sample = results.into_iter().take(SAMPLE as usize);
            sample.map(|r| json!(r)).collect()
        }
        Selected::DeadLetters(ids) => {
            let names: std::collections::BTreeSet<String> =
                destinations.iter().map(|(_, d)| d.name.clone()).collect();
            for name in names {
                let n = count(conn, bulk, upper, Some(&name))?;
                if n > 0 {
                    per_destination.insert(name, n);
                }
            }
            let sample: Vec<i64> = ids.into_iter().take(SAMPLE as usize).collect();
            sample_dead_letters(conn, &sample)?
        }
    };
    Ok(BulkPreview {
        action: bulk.kind,
        filter: bulk.filter.clone(),
        matched,
        destinations: per_destination,
        planned,
        upper_id: upper,
        sample,
    })
}

/// The sample rows of a dead-letter preview, as the API lists deliveries.
fn sample_dead_letters(conn: &mut DbConnection, ids: &[i64]) -> QueryResult<Vec<Value>> {
    let rows: Vec<actions::DeliverySummary> = deliveries::table
        .filter(deliveries::id.eq_any(ids))
        .order(deliveries::id)
        .select(actions::DeliverySummary::as_select())
        .load(conn)?;
    Ok(rows.iter().map(|row| json!(row)).collect())
}

/// Creates the action's row: running, from the first row up to `upper`.
fn create(
    conn: &mut DbConnection,
    bulk: &Bulk,
    (operator, upper, matched): (&str, i64, i64),
    now: DateTime<Utc>,
) -> Result<BulkRow, OperatorError> {
    let filter = serde_json::to_string(&bulk.filter)
        .map_err(|e| OperatorError::Internal(format!("cannot encode the filter: {e}")))?;
    let now = now.naive_utc();
    let values = (
        bulk_actions::action.eq(bulk.kind.as_str()),
        bulk_actions::filter.eq(filter),
        bulk_actions::operator.eq(operator),
        bulk_actions::status.eq(RUNNING),
        bulk_actions::upper_id.eq(upper),
        bulk_actions::cursor_id.eq(0_i64),
        bulk_actions::matched.eq(matched),
        bulk_actions::processed.eq(0_i64),
        bulk_actions::results.eq(r#"{"results":{},"deliveries":{}}"#),
        bulk_actions::created_at.eq(now),
        bulk_actions::updated_at.eq(now),
    );
    let row = dialect!(conn, c => diesel::insert_into(bulk_actions::table)
        .values(values.clone())
        .returning(BulkRow::as_returning())
        .get_result(c))?;
    Ok(row)
}

/// One bulk action, or `NotFound`.
pub(super) fn find(conn: &mut DbConnection, id: i64) -> Result<BulkRow, OperatorError> {
    bulk_actions::table
        .find(id)
        .select(BulkRow::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| OperatorError::NotFound(format!("no bulk action {id}")))
}

impl<S: Ground> UseCases<S> {
    /// What the bulk action would do, reading only.
    pub async fn preview_bulk(&self, bulk: Bulk) -> Result<BulkPreview, OperatorError> {
        let bulk = Bulk {
            expect: None,
            ..bulk
        };
        bulk.check_names(self.settings.destinations())?;
        self.read(move |conn, settings| Ok(preview(conn, &bulk, settings.destinations())?))
            .await
    }

    /// Creates the bulk action, once per key; the runner then works it through.
    pub async fn start_bulk(
        &self,
        keyed: KeyedRequest<'_>,
        bulk: Bulk,
        encode: Encode<BulkCreated, S>,
    ) -> Result<Answered<BulkCreated>, OperatorError> {
        bulk.check_names(self.settings.destinations())?;
        let operator = keyed.caller.name.clone();
        let action = bulk.kind.audit_name();
        // The newest row and the count, read before the write transaction: on SQLite a
        // count over millions of rows must not hold the write lock ingest waits for.
        let counted = bulk.clone();
        let (upper, matched) = self
            .read(move |conn, _| {
                let upper = match counted.expect {
                    Some(expect) => expect.upper_id,
                    None => upper_id(conn, counted.kind)?,
                };
                Ok((upper, count(conn, &counted, upper, None)?))
            })
            .await?;
        // A preview that no longer holds refuses only a confirmation not answered yet: the
        // same form sent again (a double click, a re-submit after the runner moved on) finds
        // the action it started, stored under its Idempotency-Key, before this is asked.
        let outdated = bulk.expect.filter(|e| e.matched != matched);
        let refused = bulk.clone();
        let work = move |conn: &mut DbConnection, _: &S, now| {
            if outdated.is_some() {
                return Err(OperatorError::Outdated(
                    String::new(),
                    serde_json::Value::Null,
                ));
            }
            let row = create(conn, &bulk, (&operator, upper, matched), now)?;
            Ok(BulkCreated {
                action: row.to_json(),
            })
        };
        match (
            self.once((BULK_ROUTE, action), keyed, work, encode).await,
            outdated,
        ) {
            (Err(OperatorError::Outdated(..)), Some(expect)) => {
                Err(self.outdated(&refused, expect, matched).await)
            }
            (started, _) => started,
        }
    }

    /// The refusal of a confirmation whose preview counted `expect` where `matched` rows
    /// match now: why, and a fresh preview to confirm instead.
    async fn outdated(&self, bulk: &Bulk, expect: Previewed, matched: i64) -> OperatorError {
        let fresh = match self.preview_bulk(bulk.clone()).await {
            Ok(fresh) => fresh,
            Err(error) => return error,
        };
        metrics::counter!("inlet_bulk_refused_total", "reason" => "preview_outdated").increment(1);
        let detail = format!(
            "the preview counted {} rows up to row {}; {matched} match there now: confirm the fresh preview",
            expect.matched, expect.upper_id
        );
        match serde_json::to_value(&fresh) {
            Ok(preview) => OperatorError::Outdated(detail, preview),
            Err(e) => OperatorError::Internal(format!("cannot encode the preview: {e}")),
        }
    }

    /// One bulk action and how far it got.
    pub async fn bulk_action(&self, id: i64) -> Result<BulkRow, OperatorError> {
        self.read(move |conn, _| find(conn, id)).await
    }

    /// The newest bulk actions first, `limit` of them.
    pub async fn bulk_actions(&self, limit: i64) -> Result<Vec<BulkRow>, OperatorError> {
        self.read(move |conn, _| {
            Ok(bulk_actions::table
                .order(bulk_actions::id.desc())
                .limit(limit)
                .select(BulkRow::as_select())
                .load(conn)?)
        })
        .await
    }
}
