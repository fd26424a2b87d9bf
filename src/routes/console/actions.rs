//! The console's actions: replay (a preview first, then a confirmation) and requeue or
//! discard dead letters. Each fills in the operator use case's typed request and calls it
//! as the API does, under the session's caller, with the Idempotency-Key the form was
//! rendered with and the API's encoding of the answer: a double click or a browser
//! re-submit does the action once and shows the stored result.

use super::error::ConsoleError;
use super::forms::{field, form_fields};
use super::session::check_csrf;
use super::session::{Session, PATH};
use super::view::{self, badge, csrf_field, event_link, layout, page_response};
use crate::idempotency::Answer;
use crate::operator::actions::{DeadLetterResult, RedeliveryResult};
use crate::operator::{
    Answered, Caller, DeadLetterAction, DeadLetterRequest, DeadLetters, EventRef, IdempotencyKey,
    KeyedRequest, Replay, ReplayReport, ReplayRequest, Role,
};
use crate::routes::operator_calls::{calls, dead_letter_answer, forbidden, replay_answer};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use serde::Serialize;

/// `POST /console/replay/preview`: what replaying the event would do, and a form to
/// confirm it.
pub async fn replay_preview(
    session: Session,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let (source, event_id) = event_of(&fields)?;
    let preview = preview_replay(&state, source, event_id).await?;
    let key = view::form_key()?;
    let body = html! {
        p { "Replaying " (event_link(source, event_id)) " would do this; nothing has changed yet." }
        (replay_results(&preview.results))
        @if session.may(Role::Operator) {
            form.card method="post" action={ (PATH) "/replay" } {
                (csrf_field(&session))
                input type="hidden" name="idempotency_key" value=(key);
                input type="hidden" name="source" value=(source);
                input type="hidden" name="event_id" value=(event_id);
                button type="submit" { "Confirm replay" }
                " "
                a href=(view::event_href(source, event_id)) { "Cancel" }
            }
        } @else {
            p { "Replaying needs the operator role; you are signed in as a " (session.role.as_str()) "." }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Replay preview", body),
    ))
}

/// `POST /console/replay`: the confirmed replay, once per form (the `operator` role).
pub async fn replay(
    session: Session,
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let caller = permitted(&session, &state, &request, "replay", &fields).await?;
    let (source, event_id) = event_of(&fields)?;
    let key = form_key_of(&fields)?;
    let called = call_replay(&state, caller, key, source, event_id).await?;
    let report = result_of(&called)?;
    let body = html! {
        (resubmitted(&called))
        (replay_results(&report.results))
        p { a href=(view::event_href(source, event_id)) { "Back to the event" } }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Replay", body),
    ))
}

fn replay_of(source: &str, event_id: &str, dry_run: bool) -> ReplayRequest {
    ReplayRequest {
        events: Some(vec![EventRef {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
        }]),
        dry_run,
        ..ReplayRequest::default()
    }
}

/// What replaying one event would do; a refusal (one swept event: 410) is the page's.
async fn preview_replay(
    state: &AppState,
    source: &str,
    event_id: &str,
) -> Result<ReplayReport, ConsoleError> {
    let settings = state.settings.current();
    let replay = Replay::parse(
        replay_of(source, event_id, true),
        settings.operator.max_replay,
    )?;
    let report = calls(state, &settings).preview_replay(replay).await?;
    refused(&replay_answer(&report, &settings)?)?;
    Ok(report)
}

/// Replays one event under the form's key, as the API would.
async fn call_replay(
    state: &AppState,
    caller: Caller,
    key: IdempotencyKey,
    source: &str,
    event_id: &str,
) -> Result<Answered<ReplayReport>, ConsoleError> {
    let request = replay_of(source, event_id, false);
    let settings = state.settings.current();
    let encoded = encode(&request)?;
    let keyed = KeyedRequest {
        caller,
        key,
        request: &encoded,
    };
    let replay = Replay::parse(request, settings.operator.max_replay)?;
    Ok(calls(state, &settings)
        .replay(keyed, replay, replay_answer)
        .await?)
}

/// The session's caller, when its role may do `action` (the `operator` role); else
/// `403`, written to the audit trail with the form's fields (never its CSRF token).
pub(super) async fn permitted(
    session: &Session,
    state: &web::Data<AppState>,
    request: &HttpRequest,
    action: &'static str,
    fields: &[(String, String)],
) -> Result<Caller, ConsoleError> {
    let settings = state.settings.current();
    let caller = session.caller(&settings, request)?;
    if caller.may(Role::Operator) {
        return Ok(caller);
    }
    let shown: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .filter(|(name, _)| name != "csrf")
        .map(|(name, value)| (name.clone(), value.clone().into()))
        .collect();
    let parameters = serde_json::Value::Object(shown);
    let needed = Role::Operator;
    Ok(forbidden(state, &settings, &caller, action, &parameters, needed).await?)
}

/// The request as the key's fingerprint covers it.
pub(super) fn encode(request: &impl Serialize) -> Result<Vec<u8>, ConsoleError> {
    serde_json::to_vec(request)
        .map_err(|e| ConsoleError::Internal(format!("cannot encode the request: {e}")))
}

/// A posted form's fields, once its CSRF token is checked.
pub(super) fn checked_form(
    session: &Session,
    body: &[u8],
) -> Result<Vec<(String, String)>, ConsoleError> {
    let fields = form_fields(body);
    check_csrf(session, &fields)?;
    Ok(fields)
}

/// `POST /console/deliveries`: requeue or discard the selected dead letters (the
/// `operator` role).
pub async fn dead_letters(
    session: Session,
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let action = match field(&fields, "action") {
        Some("requeue") => DeadLetterAction::Requeue,
        Some("discard") => DeadLetterAction::Discard,
        _ => {
            return Err(ConsoleError::Invalid(
                "choose requeue or discard".to_owned(),
            ))
        }
    };
    let caller = permitted(&session, &state, &request, action.name(), &fields).await?;
    let ids = fields
        .iter()
        .filter(|(name, _)| name == "id")
        .map(|(_, id)| {
            id.parse::<i64>()
                .map_err(|_| ConsoleError::Invalid(format!("'{id}' is not a delivery id")))
        })
        .collect::<Result<Vec<i64>, _>>()?;
    if ids.is_empty() {
        return Err(ConsoleError::Invalid(
            "Select at least one dead letter.".to_owned(),
        ));
    }
    let key = form_key_of(&fields)?;
    let called = call_dead_letters(&state, caller, key, action, ids).await?;
    let report = result_of(&called)?;
    let title = match action {
        DeadLetterAction::Requeue => "Requeued",
        DeadLetterAction::Discard => "Discarded",
    };
    let body = html! {
        (resubmitted(&called))
        (dead_letter_results(&report.results))
        p { a href={ (PATH) "/deliveries" } { "Back to the deliveries" } }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/deliveries", title, body),
    ))
}

/// The event a replay form names.
fn event_of(fields: &[(String, String)]) -> Result<(&str, &str), ConsoleError> {
    match (field(fields, "source"), field(fields, "event_id")) {
        (Some(source), Some(event_id)) => Ok((source, event_id)),
        _ => Err(ConsoleError::Invalid(
            "the form names no event (source and event_id)".to_owned(),
        )),
    }
}

/// Requeues or discards the dead letters `ids` under the form's key, as the API would.
async fn call_dead_letters(
    state: &AppState,
    caller: Caller,
    key: IdempotencyKey,
    action: DeadLetterAction,
    ids: Vec<i64>,
) -> Result<Answered<crate::operator::DeadLetterReport>, ConsoleError> {
    let request = DeadLetterRequest {
        ids: Some(ids),
        ..DeadLetterRequest::default()
    };
    let settings = state.settings.current();
    let encoded = encode(&request)?;
    let keyed = KeyedRequest {
        caller,
        key,
        request: &encoded,
    };
    let dead = DeadLetters::parse(action, request, settings.operator.max_replay)?;
    Ok(calls(state, &settings)
        .dead_letters(keyed, dead, dead_letter_answer)
        .await?)
}

/// The Idempotency-Key the form was rendered with.
pub(super) fn form_key_of(fields: &[(String, String)]) -> Result<IdempotencyKey, ConsoleError> {
    let key = field(fields, "idempotency_key")
        .ok_or_else(|| ConsoleError::Invalid("the form carries no idempotency_key".to_owned()))?;
    Ok(IdempotencyKey::parse(key)?)
}

/// A refusal (4xx) stored as the answer becomes the page's error.
fn refused(answer: &Answer) -> Result<(), ConsoleError> {
    if answer.status < 400 {
        return Ok(());
    }
    let value: serde_json::Value =
        serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
    let detail = value["detail"]
        .as_str()
        .unwrap_or("the operator API refused the request");
    Err(ConsoleError::Refused(answer.status, detail.to_owned()))
}

/// The call's result, or its refusal.
pub(super) fn result_of<T>(called: &Answered<T>) -> Result<&T, ConsoleError> {
    refused(&called.answer)?;
    called.result.as_ref().ok_or_else(|| {
        ConsoleError::Internal("the stored answer is not a result this console reads".to_owned())
    })
}

/// Says so when the answer is the stored one of an earlier submission of this form.
pub(super) fn resubmitted<T>(called: &Answered<T>) -> Markup {
    html! {
        @if called.replayed {
            p.notice.calm role="status" { "This form was already submitted: nothing was done again. The result of the first submission:" }
        } @else {
            p.notice.good role="status" { "Done." }
        }
    }
}

/// What a requeue or discard did to each dead letter.
fn dead_letter_results(results: &[DeadLetterResult]) -> Markup {
    html! {
        table {
            thead { tr { th { "Delivery" } th { "Result" } } }
            tbody {
                @for row in results {
                    tr { td.num { (row.id) } td { (badge(&row.result)) } }
                }
            }
        }
    }
}

/// A replay's (or its preview's) results: per event, and deliveries per destination.
fn replay_results(results: &[RedeliveryResult]) -> Markup {
    html! {
        table.results {
            thead { tr { th { "Event" } th { "Result" } th { "Deliveries" } th { "Destinations" } th { "Filters" } } }
            tbody {
                @for row in results {
                    tr {
                        td.id { (event_link(&row.source, &row.event_id)) }
                        td {
                            (badge(&row.result))
                            @if let Some(first) = &row.first_event_id {
                                " — its fact is delivered by replaying " (event_link(&row.source, first))
                            }
                        }
                        td.num { (row.deliveries) }
                        td { @for d in &row.destinations { (d) " " } }
                        td {
                            @for f in &row.filters {
                                (f.destination) " " (badge(&f.decision))
                                @if let Some(error) = &f.error { " " span.error { (error) } }
                                br;
                            }
                        }
                    }
                }
            }
        }
    }
}
