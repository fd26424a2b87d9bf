//! Bulk actions in the console: a filter, a preview (counts per destination and a sample),
//! one confirmation, then a progress page that reloads itself while the action runs. The
//! form fills in the operator use case's request and calls it as the API's bulk call does,
//! under the session's caller and the Idempotency-Key the preview was rendered with: a
//! second confirmation, a double click or a browser re-submit starts nothing new and shows
//! the same action.

use super::actions::{checked_form, encode, form_key_of, permitted, result_of};
use super::error::ConsoleError;
use super::forms::field;
use super::pages::{choice, console_time, query_map, source_names};
use super::session::{Session, PATH};
use super::view::{
    self, badge, csrf_field, layout, layout_refreshing, page_response, time, time_field,
};
use crate::operator::{
    Bulk, BulkFilter, BulkKind, BulkPreview, BulkRequest, BulkRow, KeyedRequest, OperatorError,
    Previewed, Role, PREVIEW_PLANNED,
};
use crate::routes::operator_calls::{bulk_answer, calls};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;

/// Seconds between reloads of a running action's page.
const REFRESH_SECS: u32 = 2;

/// `GET /console/bulk`: the filter form (pre-filled from the query, as the events and
/// deliveries pages link to it) and the newest actions.
pub async fn bulk_page(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let q = query_map(&request);
    let settings = state.settings.current();
    let recent = calls(&state, &settings).bulk_actions(20).await?;
    let body = html! {
        section.card {
            h2 { "Choose" }
            p.hint { "Replay every event a filter names, or requeue or discard every dead letter it names. A preview comes first; nothing changes until you confirm." }
            (bulk_form(&session, &q, &state))
        }
        section.card {
            h2 { "Recent bulk actions" }
            (actions_table(&recent))
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/bulk", "Bulk actions", body),
    ))
}

fn bulk_form(session: &Session, q: &HashMap<String, String>, state: &AppState) -> Markup {
    let value = |name: &str| q.get(name).cloned().unwrap_or_default();
    let settings = state.settings.current();
    let mut destinations: Vec<&str> = (settings.destinations.iter())
        .map(|(_, d)| d.name.as_str())
        .collect();
    destinations.sort_unstable();
    destinations.dedup();
    html! {
        form.filters method="post" action={ (PATH) "/bulk/preview" } {
            (csrf_field(session))
            label { "Action"
                select name="action" {
                    @for kind in ["requeue", "replay", "discard"] {
                        option value=(kind) selected[value("action") == kind] { (kind) }
                    }
                }
            }
            (choice("Source", "source", &value("source"), &source_names(&settings)))
            (choice("Destination", "destination", &value("destination"), &destinations))
            label { "Type" input type="text" name="type" value=(value("type")) placeholder="invoice.paid"; }
            (time_field("Since (UTC)", "since", &value("since")))
            (time_field("Until (UTC)", "until", &value("until")))
            button type="submit" { "Preview…" }
        }
        p.hint { "Replay: events received in the time range, to the destination named (or to every destination they are routed to). Requeue and discard: dead letters that died in the time range." }
    }
}

/// The bulk request a posted form names (times in UTC, as the console writes them).
fn request_of(fields: &[(String, String)], dry_run: bool) -> Result<BulkRequest, ConsoleError> {
    let text = |name: &str| {
        field(fields, name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let at = |name: &str| text(name).map(|t| console_time(name, &t)).transpose();
    let number = |name: &str| text(name).and_then(|t| t.parse::<i64>().ok());
    let expect = match (number("expect_matched"), number("expect_upper_id")) {
        (Some(matched), Some(upper_id)) => Some(Previewed { matched, upper_id }),
        _ => None,
    };
    Ok(BulkRequest {
        action: text("action").unwrap_or_default(),
        filter: BulkFilter {
            source: text("source"),
            destination: text("destination"),
            event_type: text("type"),
            since: at("since")?,
            until: at("until")?,
        },
        dry_run,
        expect,
    })
}

/// `POST /console/bulk/preview`: what the action would do, and the form to confirm it.
pub async fn bulk_preview(
    session: Session,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    preview_page(&session, &fields, &state, None).await
}

/// The preview of the form's action, with the form that confirms it (and `notice` above
/// it: why a confirmation was refused).
async fn preview_page(
    session: &Session,
    fields: &[(String, String)],
    state: &web::Data<AppState>,
    notice: Option<String>,
) -> Result<HttpResponse, ConsoleError> {
    let request = request_of(fields, true)?;
    let settings = state.settings.current();
    let preview = calls(state, &settings)
        .preview_bulk(Bulk::parse(request)?)
        .await?;
    let key = view::form_key()?;
    let body = html! {
        @if let Some(notice) = &notice { p.notice role="alert" { (notice) } }
        (preview_summary(&preview))
        @if session.may(Role::Operator) && preview.matched > 0 {
            form.card method="post" action={ (PATH) "/bulk" } {
                (csrf_field(session))
                input type="hidden" name="idempotency_key" value=(key);
                @for name in ["action", "source", "destination", "type", "since", "until"] {
                    @if let Some(value) = field(fields, name) {
                        input type="hidden" name=(name) value=(value);
                    }
                }
                // What this preview counted: the action acts on at most that.
                input type="hidden" name="expect_matched" value=(preview.matched);
                input type="hidden" name="expect_upper_id" value=(preview.upper_id);
                button type="submit" { "Confirm: " (preview.action.as_str()) " " (preview.matched) }
                " "
                a href={ (PATH) "/bulk" } { "Cancel" }
            }
        } @else if preview.matched > 0 {
            p { "Acting needs the operator role; you are signed in as a " (session.role.as_str()) "." }
        }
    };
    Ok(page_response(
        200,
        layout(Some(session), "/bulk", "Bulk preview", body),
    ))
}

fn preview_summary(preview: &BulkPreview) -> Markup {
    let noun = match preview.action {
        BulkKind::Replay => "events",
        _ => "dead letters",
    };
    html! {
        section.card {
            p.lead { strong { (preview.matched) } " " (noun) " match. Nothing has changed yet." }
            h3 { "Deliveries per destination" }
            @if let Some(planned) = preview.planned.filter(|p| *p < preview.matched) {
                p.hint { "Counted over the first " (planned) " events (at most " (PREVIEW_PLANNED) " are planned for a preview)." }
            }
            @if preview.destinations.is_empty() {
                p.empty { "None." }
            } @else {
                table.counts {
                    thead { tr { th { "Destination" } th.num { "Deliveries" } } }
                    tbody { @for (name, n) in &preview.destinations { tr { td { (name) } td.num { (n) } } } }
                }
            }
            h3 { "Sample" }
            (sample_table(preview))
        }
    }
}

fn sample_table(preview: &BulkPreview) -> Markup {
    html! {
        @if preview.sample.is_empty() { p.empty { "Nothing matches." } } @else {
            div.scroll { table.sample {
                thead { tr { th { "Event" } th { "Destination(s)" } th { "Result / last error" } } }
                tbody {
                    @for row in &preview.sample {
                        tr {
                            td.id { (view::event_link(row["source"].as_str().unwrap_or_default(), row["event_id"].as_str().unwrap_or_default())) }
                            td { (destinations_of(row)) }
                            td.error { (row["result"].as_str().or(row["last_error"].as_str()).unwrap_or("—")) }
                        }
                    }
                }
            } }
        }
    }
}

/// A sample row's destination (a dead letter) or destinations (a replay's plan).
fn destinations_of(row: &Value) -> String {
    match row["destination"].as_str() {
        Some(name) => name.to_owned(),
        None => (row["destinations"].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `POST /console/bulk`: starts the confirmed action, once per form (the `operator` role),
/// and sends the browser to its progress page.
pub async fn bulk_start(
    session: Session,
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let bulk_request = request_of(&fields, false)?;
    let action = bulk_request.audit_name();
    let caller = permitted(&session, &state, &request, action, &fields).await?;
    let key = form_key_of(&fields)?;
    let settings = state.settings.current();
    let encoded = encode(&bulk_request)?;
    let bulk = Bulk::parse(bulk_request)?;
    let keyed = KeyedRequest {
        caller,
        key,
        request: &encoded,
    };
    let started = calls(&state, &settings)
        .start_bulk(keyed, bulk, bulk_answer)
        .await;
    let called = match started {
        Err(OperatorError::Outdated(detail, _)) => {
            let notice = format!("Nothing was done: {detail}.");
            return preview_page(&session, &fields, &state, Some(notice)).await;
        }
        other => other?,
    };
    let id = result_of(&called)?
        .id()
        .ok_or_else(|| ConsoleError::Internal("the stored action has no id".to_owned()))?;
    let again = if called.replayed { "?again=1" } else { "" };
    Ok(HttpResponse::SeeOther()
        .insert_header((header::LOCATION, format!("{PATH}/bulk/{id}{again}")))
        .finish())
}

/// `GET /console/bulk/{id}`: how far the action got; reloads itself while it runs.
pub async fn bulk_progress(
    session: Session,
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let id = path
        .parse::<i64>()
        .map_err(|_| ConsoleError::NotFound("A bulk action's id is a number.".to_owned()))?;
    let settings = state.settings.current();
    let row = calls(&state, &settings).bulk_action(id).await?;
    let again = query_map(&request).contains_key("again");
    let body = html! {
        @if again {
            p.notice.calm role="status" { "This form was already submitted: no second action was started. This is the first one." }
        }
        (progress(&row))
        p { a href={ (PATH) "/bulk" } { "All bulk actions" } }
    };
    let refresh = row.running().then_some(REFRESH_SECS);
    let title = format!("Bulk action {id}");
    Ok(page_response(
        200,
        layout_refreshing(Some(&session), ("/bulk", &title), body, refresh),
    ))
}

fn progress(row: &BulkRow) -> Markup {
    let shown = row.to_json();
    html! {
        section.card.bulk {
            dl.facts {
                dt { "Action" } dd { (row.action) }
                dt { "Filter" } dd.id { (shown["filter"].to_string()) }
                dt { "Started by" } dd { (row.operator) " · " (time(row.created_at)) }
                dt { "Status" } dd { (badge(&row.status)) @if row.running() { " — this page reloads every " (REFRESH_SECS) " s" } }
                dt { "Progress" } dd {
                    progress value=(row.processed) max=(row.matched.max(1)) { (row.processed) " of " (row.matched) }
                    " " span.count { (row.processed) " of " (row.matched) }
                }
                @if let Some(finished) = row.finished_at { dt { "Finished" } dd { (time(finished)) } }
                @if let Some(error) = &row.error { dt { "Error" } dd.error { (error) } }
            }
            h3 { "Results" }
            (counts_table(&shown["results"], "Result"))
            @if row.action == BulkKind::Replay.as_str() {
                h3 { "Deliveries enqueued" }
                (counts_table(&shown["deliveries"], "Destination"))
            }
        }
    }
}

fn counts_table(counts: &Value, label: &str) -> Markup {
    let rows: Vec<(&String, &Value)> = counts.as_object().into_iter().flatten().collect();
    html! {
        @if rows.is_empty() { p.empty { "None yet." } } @else {
            table.counts {
                thead { tr { th { (label) } th.num { "Rows" } } }
                tbody { @for (name, n) in rows { tr { td { (badge(name)) } td.num { (n) } } } }
            }
        }
    }
}

fn actions_table(rows: &[BulkRow]) -> Markup {
    html! {
        @if rows.is_empty() { p.empty { "None yet." } } @else {
            div.scroll { table.bulk {
                thead { tr { th { "Id" } th { "Action" } th { "Status" } th.num { "Done" } th { "By" } th { "Started" } } }
                tbody {
                    @for row in rows {
                        tr {
                            td.num { a href={ (PATH) "/bulk/" (row.id) } { (row.id) } }
                            td { (row.action) }
                            td { (badge(&row.status)) }
                            td.num { (row.processed) " / " (row.matched) }
                            td { (row.operator) }
                            td.time { (time(row.created_at)) }
                        }
                    }
                }
            } }
        }
    }
}
