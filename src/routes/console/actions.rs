//! The console's actions: replay (a preview first, then a confirmation) and requeue or
//! discard dead letters. Each builds the same JSON request the operator API takes and
//! runs it through the API's code path under the session's caller, with the
//! Idempotency-Key the form was rendered with: a double click or a browser re-submit
//! does the action once and shows the stored result.

use super::error::ConsoleError;
use super::forms::{field, form_fields};
use super::session::check_csrf;
use super::session::{Session, PATH};
use super::view::{self, badge, csrf_field, event_link, layout, page_response};
use crate::routes::admin::{self, CallAnswer, DeadLetterAction};
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use maud::{html, Markup};
use serde_json::{json, Value};

/// `POST /console/replay/preview`: what replaying the event would do, and a form to
/// confirm it.
pub async fn replay_preview(
    session: Session,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let (source, event_id) = event_of(&fields)?;
    let answer = call_replay(&state, None, source, event_id).await?;
    let preview = answer_json(&answer)?;
    let key = view::form_key()?;
    let body = html! {
        p { "Replaying " (event_link(source, event_id)) " would do this; nothing has changed yet." }
        (replay_results(&preview))
        form.card method="post" action={ (PATH) "/replay" } {
            (csrf_field(&session))
            input type="hidden" name="idempotency_key" value=(key);
            input type="hidden" name="source" value=(source);
            input type="hidden" name="event_id" value=(event_id);
            button type="submit" { "Confirm replay" }
            " "
            a href=(view::event_href(source, event_id)) { "Cancel" }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Replay preview", body),
    ))
}

/// `POST /console/replay`: the confirmed replay, once per form.
pub async fn replay(
    session: Session,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = checked_form(&session, &body)?;
    let (source, event_id) = event_of(&fields)?;
    let key = form_key_of(&fields)?;
    let answer = call_replay(&state, Some(key), source, event_id).await?;
    let result = answer_json(&answer)?;
    let body = html! {
        (resubmitted(&answer))
        (replay_results(&result))
        p { a href=(view::event_href(source, event_id)) { "Back to the event" } }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/events", "Replay", body),
    ))
}

/// Replays one event through the API's code path: a preview without a key, the replay
/// itself under the form's key.
async fn call_replay(
    state: &AppState,
    key: Option<String>,
    source: &str,
    event_id: &str,
) -> Result<CallAnswer, ConsoleError> {
    let request = json!({
        "events": [{ "source": source, "event_id": event_id }],
        "dry_run": key.is_none(),
    });
    let settings = state.settings.current();
    let caller = Session::caller(&settings)?;
    Ok(admin::replay_call(state, &settings, caller, key, &encode(&request)?).await?)
}

fn encode(request: &Value) -> Result<Vec<u8>, ConsoleError> {
    serde_json::to_vec(request)
        .map_err(|e| ConsoleError::Internal(format!("cannot encode the request: {e}")))
}

/// A posted form's fields, once its CSRF token is checked.
fn checked_form(session: &Session, body: &[u8]) -> Result<Vec<(String, String)>, ConsoleError> {
    let fields = form_fields(body);
    check_csrf(session, &fields)?;
    Ok(fields)
}

/// `POST /console/deliveries`: requeue or discard the selected dead letters.
pub async fn dead_letters(
    session: Session,
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
    let request = encode(&json!({ "ids": ids }))?;
    let settings = state.settings.current();
    let caller = Session::caller(&settings)?;
    let answer =
        admin::dead_letter_call(&state, &settings, caller, Some(key), &request, action).await?;
    let result = answer_json(&answer)?;
    let title = match action {
        DeadLetterAction::Requeue => "Requeued",
        DeadLetterAction::Discard => "Discarded",
    };
    let body = html! {
        (resubmitted(&answer))
        table {
            thead { tr { th { "Delivery" } th { "Result" } } }
            tbody {
                @for row in result["results"].as_array().into_iter().flatten() {
                    tr { td.num { (row["id"]) } td { (badge(row["result"].as_str().unwrap_or_default())) } }
                }
            }
        }
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

/// The Idempotency-Key the form was rendered with.
fn form_key_of(fields: &[(String, String)]) -> Result<String, ConsoleError> {
    field(fields, "idempotency_key")
        .map(str::to_owned)
        .ok_or_else(|| ConsoleError::Invalid("the form carries no idempotency_key".to_owned()))
}

/// The answer's JSON; a refusal (4xx) becomes the page's error.
fn answer_json(answer: &CallAnswer) -> Result<Value, ConsoleError> {
    let value: Value = serde_json::from_slice(&answer.answer.body).unwrap_or(Value::Null);
    if answer.answer.status >= 400 {
        let detail = value["detail"]
            .as_str()
            .unwrap_or("the operator API refused the request");
        return Err(ConsoleError::Refused(
            answer.answer.status,
            detail.to_owned(),
        ));
    }
    Ok(value)
}

/// Says so when the answer is the stored one of an earlier submission of this form.
fn resubmitted(answer: &CallAnswer) -> Markup {
    html! {
        @if answer.replayed {
            p.notice.calm role="status" { "This form was already submitted: nothing was done again. The result of the first submission:" }
        } @else {
            p.notice.good role="status" { "Done." }
        }
    }
}

/// A replay's (or its preview's) results: per event, and deliveries per destination.
fn replay_results(answer: &Value) -> Markup {
    html! {
        table.results {
            thead { tr { th { "Event" } th { "Result" } th { "Deliveries" } th { "Destinations" } } }
            tbody {
                @for row in answer["results"].as_array().into_iter().flatten() {
                    tr {
                        td.id { (event_link(row["source"].as_str().unwrap_or_default(), row["event_id"].as_str().unwrap_or_default())) }
                        td {
                            (badge(row["result"].as_str().unwrap_or_default()))
                            @if let Some(first) = row["first_event_id"].as_str() {
                                " — its fact is delivered by replaying " (event_link(row["source"].as_str().unwrap_or_default(), first))
                            }
                        }
                        td.num { (row["deliveries"]) }
                        td { @for d in row["destinations"].as_array().into_iter().flatten() { (d.as_str().unwrap_or_default()) " " } }
                    }
                }
            }
        }
    }
}
