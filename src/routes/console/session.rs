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

use super::error::ConsoleError;
use super::forms::field;
use crate::config::Settings;
use crate::operator::sessions::{self, SessionKey};
use crate::operator::Caller;
use crate::routes::Problem;
use crate::secret::{hmac_sha256, secrets_equal, Secret};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest};
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
    pub(super) nonce: String,
    /// The token every form of this session carries.
    pub csrf: String,
}

impl Session {
    /// The session's row in `console_sessions`.
    pub(super) fn key(&self) -> SessionKey {
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
pub(super) fn operator_token(settings: &Settings) -> Result<&Secret, ConsoleError> {
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
pub(super) fn issue(
    token: &Secret,
    expires: DateTime<Utc>,
) -> Result<(String, SessionKey), ConsoleError> {
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
pub(super) fn set_cookie(value: &str, max_age_secs: i64, secure: bool) -> String {
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
pub(super) fn safe_next(next: &str) -> &str {
    let inside = next.starts_with(PATH) && !next.starts_with("//") && !next.contains('\\');
    if inside && next.bytes().all(|b| b.is_ascii_graphic()) {
        next
    } else {
        PATH
    }
}

/// Refuses a state-changing form without this session's CSRF token: counted and logged.
pub fn check_csrf(session: &Session, fields: &[(String, String)]) -> Result<(), ConsoleError> {
    if session.csrf_matches(field(fields, "csrf")) {
        return Ok(());
    }
    metrics::counter!("inlet_console_refused_total", "reason" => "csrf").increment(1);
    tracing::warn!("console form refused: missing or wrong CSRF token");
    Err(ConsoleError::Forbidden(
        "This form is not from this console session (its CSRF token is missing or wrong). \
         Reload the page and try again."
            .to_owned(),
    ))
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
