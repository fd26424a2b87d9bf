//! Signing in and out of the console: the sign-in page, an operator's token for a session
//! cookie (with a wait after repeated wrong tokens, shared with the API's), and signing out
//! for every instance — each written to the audit trail.

use super::error::ConsoleError;
use super::forms::{field, form_fields};
use super::session::{
    check_csrf, console_caller, issue, operators, safe_next, set_cookie, Session, PATH,
};
use super::view;
use crate::operator::{roles, sessions, Account, AuditEntry, Caller};
use crate::routes::Problem;
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

/// `POST /console/login`: an operator's token for a session cookie, or a clear refusal.
pub async fn login(
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let settings = state.settings.current();
    let accounts = operators(&settings)?;
    let fields = form_fields(&body);
    let next = safe_next(field(&fields, "next").unwrap_or(PATH)).to_owned();
    let client = request.peer_addr().map(|peer| peer.ip());
    let given = field(&fields, "token").unwrap_or_default();
    if given.trim().is_empty() {
        // No token guesses nothing: never counted, never made to wait (as at the API).
        refused_sign_in("no_token", &request);
        let message = "Enter an operator's token.";
        return Ok(view::page_response(401, view::login(&next, Some(message))));
    }
    if let Some(left) = state.sign_in.wait_left(client, state.clock.now()) {
        refused_sign_in("waiting", &request);
        let secs = crate::routes::seconds_to_wait(left);
        let message = format!("Too many wrong tokens in a row. Try again in {secs} s.");
        let mut page = view::page_response(429, view::login(&next, Some(&message)));
        if let Ok(value) = header::HeaderValue::from_str(&secs.to_string()) {
            page.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return Ok(page);
    }
    let Some(account) = roles::find(accounts, given.trim()) else {
        state
            .sign_in
            .failed(client, settings.operator.lockout_after, state.clock.now());
        refused_sign_in("wrong_token", &request);
        let message = "That is not an operator's token.";
        return Ok(view::page_response(401, view::login(&next, Some(message))));
    };
    let caller = console_caller(account, &request);
    let console = &settings.console;
    let ttl = chrono::Duration::from_std(console.session_ttl)
        .map_err(|e| ConsoleError::Internal(format!("session_ttl: {e}")))?;
    let value = open_session(&state, account, &caller, ttl).await?;
    metrics::counter!("inlet_console_signins_total", "result" => "success").increment(1);
    tracing::info!(operator = %account.name, role = account.role.as_str(), peer = ?request.peer_addr(), "console sign-in");
    let secure = console.secure_cookie || request.connection_info().scheme() == "https";
    Ok(HttpResponse::SeeOther()
        .insert_header((
            header::SET_COOKIE,
            set_cookie(&value, ttl.num_seconds(), secure),
        ))
        .insert_header((header::LOCATION, next))
        .finish())
}

/// A new session of `account`, open in the database for `ttl` and written to the audit
/// trail in the same transaction: its cookie value.
async fn open_session(
    state: &AppState,
    account: &Account,
    caller: &Caller,
    ttl: chrono::Duration,
) -> Result<String, ConsoleError> {
    let now = state.clock.now();
    let expires = now + ttl;
    let (value, key) = issue(&state.session_key, account, expires)?;
    let (caller, faults) = (caller.clone(), state.faults.clone());
    let result = format!(
        "session open until {}",
        expires.format("%Y-%m-%d %H:%M:%S UTC")
    );
    crate::db::on_connection(&state.pool, move |c| {
        let entry = AuditEntry::done(&caller, "sign_in", b"{}", &result, now);
        sessions::open(c, &key, expires.naive_utc(), (&faults, &entry)).map_err(Problem::from)
    })
    .await?;
    Ok(value)
}

/// Counts and logs a refused sign-in (never what was typed).
fn refused_sign_in(result: &'static str, request: &HttpRequest) {
    metrics::counter!("inlet_console_signins_total", "result" => result).increment(1);
    tracing::warn!(result, peer = ?request.peer_addr(), "console sign-in refused");
}

/// `POST /console/logout`: closes the session for every instance (written to the audit
/// trail in the same transaction), and clears the cookie.
pub async fn logout(
    session: Session,
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let fields = form_fields(&body);
    check_csrf(&session, &fields)?;
    let caller = session.caller(&state.settings.current(), &request)?;
    let (key, now, faults) = (session.key(), state.clock.now(), state.faults.clone());
    crate::db::on_connection(&state.pool, move |c| {
        let entry = AuditEntry::done(&caller, "sign_out", b"{}", "session closed", now);
        sessions::close(c, &key, (&faults, &entry)).map_err(Problem::from)
    })
    .await?;
    tracing::info!(operator = %session.name, session = %session.nonce.get(..8).unwrap_or_default(), "console sign-out");
    Ok(HttpResponse::SeeOther()
        .insert_header((header::SET_COOKIE, set_cookie("", 0, false)))
        .insert_header((header::LOCATION, format!("{PATH}/login")))
        .finish())
}
