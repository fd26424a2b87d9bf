//! The middleware every request passes: a span per request (request id, method, route;
//! handlers add source, event id, outcome and, tracing on, the trace id), the request id echoed back, the HTTP
//! metrics, `Cache-Control: no-store` under `/admin`, and the operator API's refusals
//! logged.

use super::problem::{Problem, Reason};
use crate::observability::REQUEST_ID;
use crate::state::AppState;
use crate::traces::{self, Attribute, Incoming};
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::HttpMessage;
use std::time::Instant;
use tracing::Instrument;

/// This request's id, for handlers (in the request's extensions).
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// A client's request id when it is short printable text, else a fresh one.
fn request_id(request: &ServiceRequest) -> String {
    request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|id| !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)))
}

/// A route pattern as a label: `/webhooks/{source}` → `/webhooks/:source`, since braces
/// inside label values trip simple scrapers and parsers.
fn route_label(pattern: &str) -> String {
    pattern.replace('{', ":").replace('}', "")
}

/// Whether `path` is under `/admin` (matched by a route or not).
fn is_operator_path(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/")
}

/// Operator API refusals: warnings, and errors when Inlet failed.
fn log_operator_refusal(problem: &Problem) {
    let reason = problem.reason.code();
    if problem.reason == Reason::Internal {
        tracing::error!(reason, detail = %problem.detail, "operator request failed");
    } else {
        tracing::warn!(reason, detail = %problem.detail, "operator request refused");
    }
}

/// A server span for an operator action (tracing on): a request that is not a read, to
/// the operator API or the console. It starts at the request's arrival and continues the
/// caller's `traceparent` only when the request was not refused for its credentials
/// ([`Incoming`]).
fn operator_action_span(request: &ServiceRequest, route: &str) -> Option<Incoming> {
    let method = request.method();
    let action = !(method == Method::GET || method == Method::HEAD)
        && (route.starts_with("/admin") || route.starts_with("/console"));
    if !action {
        return None;
    }
    let state = request.app_data::<actix_web::web::Data<AppState>>()?;
    if !state.traces.is_on() {
        return None;
    }
    let pattern = request.match_pattern().unwrap_or_default();
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    let name = format!("{method} {pattern}");
    Some(state.traces.incoming(name, traceparent, || {
        vec![
            Attribute::new("http.request.method", method.as_str().to_owned()),
            Attribute::new("http.route", pattern.clone()),
        ]
    }))
}

/// Ends an operator action's span with its answer (an error when Inlet failed), its trace
/// id on the request's log span.
fn end_action_span(mut action: Incoming, status: StatusCode, log_span: &tracing::Span) {
    let refused = matches!(status.as_u16(), 401 | 403 | 429);
    let span = action.start(!refused);
    if let Some(trace_id) = traces::trace_id(&span.context()) {
        log_span.record("trace_id", trace_id);
    }
    span.set(Attribute::new(
        "http.response.status_code",
        i64::from(status.as_u16()),
    ));
    if status.is_server_error() {
        span.fail(
            status.as_str(),
            status.canonical_reason().unwrap_or_default(),
        );
    }
}

/// Middleware: a span per request (request id, method, route; handlers add source, event
/// id and outcome), the request id echoed back, the HTTP metrics, and `Cache-Control:
/// no-store` on every answer under `/admin`.
pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = request_id(&request);
    let route = request
        .match_pattern()
        .map_or_else(|| "unmatched".to_owned(), |pattern| route_label(&pattern));
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        route = %route,
        source = tracing::field::Empty,
        event_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    request.extensions_mut().insert(RequestId(id.clone()));
    // The route as matched (its path decoded, as the router reads it): `/%61dmin/…` is
    // an operator answer too.
    let operator = route.starts_with("/admin") || is_operator_path(request.match_info().as_str());
    let action = operator_action_span(&request, &route);
    let started = Instant::now();
    let mut response = next.call(request).instrument(span.clone()).await?;
    if let Some(action) = action {
        end_action_span(action, response.status(), &span);
    }
    if operator {
        // Payloads, headers and tokens' refusals: never kept by a browser or a proxy.
        response.headers_mut().insert(
            actix_web::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
    }
    if route.starts_with("/admin") {
        if let Some(problem) = response.response().extensions().get::<Problem>() {
            span.in_scope(|| log_operator_refusal(problem));
        }
    }
    let status = response.status().as_u16().to_string();
    metrics::counter!("inlet_http_requests_total", "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("inlet_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    if let Ok(value) = HeaderValue::from_str(&id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID), value);
    }
    Ok(response)
}
