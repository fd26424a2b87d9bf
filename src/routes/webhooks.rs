//! `POST /webhooks/{source}` over HTTP: the source looked up, the body read within its
//! size limit and time, then [`Intake::receive`] does the rest (the provider's setup,
//! verification, the claim, the group commit); this file turns its result into the answer. `GET` answers a
//! provider's endpoint verification (Dropbox's `?challenge=`) for its sources only. Every
//! outcome and every rejection of a webhook is logged and counted here, in
//! [`count_webhook`].

use super::{seconds_to_wait, Problem, Reason, RequestId};
use crate::config::{ServerSettings, Settings};
use crate::idempotency::REPLAYED_HEADER;
use crate::ingest::{Intake, IntakeWatcher, Outcome, Received, Refusal, SetupRefusal, Webhook};
use crate::notices::IntakeNotices;
use crate::signature::Headers;
use crate::state::AppState;
use crate::traces::{self, Attribute, Incoming, Span};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse, ResponseError};

/// The schemes read the headers actix received.
impl Headers for header::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }

    fn all(&self) -> Vec<(&str, &[u8])> {
        self.iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect()
    }
}

impl From<Refusal> for Problem {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Signature(error) => error.into(),
            Refusal::Identity(error) => error.into(),
            Refusal::Ingest(error) => error.into(),
            Refusal::Setup(refusal) => refusal.into(),
        }
    }
}

impl From<SetupRefusal> for Problem {
    fn from(refusal: SetupRefusal) -> Self {
        let detail = refusal.to_string();
        match refusal {
            SetupRefusal::InvalidChallenge(_) => Problem::new(Reason::InvalidChallenge, detail),
            SetupRefusal::MalformedSecret(_) => Problem::new(Reason::MalformedSignature, detail),
            SetupRefusal::HookSecretHeld(_) => Problem::new(Reason::HookSecretHeld, detail),
            SetupRefusal::NoKey(_) => Problem::new(Reason::BadSignature, detail),
            SetupRefusal::CertificateUnavailable { retry_after, .. } => {
                Problem::new(Reason::CertificateUnavailable, detail)
                    .retry_after(seconds_to_wait(retry_after))
            }
            SetupRefusal::SubscriptionUnconfirmed { retry_after, .. } => {
                Problem::new(Reason::SubscriptionUnconfirmed, detail)
                    .retry_after(seconds_to_wait(retry_after))
            }
            SetupRefusal::Store(error) => error.into(),
        }
    }
}

pub async fn receive_webhook(
    request: HttpRequest,
    source: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let name = source.into_inner();
    // One snapshot for the whole request: a reload meanwhile changes neither its secrets,
    // nor its destinations, nor its answer.
    let settings = state.settings.current();
    // Unknown names come from the network: never a label or a log field as sent.
    let source = settings
        .source(&name)
        .map_or("unknown", |source| source.name.as_str());
    tracing::Span::current().record("source", source);
    let mut incoming = webhook_span(&state, &request, source);
    let handled = handle(&request, &name, payload, &state, &settings, &mut incoming).await;
    let span = incoming.span();
    let trace_id = traces::trace_id(&span.context());
    if let Some(trace_id) = &trace_id {
        // Every line logged under this request carries it.
        tracing::Span::current().record("trace_id", trace_id.as_str());
    }
    match handled {
        Ok(received) => {
            let event_id = received.event_id.as_deref().unwrap_or("-");
            let outcome = received.outcome.as_str();
            tracing::Span::current().record("event_id", event_id);
            count_webhook(&state, source, outcome);
            if received.dropped > 0 {
                metrics::counter!("inlet_batch_items_total", "source" => source.to_owned(), "outcome" => "bad_signature")
                    .increment(received.dropped as u64);
            }
            for (item, item_outcome) in &received.items {
                let item_outcome = item_outcome.as_str();
                metrics::counter!("inlet_batch_items_total", "source" => source.to_owned(), "outcome" => item_outcome)
                    .increment(1);
                tracing::info!(%source, event_id = %item, outcome = item_outcome, trace_id, "batch item processed");
            }
            tracing::info!(%source, %event_id, outcome, items = received.items.len(), trace_id, "webhook processed");
            end_webhook_span(
                span,
                received.answer.status,
                outcome,
                received.event_id.as_deref(),
            );
            answer_response(received)
        }
        Err(problem) => {
            reject_webhook(&state, source, &problem, None);
            let status = problem.reason.status().as_u16();
            end_webhook_span(span, status, problem.reason.code(), None);
            problem
                .for_outsiders(&request_id(&request))
                .error_response()
        }
    }
}

fn request_id(request: &HttpRequest) -> String {
    request
        .extensions()
        .get::<RequestId>()
        .map_or_else(|| "-".to_owned(), |id| id.0.clone())
}

/// `GET /webhooks/{source}`: the provider's endpoint verification, for a source whose
/// provider sends one (Dropbox: the `challenge` echoed as `text/plain`, with `nosniff`
/// against reflected XSS, never cached, nothing stored); for every other source, the
/// `405` a method no route serves gets (`404` for a source that is not configured).
/// Unsigned: the provider decides what it echoes.
pub async fn answer_challenge(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let settings = state.settings.current();
    let name = request.match_info().get("source").unwrap_or_default();
    let Some((source, answered)) = settings.source(name).and_then(|source| {
        let answered = source.provider.challenge(request.query_string())?;
        Some((source.name.as_str(), answered))
    }) else {
        return method_not_allowed(&request, &state);
    };
    tracing::Span::current().record("source", source);
    match answered {
        Ok(answer) => {
            count_webhook(&state, source, Outcome::Handshake.as_str());
            tracing::info!(%source, outcome = "handshake", "verification challenge answered");
            let mut response = HttpResponse::Ok();
            if let Ok(content_type) = HeaderValue::from_str(&answer.content_type) {
                response.insert_header((header::CONTENT_TYPE, content_type));
            }
            response
                .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
                .insert_header((header::CACHE_CONTROL, "no-store"))
                .body(answer.body)
        }
        Err(detail) => {
            let problem = Problem::new(Reason::InvalidChallenge, detail);
            reject_webhook(&state, source, &problem, None);
            problem
                .for_outsiders(&request_id(&request))
                .error_response()
        }
    }
}

/// A method `/webhooks/{source}` does not serve for its source: `405` with `Allow` naming
/// the ones it does (`POST`, and `GET` where the provider verifies with one), counted and
/// logged as a refused webhook. A source that is not configured is `404 unknown_source`
/// whatever the method, as its `POST` is: a `405` would send the client to a `POST` that
/// is refused too.
pub fn method_not_allowed(request: &HttpRequest, state: &AppState) -> HttpResponse {
    // No route took the request, so the path may not be captured; the route's pattern
    // matched, so the name is the one segment after the prefix. As in the webhook
    // handler, a name that is not configured is never a label as sent.
    let settings = state.settings.current();
    let Some(source) = request
        .path()
        .strip_prefix("/webhooks/")
        .and_then(|name| settings.source(name))
    else {
        let problem = unknown_source();
        reject_webhook(state, "unknown", &problem, Some(request.method()));
        return problem.error_response();
    };
    let allow = match source.provider.answers_get() {
        true => "POST, GET",
        false => "POST",
    };
    let problem = Problem::new(
        Reason::MethodNotAllowed,
        format!(
            "{} /webhooks/{{source}} is not served: use {allow}",
            request.method()
        ),
    );
    reject_webhook(
        state,
        source.name.as_str(),
        &problem,
        Some(request.method()),
    );
    let mut response = problem.error_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// The span of one webhook (tracing on): it continues the sender's `traceparent` once the
/// request is verified ([`Incoming`]).
fn webhook_span(state: &AppState, request: &HttpRequest, source: &str) -> Incoming {
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    state
        .traces
        .incoming("POST /webhooks/{source}", traceparent, || {
            let mut attributes = vec![
                Attribute::new("http.request.method", "POST"),
                Attribute::new("http.route", "/webhooks/{source}"),
                Attribute::new("inlet.source", source.to_owned()),
            ];
            if source != "unknown" {
                attributes.push(Attribute::new("url.path", format!("/webhooks/{source}")));
            }
            attributes
        })
}

/// What the webhook was answered, on its span: the status, the outcome (or the refusal's
/// reason) and its event id. Only Inlet's own failure (5xx) is an error: a refused webhook
/// is the sender's.
fn end_webhook_span(span: &mut Span, status: u16, outcome: &'static str, event_id: Option<&str>) {
    if !span.is_recording() {
        return;
    }
    span.set(Attribute::new(
        "http.response.status_code",
        i64::from(status),
    ));
    span.set(Attribute::new("inlet.outcome", outcome));
    if let Some(event_id) = event_id {
        span.set(Attribute::new("inlet.event.id", event_id.to_owned()));
    }
    if status >= 500 {
        span.fail(&status.to_string(), outcome);
    }
}

/// The one place a webhook's outcome is counted: the metric, the console's traffic and
/// the request's span.
pub(super) fn count_webhook(state: &AppState, source: &str, outcome: &'static str) {
    let span = tracing::Span::current();
    span.record("source", source);
    span.record("outcome", outcome);
    metrics::counter!("inlet_webhooks_total", "source" => source.to_owned(), "outcome" => outcome)
        .increment(1);
    state
        .traffic
        .record(source, outcome, state.clock.now().timestamp());
}

/// A refused webhook, counted and logged (an error when Inlet failed, else a warning).
pub(super) fn reject_webhook(
    state: &AppState,
    source: &str,
    problem: &Problem,
    method: Option<&actix_web::http::Method>,
) {
    let reason = problem.reason.code();
    count_webhook(state, source, reason);
    let detail = &problem.detail;
    match method {
        Some(method) => tracing::warn!(%source, reason, %detail, %method, "webhook rejected"),
        None if problem.reason == Reason::Internal => {
            tracing::error!(%source, reason, %detail, "webhook failed")
        }
        None => tracing::warn!(%source, reason, %detail, "webhook rejected"),
    }
}

/// The refusal of a name no source of the configuration has, whatever the method.
fn unknown_source() -> Problem {
    Problem::new(
        Reason::UnknownSource,
        "no source of that name is configured",
    )
}

/// The webhook's source and its body, received under the request's `settings`.
async fn handle(
    request: &HttpRequest,
    name: &str,
    payload: web::Payload,
    state: &AppState,
    settings: &Settings,
    incoming: &mut Incoming,
) -> Result<Received, Problem> {
    let source = settings.source(name).ok_or_else(unknown_source)?;
    let body = read_body(request, payload, &settings.server).await?;
    let watcher = (state.notices.as_deref()).map(|notices| IntakeNotices {
        notices,
        pool: &state.pool,
    });
    let intake = Intake {
        source,
        destinations: &settings.destinations,
        retention: settings.retention.events.0,
        now: state.clock.now(),
        waker: state.dispatcher_waker.as_deref(),
        faults: &state.faults,
        pool: &state.pool,
        certificates: &state.certificates,
        clock: state.clock.as_ref(),
        watcher: watcher
            .as_ref()
            .map(|watcher| watcher as &dyn IntakeWatcher),
    };
    let webhook = Webhook {
        headers: request.headers(),
        body: &body,
        query: request.query_string(),
    };
    Ok(intake.receive(&state.committer, webhook, incoming).await?)
}

/// Reads a request body of at most `server.max_body_bytes`: 413 as soon as
/// `Content-Length` or the bytes received say it is larger, and 408 when it has not all
/// arrived within `server.body_timeout` per started MiB (of `Content-Length`, or of the
/// limit when the length is not announced) — a client trickling bytes gives its
/// connection back.
pub async fn read_body(
    request: &HttpRequest,
    payload: web::Payload,
    server: &ServerSettings,
) -> Result<web::Bytes, Problem> {
    let limit = server.max_body_bytes;
    let too_large = || {
        Problem::new(
            Reason::PayloadTooLarge,
            format!("the body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let deadline = body_deadline(declared.unwrap_or(limit), server.body_timeout);
    tokio::time::timeout(deadline, payload.to_bytes_limited(limit))
        .await
        .map_err(|_| {
            Problem::new(
                Reason::RequestTimeout,
                format!(
                    "the body did not arrive within {}",
                    crate::duration::HumanDuration(deadline)
                ),
            )
        })?
        .map_err(|_| too_large())?
        .map_err(|e| {
            Problem::new(
                Reason::InvalidBody,
                format!("the body could not be read: {e}"),
            )
        })
}

/// `per_mib` for every started MiB of `length`, at least once.
fn body_deadline(length: usize, per_mib: std::time::Duration) -> std::time::Duration {
    const MIB: usize = 1024 * 1024;
    let mibs = u32::try_from(length.div_ceil(MIB).max(1)).unwrap_or(u32::MAX);
    per_mib.saturating_mul(mibs)
}

fn answer_response(received: Received) -> HttpResponse {
    let answer = received.answer;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = HttpResponse::build(status);
    if let Some((name, value)) = received.echo {
        response.insert_header((name, value));
    }
    if let Ok(content_type) = HeaderValue::from_str(&answer.content_type) {
        response.insert_header((header::CONTENT_TYPE, content_type));
    }
    if received.outcome == Outcome::StoredAnswer {
        response.insert_header((REPLAYED_HEADER, "true"));
    }
    if received.outcome == Outcome::Handshake {
        // A handshake may echo what the request sent: never sniffed, never cached.
        response
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .insert_header((header::CACHE_CONTROL, "no-store"));
    }
    response.body(answer.body)
}
