//! Filters and transforms on the event page: what each destination's filter decides for
//! the event now and the body its transform would send, this instance's recent filter
//! errors on it, and a form to try other expressions against it (`POST
//! /console/evaluate`: the `operator` role, since the expressions are the caller's own).

use super::actions::{checked_form, permitted};
use super::error::ConsoleError;
use super::forms::field;
use super::session::{Session, PATH};
use super::view::{badge, csrf_field, event_link, layout, page_response};
use crate::delivery::filters::{recent_filter_errors, FilterError};
use crate::operator::{DestinationEvaluation, EvaluateRequest, Evaluation, ExpressionResult, Role};
use crate::routes::operator_calls::calls;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};

/// What the form was filled with (shown again with its result).
#[derive(Default)]
pub struct Tried<'a> {
    pub destination: &'a str,
    pub filter: &'a str,
    pub transform: &'a str,
}

/// `POST /console/evaluate` (the `operator` role): the expressions of the form run
/// against the event.
pub async fn evaluate(
    session: Session,
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let caller = permitted(&session, &state, &request, "evaluate", &fields).await?;
    let text = |name| field(&fields, name).unwrap_or_default().trim();
    let (source, event_id) = (text("source"), text("event_id"));
    let tried = Tried {
        destination: text("destination"),
        filter: text("filter"),
        transform: text("transform"),
    };
    let given = |t: &str| (!t.is_empty()).then(|| t.to_owned());
    let request = EvaluateRequest {
        source: source.to_owned(),
        event_id: event_id.to_owned(),
        destination: given(tried.destination),
        filter: given(tried.filter),
        transform: given(tried.transform),
    };
    let settings = state.settings.current();
    let evaluation = calls(&state, &settings).evaluate(&caller, request).await?;
    let names: Vec<String> = settings
        .destinations
        .of(source)
        .iter()
        .map(|d| d.name.clone())
        .collect();
    let body = html! {
        p { "Evaluated against " (event_link(source, event_id)) "; nothing was enqueued or changed." }
        (results(&evaluation))
        (try_form(&session, source, event_id, &names, &tried))
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Try a filter", body),
    ))
}

/// The event page's section: each destination's filter and transform on this event, the
/// recent filter errors, and the form.
pub fn routing_section(
    session: &Session,
    evaluation: Option<&Evaluation>,
    source: &str,
    event_id: &str,
    names: &[String],
) -> Markup {
    let errors = recent_filter_errors(Some(source), Some(event_id));
    html! {
        section.card #routing {
            h2 { "Filters and transforms" }
            @match evaluation {
                Some(evaluation) if !evaluation.destinations.is_empty() => (results(evaluation)),
                _ => p { "This source has no destinations." },
            }
            @if !errors.is_empty() {
                h3 { "Filter errors at ingest (this instance)" }
                (errors_table(&errors))
            }
            @if session.may(Role::Operator) {
                (try_form(session, source, event_id, names, &Tried::default()))
            } @else {
                p.hint { "Trying other expressions needs the operator role: they run on the server." }
            }
        }
    }
}

fn results(evaluation: &Evaluation) -> Markup {
    html! {
        table.results #evaluation {
            thead { tr { th { "Destination" } th { "Type routing" } th { "Filter" } th { "Enqueued" } th { "Transform" } } }
            tbody {
                @for row in &evaluation.destinations {
                    (result_row(row))
                }
            }
        }
    }
}

fn result_row(row: &DestinationEvaluation) -> Markup {
    html! {
        tr {
            td { (row.destination.as_deref().unwrap_or("(expressions alone)")) }
            td { (badge(if row.events_match { "matches" } else { "skips" })) }
            td { (outcome(row.filter.as_ref(), "no filter")) }
            td { (badge(if row.enqueued { "enqueue" } else { "skip" })) }
            td { (outcome(row.transform.as_ref(), "no transform: the payload as received")) }
        }
    }
}

fn outcome(outcome: Option<&ExpressionResult>, none: &str) -> Markup {
    let Some(outcome) = outcome else {
        return html! { span.muted { (none) } };
    };
    html! {
        code { (outcome.expression) }
        br;
        @if let Some(decision) = &outcome.decision { (badge(decision)) " " }
        @if let Some(error) = &outcome.error { span.error { (error) } }
        @if let Some(bound) = &outcome.bound { " " span.muted { "(the " (bound) " bound)" } }
        @if let Some(body) = &outcome.body {
            pre.payload { (serde_json::to_string_pretty(body).unwrap_or_default()) }
        }
    }
}

fn errors_table(errors: &[FilterError]) -> Markup {
    html! {
        table.results {
            thead { tr { th { "At" } th { "Destination" } th { "Error" } } }
            tbody {
                @for e in errors {
                    tr { td.time { (super::view::time(e.at.naive_utc())) } td { (e.destination) } td { (e.reason) } }
                }
            }
        }
    }
}

fn try_form(
    session: &Session,
    source: &str,
    event_id: &str,
    names: &[String],
    tried: &Tried<'_>,
) -> Markup {
    html! {
        form.card.try method="post" action={ (PATH) "/evaluate" } {
            h3 { "Try a filter or transform on this event" }
            (csrf_field(session))
            input type="hidden" name="source" value=(source);
            input type="hidden" name="event_id" value=(event_id);
            label { "Destination "
                select name="destination" {
                    option value="" selected[tried.destination.is_empty()] { "(none: the expressions alone)" }
                    @for name in names {
                        option value=(name) selected[tried.destination == name] { (name) }
                    }
                }
            }
            label { "Filter (jq) " textarea name="filter" rows="2" placeholder=".data.object.amount > 100000" { (tried.filter) } }
            label { "Transform (jq) " textarea name="transform" rows="2" placeholder="{id: .id, amount: .data.object.amount}" { (tried.transform) } }
            button type="submit" { "Evaluate" }
        }
    }
}
