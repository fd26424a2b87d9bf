//! The HTTP surface: webhooks, the operator API, health and metrics — one table of routes,
//! which the OpenAPI document is checked against, split between the webhook listener and
//! (with `admin.bind`) the operator surface's own — and the helpers the handlers share.

pub use crate::idempotency::REPLAYED_HEADER;
pub use middleware::{observe, RequestId};
pub use problem::{seconds_to_wait, Problem, Reason};
pub use webhooks::read_body;

use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

/// Generates a route table and its registration from one list, so the table (the one the
/// OpenAPI document is checked against, the one `Allow` headers are made from) is the set
/// of routes actually served. Defined before the modules so the console uses it too.
macro_rules! routes {
    ($table:ident, $register:ident; $($method:ident $path:expr => $handler:path;)*) => {
        /// Every route served here, as (method, path pattern).
        pub const $table: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// Registers the routes whose path `keep` takes.
        pub fn $register(config: &mut actix_web::web::ServiceConfig, keep: fn(&str) -> bool) {
            $(if keep($path) {
                config.route($path, actix_web::web::$method().to($handler));
            })*
        }
    };
}

pub mod admin;
pub mod console;
pub mod health;
mod middleware;
mod operator_calls;
mod problem;
pub mod webhooks;

routes! {
    ROUTES, register_routes;
    post WEBHOOK_ROUTE => webhooks::receive_webhook;
    get WEBHOOK_ROUTE => webhooks::answer_challenge;
    get "/healthz" => health::healthz;
    get "/readyz" => health::readyz;
    get "/metrics" => health::metrics;
    get "/openapi.json" => openapi;
    get "/admin/events" => admin::list_events;
    get "/admin/events/{source}/{event_id}" => admin::show_event;
    post "/admin/replay" => admin::replay;
    post "/admin/evaluate" => admin::evaluate;
    get "/admin/deliveries" => admin::list_deliveries;
    post "/admin/deliveries/requeue" => admin::requeue;
    post "/admin/deliveries/discard" => admin::discard;
    post "/admin/bulk" => admin::bulk;
    get "/admin/bulk" => admin::bulk_actions;
    get "/admin/bulk/{id}" => admin::bulk_action;
    get "/admin/retention" => admin::retention;
    get "/admin/destinations" => admin::destinations;
    get "/admin/hook-secrets" => admin::hook_secrets;
    post "/admin/hook-secrets/clear" => admin::clear_hook_secret;
    post "/admin/reconcile" => admin::reconcile;
    get "/admin/reconcile/runs" => admin::reconcile_runs;
    post "/admin/reload" => admin::reload;
    get "/admin/audit" => admin::audit;
}

/// What the webhook listener serves when the operator surface has a listener of its own
/// (`admin.bind`): webhooks and health, nothing an operator uses.
pub fn is_public(path: &str) -> bool {
    matches!(path, WEBHOOK_ROUTE | "/healthz" | "/readyz")
}

/// What the operator surface's own listener serves: everything but webhooks (health
/// too, for its probes).
pub fn is_operator(path: &str) -> bool {
    path != WEBHOOK_ROUTE
}

/// Every route.
pub fn everything(_: &str) -> bool {
    true
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

/// The methods `table` serves at `pattern` (its paths under `prefix`), as an `Allow`
/// header lists them.
pub fn allowed_methods(table: &[(&str, &str)], prefix: &str, pattern: &str) -> String {
    table
        .iter()
        .filter(|(_, path)| pattern.strip_prefix(prefix) == Some(path))
        .map(|(method, _)| method.to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(", ")
}

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
    if pattern == WEBHOOK_ROUTE {
        // Which methods a webhook source serves depends on its provider.
        return webhooks::method_not_allowed(&request, &state);
    }
    let allow = allowed_methods(ROUTES, "", &pattern);
    let problem = Problem::new(
        Reason::MethodNotAllowed,
        format!("{} {pattern} is not served: use {allow}", request.method()),
    );
    let mut response = problem.error_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}
