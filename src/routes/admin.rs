//! The operator API under `/admin`: inspect events and deliveries, replay events (or
//! preview a replay), requeue or discard dead letters — every call behind the operator's
//! bearer token (compared in constant time, never logged), and every mutating call itself
//! idempotent: it needs an `Idempotency-Key`, claimed in the same transaction as its
//! effect (see [`crate::idempotency`]).

use super::webhooks::read_body;
use crate::config::Settings;
use crate::db::{write_transaction, DbConnection};
use crate::delivery::Destinations;
use crate::idempotency::REPLAYED_HEADER;
use crate::idempotency::{self, Answer, Once, OperatorKey};
use crate::operator::actions::{self, DeliveryFilter, EventFilter};
use crate::routes::{Problem, Reason};
use crate::secret::secrets_equal;
use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Rows per page by default, and at most.
pub const DEFAULT_PAGE: i64 = 100;
pub const MAX_PAGE: i64 = 500;

/// Who is calling: derived from the token, never the token itself. Idempotency-Keys are
/// scoped to it, so the API and the console (signed in with the same token) share them.
pub struct Caller(String);

impl Caller {
    /// The caller the operator token stands for.
    pub fn of_token(token: &crate::secret::Secret) -> Self {
        let digest = Sha256::digest([b"inlet operator ", token.expose().as_bytes()].concat());
        Caller(hex::encode(&digest[..8]))
    }
}

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

fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(Reason::InvalidRequest, detail)
}

fn query<T: serde::de::DeserializeOwned>(request: &HttpRequest) -> Result<T, Problem> {
    web::Query::<T>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| invalid(format!("invalid query: {e}")))
}

/// One page of a listing: rows after `cursor` (an id), `limit` of them.
struct Page {
    cursor: Option<i64>,
    limit: i64,
}

impl Page {
    fn of(cursor: Option<i64>, limit: Option<i64>) -> Result<Self, Problem> {
        match limit.unwrap_or(DEFAULT_PAGE) {
            limit @ 1..=MAX_PAGE => Ok(Self { cursor, limit }),
            _ => Err(invalid(format!("limit is 1 to {MAX_PAGE}"))),
        }
    }

    /// `{name: rows, "next_cursor": …}`: the next cursor is the last id of a full page,
    /// none after a short one. Ids only grow, so paging never shows a row twice.
    async fn answer<T: Serialize + Send + 'static>(
        self,
        state: &AppState,
        name: &'static str,
        id: fn(&T) -> i64,
        fetch: impl FnOnce(&mut DbConnection, Option<i64>, i64) -> diesel::QueryResult<Vec<T>>
            + Send
            + 'static,
    ) -> Result<HttpResponse, Problem> {
        let (cursor, limit) = (self.cursor, self.limit);
        let rows = on_connection(state, move |c| Ok(fetch(c, cursor, limit)?)).await?;
        let next = (rows.len() as i64 == limit)
            .then(|| rows.last().map(|row| id(row).to_string()))
            .flatten();
        Ok(json_response(
            StatusCode::OK,
            &json!({ name: rows, "next_cursor": next }),
        ))
    }
}

/// Runs `work` on a pooled connection off the executor.
async fn on_connection<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&mut DbConnection) -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    crate::db::on_connection(&state.pool, work).await
}

fn json_response(status: StatusCode, body: &Value) -> HttpResponse {
    HttpResponse::build(status).json(body)
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
    _: Authorized,
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
    filter.validate()?;
    let page = Page::of(q.cursor, q.limit)?;
    page.answer(
        &state,
        "events",
        |e: &actions::EventSummary| e.id,
        move |c, cursor, limit| actions::list_events(c, &filter, cursor, limit),
    )
    .await
}

/// `GET /admin/events/{source}/{event_id}`.
pub async fn show_event(
    Authorized(_, settings): Authorized,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let (source, event_id) = path.into_inner();
    actions::check_text("source", Some(&source))?;
    actions::check_text("event_id", Some(&event_id))?;
    let window = settings.retention.events;
    let (s, e) = (source.clone(), event_id.clone());
    match on_connection(&state, move |c| Ok(actions::show_event(c, &s, &e)?)).await? {
        Some(Ok(event)) => Ok(json_response(StatusCode::OK, &event)),
        Some(Err(fact)) => Err(Problem::new(
            Reason::Expired,
            format!(
                "event {source}/{event_id} was swept after the retention window ({window}); \
                 its fact {}:{} remains in the ledger",
                fact["kind"].as_str().unwrap_or_default(),
                fact["key"].as_str().unwrap_or_default()
            ),
        )),
        None => Err(Problem::new(
            Reason::UnknownEvent,
            format!("no event {source}/{event_id} has been received"),
        )),
    }
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
    _: Authorized,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let q: DeliveriesQuery = query(&request)?;
    let filter = DeliveryFilter {
        status: q.status,
        source: q.source,
        destination: q.destination,
    };
    filter.validate()?;
    let page = Page::of(q.cursor, q.limit)?;
    page.answer(
        &state,
        "deliveries",
        |d: &actions::DeliverySummary| d.id,
        move |c, cursor, limit| actions::list_deliveries(c, &filter, cursor, limit),
    )
    .await
}

/// `GET /admin/destinations`: every destination's circuit breaker and limits, as every
/// instance shares them.
pub async fn destinations(
    Authorized(_, settings): Authorized,
    state: web::Data<AppState>,
) -> Result<HttpResponse, Problem> {
    let gated = settings.destinations.gated();
    let now = state.clock.now();
    let views = on_connection(&state, move |c| {
        Ok(crate::delivery::gate_views(c, &gated, now)?)
    })
    .await?;
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

/// The `Idempotency-Key` header of a mutating call, when sent.
fn idempotency_key(request: &HttpRequest) -> Result<Option<String>, Problem> {
    let Some(key) = request.headers().get("Idempotency-Key") else {
        return Ok(None);
    };
    let key = key.to_str().map_err(|_| bad_key())?;
    checked_key(key.to_owned()).map(Some)
}

/// An Idempotency-Key is 1 to 255 printable characters, from the API or a console form.
fn checked_key(key: String) -> Result<String, Problem> {
    let printable = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > 255 || !printable {
        return Err(bad_key());
    }
    Ok(key)
}

fn bad_key() -> Problem {
    invalid("an Idempotency-Key is 1 to 255 printable characters")
}

/// The key a mutating call cannot do without, checked.
fn required(key: Option<String>) -> Result<String, Problem> {
    let key = key.ok_or_else(|| {
        Problem::new(
            Reason::IdempotencyKeyMissing,
            "mutating calls need an Idempotency-Key header",
        )
    })?;
    checked_key(key)
}

/// What an operator call answered, and whether that is the stored answer of an earlier
/// call with the same key.
pub struct CallAnswer {
    pub answer: Answer,
    pub replayed: bool,
}

impl CallAnswer {
    fn ran(status: u16, body: Vec<u8>) -> Self {
        let content_type = idempotency::content_type_of(status).to_owned();
        Self {
            answer: Answer {
                status,
                content_type,
                body,
            },
            replayed: false,
        }
    }

    fn into_response(self) -> HttpResponse {
        let answer = self.answer;
        let mut response =
            HttpResponse::build(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK));
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_str(&answer.content_type)
                .unwrap_or(HeaderValue::from_static("application/json")),
        ));
        if self.replayed {
            response.insert_header((REPLAYED_HEADER, "true"));
        }
        response.body(answer.body)
    }
}

/// Claims the key, runs `execute` and stores its answer in one transaction; or answers a
/// retry with the stored answer, byte for byte. Validation happens before this, so a
/// refused request stores nothing and a corrected retry with the same key works.
/// The fingerprint covers the route (`"POST /admin/replay"`) and the body, so one key
/// cannot be reused for another call.
async fn run_idempotent(
    state: &AppState,
    settings: &Arc<Settings>,
    route: &str,
    caller: Caller,
    key: String,
    body: &[u8],
    execute: impl FnOnce(&mut DbConnection, &Settings, DateTime<Utc>) -> Result<(u16, Vec<u8>), Problem>
        + Send
        + 'static,
) -> Result<CallAnswer, Problem> {
    let fingerprint = hex::encode(Sha256::digest([route.as_bytes(), b"\n", body].concat()));
    let settings = settings.clone();
    let now = state.clock.now();
    let expires_at = now + settings.retention.operator_keys.0;
    let (answer, replayed) = on_connection(state, move |conn| {
        write_transaction(conn, |conn| {
            let key = OperatorKey {
                caller: &caller.0,
                idempotency_key: &key,
                fingerprint: &fingerprint,
                created_at: now.naive_utc(),
                expires_at: expires_at.naive_utc(),
            };
            let call = idempotency::once(conn, &key, |conn| {
                let (status, body) = execute(conn, &settings, now)?;
                let content_type = idempotency::content_type_of(status).to_owned();
                Ok::<_, Problem>((
                    (),
                    Answer {
                        status,
                        content_type,
                        body,
                    },
                ))
            })?;
            match call {
                Once::Ran((), answer) => Ok((answer, false)),
                Once::Stored(answer) => Ok((answer, true)),
                Once::Mismatch { .. } => Err(Problem::new(
                    Reason::IdempotencyKeyReused,
                    "this Idempotency-Key was used for a different request",
                )),
                Once::Unanswered => Err(Problem::internal("the stored call has no response")),
            }
        })
    })
    .await?;
    if !replayed {
        // A replay or requeue enqueued work: send it now rather than at the next poll.
        if let Some(waker) = &state.dispatcher_waker {
            waker.notify_one();
        }
    }
    Ok(CallAnswer { answer, replayed })
}

fn to_json(value: &Value) -> Result<Vec<u8>, Problem> {
    serde_json::to_vec(value)
        .map_err(|e| Problem::internal(format!("cannot encode the answer: {e}")))
}

/// `{"source": …, "event_id": …}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventRef {
    source: String,
    event_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    events: Option<Vec<EventRef>>,
    filter: Option<EventFilter>,
    limit: Option<u32>,
    #[serde(default)]
    dry_run: bool,
}

/// The events a replay names: a list, or a filter (at most `limit` events).
enum ReplayTarget {
    Events(Vec<(String, String)>),
    Filter(EventFilter, i64),
}

impl ReplayTarget {
    fn parse(request: ReplayRequest, max: u32) -> Result<Self, Problem> {
        let limit = i64::from(request.limit.unwrap_or(max).min(max));
        match (request.events, request.filter) {
            (Some(events), None) if !events.is_empty() && events.len() as u32 <= max => {
                for event in &events {
                    actions::check_text("source", Some(&event.source))?;
                    actions::check_text("event_id", Some(&event.event_id))?;
                }
                Ok(Self::Events(
                    events.into_iter().map(|e| (e.source, e.event_id)).collect(),
                ))
            }
            (None, Some(filter)) => {
                filter.validate()?;
                Ok(Self::Filter(filter, limit))
            }
            _ => Err(invalid(format!(
                "send either \"events\" (1 to {max} {{source, event_id}}) or \"filter\""
            ))),
        }
    }

    /// The events, and whether a filter matched more than its limit let through.
    fn items(self, conn: &mut DbConnection) -> diesel::QueryResult<(Vec<(String, String)>, bool)> {
        match self {
            Self::Events(mut items) => {
                let mut seen = std::collections::HashSet::new();
                items.retain(|item| seen.insert(item.clone()));
                Ok((items, false))
            }
            Self::Filter(filter, limit) => {
                // One more than the limit says whether there were more.
                let mut items = actions::events_matching(conn, &filter, limit + 1)?;
                let truncated = items.len() as i64 > limit;
                items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                Ok((items, truncated))
            }
        }
    }
}

/// The answer to a replay or its preview: `410` when it named one event that was swept,
/// else the results with their summary and whether a filter was cut at its limit.
fn replay_answer(
    dry_run: bool,
    results: &[actions::RedeliveryResult],
    truncated: bool,
    window: crate::duration::HumanDuration,
) -> Result<(u16, Vec<u8>), Problem> {
    if let [only] = results {
        if only.result == "expired" {
            let problem = Problem::new(
                Reason::Expired,
                format!(
                    "event {}/{} was swept after the retention window ({window}); its fact \
                     remains, so it can no longer be replayed",
                    only.source, only.event_id
                ),
            );
            return Ok((410, problem.body()));
        }
    }
    let body = to_json(&json!({
        "dry_run": dry_run,
        "truncated": truncated,
        "summary": actions::RedeliverySummary::of(results),
        "results": results,
    }))?;
    Ok((200, body))
}

/// The route of a replay.
pub const REPLAY_ROUTE: &str = "POST /admin/replay";

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
    let answer = replay_call(&state, &settings, caller, key, &body).await?;
    Ok(answer.into_response())
}

/// A replay request (JSON, as the API takes it) run for `caller` with the request's
/// `settings` snapshot: the API's and the console's one code path.
pub async fn replay_call(
    state: &AppState,
    settings: &Arc<Settings>,
    caller: Caller,
    key: Option<String>,
    body: &[u8],
) -> Result<CallAnswer, Problem> {
    let parsed: ReplayRequest = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("invalid replay request: {e}")))?;
    let dry_run = parsed.dry_run;
    let target = ReplayTarget::parse(parsed, settings.operator.max_replay)?;
    if dry_run {
        let settings = settings.clone();
        let (status, body) = on_connection(state, move |conn| {
            let (items, truncated) = target.items(conn)?;
            let results = actions::preview_redelivery(conn, &settings.destinations, &items)?;
            replay_answer(true, &results, truncated, settings.retention.events)
        })
        .await?;
        return Ok(CallAnswer::ran(status, body));
    }
    run_idempotent(
        state,
        settings,
        REPLAY_ROUTE,
        caller,
        required(key)?,
        body,
        move |conn, settings, now| {
            let (items, truncated) = target.items(conn)?;
            let results = actions::redeliver(conn, &settings.destinations, &items, now)?;
            replay_answer(false, &results, truncated, settings.retention.events)
        },
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterRequest {
    ids: Option<Vec<i64>>,
    filter: Option<DeliveryFilter>,
    limit: Option<u32>,
}

/// What an operator does to dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterAction {
    /// Back to pending, with a fresh deadline.
    Requeue,
    /// Set aside, never sent, swept after `retention.dead_letters`.
    Discard,
}

impl DeadLetterAction {
    /// The route the action is (the Idempotency-Key fingerprint covers it).
    pub fn route(self) -> &'static str {
        match self {
            Self::Requeue => "POST /admin/deliveries/requeue",
            Self::Discard => "POST /admin/deliveries/discard",
        }
    }

    fn run(
        self,
        conn: &mut DbConnection,
        destinations: &Destinations,
        ids: &[i64],
        now: DateTime<Utc>,
    ) -> diesel::QueryResult<Vec<actions::DeadLetterResult>> {
        match self {
            Self::Requeue => actions::requeue(conn, destinations, ids, now),
            Self::Discard => actions::discard(conn, ids, now),
        }
    }
}

/// A requeue or discard request (JSON, as the API takes it) run for `caller`: ids or a
/// filter over dead deliveries, under the caller's Idempotency-Key — the API's and the
/// console's one code path, with the request's `settings` snapshot.
pub async fn dead_letter_call(
    state: &AppState,
    settings: &Arc<Settings>,
    caller: Caller,
    key: Option<String>,
    body: &[u8],
    action: DeadLetterAction,
) -> Result<CallAnswer, Problem> {
    let key = required(key)?;
    let parsed: DeadLetterRequest =
        serde_json::from_slice(body).map_err(|e| invalid(format!("invalid request: {e}")))?;
    let max = settings.operator.max_replay;
    let limit = i64::from(parsed.limit.unwrap_or(max).min(max));
    let selection = match (parsed.ids, parsed.filter) {
        (Some(ids), None) if !ids.is_empty() && ids.len() as u32 <= max => Ok(ids),
        (None, Some(filter)) => {
            filter.validate()?;
            Err(filter)
        }
        _ => {
            return Err(invalid(format!(
                "send either \"ids\" (1 to {max}) or \"filter\""
            )))
        }
    };
    run_idempotent(
        state,
        settings,
        action.route(),
        caller,
        key,
        body,
        move |conn, settings, now| {
            let ids = match selection {
                Ok(ids) => ids,
                Err(filter) => actions::dead_matching(conn, &filter, limit)?,
            };
            let results = action.run(conn, &settings.destinations, &ids, now)?;
            Ok((200, to_json(&json!({ "results": results }))?))
        },
    )
    .await
}

/// The API's requeue and discard: the key is checked before the body is read.
async fn on_dead_letters(
    Authorized(caller, settings): Authorized,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    action: DeadLetterAction,
) -> Result<HttpResponse, Problem> {
    let key = Some(required(idempotency_key(&request)?)?);
    let body = read_body(&request, payload, &settings.server).await?;
    let answer = dead_letter_call(&state, &settings, caller, key, &body, action).await?;
    Ok(answer.into_response())
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
