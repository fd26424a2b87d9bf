//! `POST /webhooks/{source}`: size limit → source lookup → signature over the raw bytes →
//! identity and fact → the ingest transaction on a blocking thread → the answer.
//! Every outcome and every rejection is logged and counted here, in one place.

use crate::config::{ServerSettings, Settings};
use crate::idempotency::{Answer, REPLAYED_HEADER};
use crate::identity::Identity;
use crate::ingest::{Claim, Outcome};
use crate::ledger::{FactIdentity, BODY_KIND};
use crate::provider::SourceSettings;
use crate::routes::RequestId;
use crate::routes::{Problem, Reason};
use crate::secret::Secret;
use crate::signature::{Headers, Keys, Unverified, Verified};
use crate::state::AppState;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use std::time::Instant;

/// The schemes read the headers actix received.
impl Headers for header::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }
}

pub async fn receive_webhook(
    request: HttpRequest,
    source: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let name = source.into_inner();
    // One snapshot for the whole request: a reload meanwhile does not change its secrets,
    // its destinations or its answer.
    let settings = state.settings.current();
    // Unknown names come from the network: never a label or a log field as sent.
    let source_label = match settings.source(&name) {
        Some(source) => source.name.as_str().to_owned(),
        None => "unknown".to_owned(),
    };
    let span = tracing::Span::current();
    span.record("source", source_label.as_str());
    let result = ingest(&request, &name, payload, &state, &settings).await;
    let outcome = match &result {
        Ok((outcome, _, _)) => outcome.as_str(),
        Err(problem) => problem.reason.code(),
    };
    metrics::counter!("inlet_webhooks_total", "source" => source_label.clone(), "outcome" => outcome)
        .increment(1);
    state
        .traffic
        .record(&source_label, outcome, state.clock.now().timestamp());
    match result {
        Ok((outcome, event_id, answer)) => {
            span.record("event_id", event_id.as_str());
            span.record("outcome", outcome.as_str());
            tracing::info!(source = %source_label, %event_id, outcome = outcome.as_str(), "webhook processed");
            answer_response(outcome, answer)
        }
        Err(problem) => {
            span.record("outcome", problem.reason.code());
            if problem.reason == Reason::Internal {
                tracing::error!(source = %source_label, reason = problem.reason.code(), detail = %problem.detail, "webhook failed");
            } else {
                tracing::warn!(source = %source_label, reason = problem.reason.code(), detail = %problem.detail, "webhook rejected");
            }
            let request_id = request
                .extensions()
                .get::<RequestId>()
                .map_or_else(|| "-".to_owned(), |id| id.0.clone());
            problem.for_outsiders(&request_id).error_response()
        }
    }
}

async fn ingest(
    request: &HttpRequest,
    name: &str,
    payload: web::Payload,
    state: &AppState,
    settings: &Settings,
) -> Result<(Outcome, String, Answer), Problem> {
    let source = settings.source(name).ok_or_else(|| {
        Problem::new(
            Reason::UnknownSource,
            "no source of that name is configured",
        )
    })?;
    let body = read_body(request, payload, &settings.server).await?;
    let seen = Instant::now();

    let now = state.clock.now();
    let scheme = source.provider.scheme();
    let keys = Keys {
        secrets: &source.secrets,
        tolerance: source.tolerance,
    };
    let verified = scheme.verify(Unverified::new(request.headers(), &body), keys, now)?;
    if let Some(answer) = source.provider.handshake(&verified, &source.secrets) {
        return Ok((Outcome::Handshake, "-".to_owned(), answer));
    }
    let (claim, routed) = claim_of(request, source, settings, (&verified, &body), now)?;
    let event_id = claim.identity.event_id.to_string();

    let verdict = state.committer.commit(claim).await;
    metrics::histogram!("inlet_ingest_duration_seconds", "source" => source.name.as_str().to_owned())
        .record(seen.elapsed().as_secs_f64());
    let (outcome, answer) = verdict?;
    if outcome == Outcome::Accepted {
        after_accepted(state, settings, source.name.as_str(), routed);
    }
    Ok((outcome, event_id, answer))
}

/// What a verified request claims: its event, its fact (and, for a source keyed on what
/// was signed, the body's), the stored copy of the request and the outbox rows of the
/// destinations whose `events` filter takes its type; and whether there is any. `body` is
/// the bytes `verified` reads (a shared buffer: cloning it copies nothing).
fn claim_of(
    request: &HttpRequest,
    source: &SourceSettings,
    settings: &Settings,
    (verified, body): (&Verified<'_>, &web::Bytes),
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(Claim, bool), Problem> {
    let identity = Identity::locate(verified, &source.locators)?;
    let fact = FactIdentity::of_event(
        &source.fact_rules,
        identity.event_type.as_deref(),
        &identity.event_id,
        identity.document.as_ref(),
        identity.fact_key.as_ref(),
    )?;
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    // What was signed: the body, or its canonical reading.
    let fingerprint = verified.content_digest();
    let destinations =
        settings
            .destinations
            .deadlines(source.name.as_str(), identity.event_type.as_deref(), now);
    let routed = !destinations.is_empty();
    let body_fact = (source.keys_body_fact && fact.kind != BODY_KIND).then(|| FactIdentity {
        kind: BODY_KIND.to_owned(),
        key: fingerprint.clone(),
    });
    let claim = Claim {
        source: source.name.as_str().to_owned(),
        identity,
        fact,
        body_fact,
        fingerprint,
        content_type,
        headers: received_headers(
            request,
            source.provider.credential_header(),
            &source.secrets,
        ),
        received_at: now,
        expires_at: now + settings.retention.events.0,
        destinations,
        answer: source.provider.event_answer(verified),
        payload: body.clone(),
    };
    Ok((claim, routed))
}

/// After a new fact committed: wake the dispatcher when it has outbox rows, or count it
/// as unrouted when the source has destinations but none takes its type.
fn after_accepted(state: &AppState, settings: &Settings, source: &str, routed: bool) {
    if routed {
        if let Some(waker) = &state.dispatcher_waker {
            waker.notify_one();
        }
    } else if !settings.destinations.of(source).is_empty() {
        metrics::counter!("inlet_unrouted_facts_total", "source" => source.to_owned()).increment(1);
    }
}

/// Headers that carry credentials whatever the source: never stored.
const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-forwarded-client-cert",
];

/// Parts of a header name that mark a credential (proxies add bearer assertions:
/// `cf-access-jwt-assertion`, `x-amzn-oidc-data`, session and API tokens).
const CREDENTIAL_MARKS: [&str; 7] = [
    "token",
    "secret",
    "password",
    "jwt",
    "session",
    "x-amzn-oidc-",
    "cf-access-",
];

/// What a credential's value is stored as.
pub const REDACTED: &str = "[redacted]";

/// Whether the header `name` (lower case) may carry a credential: the names above, any
/// name with a credential mark, and the source's own token header.
fn is_credential(name: &str, source_header: Option<&str>) -> bool {
    CREDENTIAL_HEADERS.contains(&name)
        || CREDENTIAL_MARKS.iter().any(|mark| name.contains(mark))
        || source_header.is_some_and(|header| header.eq_ignore_ascii_case(name))
}

/// What gives a source's credential away in a stored header: its name ([`is_credential`])
/// or its value — a sender, proxy or gateway may copy the credential under any other name
/// (`X-Forwarded-Hook-Key`, `X-Signature: Bearer …`).
struct Credentials<'a> {
    /// The source's own token header.
    header: Option<&'a str>,
    /// Each secret as configured, and its base64 without padding (how `Basic` sends
    /// `user:password`; a prefix of the padded form too).
    values: Vec<String>,
}

impl<'a> Credentials<'a> {
    fn of(header: Option<&'a str>, secrets: &[Secret]) -> Self {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        use base64::Engine;
        let mut values = Vec::with_capacity(secrets.len() * 3);
        for secret in secrets.iter().map(Secret::expose) {
            values.push(secret.to_owned());
            values.push(STANDARD_NO_PAD.encode(secret));
            values.push(URL_SAFE_NO_PAD.encode(secret));
        }
        values.retain(|value| !value.is_empty());
        values.sort_unstable();
        values.dedup();
        Self { header, values }
    }

    /// Whether the header `name` (lower case) with `value` is stored as [`REDACTED`]. A
    /// substring search, not constant time: it runs only after the request verified, so
    /// whoever could time it already holds the credential.
    fn reveal(&self, name: &str, value: &str) -> bool {
        is_credential(name, self.header) || self.values.iter().any(|v| value.contains(v.as_str()))
    }
}

/// The request's headers as received, by name, as JSON `[[name, value], …]` (values as
/// text, invalid UTF-8 replaced); a header that would reveal a credential, by its name or
/// by its value ([`Credentials::reveal`]), is stored as [`REDACTED`]. Signature headers are
/// kept: they prove nothing to anyone without the secret.
fn received_headers(request: &HttpRequest, header: Option<&str>, secrets: &[Secret]) -> String {
    let credentials = Credentials::of(header, secrets);
    let mut rows: Vec<(&str, std::borrow::Cow<'_, str>)> = request
        .headers()
        .iter()
        .map(|(name, value)| {
            let name = name.as_str();
            let text = String::from_utf8_lossy(value.as_bytes());
            let value = if credentials.reveal(name, &text) {
                REDACTED.into()
            } else {
                text
            };
            (name, value)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
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

fn answer_response(outcome: Outcome, answer: Answer) -> HttpResponse {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = HttpResponse::build(status);
    if let Ok(content_type) = HeaderValue::from_str(&answer.content_type) {
        response.insert_header((header::CONTENT_TYPE, content_type));
    }
    if outcome == Outcome::StoredAnswer {
        response.insert_header((REPLAYED_HEADER, "true"));
    }
    response.body(answer.body)
}

#[cfg(test)]
mod tests {
    use super::{is_credential, Credentials};
    use crate::secret::Secret;

    #[test]
    fn credentials_are_recognised_and_signatures_are_not() {
        for name in [
            "authorization",
            "cookie",
            "x-api-key",
            "cf-access-jwt-assertion",
            "x-amzn-oidc-data",
            "x-auth-token",
            "x-session-id",
        ] {
            assert!(is_credential(name, None), "{name}");
        }
        for name in [
            "stripe-signature",
            "x-hub-signature-256",
            "webhook-signature",
            "x-twilio-signature",
            "x-signature-ed25519",
            "content-type",
        ] {
            assert!(!is_credential(name, None), "{name}");
        }
        assert!(is_credential("x-webhook-key", Some("X-Webhook-Key")));
    }

    #[test]
    fn a_secret_anywhere_in_a_value_reveals_it_under_any_name() {
        let secrets = [
            Secret::new("tok_0123456789abcdef"),
            Secret::new("user:pa/ss?>word"),
        ];
        let credentials = Credentials::of(None, &secrets);
        for value in [
            "tok_0123456789abcdef",
            "Bearer tok_0123456789abcdef",
            "Basic dXNlcjpwYS9zcz8+d29yZA==",
            "basic dXNlcjpwYS9zcz8-d29yZA",
        ] {
            assert!(credentials.reveal("x-forwarded-hook-key", value), "{value}");
        }
        for value in ["tok_0123456789abcde", "application/json", ""] {
            assert!(
                !credentials.reveal("x-forwarded-hook-key", value),
                "{value}"
            );
        }
        assert!(!Credentials::of(None, &[Secret::new("")]).reveal("x-a", "anything"));
    }
}
