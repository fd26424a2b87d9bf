//! The operator API under `/admin`: inspect events and deliveries, replay events (or
//! preview a replay), requeue or discard dead letters — every call behind the operator's
//! bearer token (compared in constant time, never logged). Each handler parses the
//! request, calls one use case of [`crate::operator::Calls`] and answers; every mutating
//! call is idempotent: it needs an `Idempotency-Key`, claimed in the same transaction as
//! its effect (see [`crate::idempotency`]).

use super::webhooks::read_body;
use super::{Problem, Reason};
use crate::config::Settings;
use crate::idempotency::{Answer, REPLAYED_HEADER};
use crate::operator::actions::{DeliveryFilter, EventFilter};
use crate::operator::{
    json_answer, Called, Caller, Calls, DeadLetterAction, DeadLetterReport, DeadLetterRequest,
    DeadLetters, IdempotencyKey, Keyed, OperatorError, Replay, ReplayReport, ReplayRequest,
};
use crate::secret::secrets_equal;
use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;

fn authorize(request: &HttpRequest, settings: &Settings) -> Result<Caller, Problem> {
    let Some(token) = &settings.operator.token else {
        return Err(Problem::new(
            Reason::Unauthorized,
            "the operator API is disabled: configure operator.token",
        ));
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            Problem::new(
                Reason::Unauthorized,
                "send Authorization: Bearer <operator token>",
            )
        })?;
    if !secrets_equal(given.trim().as_bytes(), token.expose().as_bytes()) {
        return Err(Problem::new(
            Reason::Unauthorized,
            "the operator token is wrong",
        ));
    }
    Ok(Caller::of_token(token))
}

/// An authenticated operator: extracting it refuses (401) a request without the right
/// bearer token, before anything else about the request is looked at. It carries the
/// request's one settings snapshot, the one the token was checked against.
pub struct Authorized(Caller, Arc<Settings>);

impl FromRequest for Authorized {
    type Error = Problem;
    type Future = std::future::Ready<Result<Self, Problem>>;

    fn from_request(request: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let authorized = match request.app_data::<web::Data<AppState>>() {
            Some(state) => {
                let settings = state.settings.current();
                authorize(request, &settings).map(|caller| Authorized(caller, settings))
            }
            None => Err(Problem::internal("the application state is missing")),
        };
        std::future::ready(authorized)
    }
}

/// The use cases under the request's settings snapshot.
pub fn calls(state: &AppState, settings: &Arc<Settings>) -> Calls<Settings> {
    Calls {
        pool: state.pool.clone(),
        settings: settings.clone(),
        now: state.clock.now(),
        waker: state.dispatcher_waker.clone(),
    }
}

fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(Reason::InvalidRequest, detail)
}

fn query<T: serde::de::DeserializeOwned>(request: &HttpRequest) -> Result<T, Problem> {
    web::Query::<T>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| invalid(format!("invalid query: {e}")))
}

fn json_response(status: StatusCode, body: &Value) -> HttpResponse {
    HttpResponse::build(status).json(body)
}

/// `{name: rows, "next_cursor": …}`.
fn listing<T: Serialize>(name: &str, listing: crate::operator::Listing<T>) -> HttpResponse {
    json_response(
        StatusCode::OK,
        &json!({ name: listing.rows, "next_cursor": listing.next_cursor }),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    status: Option<String>,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    cursor: Option<i64>,
    limit: Option<i64>,
}

/// `GET /admin/events`: in id order, `limit` per page, `cursor` = the last page's
/// `next_cursor`.
pub async fn list_events(
    Authorized(_, settings): Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let q: EventsQuery = query(&request)?;
    let filter = EventFilter {
        source: q.source,
        event_type: q.event_type,
        status: q.status,
        since: q.since,
        until: q.until,
    };
    let events = calls(&state, &settings)
        .list_events(filter, q.cursor, q.limit)
        .await?;
    Ok(listing("events", events))
}

/// `GET /admin/events/{source}/{event_id}`.
pub async fn show_event(
    Authorized(_, settings): Authorized,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let (source, event_id) = path.into_inner();
    let event = calls(&state, &settings)
        .show_event(&source, &event_id)
        .await?;
    Ok(json_response(StatusCode::OK, &event))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    status: Option<String>,
    source: Option<String>,
    destination: Option<String>,
    cursor: Option<i64>,
    limit: Option<i64>,
}

/// `GET /admin/deliveries` (e.g. `?status=dead` for the dead letters).
pub async fn list_deliveries(
    Authorized(_, settings): Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let q: DeliveriesQuery = query(&request)?;
    let filter = DeliveryFilter {
        status: q.status,
        source: q.source,
        destination: q.destination,
    };
    let deliveries = calls(&state, &settings)
        .list_deliveries(filter, q.cursor, q.limit)
        .await?;
    Ok(listing("deliveries", deliveries))
}

/// `GET /admin/destinations`: every destination's circuit breaker and limits, as every
/// instance shares them.
pub async fn destinations(
    Authorized(_, settings): Authorized,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let views = calls(&state, &settings).destinations().await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "destinations": views }),
    ))
}

/// `GET /admin/retention`: the audit's numbers.
pub async fn retention(Authorized(_, settings): Authorized) -> Result<HttpResponse, Problem> {
    let retention = &settings.retention;
    let audit = &retention.audit;
    let horizons: Vec<Value> = audit
        .horizons
        .iter()
        .map(|h| json!({ "name": h.name, "value": h.value.to_string(), "origin": h.origin }))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "events": audit.events.to_string(),
            "horizons": horizons,
            "effective_horizon": audit.effective_horizon().map(|h| h.value.to_string()),
            "operator_keys": audit.operator_keys.to_string(),
            "dead_letters": retention.dead_letters.to_string(),
            "passes": audit.passes(),
            "sweep_interval": crate::duration::HumanDuration(retention.sweep_interval).to_string(),
            "sweep_batch": retention.sweep_batch,
        }),
    ))
}

/// The `Idempotency-Key` header of a mutating call, when sent, checked.
fn idempotency_key(request: &HttpRequest) -> Result<Option<IdempotencyKey>, Problem> {
    let Some(key) = request.headers().get("Idempotency-Key") else {
        return Ok(None);
    };
    Ok(Some(IdempotencyKey::from_header(key.as_bytes())?))
}

/// A stored answer as the API sends it: byte for byte, marked when it is a copy's.
fn called_response<T>(called: Called<T>) -> HttpResponse {
    let answer = called.answer;
    let mut response =
        HttpResponse::build(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK));
    response.insert_header((
        header::CONTENT_TYPE,
        HeaderValue::from_str(&answer.content_type)
            .unwrap_or(HeaderValue::from_static("application/json")),
    ));
    if called.replayed {
        response.insert_header((REPLAYED_HEADER, "true"));
    }
    response.body(answer.body)
}

fn to_json(value: &Value) -> Result<Vec<u8>, OperatorError> {
    serde_json::to_vec(value)
        .map_err(|e| OperatorError::Internal(format!("cannot encode the answer: {e}")))
}

/// A replay's (or its preview's) answer, as stored and sent: `410` when it named one
/// event that was swept, else the results with their summary and whether a filter was cut
/// at its limit. The console's replays are stored the same way.
pub fn replay_answer(report: &ReplayReport, settings: &Settings) -> Result<Answer, OperatorError> {
    if let Some(only) = report.only_expired() {
        let window = settings.retention.events;
        let problem = Problem::new(
            Reason::Expired,
            format!(
                "event {}/{} was swept after the retention window ({window}); its fact \
                 remains, so it can no longer be replayed",
                only.source, only.event_id
            ),
        );
        return Ok(json_answer(410, problem.body()));
    }
    let body = to_json(&json!({
        "dry_run": report.dry_run,
        "truncated": report.truncated,
        "summary": report.summary,
        "results": report.results,
    }))?;
    Ok(json_answer(200, body))
}

/// A requeue's or discard's answer: each dead letter's result.
pub fn dead_letter_answer(
    report: &DeadLetterReport,
    _: &Settings,
) -> Result<Answer, OperatorError> {
    Ok(json_answer(
        200,
        to_json(&json!({ "results": report.results }))?,
    ))
}

/// `POST /admin/replay`; with `"dry_run": true` a preview that changes nothing (and so
/// needs no Idempotency-Key).
pub async fn replay(
    Authorized(caller, settings): Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let key = idempotency_key(&request)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: ReplayRequest = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("invalid replay request: {e}")))?;
    let replay = Replay::parse(parsed, settings.operator.max_replay)?;
    let calls = calls(&state, &settings);
    if replay.dry_run {
        let report = calls.preview_replay(replay).await?;
        let answer = replay_answer(&report, &settings)?;
        return Ok(called_response(Called::<()> {
            answer,
            replayed: false,
            result: None,
        }));
    }
    let keyed = Keyed {
        caller,
        key: IdempotencyKey::required(key)?,
        request: &body,
    };
    let called = calls.replay(keyed, replay, replay_answer).await?;
    Ok(called_response(called))
}

/// The API's requeue and discard: the key is checked before the body is read.
async fn on_dead_letters(
    Authorized(caller, settings): Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    action: DeadLetterAction,
) -> Result<HttpResponse, Problem> {
    let key = IdempotencyKey::required(idempotency_key(&request)?)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: DeadLetterRequest =
        serde_json::from_slice(&body).map_err(|e| invalid(format!("invalid request: {e}")))?;
    let dead = DeadLetters::parse(action, parsed, settings.operator.max_replay)?;
    let keyed = Keyed {
        caller,
        key,
        request: &body,
    };
    let called = calls(&state, &settings)
        .dead_letters(keyed, dead, dead_letter_answer)
        .await?;
    Ok(called_response(called))
}

/// `POST /admin/deliveries/requeue`: dead letters back to pending.
pub async fn requeue(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    on_dead_letters(operator, request, payload, state, DeadLetterAction::Requeue).await
}

/// `POST /admin/deliveries/discard`: dead letters set aside, never sent.
pub async fn discard(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    on_dead_letters(operator, request, payload, state, DeadLetterAction::Discard).await
}

/// `POST /admin/reload`: reads the configuration file again. 200 with what changed (names
/// only); 422 naming the key when the file is refused, and then nothing changed. No
/// Idempotency-Key: a reload applies the file as it is now, so repeating one converges
/// (the second finds nothing to change) and a stored answer would be stale.
pub async fn reload(_: Authorized, state: web::Data<AppState>) -> HttpResponse {
    match state.reloader.reload("api").await {
        Ok(changes) => json_response(
            StatusCode::OK,
            &json!({ "result": "applied", "changes": changes }),
        ),
        Err(refused) => HttpResponse::build(StatusCode::UNPROCESSABLE_ENTITY)
            .insert_header((
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            ))
            .body(
                json!({
                    "type": "urn:inlet:problem:config_refused",
                    "title": "Configuration reload refused",
                    "status": 422,
                    "reason": "config_refused",
                    "key": refused.key,
                    "detail": refused.to_string(),
                })
                .to_string(),
            ),
    }
}
