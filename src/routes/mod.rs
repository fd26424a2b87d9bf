//! The HTTP surface: webhooks, the operator API, health and metrics — one table of routes,
//! which the OpenAPI document is checked against — and the helpers the handlers share.

pub mod admin;
pub mod console;
pub mod health;
pub mod webhooks;

pub use crate::idempotency::REPLAYED_HEADER;
pub use webhooks::read_body;

use crate::error::{Problem, Reason};
use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

/// Generates the route table and its registration from one list, so the table the
/// OpenAPI document is checked against is the set of routes actually served.
macro_rules! routes {
    ($($method:ident $path:expr => $handler:path;)*) => {
        /// Every route Inlet serves, as (method, path pattern).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        pub fn register_routes(config: &mut web::ServiceConfig) {
            $(config.route($path, web::$method().to($handler));)*
        }
    };
}

routes! {
    post WEBHOOK_ROUTE => webhooks::receive_webhook;
    get "/healthz" => health::healthz;
    get "/readyz" => health::readyz;
    get "/metrics" => health::metrics;
    get "/openapi.json" => openapi;
    get "/admin/events" => admin::list_events;
    get "/admin/events/{source}/{event_id}" => admin::show_event;
    post "/admin/replay" => admin::replay;
    get "/admin/deliveries" => admin::list_deliveries;
    post "/admin/deliveries/requeue" => admin::requeue;
    post "/admin/deliveries/discard" => admin::discard;
    get "/admin/retention" => admin::retention;
    get "/admin/destinations" => admin::destinations;
    post "/admin/reload" => admin::reload;
}

/// The OpenAPI 3.1 document of these routes (`openapi.json` in the repository).
pub const OPENAPI: &str = include_str!("../../openapi.json");

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

/// Where providers deliver.
pub const WEBHOOK_ROUTE: &str = "/webhooks/{source}";

/// Requests no route takes: a served path asked with another method is `405` with
/// `Allow` (for webhooks also counted and logged as a rejection); anything else is `404`.
pub async fn no_route(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let Some(pattern) = request
        .match_pattern()
        .filter(|pattern| ROUTES.iter().any(|(_, path)| path == pattern))
    else {
        return Problem::new(
            Reason::NotFound,
            "no such route (webhooks are POST /webhooks/{source})",
        )
        .error_response();
    };
    let allow = ROUTES
        .iter()
        .filter(|(_, path)| *path == pattern)
        .map(|(method, _)| method.to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(", ");
    let problem = Problem::new(
        Reason::MethodNotAllowed,
        format!("{} {pattern} is not served: use {allow}", request.method()),
    );
    if pattern == WEBHOOK_ROUTE {
        // No route matched, so the path was not captured: the pattern matched, so the
        // name is the one segment after the prefix. As in the webhook handler, a name that
        // is not configured is never a label as sent.
        let settings = state.settings.current();
        let source = request
            .path()
            .strip_prefix("/webhooks/")
            .and_then(|name| settings.source(name))
            .map_or("unknown", |source| source.name.as_str());
        let reason = problem.reason.code();
        let span = tracing::Span::current();
        span.record("source", source);
        span.record("outcome", reason);
        metrics::counter!("inlet_webhooks_total", "source" => source.to_owned(), "outcome" => reason)
            .increment(1);
        state
            .traffic
            .record(source, reason, state.clock.now().timestamp());
        tracing::warn!(%source, reason, detail = %problem.detail, method = %request.method(), "webhook rejected");
    }
    let mut response = problem.error_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}
