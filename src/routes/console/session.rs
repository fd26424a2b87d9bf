//! Signing in to the console: the operator token, once, for a signed and expiring
//! session cookie; a CSRF token per session for every form that changes something.
//!
//! The cookie is `{expires}.{nonce}.{mac}`: the MAC (HMAC-SHA256 under a key derived
//! from the operator token) covers the expiry and the nonce, so it cannot be forged or
//! extended, and rotating the token ends every session. The nonce is the session's id:
//! sign-in opens the session in the database (`console_sessions`, keyed by the id's
//! sha256), every page checks it is still open there — only once the MAC is genuine, so a
//! forged cookie costs no query — and signing out closes it for every instance sharing
//! the database, a copied cookie included. The CSRF token is the MAC of the nonce under
//! the same key: a page of another origin can neither read it nor compute it.

use super::view;
use super::{form_fields, ConsoleError};
use crate::config::Settings;
use crate::error::Problem;
use crate::operator::sessions::{self, SessionKey};
use crate::routes::admin::Caller;
use crate::secret::{hmac_sha256, secrets_equal, Secret};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use std::future::Future;
use std::io::Read;
use std::pin::Pin;

/// The session cookie's name.
pub const COOKIE: &str = "inlet_console";
/// Where the console lives; the cookie is sent nowhere else.
pub const PATH: &str = "/console";

/// A signed-in operator.
#[derive(Debug, Clone)]
pub struct Session {
    nonce: String,
    /// The token every form of this session carries.
    pub csrf: String,
}

impl Session {
    /// The session's row in `console_sessions`.
    fn key(&self) -> SessionKey {
        SessionKey::of(&self.nonce)
    }

    /// Whether `given` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, given: Option<&str>) -> bool {
        given.is_some_and(|given| secrets_equal(given.as_bytes(), self.csrf.as_bytes()))
    }

    /// The caller the session acts as under the request's `settings`: the operator
    /// token's, as in the API.
    pub fn caller(settings: &Settings) -> Result<Caller, ConsoleError> {
        operator_token(settings).map(Caller::of_token)
    }
}

/// The operator token: what signs in, and what sessions are signed with.
fn operator_token(settings: &Settings) -> Result<&Secret, ConsoleError> {
    settings
        .operator
        .token
        .as_ref()
        .ok_or(ConsoleError::Disabled)
}

/// The key sessions are signed with, derived from the operator token.
fn session_key(token: &Secret) -> [u8; 32] {
    hmac_sha256(token.expose().as_bytes(), &[b"inlet console session key"])
}

fn mac_hex(key: &[u8; 32], parts: &[&[u8]]) -> String {
    hex::encode(hmac_sha256(key, parts))
}

/// A new session cookie value, valid until `expires`, and the session's key.
fn issue(token: &Secret, expires: DateTime<Utc>) -> Result<(String, SessionKey), ConsoleError> {
    let nonce = hex::encode(random_bytes::<16>()?);
    let expires = expires.timestamp().to_string();
    let mac = mac_hex(
        &session_key(token),
        &[b"session ", expires.as_bytes(), b" ", nonce.as_bytes()],
    );
    Ok((format!("{expires}.{nonce}.{mac}"), SessionKey::of(&nonce)))
}

/// The session a cookie value stands for, if it is genuine and unexpired at `now`.
fn verify(token: &Secret, value: &str, now: DateTime<Utc>) -> Option<Session> {
    let mut parts = value.splitn(3, '.');
    let (expires, nonce, mac) = (parts.next()?, parts.next()?, parts.next()?);
    let key = session_key(token);
    let expected = mac_hex(
        &key,
        &[b"session ", expires.as_bytes(), b" ", nonce.as_bytes()],
    );
    if !secrets_equal(mac.as_bytes(), expected.as_bytes()) {
        return None;
    }
    if expires.parse::<i64>().ok()? <= now.timestamp() {
        return None;
    }
    Some(Session {
        csrf: mac_hex(&key, &[b"csrf ", nonce.as_bytes()]),
        nonce: nonce.to_owned(),
    })
}

/// Bytes from the kernel's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], ConsoleError> {
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut urandom| urandom.read_exact(&mut bytes))
        .map_err(|e| ConsoleError::Internal(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes)
}

/// A page that needs a session: without a genuine, unexpired one that is still open in
/// the database, the browser is sent to sign in (and back here afterwards).
impl FromRequest for Session {
    type Error = ConsoleError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ConsoleError>>>>;

    fn from_request(request: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        let genuine = genuine_session(request);
        let next = next_of(request);
        Box::pin(async move {
            let (session, state) = genuine?;
            let (key, now) = (session.key(), state.clock.now().naive_utc());
            let open = crate::db::on_connection(&state.pool, move |c| {
                sessions::is_open(c, &key, now).map_err(Problem::from)
            })
            .await?;
            if !open {
                metrics::counter!("inlet_console_refused_total", "reason" => "signed_out")
                    .increment(1);
                tracing::warn!(
                    session = %session.nonce.get(..8).unwrap_or_default(),
                    "console session refused: signed out (a copied cookie?)"
                );
                return Err(ConsoleError::SignIn(next));
            }
            Ok(session)
        })
    }
}

/// The session the request's cookie stands for when it is genuine and unexpired (checked
/// without the database), and the state to check it is still open with.
fn genuine_session(request: &HttpRequest) -> Result<(Session, web::Data<AppState>), ConsoleError> {
    let state = request
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ConsoleError::Internal("the application state is missing".to_owned()))?;
    let settings = state.settings.current();
    let token = operator_token(&settings)?;
    let session = cookie_value(request)
        .and_then(|value| verify(token, value, state.clock.now()))
        .ok_or_else(|| ConsoleError::SignIn(next_of(request)))?;
    Ok((session, state.clone()))
}

/// The session cookie's value, from the `Cookie` header(s).
fn cookie_value(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get_all(header::COOKIE)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// A `Set-Cookie` value for the session: only for the console's path, never readable by
/// script, never sent from another site; `Secure` when asked for or over TLS.
fn set_cookie(value: &str, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{COOKIE}={value}; Path={PATH}; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    )
}

/// Where to return after signing in: this page, when it is a console page.
fn next_of(request: &HttpRequest) -> String {
    let path = request.uri().path_and_query().map_or(PATH, |p| p.as_str());
    safe_next(path).to_owned()
}

/// Only a console path (never another origin or `//host`) is a place to return to.
fn safe_next(next: &str) -> &str {
    let inside = next.starts_with(PATH) && !next.starts_with("//") && !next.contains('\\');
    if inside && next.bytes().all(|b| b.is_ascii_graphic()) {
        next
    } else {
        PATH
    }
}

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
    let next = safe_next(super::field(&fields, "next").unwrap_or(PATH)).to_owned();
    let client = request.peer_addr().map(|peer| peer.ip());
    if let Some(left) = state.sign_in.wait_left(client) {
        refused_sign_in("waiting", &request);
        let message = format!(
            "Too many wrong tokens in a row. Try again in {} s.",
            left.as_secs().max(1)
        );
        return Ok(view::page_response(429, view::login(&next, Some(&message))));
    }
    let given = super::field(&fields, "token").unwrap_or_default();
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
    super::check_csrf(&session, &fields)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_genuine_only_unaltered_unexpired_and_under_its_token() {
        let token = Secret::new("an-operator-token-0123");
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let (value, key) = issue(&token, now + chrono::Duration::hours(1)).unwrap();
        let session = verify(&token, &value, now).expect("genuine");
        assert_eq!(session.key(), key, "the cookie names the session opened");
        assert!(session.csrf_matches(Some(&session.csrf)));
        assert!(!session.csrf_matches(Some("0")));
        assert!(!session.csrf_matches(None));
        assert!(verify(&token, &value, now + chrono::Duration::hours(2)).is_none());
        assert!(verify(&Secret::new("another-token-0123456"), &value, now).is_none());
        let (expires, rest) = value.split_once('.').unwrap();
        let extended = format!("{}.{rest}", expires.parse::<i64>().unwrap() + 3600);
        assert!(verify(&token, &extended, now).is_none());
        assert!(verify(&token, "garbage", now).is_none());
        let (other, _) = issue(&token, now + chrono::Duration::hours(1)).unwrap();
        assert_ne!(verify(&token, &other, now).unwrap().csrf, session.csrf);
    }

    #[test]
    fn only_console_paths_are_returned_to() {
        assert_eq!(
            safe_next("/console/events?source=a"),
            "/console/events?source=a"
        );
        assert_eq!(safe_next("https://evil.example/console"), PATH);
        assert_eq!(safe_next("//evil.example"), PATH);
        assert_eq!(safe_next("/admin/events"), PATH);
        assert_eq!(safe_next("/console\\@evil"), PATH);
    }
}
