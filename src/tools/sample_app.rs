//! `inlet sample-app`: a sample application to deliver to, where the quickstart ends. As
//! every application behind Inlet should, it verifies each delivery's Standard Webhooks
//! signature with the destination's secret before it trusts the body, answers `200` — or
//! `401` to a delivery it cannot verify, which Inlet then retries — and prints one line
//! per delivery: the delivery key, the event's source, id and type, the attempt, and
//! whether the key came before (a retry or a replay: an application applies it once).

use crate::config::Settings;
use crate::secret::Secret;
use crate::signature::{Keys, Scheme, Standard, Unverified};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use chrono::Utc;
use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How far a delivery's signed timestamp may be from now (Standard Webhooks' advice).
const TOLERANCE: Duration = Duration::from_secs(300);
/// The largest delivery body read (Inlet's default `server.max_body_bytes`).
const MAX_BODY: usize = 1024 * 1024;
/// Connections served at once: each may hold a body of up to [`MAX_BODY`] before its
/// signature is checked.
const MAX_CONNECTIONS: usize = 256;
/// The most characters of a header value printed.
const MAX_PRINTED: usize = 200;
/// Delivery keys remembered to tell a repeat; past this many the memory starts afresh.
const KEYS_REMEMBERED: usize = 100_000;

/// The receiver's state: the secrets it verifies with and the keys it has seen.
struct Receiver {
    secrets: Vec<Secret>,
    seen: Mutex<HashSet<String>>,
}

impl Receiver {
    /// Whether `key` came before; remembers it.
    fn seen_before(&self, key: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= KEYS_REMEMBERED {
            seen.clear();
        }
        !seen.insert(key.to_owned())
    }
}

/// What a delivery says of itself, ready to print. The key is the signed `webhook-id`
/// (Inlet sends the delivery key there and in `Idempotency-Key`); source, event id, type
/// and attempt come from Inlet's own headers, which the signature does not cover.
struct Delivery {
    key: Option<String>,
    line: String,
}

impl Delivery {
    fn of(request: &HttpRequest) -> Self {
        let header = |name: &str| -> String {
            request
                .headers()
                .get(name)
                .map_or_else(|| "-".to_owned(), |value| printable(value.as_bytes()))
        };
        let key = request
            .headers()
            .get("webhook-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let line = format!(
            "key={} source={} event={} type={} attempt={}",
            header("webhook-id"),
            header("inlet-source"),
            header("inlet-event-id"),
            header("inlet-event-type"),
            header("inlet-attempt"),
        );
        Self { key, line }
    }

    /// Why a delivery whose signature verified is still not one Inlet sent: its
    /// `Idempotency-Key` (what an application deduplicates on) is not the signed key.
    fn unsigned_key(&self, request: &HttpRequest) -> Option<String> {
        let idempotency_key = request
            .headers()
            .get("idempotency-key")
            .map(|v| v.as_bytes());
        (idempotency_key != self.key.as_deref().map(str::as_bytes)).then(|| {
            "its Idempotency-Key is not its signed webhook-id: a copy re-labelled".to_owned()
        })
    }
}

/// A header value as printable text: control, format (bidi, zero-width) and space
/// characters escaped, so a value can neither move the cursor nor pass for another field;
/// at most [`MAX_PRINTED`] characters.
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_PRINTED)
        .flat_map(|c| match c.is_ascii_graphic() {
            true => vec![c],
            false => c.escape_unicode().collect(),
        })
        .collect()
}

/// Writes one line to stdout; a closed or full stdout is not the sender's problem.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

async fn take_delivery(
    receiver: web::Data<Receiver>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let delivery = Delivery::of(&request);
    let keys = Keys {
        secrets: &receiver.secrets,
        tolerance: TOLERANCE,
        now: Utc::now(),
    };
    let unverified = Unverified::new(request.headers(), &body);
    let verdict = match Standard.verify(unverified, keys) {
        Err(error) => Err(error.to_string()),
        Ok(_) => match (&delivery.key, delivery.unsigned_key(&request)) {
            (Some(key), None) => Ok(key.clone()),
            (_, Some(reason)) => Err(reason),
            (None, None) => Err("its webhook-id is not text".to_owned()),
        },
    };
    match verdict {
        Ok(key) => {
            let repeat = match receiver.seen_before(&key) {
                true => " (seen before: a retry or a replay, to apply once)",
                false => "",
            };
            say(&format!("delivered  {}{repeat}", delivery.line));
            HttpResponse::Ok().finish()
        }
        Err(reason) => {
            say(&format!("REFUSED    {}: {reason}", delivery.line));
            HttpResponse::Unauthorized()
                .content_type("application/problem+json")
                .body(
                    serde_json::json!({
                        "type": "about:blank",
                        "title": "the delivery's signature does not verify",
                        "status": 401,
                        "detail": reason,
                    })
                    .to_string(),
                )
        }
    }
}

/// The secrets `inlet sample-app` verifies with when none is given: those of the
/// configuration's HTTP destinations whose URL is on `bind`'s port and host
/// (`localhost` and `127.0.0.1` being one).
pub fn secrets_for(settings: &Settings, bind: &str) -> anyhow::Result<Vec<Secret>> {
    let (host, port) = bind
        .rsplit_once(':')
        .and_then(|(host, port)| Some((loopback(host), port.parse::<u16>().ok()?)))
        .ok_or_else(|| anyhow::anyhow!("--bind {bind}: expected HOST:PORT"))?;
    let mut secrets: Vec<Secret> = Vec::new();
    for (_, destination) in settings.destinations.iter() {
        let Ok(url) = reqwest::Url::parse(&destination.url) else {
            continue;
        };
        let on_bind = url.port_or_known_default() == Some(port)
            && url.host_str().map(loopback) == Some(host)
            && url.scheme() == "http";
        if on_bind && !secrets.contains(&destination.secret) {
            secrets.push(destination.secret.clone());
        }
    }
    if secrets.is_empty() {
        anyhow::bail!(
            "no destination of this configuration delivers to http://{bind}: give the \
             destination's secret with --secret (whsec_…, env:NAME or file:PATH)"
        );
    }
    Ok(secrets)
}

/// `localhost` and `127.0.0.1` name the same listener.
fn loopback(host: &str) -> &str {
    match host {
        "localhost" => "127.0.0.1",
        other => other,
    }
}

/// Serves the receiver at `bind` until Ctrl-C or SIGTERM, printing each delivery.
pub async fn run_sample_app(bind: &str, secrets: Vec<Secret>) -> anyhow::Result<()> {
    let count = secrets.len();
    let receiver = web::Data::new(Receiver {
        secrets,
        seen: Mutex::new(HashSet::new()),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(receiver.clone())
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .default_service(web::to(take_delivery))
    })
    .workers(1)
    .max_connections(MAX_CONNECTIONS)
    .bind(bind)?;
    for address in server.addrs() {
        say(&format!(
            "receiving deliveries on http://{address} (any path), verifying their \
             signatures with {count} secret{}",
            if count == 1 { "" } else { "s" }
        ));
    }
    server.run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::EventToSign;
    use crate::signature::{Signer, ToSign};
    use actix_web::test::{call_service, init_service, TestRequest};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[actix_web::test]
    async fn a_signed_delivery_is_accepted_and_a_forged_one_refused() {
        let secret = Secret::resolve(SECRET).expect("a secret");
        let receiver = web::Data::new(Receiver {
            secrets: vec![secret.clone()],
            seen: Mutex::new(HashSet::new()),
        });
        let app = init_service(
            App::new()
                .app_data(receiver.clone())
                .default_service(web::to(take_delivery)),
        )
        .await;
        let body = br#"{"id":"evt_1"}"#;
        let event = EventToSign {
            id: "stripe:evt_1".to_owned(),
            event_type: "payment_intent.succeeded".to_owned(),
        };
        let mut signed = Standard.sign(ToSign::new(body, &secret, Utc::now(), &event));
        signed.push(("Idempotency-Key".to_owned(), event.id.clone()));
        let post = |headers: &[(String, String)], body: &[u8]| {
            let mut request = TestRequest::post()
                .uri("/events")
                .set_payload(body.to_vec());
            for (name, value) in headers {
                request = request.insert_header((name.as_str(), value.as_str()));
            }
            request.to_request()
        };
        assert_eq!(call_service(&app, post(&signed, body)).await.status(), 200);
        assert!(
            receiver.seen_before("stripe:evt_1"),
            "the key was remembered"
        );
        let forged = call_service(&app, post(&signed, br#"{"id":"evt_2"}"#)).await;
        assert_eq!(forged.status(), 401);
        // A captured delivery re-sent under another (unsigned) Idempotency-Key.
        let mut relabelled = signed.clone();
        relabelled.retain(|(name, _)| name != "Idempotency-Key");
        relabelled.push(("Idempotency-Key".to_owned(), "stripe:evt_9".to_owned()));
        let copy = call_service(&app, post(&relabelled, body)).await;
        assert_eq!(copy.status(), 401);
        assert!(!receiver.seen_before("stripe:evt_9"), "never counted");
    }

    #[test]
    fn printed_headers_can_neither_move_the_cursor_nor_forge_a_field() {
        assert_eq!(printable(b"a\x1b[31mb\n"), "a\\u{1b}[31mb\\u{a}");
        assert_eq!(printable(b"x source=evil"), "x\\u{20}source=evil");
        assert_eq!(printable("\u{202e}".as_bytes()), "\\u{202e}");
        assert_eq!(printable(&[b'x'; 500]).len(), MAX_PRINTED);
    }
}
