//! Signing in and out of the console: the sign-in page, the operator token for a session
//! cookie (with a wait after repeated wrong tokens), and signing out for every instance.

use super::error::ConsoleError;
use super::forms::{field, form_fields};
use super::session::{check_csrf, issue, operator_token, safe_next, set_cookie, Session, PATH};
use super::view;
use crate::operator::sessions;
use crate::routes::Problem;
use crate::secret::{secrets_equal, Secret};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};

/// `GET /console/login`.
pub async fn login_form(request: HttpRequest) -> Result<HttpResponse, ConsoleError> {
    let next =
        web::Query::<std::collections::HashMap<String, String>>::from_query(request.query_string())
            .ok()
            .and_then(|q| q.get("next").cloned())
            .unwrap_or_else(|| PATH.to_owned());
    Ok(view::page_response(
        200,
        view::login(safe_next(&next), None),
    ))
}

/// `POST /console/login`: the token for a session cookie, or a clear refusal.
pub async fn login(
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let settings = state.settings.current();
    let token = operator_token(&settings)?;
    let fields = form_fields(&body);
    let next = safe_next(field(&fields, "next").unwrap_or(PATH)).to_owned();
    let client = request.peer_addr().map(|peer| peer.ip());
    if let Some(left) = state.sign_in.wait_left(client) {
        refused_sign_in("waiting", &request);
        let message = format!(
            "Too many wrong tokens in a row. Try again in {} s.",
            left.as_secs().max(1)
        );
        return Ok(view::page_response(429, view::login(&next, Some(&message))));
    }
    let given = field(&fields, "token").unwrap_or_default();
    if !secrets_equal(given.trim().as_bytes(), token.expose().as_bytes()) {
        state.sign_in.failed(client);
        refused_sign_in("wrong_token", &request);
        let message = "That is not the operator token.";
        return Ok(view::page_response(401, view::login(&next, Some(message))));
    }
    state.sign_in.succeeded(client);
    metrics::counter!("inlet_console_signins_total", "result" => "success").increment(1);
    tracing::info!(peer = ?request.peer_addr(), "console sign-in");
    let settings = &settings.console;
    let ttl = chrono::Duration::from_std(settings.session_ttl)
        .map_err(|e| ConsoleError::Internal(format!("session_ttl: {e}")))?;
    let value = open_session(&state, token, ttl).await?;
    let secure = settings.secure_cookie || request.connection_info().scheme() == "https";
    Ok(HttpResponse::SeeOther()
        .insert_header((
            header::SET_COOKIE,
            set_cookie(&value, ttl.num_seconds(), secure),
        ))
        .insert_header((header::LOCATION, next))
        .finish())
}

/// A new session, open in the database for `ttl`: its cookie value.
async fn open_session(
    state: &AppState,
    token: &Secret,
    ttl: chrono::Duration,
) -> Result<String, ConsoleError> {
    let now = state.clock.now();
    let expires = now + ttl;
    let (value, key) = issue(token, expires)?;
    let (now, expires) = (now.naive_utc(), expires.naive_utc());
    crate::db::on_connection(&state.pool, move |c| {
        sessions::open(c, &key, now, expires).map_err(Problem::from)
    })
    .await?;
    Ok(value)
}

/// Counts and logs a refused sign-in (never what was typed).
fn refused_sign_in(result: &'static str, request: &HttpRequest) {
    metrics::counter!("inlet_console_signins_total", "result" => result).increment(1);
    tracing::warn!(result, peer = ?request.peer_addr(), "console sign-in refused");
}

/// `POST /console/logout`: closes the session for every instance, and clears the cookie.
pub async fn logout(
    session: Session,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = form_fields(&body);
    check_csrf(&session, &fields)?;
    let (key, now) = (session.key(), state.clock.now().naive_utc());
    crate::db::on_connection(&state.pool, move |c| {
        sessions::close(c, &key, now).map_err(Problem::from)
    })
    .await?;
    tracing::info!(session = %session.nonce.get(..8).unwrap_or_default(), "console sign-out");
    Ok(HttpResponse::SeeOther()
        .insert_header((header::SET_COOKIE, set_cookie("", 0, false)))
        .insert_header((header::LOCATION, format!("{PATH}/login")))
        .finish())
}
