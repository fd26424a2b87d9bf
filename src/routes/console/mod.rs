//! The operator console under `/console`: server-rendered pages to find any event, see
//! what came in and what went out, and replay, requeue or discard — no JavaScript, no
//! build step, nothing to install.
//!
//! HTML is written with maud: templates are Rust, checked by the compiler, and every
//! value is escaped unless wrapped in `PreEscaped` (only the stylesheet-free SVG chart,
//! built from numbers, is). Every response carries a strict Content-Security-Policy
//! (`default-src 'self'`, no inline script or style), `X-Frame-Options: DENY`,
//! `nosniff` and `no-store`. Every page needs a session ([`session::Session`]); every
//! form that changes something carries the session's CSRF token and its own
//! Idempotency-Key, and calls the same operator use cases as the API, storing the same
//! answer ([`crate::routes::operator_calls`]).

mod actions;
mod audit;
mod bulk;
mod chart;
mod error;
mod evaluate;
mod forms;
mod login;
mod pages;
mod session;
mod view;

pub use error::ConsoleError;
pub use forms::form_fields;

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::middleware::DefaultHeaders;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse, ResponseError};
use session::Session;

/// The console's Content-Security-Policy: nothing but this origin's stylesheet.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
     style-src 'self'; script-src 'none'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// Largest form body the console reads (a dead-letter selection of 1,000 ids fits).
const MAX_FORM_BYTES: usize = 64 * 1024;

/// The console's routes, under `/console`.
pub fn register(config: &mut web::ServiceConfig) {
    config.service(
        web::scope(session::PATH)
            .wrap(
                DefaultHeaders::new()
                    .add((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
                    .add((header::X_FRAME_OPTIONS, "DENY"))
                    .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
                    .add((header::REFERRER_POLICY, "same-origin"))
                    .add((header::CACHE_CONTROL, "no-store")),
            )
            .app_data(web::PayloadConfig::new(MAX_FORM_BYTES))
            .configure(|config| register_pages(config, crate::routes::everything))
            .default_service(web::to(no_page)),
    );
}

routes! {
    PAGES, register_pages;
    get "" => pages::overview;
    get "/" => pages::overview;
    get "/login" => login::login_form;
    post "/login" => login::login;
    post "/logout" => login::logout;
    get "/events" => pages::events;
    get "/events/{source}/{event_id}" => pages::event;
    get "/deliveries" => pages::deliveries;
    post "/deliveries" => actions::dead_letters;
    get "/sources" => pages::sources;
    get "/audit" => audit::audit;
    get "/bulk" => bulk::bulk_page;
    post "/bulk/preview" => bulk::bulk_preview;
    post "/bulk" => bulk::bulk_start;
    get "/bulk/{id}" => bulk::bulk_progress;
    post "/replay/preview" => actions::replay_preview;
    post "/replay" => actions::replay;
    post "/evaluate" => evaluate::evaluate;
    get "/console.css" => stylesheet;
}

/// The hand-written stylesheet, served from the binary.
async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .body(include_str!("console.css"))
}

/// Requests no page takes: a console path asked with another method is `405` with
/// `Allow`, as the API's routes are, session or not; anything else needs a session first (so
/// the console's paths are not shown to strangers), then is `404`.
async fn no_page(request: HttpRequest) -> Result<HttpResponse, ConsoleError> {
    let allow = request
        .match_pattern()
        .map(|pattern| crate::routes::allowed_methods(PAGES, session::PATH, &pattern))
        .filter(|allow| !allow.is_empty());
    if let Some(allow) = allow {
        let detail = format!(
            "{} is not served at {}: use {allow}.",
            request.method(),
            request.path()
        );
        return Err(ConsoleError::MethodNotAllowed { allow, detail });
    }
    Session::extract(&request).await?;
    Err(ConsoleError::NotFound("No such page.".to_owned()))
}

impl ResponseError for ConsoleError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::SignIn(_) => StatusCode::SEE_OTHER,
            Self::Disabled | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Invalid(_) => StatusCode::BAD_REQUEST,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Refused(status, _) => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Self::Problem(problem) => problem.reason.status(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let Self::SignIn(next) = self {
            let location = format!(
                "{}/login?next={}",
                session::PATH,
                form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
            );
            return HttpResponse::SeeOther()
                .insert_header((header::LOCATION, location))
                .finish();
        }
        self.log();
        let status = self.status_code();
        let mut response =
            view::page_response(status.as_u16(), view::error_page(status, &self.to_string()));
        let extra = match self {
            Self::Problem(problem) => problem
                .retry_after
                .or(problem.reason.retry_after_secs().map(u64::from))
                .map(|secs| (header::RETRY_AFTER, secs.to_string())),
            Self::MethodNotAllowed { allow, .. } => Some((header::ALLOW, allow.clone())),
            _ => None,
        };
        if let Some((name, value)) = extra {
            if let Ok(value) = header::HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, value);
            }
        }
        response
    }
}
