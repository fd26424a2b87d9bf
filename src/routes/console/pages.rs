//! The console's pages: overview, events, one event, deliveries, sources.

use super::chart;
use super::error::ConsoleError;
use super::evaluate::routing_section;
use super::session::{Session, PATH};
use super::view::{self, api_time, badge, csrf_field, event_link, layout, page_response, time};
use crate::config::Settings;
use crate::db::DbConnection;
use crate::delivery::{
    gate_views, BreakerState, DestinationSettings, GateView, DEAD, DELIVERED, DISCARDED,
    IN_PROGRESS, PENDING,
};
use crate::observability::TrafficCounts;
use crate::operator::actions::{self, DeliveryFilter, EventFilter};
use crate::operator::views::{self, EventSearch, StoredOutcome};
use crate::operator::{EvaluateRequest, Role};
use crate::routes::admin;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::{html, Markup};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Rows per listing page.
pub(super) const PAGE: i64 = 50;
/// Deliveries a destination's record looks at.
const RECORD_SAMPLE: i64 = 200;

/// Destinations' gates by (source, destination).
type Gates = HashMap<(String, String), GateView>;

fn by_destination(views: Vec<GateView>) -> Gates {
    views
        .into_iter()
        .map(|g| ((g.source.clone(), g.destination.clone()), g))
        .collect()
}

fn gate_of<'a>(gates: &'a Gates, source: &str, destination: &str) -> Option<&'a GateView> {
    gates.get(&(source.to_owned(), destination.to_owned()))
}

async fn read<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&mut DbConnection) -> diesel::QueryResult<T> + Send + 'static,
) -> Result<T, ConsoleError> {
    let found = crate::db::on_connection(&state.pool, move |c| {
        work(c).map_err(crate::routes::Problem::from)
    })
    .await?;
    Ok(found)
}

pub(super) fn query_map(request: &HttpRequest) -> HashMap<String, String> {
    form_urlencoded::parse(request.query_string().as_bytes())
        .into_owned()
        .filter(|(_, value)| !value.trim().is_empty())
        .collect()
}

/// `GET /console`: traffic by source and outcome, the last hour per minute, the delivery
/// backlog, the retention audit and the last sweep.
pub async fn overview(
    session: Session,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let now = state.clock.now();
    let traffic = state.traffic.since(now.timestamp() - 86_400);
    let gated = state.settings.current().destinations.gated();
    let (backlog, gates) = read(&state, move |c| {
        Ok((
            views::backlog(c)?,
            by_destination(gate_views(c, &gated, now)?),
        ))
    })
    .await?;
    let body = html! {
        section.card {
            h2 { "Webhooks by outcome" }
            p.hint { "Answered by this instance since it started (at most the last day), including refusals, which are never stored." }
            (traffic_table(&traffic, now))
            h3 { "Per minute, last hour" }
            (chart::per_minute(&traffic, now.timestamp().div_euclid(60), 60))
            p.legend {
                @for group in chart::GROUPS { span class={ "key " (group) } { (group) } " " }
            }
        }
        section.card {
            h2 { "Delivery backlog" }
            (backlog_table(&backlog, &gates))
        }
        section.card {
            h2 { "Retention" }
            (retention(&state, now))
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "", "Overview", body),
    ))
}

/// Counts per source and outcome over the last hour and day.
fn traffic_table(traffic: &[(i64, TrafficCounts)], now: DateTime<Utc>) -> Markup {
    let hour_start = (now.timestamp() - 3600).div_euclid(60);
    let mut rows: BTreeMap<(String, &'static str), (u64, u64)> = BTreeMap::new();
    for (minute, counts) in traffic {
        for ((source, outcome), count) in counts {
            let row = rows.entry((source.clone(), *outcome)).or_default();
            row.1 += count;
            if *minute > hour_start {
                row.0 += count;
            }
        }
    }
    html! {
        @if rows.is_empty() {
            p.empty { "No webhooks in the last day." }
        } @else {
            table {
                thead { tr { th { "Source" } th { "Outcome" } th.num { "Last hour" } th.num { "Last day" } } }
                tbody {
                    @for ((source, outcome), (hour, day)) in &rows {
                        tr { td { (source) } td { (badge(outcome)) } td.num { (hour) } td.num { (day) } }
                    }
                }
            }
        }
    }
}

/// Per destination: pending, in flight and dead deliveries, and the breaker. A destination
/// whose breaker is not closed has a row even with nothing waiting.
fn backlog_table(backlog: &[(String, String, String, i64)], gates: &Gates) -> Markup {
    let mut rows: BTreeMap<(&str, &str), [i64; 3]> = BTreeMap::new();
    for ((source, destination), gate) in gates {
        if gate.breaker != BreakerState::Closed.as_str() {
            rows.entry((source, destination)).or_default();
        }
    }
    for (source, destination, status, count) in backlog {
        let row = rows.entry((source, destination)).or_default();
        match status.as_str() {
            PENDING => row[0] += count,
            IN_PROGRESS => row[1] += count,
            _ => row[2] += count,
        }
    }
    html! {
        @if rows.is_empty() {
            p.empty { "Nothing waiting: every delivery is delivered or set aside." }
        } @else {
            table {
                thead { tr { th { "Source" } th { "Destination" } th.num { "Pending" } th.num { "In flight" } th.num { "Dead letters" } th { "Breaker" } } }
                tbody {
                    @for ((source, destination), [pending, flight, dead]) in &rows {
                        @let gate = gate_of(gates, source, destination);
                        tr class=[view::breaker_row(gate)] {
                            td { (source) } td { (destination) }
                            td.num { (pending) } td.num { (flight) }
                            td.num {
                                @if *dead > 0 {
                                    a href={ (PATH) "/deliveries?status=dead&destination=" (view::query_value(destination)) "&source=" (view::query_value(source)) } { (dead) }
                                } @else { "0" }
                            }
                            td.breaker { @match gate { Some(gate) => { (view::breaker(gate)) } None => { "—" } } }
                        }
                    }
                }
            }
        }
    }
}

fn retention(state: &AppState, now: DateTime<Utc>) -> Markup {
    let settings = state.settings.current();
    let retention = &settings.retention;
    let audit = &retention.audit;
    html! {
        p {
            "Events are kept " strong { (audit.events) } "; "
            @match audit.effective_horizon() {
                Some(line) => { "the longest resend horizon is " strong { (line.value) } " (" (line.name) "). " }
                None => { "no source has a resend horizon. " }
            }
            @if audit.passes() { (badge("closed")) " every copy that can still arrive finds its record." }
            @else { (badge("failed")) " a copy can arrive after its record was swept." }
        }
        p {
            "Last sweep: "
            @match &state.sweeper {
                Some(sweeper) => {
                    @match sweeper.last_success() {
                        Some(at) => { (at.format("%Y-%m-%d %H:%M:%S UTC").to_string()) }
                        None => { "none yet since this instance started" }
                    }
                    " (every " (crate::duration::HumanDuration(retention.sweep_interval)) ")"
                    @if let Some(late) = sweeper.stalled_for(now) { " — " (badge("failed")) " stalled for " (late.num_seconds()) " s" }
                }
                None => { "this instance does not run the sweeper." }
            }
        }
    }
}

/// `GET /console/events`: filters, newest first, keyset pages.
pub async fn events(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let q = query_map(&request);
    let search = event_search(&q, &state)?;
    let before = parse_id(q.get("before"))?;
    let searched = search.clone();
    let rows = read(&state, move |c| {
        views::recent_events(c, &searched, before, PAGE)
    })
    .await?;
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.summary.id))
        .flatten();
    let body = html! {
        (event_filters(&q, &state))
        @if rows.is_empty() {
            p.empty { "No events match." }
        } @else {
            div.scroll { table.events {
                thead { tr { th { "Received" } th { "Source" } th { "Event" } th { "Type" } th { "Outcome" } th { "Fact" } } }
                tbody {
                    @for row in &rows {
                        @let e = &row.summary;
                        tr {
                            td.time { (time(e.received_at)) }
                            td { (e.source) }
                            td.id { (event_link(&e.source, &e.event_id)) }
                            td { (e.event_type.as_deref().unwrap_or("—")) }
                            td { (badge(row.outcome.as_str())) }
                            td.id { (e.fact_kind) ":" (e.fact_key) }
                        }
                    }
                }
            } }
        }
        @if let Some(older) = older {
            p.pager { a href=(pager_href("/events", &q, older)) { "Older →" } }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Events", body),
    ))
}

pub(super) fn parse_id(value: Option<&String>) -> Result<Option<i64>, ConsoleError> {
    value
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| ConsoleError::Invalid(format!("'{v}' is not a row id")))
        })
        .transpose()
}

/// The events search a query string asks for, checked as the API checks its filters.
fn event_search(
    q: &HashMap<String, String>,
    state: &AppState,
) -> Result<EventSearch, ConsoleError> {
    let at = |name: &str| -> Result<Option<DateTime<Utc>>, ConsoleError> {
        q.get(name)
            .map(|text| {
                NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
                    .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S"))
                    .map(|at| at.and_utc())
                    .map_err(|_| {
                        ConsoleError::Invalid(format!(
                            "{name}: '{text}' is not a time (YYYY-MM-DDTHH:MM, UTC)"
                        ))
                    })
            })
            .transpose()
    };
    let filter = EventFilter {
        source: q.get("source").cloned(),
        event_type: q.get("type").cloned(),
        status: None,
        since: at("since")?,
        until: at("until")?,
    };
    filter.validate()?;
    let text = q.get("q").map(|t| t.trim().to_owned());
    actions::check_text("q", text.as_deref())?;
    let outcome = match q.get("outcome") {
        Some(text) => Some(StoredOutcome::parse(text).ok_or_else(|| {
            ConsoleError::Invalid("outcome is accepted or duplicate_fact".to_owned())
        })?),
        None => None,
    };
    Ok(EventSearch {
        filter,
        outcome,
        text,
        sources: state
            .settings
            .current()
            .sources
            .iter()
            .map(|s| s.name.as_str().to_owned())
            .collect(),
    })
}

fn event_filters(q: &HashMap<String, String>, state: &AppState) -> Markup {
    let value = |name: &str| q.get(name).cloned().unwrap_or_default();
    let settings = state.settings.current();
    html! {
        form.filters method="get" action={ (PATH) "/events" } {
            (choice("Source", "source", &value("source"), &source_names(&settings)))
            label { "Type" input type="text" name="type" value=(value("type")) placeholder="invoice.paid"; }
            (choice("Outcome", "outcome", &value("outcome"), &["accepted", "duplicate_fact"]))
            label { "Since (UTC)" input type="datetime-local" name="since" value=(value("since")); }
            label { "Until (UTC)" input type="datetime-local" name="until" value=(value("until")); }
            label.wide { "Event id or fact key" input type="search" name="q" value=(value("q")); }
            button type="submit" { "Filter" }
        }
    }
}

/// A filter's drop-down: "any" or one of `options`, with `current` selected.
pub(super) fn choice(label: &str, name: &str, current: &str, options: &[&str]) -> Markup {
    html! {
        label { (label)
            select name=(name) {
                option value="" { "any" }
                @for option in options {
                    option value=(option) selected[current == *option] { (option) }
                }
            }
        }
    }
}

/// The configured sources' names.
fn source_names(settings: &Settings) -> Vec<&str> {
    settings.sources.iter().map(|s| s.name.as_str()).collect()
}

/// The link to the next (older) page, keeping the filters.
pub(super) fn pager_href(page: &str, q: &HashMap<String, String>, before: i64) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut keys: Vec<&String> = q.keys().filter(|k| *k != "before").collect();
    keys.sort();
    for key in keys {
        query.append_pair(key, &q[key]);
    }
    query.append_pair("before", &before.to_string());
    format!("{PATH}{page}?{}", query.finish())
}

/// `GET /console/events/{source}/{event_id}`: what came in, what was answered, the fact
/// and every event that carried it, every delivery.
pub async fn event(
    session: Session,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let (source, event_id) = path.into_inner();
    actions::check_text("source", Some(&source))?;
    actions::check_text("event_id", Some(&event_id))?;
    let (s, e) = (source.clone(), event_id.clone());
    let shown = read(&state, move |c| {
        let actions::Shown::Stored(event) = actions::show_event(c, &s, &e)? else {
            return Ok(None);
        };
        let fact = &event["event"];
        let siblings = views::events_of_fact(
            c,
            &s,
            fact["fact_kind"].as_str().unwrap_or_default(),
            fact["fact_key"].as_str().unwrap_or_default(),
            100,
        )?;
        Ok(Some((event, siblings)))
    })
    .await?;
    let Some((shown, siblings)) = shown else {
        return Err(ConsoleError::NotFound(format!(
            "No stored event {source}/{event_id}: it never arrived, or it was swept after the retention window."
        )));
    };
    let settings = state.settings.current();
    let names: Vec<String> = (settings.destinations.of(&source).iter())
        .map(|d| d.name.clone())
        .collect();
    let request = EvaluateRequest {
        source: source.clone(),
        event_id: event_id.clone(),
        destination: None,
        filter: None,
        transform: None,
    };
    let evaluation = admin::calls(&state, &settings).evaluate(request).await.ok();
    let routing = routing_section(&session, evaluation.as_ref(), &source, &event_id, &names);
    let body = html! { (event_body(&session, &shown, &siblings)?) (routing) };
    Ok(page_response(
        200,
        layout(
            Some(&session),
            "/events",
            &format!("Event {event_id}"),
            body,
        ),
    ))
}

fn event_body(
    session: &Session,
    shown: &Value,
    siblings: &[actions::EventSummary],
) -> Result<Markup, ConsoleError> {
    let event = &shown["event"];
    let source = event["source"].as_str().unwrap_or_default();
    let event_id = event["event_id"].as_str().unwrap_or_default();
    Ok(html! {
        section.card {
            dl.facts {
                dt { "Source" } dd { (source) }
                dt { "Event id" } dd.id { (event_id) }
                dt { "Type" } dd { (event["event_type"].as_str().unwrap_or("—")) }
                dt { "Received" } dd { (api_time(&event["received_at"], "")) }
                dt { "Kept until" } dd { (api_time(&event["expires_at"], "")) }
                dt { "Body digest" } dd.id { (shown["fingerprint"].as_str().unwrap_or_default()) }
            }
            @if session.may(Role::Operator) {
                form.inline method="post" action={ (PATH) "/replay/preview" } {
                    (csrf_field(session))
                    input type="hidden" name="source" value=(source);
                    input type="hidden" name="event_id" value=(event_id);
                    button type="submit" { "Replay…" }
                }
            }
        }
        section.card {
            h2 { "Request headers" }
            (headers_table(&shown["headers"]))
        }
        section.card {
            h2 { "Payload" }
            (view::payload(&bytes_of(&shown["payload"])))
        }
        section.card {
            h2 { "Stored answer" }
            p { "Status " (shown["response"]["status"].as_i64().map_or("—".to_owned(), |s| s.to_string())) ", "
                (shown["response"]["content_type"].as_str().unwrap_or("—")) }
            (view::payload(&bytes_of(&shown["response"]["body"])))
        }
        section.card {
            h2 { "Fact" }
            (fact_section(shown, siblings))
        }
        section.card {
            h2 { "Deliveries" }
            (deliveries_table(None, &shown["deliveries"]))
            h3 { "Attempts" }
            (attempts_table(&shown["deliveries"]))
        }
    })
}

/// The API's `{"encoding", "data"}` back to bytes.
fn bytes_of(value: &Value) -> Vec<u8> {
    use base64::Engine;
    let data = value["data"].as_str().unwrap_or_default();
    match value["encoding"].as_str() {
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default(),
        _ => data.as_bytes().to_vec(),
    }
}

fn headers_table(headers: &Value) -> Markup {
    html! {
        @match headers.as_array() {
            Some(rows) => {
                table.headers {
                    tbody {
                        @for row in rows {
                            tr { th { (row[0].as_str().unwrap_or_default()) } td.id { (row[1].as_str().unwrap_or_default()) } }
                        }
                    }
                }
            }
            None => { p.empty { "Not kept: this event was stored before Inlet kept request headers." } }
        }
    }
}

fn fact_section(shown: &Value, siblings: &[actions::EventSummary]) -> Markup {
    let fact = &shown["fact"];
    html! {
        @if fact.is_null() {
            p.empty { "No fact recorded." }
        } @else {
            p {
                code { (fact["kind"].as_str().unwrap_or_default()) ":" (fact["key"].as_str().unwrap_or_default()) }
                " recorded " (api_time(&fact["created_at"], ""))
                " by " (event_link(shown["event"]["source"].as_str().unwrap_or_default(), fact["first_event_id"].as_str().unwrap_or_default()))
            }
            h3 { "Every stored event that carried it" }
            ul.siblings {
                @for sibling in siblings {
                    li { (event_link(&sibling.source, &sibling.event_id)) " · " (time(sibling.received_at)) }
                }
            }
        }
    }
}

/// Every attempt of every delivery: when, how long, what came back.
fn attempts_table(deliveries: &Value) -> Markup {
    let rows: Vec<(&Value, &Value)> = deliveries
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| {
            d["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |a| (d, a))
        })
        .collect();
    html! {
        @if rows.is_empty() {
            p.empty { "No attempt made yet." }
        } @else {
            div.scroll { table.attempts {
                thead { tr {
                    th { "Delivery" } th { "Destination" } th.num { "Attempt" } th { "Outcome" }
                    th { "Answer" } th { "Error" } th { "Started" } th.num { "Duration" }
                } }
                tbody {
                    @for (delivery, attempt) in &rows {
                        tr {
                            td.num { (delivery["id"]) }
                            td { (delivery["destination"].as_str().unwrap_or_default()) }
                            td.num { (attempt["attempt"]) }
                            td { (badge(attempt["outcome"].as_str().unwrap_or_default())) }
                            td { (attempt["status"].as_i64().map_or("—".to_owned(), |s| s.to_string())) }
                            td.error { (attempt["error"].as_str().unwrap_or("—")) }
                            td.time { (api_time(&attempt["started_at"], "")) }
                            td.num { (attempt["duration_ms"]) " ms" }
                        }
                    }
                }
            } }
        }
    }
}

/// Deliveries as a table; with a session, dead letters get checkboxes for the actions.
fn deliveries_table(selectable: Option<&Session>, deliveries: &Value) -> Markup {
    let rows = deliveries.as_array().cloned().unwrap_or_default();
    html! {
        @if rows.is_empty() {
            p.empty { "No deliveries." }
        } @else {
            div.scroll { table.deliveries {
                thead { tr {
                    @if selectable.is_some() { th { span.sr { "Select" } } }
                    th { "Id" } th { "Event" } th { "Destination" } th { "Status" } th.num { "Attempts" }
                    th { "Last answer" } th { "Last error" } th { "Next attempt" } th { "Settled" }
                } }
                tbody {
                    @for d in &rows {
                        @let status = d["status"].as_str().unwrap_or_default();
                        tr {
                            @if selectable.is_some() {
                                td { @if status == DEAD {
                                    input type="checkbox" name="id" value=(d["id"]) aria-label={ "Select delivery " (d["id"]) };
                                } }
                            }
                            td.num { (d["id"]) }
                            td.id { (event_link(d["source"].as_str().unwrap_or_default(), d["event_id"].as_str().unwrap_or_default())) }
                            td { (d["destination"].as_str().unwrap_or_default()) }
                            td { (badge(status)) }
                            td.num { (d["attempt"]) }
                            td { (d["last_status"].as_i64().map_or("—".to_owned(), |s| s.to_string())) }
                            td.error { (d["last_error"].as_str().unwrap_or("—")) }
                            td.time { @if status == PENDING { (api_time(&d["next_attempt_at"], "")) } @else { "—" } }
                            td.time { (api_time(if d["delivered_at"].is_string() { &d["delivered_at"] } else { &d["settled_at"] }, "—")) }
                        }
                    }
                }
            } }
        }
    }
}

/// `GET /console/deliveries`: by destination and status; dead letters can be requeued or
/// discarded, one or many at once.
pub async fn deliveries(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let q = query_map(&request);
    let filter = DeliveryFilter {
        status: q.get("status").cloned(),
        source: q.get("source").cloned(),
        destination: q.get("destination").cloned(),
    };
    filter.validate()?;
    let before = parse_id(q.get("before"))?;
    let rows = read(&state, move |c| {
        views::recent_deliveries(c, &filter, before, PAGE)
    })
    .await?;
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    let any_dead = rows.iter().any(|d| d.status == DEAD);
    let json = serde_json::to_value(&rows)
        .map_err(|e| ConsoleError::Internal(format!("cannot encode deliveries: {e}")))?;
    let key = view::form_key()?;
    let body = html! {
        (delivery_filters(&q, &state))
        @if session.may(Role::Operator) {
            form method="post" action={ (PATH) "/deliveries" } {
                (csrf_field(&session))
                input type="hidden" name="idempotency_key" value=(key);
                (deliveries_table(Some(&session), &json))
                @if any_dead {
                    div.actions {
                        button type="submit" name="action" value="requeue" { "Requeue selected" }
                        button.danger type="submit" name="action" value="discard" { "Discard selected" }
                    }
                }
            }
        } @else {
            (deliveries_table(None, &json))
        }
        @if let Some(older) = older {
            p.pager { a href=(pager_href("/deliveries", &q, older)) { "Older →" } }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/deliveries", "Deliveries", body),
    ))
}

fn delivery_filters(q: &HashMap<String, String>, state: &AppState) -> Markup {
    let value = |name: &str| q.get(name).cloned().unwrap_or_default();
    let settings = state.settings.current();
    let mut destinations: Vec<&str> = settings
        .destinations
        .iter()
        .map(|(_, d)| d.name.as_str())
        .collect();
    destinations.sort_unstable();
    destinations.dedup();
    html! {
        form.filters method="get" action={ (PATH) "/deliveries" } {
            (choice("Source", "source", &value("source"), &source_names(&settings)))
            (choice("Destination", "destination", &value("destination"), &destinations))
            (choice("Status", "status", &value("status"), &[PENDING, IN_PROGRESS, DELIVERED, DEAD, DISCARDED]))
            button type="submit" { "Filter" }
        }
    }
}

/// `GET /console/sources`: each source's scheme, active secrets (a count, never a value),
/// resend horizon, fact rules and destinations with the event types they receive, their
/// circuit breaker and limits, and their recent record.
pub async fn sources(
    session: Session,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let settings = state.settings.current();
    let pairs: Vec<(String, String)> = settings
        .destinations
        .iter()
        .map(|(source, d)| (source.to_owned(), d.name.clone()))
        .collect();
    let gated = settings.destinations.gated();
    let now = state.clock.now();
    let (records, gates) = read(&state, move |c| {
        let records = pairs
            .into_iter()
            .map(|(source, name)| {
                let record = views::destination_record(c, &source, &name, RECORD_SAMPLE)?;
                Ok(((source, name), record))
            })
            .collect::<diesel::QueryResult<Records>>()?;
        Ok((records, by_destination(gate_views(c, &gated, now)?)))
    })
    .await?;
    let body = html! {
        @for source in &settings.sources {
            @let name = source.name.as_str();
            section.card {
                h2 { (name) }
                dl.facts {
                    dt { "Scheme" } dd { (source.provider.name()) }
                    dt { "Active secrets" } dd { (source.secrets.len()) }
                    dt { "Resend horizon" } dd { (source.resend_horizon.0) " — " (source.resend_horizon.1) }
                    @if source.provider.scheme().signs_timestamp() {
                        dt { "Timestamp tolerance" } dd { (source.tolerance.as_secs()) " s" }
                    }
                    dt { "Fact rules" }
                    dd { @if source.fact_rules.is_empty() { "none (one fact per event)" } @else {
                        ul { @for rule in &source.fact_rules { li { code { (rule.describe()) } } } }
                    } }
                }
                h3 { "Destinations" }
                (destinations_table(name, settings.destinations.of(name), &records, &gates))
            }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/sources", "Sources", body),
    ))
}

/// Recent records by (source, destination).
type Records = HashMap<(String, String), views::DestinationRecord>;

/// A source's destinations: what they receive, their breaker and limits, their record.
fn destinations_table(
    source: &str,
    destinations: &[DestinationSettings],
    records: &Records,
    gates: &Gates,
) -> Markup {
    html! {
        @if destinations.is_empty() {
            p.empty { "None: facts are recorded, not forwarded." }
        } @else {
            table.destinations {
                thead { tr {
                    th { "Name" } th { "URL" } th { "Events" } th { "Breaker" } th.num { "In flight" } th { "Rate" }
                    th.num { "Recent success" } th { "Last delivered" } th { "Last error" }
                } }
                tbody {
                    @for destination in destinations {
                        @let record = records.get(&(source.to_owned(), destination.name.clone())).cloned().unwrap_or_default();
                        @let gate = gate_of(gates, source, &destination.name);
                        tr class=[view::breaker_row(gate)] {
                            td { (destination.name) }
                            td.id { (shown_url(&destination.url)) }
                            td { @if destination.events.is_filtered() { code { (destination.events) } } @else { (destination.events) } }
                            (gate_cells(gate))
                            td.num { @match record.success_rate() {
                                Some(rate) => { (format!("{rate:.1} %")) " of " (record.delivered + record.dead) }
                                None => { "—" }
                            } }
                            td.time { (record.last_delivered_at.map_or("—".to_owned(), time)) }
                            td.error { @match &record.last_error {
                                Some((error, at)) => { (error) " (" (time(*at)) ")" }
                                None => { "—" }
                            } }
                        }
                    }
                }
            }
        }
    }
}

/// The breaker, in flight (of `max_in_flight`) and rate cells of a destination's row.
fn gate_cells(gate: Option<&GateView>) -> Markup {
    let Some(gate) = gate else {
        return html! { td { "—" } td.num { "—" } td { "—" } };
    };
    html! {
        td.breaker { (view::breaker(gate)) }
        td.num.limit {
            (gate.in_flight)
            @match gate.max_in_flight { Some(max) => { " / " (max) } None => { " (no limit)" } }
        }
        td.limit {
            @match (gate.rate, gate.rate_burst) {
                (Some(rate), Some(burst)) => { (rate) "/s, burst " (burst) }
                (Some(rate), None) => { (rate) "/s" }
                _ => { "no limit" }
            }
        }
    }
}

/// A destination's URL as the console shows it: scheme, host and port only — user info,
/// paths and queries often hold tokens (Slack's and Discord's webhook URLs do).
fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_destination_url_shows_no_credential() {
        assert_eq!(
            shown_url("https://discord.com/api/webhooks/1/SECRET?wait=true"),
            "https://discord.com"
        );
        assert_eq!(
            shown_url("amqp://user:pw@rabbit:5672/%2f"),
            "amqp://rabbit:5672"
        );
        assert_eq!(shown_url("http://app:9000"), "http://app:9000");
    }
}
