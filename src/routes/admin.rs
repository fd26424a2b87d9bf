//! The operator API under `/admin`: inspect events and deliveries, replay events (or
//! preview a replay), requeue or discard dead letters, reload, read the audit trail —
//! every call behind a configured operator's bearer token (compared in constant time,
//! never logged; wrong ones in a row make the address wait) and that operator's role
//! (`viewer` reads, `operator` also acts, `admin` also reloads). Each handler parses the
//! request, calls one use case of [`crate::operator::UseCases`] and answers; every mutating
//! call is idempotent: it needs an `Idempotency-Key`, claimed in the same transaction as
//! its effect (see [`crate::idempotency`]).

use super::operator_calls::{
    bulk_answer, caller_of, calls, dead_letter_answer, forbidden, replay_answer, to_json,
};
use super::webhooks::read_body;
use super::{Problem, Reason};
use crate::config::Settings;
use crate::idempotency::{Answer, REPLAYED_HEADER};
use crate::operator::actions::{self, DeliveryFilter, EventFilter};
use crate::operator::as_documented;
use crate::operator::{
    json_answer, roles, Answered, AuditFilter, Bulk, BulkRequest, BulkRow, Caller,
    ClearHookSecretRequest, DeadLetterAction, DeadLetterRequest, DeadLetters, EvaluateRequest,
    HookSecretCleared, IdempotencyKey, KeyedRequest, OperatorError, ReconcileAsked, ReconcileCall,
    Replay, ReplayRequest, Role,
};
use crate::reload::AUDIT_KEY;
use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;

/// The operator whose bearer token the request carries. A request without one is `401`
/// (it guesses nothing). From an address that sent wrong tokens in a row (to the API or
/// the console's sign-in: one limiter), no token is looked at until its wait is over:
/// `429` with `Retry-After`.
fn authorize(
    request: &HttpRequest,
    state: &AppState,
    settings: &Settings,
) -> Result<Caller, Problem> {
    if !settings.operator.any() {
        return Err(Problem::new(
            Reason::Unauthorized,
            "the operator API is disabled: configure operator.token or [[operators]]",
        ));
    }
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
    let client = request.peer_addr().map(|peer| peer.ip());
    if let Some(left) = state.sign_in.wait_left(client, state.clock.now()) {
        let secs = super::seconds_to_wait(left);
        refused_token("waiting", client);
        return Err(Problem::new(
            Reason::TooManyAttempts,
            format!("too many wrong operator tokens from this address: try again in {secs} s"),
        )
        .retry_after(secs));
    }
    let Some(account) = roles::find(&settings.operator.accounts, given.trim()) else {
        state
            .sign_in
            .failed(client, settings.operator.lockout_after, state.clock.now());
        refused_token("wrong_token", client);
        return Err(Problem::new(
            Reason::Unauthorized,
            "the operator token is wrong",
        ));
    };
    Ok(caller_of(account, "api", request))
}

/// Counts and logs a refused bearer token: the address, never the value.
fn refused_token(reason: &'static str, client: Option<std::net::IpAddr>) {
    metrics::counter!("inlet_operator_auth_refused_total", "surface" => "api", "reason" => reason)
        .increment(1);
    let client = client.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
    tracing::warn!(reason, %client, "operator API: bearer token refused");
}

/// An authenticated operator: extracting it refuses (401, or 429 while the address
/// waits) a request without a configured operator's bearer token, before anything else
/// about the request is looked at. It carries the request's one settings snapshot, the
/// one the token was checked against.
pub struct Authorized(Caller, Arc<Settings>);

impl FromRequest for Authorized {
    type Error = Problem;
    type Future = std::future::Ready<Result<Self, Problem>>;

    fn from_request(request: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let authorized = match request.app_data::<web::Data<AppState>>() {
            Some(state) => {
                let settings = state.settings.current();
                authorize(request, state, &settings).map(|caller| Authorized(caller, settings))
            }
            None => Err(Problem::internal("the application state is missing")),
        };
        std::future::ready(authorized)
    }
}

impl Authorized {
    /// The caller, when its role may do `action`; else `403`, and the refusal is written
    /// to the audit trail (the request's body is never read).
    async fn permit(
        self,
        state: &AppState,
        request: &HttpRequest,
        (action, needed): (&'static str, Role),
    ) -> Result<(Caller, Arc<Settings>), Problem> {
        let Authorized(caller, settings) = self;
        if caller.may(needed) {
            return Ok((caller, settings));
        }
        let parameters = json!({ "path": request.path(), "query": request.query_string() });
        forbidden(state, &settings, &caller, action, &parameters, needed).await
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

/// A request body that must be a JSON object of `T`'s fields (serde would read a struct
/// from an array of them too, which the document does not allow).
fn body_of<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, Problem> {
    let fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| invalid(format!("invalid {what}: {e}")))?;
    serde_json::from_value(Value::Object(fields))
        .map_err(|e| invalid(format!("invalid {what}: {e}")))
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

/// A listing's query: `name`'s own filters, then the time range and the page that every
/// listing of rows in time takes (unknown parameters refused).
macro_rules! listing_query {
    ($name:ident { $($filters:tt)* }) => {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name {
            $($filters)*
            #[serde(default, deserialize_with = "actions::time_bound")]
            since: Option<DateTime<Utc>>,
            #[serde(default, deserialize_with = "actions::time_bound")]
            until: Option<DateTime<Utc>>,
            #[serde(default, deserialize_with = "as_documented::cursor")]
            cursor: Option<i64>,
            limit: Option<i64>,
        }
    };
}

listing_query!(EventsQuery {
    source: Option<String>,
    #[serde(rename = "type")]
    event_type: Option<String>,
    status: Option<String>,
});

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
    let answer = serde_json::to_value(&event)
        .map_err(|e| Problem::from(OperatorError::Internal(e.to_string())))?;
    Ok(json_response(StatusCode::OK, &answer))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    status: Option<String>,
    source: Option<String>,
    destination: Option<String>,
    #[serde(default, deserialize_with = "as_documented::cursor")]
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

/// `GET /admin/hook-secrets`: each source whose secret a handshake establishes, and
/// when it was established (`null`: none yet, or cleared) — never the secret.
pub async fn hook_secrets(
    Authorized(_, settings): Authorized,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let held = calls(&state, &settings).hook_secrets().await?;
    let mut rows: Vec<Value> = settings
        .sources
        .iter()
        .filter(|source| source.provider.secret_by_handshake().is_some())
        .map(|source| {
            let name = source.name.as_str();
            let at = held
                .iter()
                .find(|h| h.source == name)
                .map(|h| h.established_at);
            json!({
                "source": name,
                "configured_secrets": source.secrets.len(),
                "established_at": at,
            })
        })
        .collect();
    // A secret kept for a source no longer configured (it can still be cleared).
    for view in held.iter().filter(|h| settings.source(&h.source).is_none()) {
        rows.push(json!({
            "source": view.source,
            "configured_secrets": Value::Null,
            "established_at": view.established_at,
        }));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({ "hook_secrets": rows }),
    ))
}

/// A clear's answer: what it did.
pub fn hook_secret_answer(
    cleared: &HookSecretCleared,
    _: &Settings,
) -> Result<Answer, OperatorError> {
    Ok(json_answer(200, to_json(&json!(cleared))?))
}

/// `POST /admin/hook-secrets/clear` (the `operator` role): forgets the secret a source's
/// handshake stored, so that the source's next handshake (a new webhook's) is taken; until
/// then its requests are refused `401`. Once per Idempotency-Key, audited.
pub async fn clear_hook_secret(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let needs = ("clear_hook_secret", Role::Operator);
    let (caller, settings) = operator.permit(&state, &request, needs).await?;
    let key = IdempotencyKey::required(idempotency_key(&request)?)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: ClearHookSecretRequest = body_of(&body, "request")?;
    let takes_handshake = settings
        .source(&parsed.source)
        .is_none_or(|source| source.provider.secret_by_handshake().is_some());
    if !takes_handshake {
        return Err(invalid(format!(
            "source {} does not take its secret from a handshake: its secrets are configured",
            parsed.source
        )));
    }
    let keyed = KeyedRequest {
        caller,
        key,
        request: &body,
    };
    let called = calls(&state, &settings)
        .clear_hook_secret(keyed, parsed.source, hook_secret_answer)
        .await?;
    Ok(called_response(called))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileRunsQuery {
    source: String,
    limit: Option<i64>,
}

/// `GET /admin/reconcile/runs?source=NAME`: a source's reconciliation runs, newest first.
pub async fn reconcile_runs(
    Authorized(_, settings): Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let q: ReconcileRunsQuery = query(&request)?;
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(invalid("limit is 1 to 100"));
    }
    let runs = calls(&state, &settings)
        .reconcile_runs(q.source, limit)
        .await?;
    Ok(json_response(StatusCode::OK, &json!({ "runs": runs })))
}

/// A run asked for: 202, the run `requested`.
pub fn reconcile_answer(asked: &ReconcileAsked, _: &Settings) -> Result<Answer, OperatorError> {
    Ok(json_answer(202, to_json(&json!(asked))?))
}

/// `POST /admin/reconcile` (the `operator` role, as a replay): asks for a run of a source
/// now; whichever instance's schedule takes it makes it. Once per Idempotency-Key, audited.
pub async fn reconcile(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let needs = ("reconcile", Role::Operator);
    let (caller, settings) = operator.permit(&state, &request, needs).await?;
    let key = IdempotencyKey::required(idempotency_key(&request)?)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let call: ReconcileCall = body_of(&body, "request")?;
    let reconciliation = (settings.source(&call.source))
        .and_then(|source| source.reconcile.clone())
        .ok_or_else(|| {
            Problem::new(
                Reason::NotFound,
                format!(
                    "no source {} is reconciled: none with [sources.reconcile]",
                    call.source
                ),
            )
        })?;
    let since = (call.since.as_deref())
        .map(crate::duration::HumanDuration::parse)
        .transpose()
        .map_err(|m| invalid(format!("since: {m}")))?
        .map(|d| d.0);
    let keyed = KeyedRequest {
        caller,
        key,
        request: &body,
    };
    let called = calls(&state, &settings)
        .ask_reconcile(keyed, (call, since), reconciliation, reconcile_answer)
        .await?;
    state.reconciler.requested.notify_one();
    Ok(called_response(called))
}

/// `POST /admin/evaluate` (the `operator` role: expressions of the caller's own run on the
/// server): a destination's filter and transform (or expressions given in the body) run
/// against a stored event. Changes nothing; one at a time per operator.
pub async fn evaluate(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let needs = ("evaluate", Role::Operator);
    let (caller, settings) = operator.permit(&state, &request, needs).await?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: EvaluateRequest = body_of(&body, "evaluate request")?;
    let evaluation = calls(&state, &settings).evaluate(&caller, parsed).await?;
    let answer = serde_json::to_value(&evaluation)
        .map_err(|e| Problem::from(OperatorError::Internal(e.to_string())))?;
    Ok(json_response(StatusCode::OK, &answer))
}

/// `GET /admin/retention`: the retention check's numbers.
pub async fn retention(Authorized(_, settings): Authorized) -> Result<HttpResponse, Problem> {
    let retention = &settings.retention;
    let check = &retention.check;
    let horizons: Vec<Value> = check
        .horizons
        .iter()
        .map(|h| json!({ "name": h.name, "value": h.value.to_string(), "origin": h.origin }))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "events": check.events.to_string(),
            "horizons": horizons,
            "effective_horizon": check.effective_horizon().map(|h| h.value.to_string()),
            "operator_keys": check.operator_keys.to_string(),
            "dead_letters": retention.dead_letters.to_string(),
            "audit": retention.audit_trail.to_string(),
            "passes": check.passes(),
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
fn called_response<T>(called: Answered<T>) -> HttpResponse {
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

/// `POST /admin/replay`; with `"dry_run": true` a preview that changes nothing (and so
/// needs no Idempotency-Key, and a viewer may ask for it); else the `operator` role.
pub async fn replay(
    Authorized(caller, settings): Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let key = idempotency_key(&request)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: ReplayRequest = body_of(&body, "replay request")?;
    if !parsed.dry_run && !caller.may(Role::Operator) {
        let parameters = serde_json::from_slice(&body).unwrap_or(Value::Null);
        return forbidden(
            &state,
            &settings,
            &caller,
            "replay",
            &parameters,
            Role::Operator,
        )
        .await;
    }
    let replay = Replay::parse(parsed, settings.operator.max_replay)?;
    let calls = calls(&state, &settings);
    if replay.dry_run {
        let report = calls.preview_replay(replay).await?;
        let answer = replay_answer(&report, &settings)?;
        return Ok(called_response(Answered::<()> {
            answer,
            replayed: false,
            result: None,
        }));
    }
    let keyed = KeyedRequest {
        caller,
        key: IdempotencyKey::required(key)?,
        request: &body,
    };
    let called = calls.replay(keyed, replay, replay_answer).await?;
    Ok(called_response(called))
}

/// The API's requeue and discard (the `operator` role): the role and the key are checked
/// before the body is read.
async fn on_dead_letters(
    operator: Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    action: DeadLetterAction,
) -> Result<HttpResponse, Problem> {
    let needs = (action.name(), Role::Operator);
    let (caller, settings) = operator.permit(&state, &request, needs).await?;
    let key = IdempotencyKey::required(idempotency_key(&request)?)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let parsed: DeadLetterRequest = body_of(&body, "request")?;
    let dead = DeadLetters::parse(action, parsed, settings.operator.max_replay)?;
    let keyed = KeyedRequest {
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

/// The bulk request in `body`, checked; a viewer may only preview it (`dry_run`).
async fn bulk_request(
    (caller, settings): (&Caller, &Arc<Settings>),
    body: &[u8],
    state: &AppState,
) -> Result<Bulk, Problem> {
    let parsed: BulkRequest = body_of(body, "bulk request")?;
    if !parsed.dry_run && !caller.may(Role::Operator) {
        let parameters = serde_json::from_slice(body).unwrap_or(Value::Null);
        let action = parsed.audit_name();
        return forbidden(state, settings, caller, action, &parameters, Role::Operator).await;
    }
    Ok(Bulk::parse(parsed)?)
}

/// `POST /admin/bulk`: replay, requeue or discard everything a filter names, in batches.
/// With `"dry_run": true` a preview (counts per destination, a sample) that changes
/// nothing; else the `operator` role and an Idempotency-Key, and `202` with the action,
/// which every instance's runner then works through (`GET /admin/bulk/{id}`).
pub async fn bulk(
    Authorized(caller, settings): Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let key = idempotency_key(&request)?;
    let body = read_body(&request, payload, &settings.server).await?;
    let bulk = bulk_request((&caller, &settings), &body, &state).await?;
    let calls = calls(&state, &settings);
    if bulk.dry_run {
        let preview = calls.preview_bulk(bulk).await?;
        return Ok(HttpResponse::Ok().json(preview));
    }
    let keyed = KeyedRequest {
        caller,
        key: IdempotencyKey::required(key)?,
        request: &body,
    };
    let called = calls.start_bulk(keyed, bulk, bulk_answer).await?;
    Ok(called_response(called))
}

/// `GET /admin/bulk`: the newest bulk actions first (at most 100).
pub async fn bulk_actions(
    Authorized(_, settings): Authorized,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let rows = calls(&state, &settings).bulk_actions(100).await?;
    let rows: Vec<Value> = rows.iter().map(BulkRow::to_json).collect();
    Ok(json_response(StatusCode::OK, &json!({ "actions": rows })))
}

/// `GET /admin/bulk/{id}`: one bulk action and how far it got.
pub async fn bulk_action(
    Authorized(_, settings): Authorized,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let id = path
        .parse::<i64>()
        .map_err(|_| Problem::new(Reason::NotFound, "a bulk action's id is a number"))?;
    let row = calls(&state, &settings).bulk_action(id).await?;
    Ok(json_response(StatusCode::OK, &row.to_json()))
}

/// `POST /admin/reload` (the `admin` role): reads the configuration file again. 200 with
/// what changed (names only); 422 naming the key when the file is refused, and then
/// nothing changed. Recorded in the audit trail: an applied reload's row is written
/// before the new settings are put in force, and a reload whose row cannot be written is
/// not applied (503, as for any database failure). No Idempotency-Key: a reload applies the file as it is now, so repeating
/// one converges (the second finds nothing to change) and a stored answer would be stale.
pub async fn reload(
    operator: Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let (caller, settings) = operator
        .permit(&state, &request, ("reload", Role::Admin))
        .await?;
    let recorder = calls(&state, &settings).reload_recorder(caller);
    match state.reloader.reload_recorded("api", recorder).await {
        Ok(changes) => Ok(json_response(
            StatusCode::OK,
            &json!({ "result": "applied", "changes": changes }),
        )),
        // The database's failure, not the file's: retry later; nothing was applied.
        Err(refused) if refused.key == AUDIT_KEY => Err(Problem::unavailable(format!(
            "the reload was not applied: {}",
            refused.message
        ))),
        Err(refused) => Ok(HttpResponse::build(StatusCode::UNPROCESSABLE_ENTITY)
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
            )),
    }
}

listing_query!(AuditQuery {
    operator: Option<String>,
    action: Option<String>,
    outcome: Option<String>,
});

/// `GET /admin/audit`: the audit trail, newest first, `cursor` = the last page's
/// `next_cursor`.
pub async fn audit(
    Authorized(_, settings): Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let q: AuditQuery = query(&request)?;
    let filter = AuditFilter {
        operator: q.operator,
        action: q.action,
        outcome: q.outcome,
        since: q.since,
        until: q.until,
    };
    let rows = calls(&state, &settings)
        .audit_trail(filter, q.cursor, q.limit)
        .await?;
    Ok(listing("audit", rows))
}
