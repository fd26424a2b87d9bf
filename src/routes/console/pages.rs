//! The console's pages: overview, events, one event, deliveries, sources.

use super::chart;
use super::error::ConsoleError;
use super::evaluate::routing_section;
use super::session::{Session, PATH};
use super::view::{self, badge, csrf_field, event_link, layout, page_response, time, time_field};
use crate::config::Settings;
use crate::delivery::{
    BreakerState, DestinationSettings, GateView, DEAD, DELIVERED, DISCARDED, IN_PROGRESS, PENDING,
};
use crate::duration::HumanDuration;
use crate::observability::TrafficCounts;
use crate::operator::actions::{
    self, AttemptSummary, DeliveryAttempts, DeliveryFilter, DeliverySummary, EventFilter,
    StoredEvent,
};
use crate::operator::views::{self, EventSearch, EventsPage, Records, StoredOutcome};
use crate::operator::{EvaluateRequest, OperatorError, Role};
use crate::provider::record::Reconciliation;
use crate::reconcile::RunView;
use crate::routes::operator_calls::calls;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDateTime, Utc};
use maud::{html, Markup};
use std::collections::{BTreeMap, HashMap};

/// Rows per listing page.
pub(super) const PAGE: i64 = 50;
/// The overview's auto-refresh periods, in seconds (opt-in: off by default).
const REFRESH_CHOICES: [u32; 3] = [10, 30, 60];
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

pub(super) fn query_map(request: &HttpRequest) -> HashMap<String, String> {
    form_urlencoded::parse(request.query_string().as_bytes())
        .into_owned()
        .filter(|(_, value)| !value.trim().is_empty())
        .collect()
}

/// `GET /console`: traffic by source and outcome, the last hour per minute, the delivery
/// backlog, the retention check and the last sweep.
pub async fn overview(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let refresh = query_map(&request)
        .get("refresh")
        .and_then(|r| r.parse::<u32>().ok())
        .filter(|r| REFRESH_CHOICES.contains(r));
    let now = state.clock.now();
    let traffic = state.traffic.since(now.timestamp() - 86_400);
    let settings = state.settings.current();
    let overview = calls(&state, &settings).overview().await?;
    let (backlog, gates) = (overview.backlog, by_destination(overview.gates));
    let body = html! {
        p.refresh { "Auto-refresh: "
            @if refresh.is_none() { strong { "off" } } @else { a href=(PATH) { "off" } }
            @for choice in REFRESH_CHOICES {
                " · "
                @if refresh == Some(choice) { strong { (choice) " s" } }
                @else { a href={ (PATH) "?refresh=" (choice) } { (choice) " s" } }
            }
        }
        section.card {
            h2 { "Webhooks by outcome" }
            p.hint { "Answered by this instance since it started (at most the last day), including refusals, which are never stored." }
            (traffic_table(&traffic, now))
            h3 { "Per minute, last hour" }
            (chart::per_minute(&traffic, now.timestamp().div_euclid(60), 60))
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
        view::layout_refreshing(Some(&session), ("", "Overview"), body, refresh),
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
                                    a.badge.bad.count href={ (PATH) "/deliveries?status=dead&destination=" (view::query_value(destination)) "&source=" (view::query_value(source)) } { (dead) }
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
    let check = &retention.check;
    html! {
        p {
            "Events are kept " strong { (check.events) } "; "
            @match check.effective_horizon() {
                Some(line) => { "the longest resend horizon is " strong { (line.value) } ", that of the " (line.name) ". " }
                None => { "no source has a resend horizon. " }
            }
            @if check.passes() { (badge("window covers resends")) " every copy that can still arrive finds its record." }
            @else { (badge("window too short")) " a copy can arrive after its record was swept." }
        }
        p {
            "Last sweep: "
            @match &state.sweeper {
                Some(sweeper) => {
                    @match sweeper.last_success() {
                        Some(at) => { (time(at.naive_utc())) }
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

/// `GET /console/events`: filters and a search, newest first, keyset pages with a count;
/// each event's deliveries at a glance.
pub async fn events(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let q = query_map(&request);
    let search = event_search(&q, &state)?;
    let before = parse_id(q.get("before"))?;
    // A page number only labels the rows (paging is by `before`): bounded, never overflowing.
    let page = q
        .get("page")
        .and_then(|p| p.parse::<i64>().ok())
        .unwrap_or(1)
        .clamp(1, 1_000_000);
    let settings = state.settings.current();
    let searched = search.clone();
    let EventsPage { found, states } = calls(&state, &settings)
        .search_events(searched, before, PAGE)
        .await?;
    let rows = &found.rows;
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.summary.id))
        .flatten();
    let body = html! {
        (event_filters(&q, &state))
        (found_line(&found, page, search.text.is_some()))
        @if !rows.is_empty() { (events_table(&settings, rows, &states)) }
        @if let Some(older) = older {
            p.pager { a href=(pager_href("/events", &q, older, Some(page + 1))) { "Older →" } }
        }
        @if session.may(Role::Operator) {
            p.hint { a href=(bulk_href(&q)) { "Replay every event this filter selects…" } }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Events", body),
    ))
}

/// The listed events, each with its deliveries per destination.
fn events_table(
    settings: &Settings,
    rows: &[views::ListedEvent],
    states: &HashMap<(String, String), Vec<views::DeliveryState>>,
) -> Markup {
    html! {
    div.scroll { table.events {
        thead { tr { th { "Received" } th { "Source" } th { "Event" } th { "Type" } th { "Outcome" } th { "Deliveries" } th { "Fact" } } }
        tbody {
            @for row in rows {
                @let e = &row.summary;
                @let key = (e.source.clone(), e.event_id.clone());
                tr {
                    td.time data-label="Received" { (time(e.received_at)) }
                    td data-label="Source" { (e.source) }
                    td.id data-label="Event" { (event_link(&e.source, &e.event_id)) }
                    td data-label="Type" { (e.event_type.as_deref().unwrap_or("—")) }
                    td data-label="Outcome" { (badge(row.outcome.as_str())) }
                    td.states data-label="Deliveries" { (delivery_cell(settings, row, states.get(&key).map_or(&[][..], Vec::as_slice))) }
                    td.id.fact data-label="Fact" { (e.fact_kind) ":" wbr; (e.fact_key) }
                }
            }
        }
    } }
    }
}

/// `Showing 51–100 of 1,000+ events` (exact up to the count's cap), and what a payload
/// search looked at.
fn found_line(found: &views::Found, page: i64, searched: bool) -> Markup {
    let first = (page - 1) * PAGE + 1;
    let last = first + found.rows.len() as i64 - 1;
    let total = if found.count > views::COUNT_CAP {
        format!("more than {}", views::COUNT_CAP)
    } else {
        found.count.to_string()
    };
    html! {
        @if found.rows.is_empty() {
            p.empty { "No events match." }
        } @else {
            p.count { "Showing " (first) "–" (last) " of " (total) " matching events." }
        }
        @if searched && found.scan_bounded {
            p.hint { "Payloads and headers were searched in the newest " (views::SEARCH_SCAN) " events of this range; event ids and fact keys in every event. Narrow the time range to search older payloads." }
        }
    }
}

/// An event's deliveries per destination: delivered, pending, dead (with its last error),
/// or filtered out (routed by type, not taken by the destination's filter).
fn delivery_cell(
    settings: &Settings,
    row: &views::ListedEvent,
    states: &[views::DeliveryState],
) -> Markup {
    let e = &row.summary;
    let routed: Vec<&DestinationSettings> = (settings
        .destinations
        .routed(&e.source, e.event_type.as_deref()))
    .collect();
    html! {
        @if row.outcome == StoredOutcome::DuplicateFact {
            span.muted { "none: its fact's first event delivers" }
        } @else if states.is_empty() && routed.is_empty() {
            span.muted { "no destination" }
        } @else {
            ul.states {
                @for state in states {
                    li { (state.destination) " " (badge(&state.status))
                        @if state.status != DELIVERED { @if let Some(error) = &state.last_error { " " span.error title=(error) { (headline(error)) } } } }
                }
                @for destination in routed.iter().filter(|d| !states.iter().any(|s| s.destination == d.name)) {
                    li { (destination.name) " " @if destination.filter.is_some() { (badge("filtered out")) } @else { (badge("none")) } }
                }
            }
        }
    }
}

/// An error's first clause — `connection refused (10.0.0.7:443)`, `HTTP 422` — for a
/// list; the whole chain is on the event page (and in the cell's title).
fn headline(error: &str) -> &str {
    error.split_once(": ").map_or(error, |(head, _)| head)
}

/// The bulk page, pre-filled to requeue the dead letters the deliveries filter selects.
fn bulk_dead_href(q: &HashMap<String, String>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::from("action=requeue"));
    for key in ["source", "destination"] {
        if let Some(value) = q.get(key) {
            query.append_pair(key, value);
        }
    }
    format!("{PATH}/bulk?{}", query.finish())
}

/// The bulk page, pre-filled to replay what the events filter selects.
fn bulk_href(q: &HashMap<String, String>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::from("action=replay"));
    for key in ["source", "type", "since", "until"] {
        if let Some(value) = q.get(key) {
            query.append_pair(key, value);
        }
    }
    format!("{PATH}/bulk?{}", query.finish())
}

pub(super) fn parse_id(value: Option<&String>) -> Result<Option<i64>, ConsoleError> {
    value
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| ConsoleError::Invalid(format!("'{v}' is not a row id")))
        })
        .transpose()
}

/// A time as the console's forms take it, in UTC: `2026-12-04 05:00`, with seconds, with
/// a `T` instead of the space, or a date alone (its midnight).
pub(super) fn console_time(name: &str, text: &str) -> Result<DateTime<Utc>, ConsoleError> {
    let text = text.trim();
    [
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%dT%H:%M:%S",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
    .or_else(|| {
        chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .and_then(|day| day.and_hms_opt(0, 0, 0))
    })
    .map(|at| at.and_utc())
    .ok_or_else(|| {
        ConsoleError::Invalid(format!(
            "{name}: '{text}' is not a time (YYYY-MM-DD HH:MM, UTC)"
        ))
    })
}

/// The events search a query string asks for, checked as the API checks its filters.
fn event_search(
    q: &HashMap<String, String>,
    state: &AppState,
) -> Result<EventSearch, ConsoleError> {
    let at = |name: &str| q.get(name).map(|text| console_time(name, text)).transpose();
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
    let settings = state.settings.current();
    Ok(EventSearch {
        filter,
        outcome,
        text,
        sources: (source_names(&settings).into_iter())
            .map(str::to_owned)
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
            (time_field("Since (UTC)", "since", &value("since")))
            (time_field("Until (UTC)", "until", &value("until")))
            label.wide { "Event id, fact key, or a value in the payload or headers" input type="search" name="q" value=(value("q")) placeholder="evt_1N… or 4711"; }
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

/// The configured sources' names, and `inlet` (the operational notices) when `[notices]`
/// is configured.
pub(super) fn source_names(settings: &Settings) -> Vec<&str> {
    let notices = settings.notices.as_ref().map(|_| crate::notices::SOURCE);
    (settings.sources.iter().map(|s| s.name.as_str()))
        .chain(notices)
        .collect()
}

/// The link to the next (older) page, keeping the filters; `number` is that page's, when
/// the page shows it.
pub(super) fn pager_href(
    page: &str,
    q: &HashMap<String, String>,
    before: i64,
    number: Option<i64>,
) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut keys: Vec<&String> = (q.keys())
        .filter(|k| *k != "before" && *k != "page")
        .collect();
    keys.sort();
    for key in keys {
        query.append_pair(key, &q[key]);
    }
    query.append_pair("before", &before.to_string());
    if let Some(number) = number {
        query.append_pair("page", &number.to_string());
    }
    format!("{PATH}{page}?{}", query.finish())
}

/// `GET /console/events/{source}/{event_id}`: what came in, what was answered, the fact
/// and every event that carried it, every delivery.
pub async fn event(
    session: Session,
    http: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let (source, event_id) = path.into_inner();
    let settings = state.settings.current();
    let found = calls(&state, &settings)
        .event_with_its_fact(&source, &event_id, 100)
        .await;
    let (shown, siblings) = match found {
        Ok(found) => found,
        Err(OperatorError::Expired(_) | OperatorError::UnknownEvent(_)) => {
            return Err(ConsoleError::NotFound(format!(
                "No stored event {source}/{event_id}: it never arrived, or it was swept after the retention window."
            )))
        }
        Err(error) => return Err(error.into()),
    };
    let names: Vec<String> = (settings.destinations.of(&source).iter())
        .map(|d| d.name.clone())
        .collect();
    let evaluate = EvaluateRequest {
        source: source.clone(),
        event_id: event_id.clone(),
        destination: None,
        filter: None,
        transform: None,
    };
    // The configured expressions only (any role may see them decide), on the tools'
    // evaluators, counted against this operator's one evaluation at a time.
    let caller = session.caller(&settings, &http)?;
    let evaluation = (calls(&state, &settings).evaluate(&caller, evaluate).await).ok();
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

/// What the event page says of the event first: where it came from, when, its digest,
/// its trace and its deliveries at a glance.
fn event_facts(shown: &StoredEvent) -> Markup {
    let event = &shown.event;
    html! {
        dl.facts {
            dt { "Source" } dd { (event.source) }
            dt { "Event id" } dd.id { (event.event_id) }
            dt { "Type" } dd { (event.event_type.as_deref().unwrap_or("—")) }
            dt { "Received" } dd { (time(event.received_at)) }
            dt { "Arrived" } dd { @match event.arrival.as_deref() {
                Some("recovered") => { span.badge.calm title="Fetched from the provider's own record by a reconciliation run: trusted by the authenticated API call, not a signature" { "recovered" } " from the provider's record" }
                _ => { "as a signed webhook" }
            } }
            dt { "Kept until" } dd { (time(event.expires_at)) }
            dt { "Body digest" } dd.id { (shown.fingerprint) }
            @if let Some(trace_id) = &shown.trace_id {
                dt { "Trace id" } dd.id title="The OpenTelemetry trace of this webhook and its deliveries: search it in your tracing backend" { (trace_id) }
            }
            dt { "Deliveries" } dd { (deliveries_at_a_glance(&shown.deliveries)) }
        }
    }
}

fn event_body(
    session: &Session,
    shown: &StoredEvent,
    siblings: &[actions::EventSummary],
) -> Result<Markup, ConsoleError> {
    let (source, event_id) = (shown.event.source.as_str(), shown.event.event_id.as_str());
    let response = &shown.response;
    let deliveries: Vec<&DeliverySummary> =
        (shown.deliveries.iter()).map(|d| &d.delivery).collect();
    Ok(html! {
        section.card {
            (event_facts(shown))
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
            (headers_table(shown.headers.as_deref()))
        }
        section.card {
            h2 { "Payload" }
            (view::payload(&shown.payload))
        }
        section.card {
            h2 { "Copy as curl" }
            p.hint { "The stored request, to reproduce it: Inlet answers a copy with the stored answer (a duplicate changes nothing) — for a signature that carries a timestamp, only within its tolerance; an older copy is refused 401 timestamp_out_of_tolerance. The URL is built from the request's Host header. Credentials were redacted when it was stored." }
            pre.payload.curl { (curl_of(source, shown)) }
        }
        section.card {
            h2 { "Stored answer" }
            p { "Status " (response.status.map_or("—".to_owned(), |s| s.to_string())) ", "
                (response.content_type.as_deref().unwrap_or("—")) }
            (view::payload(response.body.as_deref().unwrap_or_default()))
        }
        section.card {
            h2 { "Fact" }
            (fact_section(shown, siblings))
        }
        section.card {
            h2 { "Deliveries" }
            (deliveries_table(None, &deliveries))
            h3 { "Attempts" }
            (attempts_table(&shown.deliveries))
        }
    })
}

/// Each delivery of the event in a line: its destination, status, and the first clause of
/// its last error (the whole chain is in the attempts below).
fn deliveries_at_a_glance(deliveries: &[DeliveryAttempts]) -> Markup {
    html! {
        @if deliveries.is_empty() { span.muted { "none" } } @else {
            ul.states {
                @for d in deliveries.iter().map(|d| &d.delivery) {
                    li {
                        (d.destination) " " (badge(&d.status))
                        " after " (d.attempt) @if d.attempt == 1 { " attempt" } @else { " attempts" }
                        @if d.status != DELIVERED { @if let Some(error) = &d.last_error {
                            " " span.error title=(error) { (headline(error)) }
                        } }
                    }
                }
            }
        }
    }
}

/// The stored request as a `curl` command, to the host it was sent to.
fn curl_of(source: &str, shown: &StoredEvent) -> String {
    let headers: &[(String, String)] = shown.headers.as_deref().unwrap_or_default();
    let find = |name: &str| {
        (headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let scheme = find("x-forwarded-proto").unwrap_or("http");
    let host = find("x-forwarded-host")
        .or(find("host"))
        .unwrap_or("localhost:8080");
    let url = format!("{scheme}://{host}/webhooks/{source}");
    crate::curl::command(&url, headers, &shown.payload)
}

fn headers_table(headers: Option<&[(String, String)]>) -> Markup {
    html! {
        @match headers {
            Some(rows) => {
                table.headers {
                    tbody {
                        @for (name, value) in rows {
                            tr { th { (name) } td.id { (value) } }
                        }
                    }
                }
            }
            None => { p.empty { "Not kept: this event was stored before Inlet kept request headers." } }
        }
    }
}

fn fact_section(shown: &StoredEvent, siblings: &[actions::EventSummary]) -> Markup {
    html! {
        @match &shown.fact {
            None => { p.empty { "No fact recorded." } }
            Some(fact) => {
                p {
                    code { (fact.kind) ":" (fact.key) }
                    " recorded " (time(fact.created_at))
                    " by " (event_link(&shown.event.source, &fact.first_event_id))
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
}

/// Every attempt of every delivery: when, how long the destination took to answer, and
/// what it answered (its status and the start of its body) or why nothing came back.
fn attempts_table(deliveries: &[DeliveryAttempts]) -> Markup {
    let rows: Vec<(&DeliverySummary, &AttemptSummary)> = (deliveries.iter())
        .flat_map(|d| d.attempts.iter().map(move |a| (&d.delivery, a)))
        .collect();
    html! {
        @if rows.is_empty() {
            p.empty { "No attempt made yet." }
        } @else {
            div.scroll { table.attempts {
                thead { tr {
                    th { "Delivery" } th { "Destination" } th.num { "Attempt" } th { "Outcome" }
                    th { "Answer" } th { "Error" } th { "Started" } th.num { "Response time" }
                } }
                tbody {
                    @for (delivery, attempt) in &rows {
                        @let (body, error) = answer_parts(attempt.error.as_deref());
                        tr {
                            td.num data-label="Delivery" { (delivery.id) }
                            td data-label="Destination" { (delivery.destination) }
                            td.num data-label="Attempt" { (attempt.attempt) }
                            td data-label="Outcome" { (badge(&attempt.outcome)) }
                            td.answer data-label="Answer" {
                                @match attempt.status { Some(status) => { strong { (status) } } None => { span.muted { "none" } } }
                                @if let Some(body) = body { " " code.body { (body) } }
                            }
                            td data-label="Error" { @match error { Some(error) => { span.error { (error) } } None => { span.muted { "—" } } } }
                            td.time data-label="Started" { (time(attempt.started_at)) }
                            td.num data-label="Response time" { (attempt.duration_ms) " ms" }
                        }
                    }
                }
            } }
        }
    }
}

/// An attempt's stored error split into the answer's body (`HTTP 422: {body}` keeps the
/// start of what the destination answered) and an error proper (no answer at all).
fn answer_parts(error: Option<&str>) -> (Option<&str>, Option<&str>) {
    let Some(error) = error else {
        return (None, None);
    };
    match error
        .strip_prefix("HTTP ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((status, body)) if status.chars().all(|c| c.is_ascii_digit()) => {
            (Some(body).filter(|b| !b.is_empty()), None)
        }
        _ => (None, Some(error)),
    }
}

/// Deliveries as a table; with a session, dead letters get checkboxes for the actions.
fn deliveries_table(selectable: Option<&Session>, rows: &[&DeliverySummary]) -> Markup {
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
                    @for d in rows {
                        @let status = d.status.as_str();
                        tr {
                            @if selectable.is_some() {
                                td { @if status == DEAD {
                                    input type="checkbox" name="id" value=(d.id) aria-label={ "Select delivery " (d.id) };
                                } }
                            }
                            td.num data-label="Id" { (d.id) }
                            td.id data-label="Event" { (event_link(&d.source, &d.event_id)) }
                            td data-label="Destination" { (d.destination) }
                            td data-label="Status" { (badge(status)) }
                            td.num data-label="Attempts" { (d.attempt) }
                            td data-label="Last answer" { (d.last_status.map_or("—".to_owned(), |s| s.to_string())) }
                            td data-label="Last error" { @match &d.last_error { Some(error) => { span.error { (error) } } None => { span.muted { "—" } } } }
                            td.time data-label="Next attempt" { @if status == PENDING { (time(d.next_attempt_at)) } @else { span.muted { "—" } } }
                            td.time data-label="Settled" { @match d.delivered_at.or(d.settled_at) { Some(at) => { (time(at)) } None => { "—" } } }
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
    let settings = state.settings.current();
    let rows = calls(&state, &settings)
        .recent_deliveries(filter, before, PAGE)
        .await?;
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    let any_dead = rows.iter().any(|d| d.status == DEAD);
    let shown: Vec<&DeliverySummary> = rows.iter().collect();
    let key = view::form_key()?;
    let body = html! {
        (delivery_filters(&q, &state))
        @if session.may(Role::Operator) {
            form method="post" action={ (PATH) "/deliveries" } {
                (csrf_field(&session))
                input type="hidden" name="idempotency_key" value=(key);
                (deliveries_table(Some(&session), &shown))
                @if any_dead {
                    div.actions {
                        button type="submit" name="action" value="requeue" { "Requeue selected" }
                        button.danger type="submit" name="action" value="discard" { "Discard selected" }
                    }
                }
            }
        } @else {
            (deliveries_table(None, &shown))
        }
        @if let Some(older) = older {
            p.pager { a href=(pager_href("/deliveries", &q, older, None)) { "Older →" } }
        }
        @if session.may(Role::Operator) {
            p.hint { a href=(bulk_dead_href(&q)) { "Requeue or discard every dead letter this filter selects…" } }
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

/// For a source whose secret a handshake establishes (Asana): when it was, never what.
fn handshake_secret(
    source: &crate::provider::SourceSettings,
    held: &[(String, NaiveDateTime)],
) -> Markup {
    let Some(header) = source.provider.secret_by_handshake() else {
        return html! {};
    };
    let at = held.iter().find(|(name, _)| name == source.name.as_str());
    html! {
        dt { "Handshake secret" }
        dd { @match at {
            Some((_, at)) => { "established " (time(*at)) " (" code { (header) } ")" },
            None => { "none yet: the webhook's handshake (" code { (header) } ") is taken" },
        } }
    }
}

/// `GET /console/sources`: each source's scheme, active secrets (a count, never a value),
/// when a handshake established its secret (Asana: never the secret),
/// resend horizon, fact rules and destinations with the event types they receive, their
/// circuit breaker and limits, and their recent record.
pub async fn sources(
    session: Session,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let settings = state.settings.current();
    let page = calls(&state, &settings).sources_page(RECORD_SAMPLE).await?;
    let (records, gates) = (page.records, by_destination(page.gates));
    let held = page.established;
    let mut runs = HashMap::new();
    for source in settings
        .sources
        .iter()
        .filter(|source| source.reconcile.is_some())
    {
        let name = source.name.as_str().to_owned();
        let recent = calls(&state, &settings)
            .reconcile_runs(name.clone(), 5)
            .await?;
        runs.insert(name, recent);
    }
    let body = html! {
        @for source in &settings.sources {
            @let name = source.name.as_str();
            section.card {
                h2 { (name) }
                dl.facts {
                    dt { "Scheme" } dd { (source.provider.name()) }
                    dt { "Active secrets" } dd { (source.secrets.len()) }
                    (handshake_secret(source, &held))
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
                @if let Some(reconciliation) = &source.reconcile {
                    (reconcile_runs(reconciliation, runs.get(name).map(Vec::as_slice).unwrap_or_default()))
                }
            }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/sources", "Sources", body),
    ))
}

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
                    th { "Name" } th { "URL" } th { "Events" } th { "Breaker" } th { "Limits" }
                    th { "Last hour" } th { "Recent deliveries" } th { "Last error" }
                } }
                tbody {
                    @for destination in destinations {
                        @let (record, hour) = records.get(&(source.to_owned(), destination.name.clone())).cloned().unwrap_or_default();
                        @let gate = gate_of(gates, source, &destination.name);
                        tr class=[view::breaker_row(gate)] {
                            td data-label="Name" { (destination.name) }
                            td.id data-label="URL" { (shown_url(&destination.url)) }
                            td data-label="Events" { @if destination.events.is_filtered() { code { (destination.events) } } @else { (destination.events) } }
                            (gate_cells(gate))
                            td data-label="Last hour" { @match hour.success_rate() {
                                Some(rate) => {
                                    (rate_badge(rate)) " of " (hour.attempts) " attempts"
                                    @if let (Some(p50), Some(p99)) = (hour.p50_ms, hour.p99_ms) { br; span.muted { "p50 " (p50) " ms · p99 " (p99) " ms" } }
                                }
                                None => { span.muted { "no attempt" } }
                            } }
                            td data-label="Recent deliveries" {
                                @match record.success_rate() {
                                    Some(rate) => { (rate_badge(rate)) " of " (record.delivered + record.dead) }
                                    None => { span.muted { "none finished" } }
                                }
                                br;
                                span.muted { "last delivered " }
                                @match record.last_delivered_at { Some(at) => { (time(at)) } None => { span.muted { "never" } } }
                            }
                            td data-label="Last error" { @match &record.last_error {
                                Some((error, at)) => { span.error { (error) } " (" (time(*at)) ")" }
                                None => { span.muted { "none" } }
                            } }
                        }
                    }
                }
            }
        }
    }
}

/// A reconciled source's last runs: when, what was listed, missing and recovered.
fn reconcile_runs(reconciliation: &Reconciliation, runs: &[RunView]) -> Markup {
    html! {
        h3 { "Reconciliation" }
        p.muted {
            "The " (reconciliation.api.name()) " API's record, every " (HumanDuration(reconciliation.interval))
            ", " (reconciliation.mode.as_str()) " mode; an event younger than " (HumanDuration(reconciliation.settle)) " is not missing yet."
        }
        @if runs.is_empty() {
            p.empty { "No run yet." }
        } @else {
            table.reconcile-runs {
                thead { tr { th { "Started" } th { "By" } th { "Mode" } th { "Status" } th { "Listed" } th { "Missing" } th { "Recovered" } th { "Errors" } } }
                tbody { @for run in runs {
                    tr {
                        td data-label="Started" { (time(run.started_at.naive_utc())) }
                        td data-label="By" { (run.trigger) @if let Some(by) = &run.requested_by { " (" (by) ")" } }
                        td data-label="Mode" { (run.mode) }
                        td data-label="Status" { @if run.status == "failed" { span.error title=(run.error.as_deref().unwrap_or_default()) { "failed" } } @else { (run.status) } }
                        td data-label="Listed" { (run.listed) }
                        td data-label="Missing" { (run.missing) }
                        td data-label="Recovered" { (run.recovered) }
                        td data-label="Errors" { (run.errors) }
                    }
                } }
            }
        }
    }
}

/// A success rate, highlighted when it is low: red under 90 %, amber under 99 %.
fn rate_badge(rate: f64) -> Markup {
    let tone = match rate {
        r if r < 90.0 => "bad",
        r if r < 99.0 => "calm",
        _ => "good",
    };
    html! { span class={ "badge " (tone) } { (format!("{rate:.1} %")) } }
}

/// The breaker and limits (in flight of `max_in_flight`, rate) cells of a destination's row.
fn gate_cells(gate: Option<&GateView>) -> Markup {
    let Some(gate) = gate else {
        return html! { td data-label="Breaker" { "—" } td data-label="Limits" { "—" } };
    };
    html! {
        td.breaker data-label="Breaker" { (view::breaker(gate)) }
        td.limit data-label="Limits" {
            (gate.in_flight)
            @match gate.max_in_flight { Some(max) => { " / " (max) " in flight" } None => { " in flight (no limit)" } }
            br;
            @match (gate.rate, gate.rate_burst) {
                (Some(rate), Some(burst)) => { (rate) "/s, burst " (burst) }
                (Some(rate), None) => { (rate) "/s" }
                _ => { "no rate limit" }
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
