//! `inlet receive`: a sample application to deliver to, where the quickstart ends. As
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
/// The largest delivery body read.
const MAX_BODY: usize = 16 * 1024 * 1024;
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

/// What a delivery says of itself in Inlet's headers, ready to print.
struct Delivery {
    key: String,
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
        let key = header("idempotency-key");
        let line = format!(
            "key={key} source={} event={} type={} attempt={}",
            header("inlet-source"),
            header("inlet-event-id"),
            header("inlet-event-type"),
            header("inlet-attempt"),
        );
        Self { key, line }
    }
}

/// A header value as printable text: no control characters, at most [`MAX_PRINTED`].
fn printable(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_PRINTED)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

async fn receive(
    receiver: web::Data<Receiver>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let delivery = Delivery::of(&request);
    let keys = Keys {
        secrets: &receiver.secrets,
        tolerance: TOLERANCE,
    };
    let unverified = Unverified::new(request.headers(), &body);
    match Standard.verify(unverified, keys, Utc::now()) {
        Ok(_) => {
            let repeat = match receiver.seen_before(&delivery.key) {
                true => " (seen before: a retry or a replay, to apply once)",
                false => "",
            };
            println!("delivered  {}{repeat}", delivery.line);
            HttpResponse::Ok().finish()
        }
        Err(error) => {
            println!("REFUSED    {}: {error}", delivery.line);
            HttpResponse::Unauthorized()
                .content_type("application/problem+json")
                .body(
                    serde_json::json!({
                        "type": "about:blank",
                        "title": "the delivery's signature does not verify",
                        "status": 401,
                        "detail": error.to_string(),
                    })
                    .to_string(),
                )
        }
    }
}

/// The secrets `inlet receive` verifies with when none is given: those of the
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
pub async fn run_receiver(bind: &str, secrets: Vec<Secret>) -> anyhow::Result<()> {
    let count = secrets.len();
    let receiver = web::Data::new(Receiver {
        secrets,
        seen: Mutex::new(HashSet::new()),
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(receiver.clone())
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .default_service(web::to(receive))
    })
    .workers(1)
    .bind(bind)?;
    for address in server.addrs() {
        println!(
            "receiving deliveries on http://{address} (any path), verifying their \
             signatures with {count} secret{}",
            if count == 1 { "" } else { "s" }
        );
    }
    server.run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::EventToSign;
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
                .default_service(web::to(receive)),
        )
        .await;
        let body = br#"{"id":"evt_1"}"#;
        let event = EventToSign {
            id: "stripe:evt_1".to_owned(),
            event_type: "payment_intent.succeeded".to_owned(),
        };
        let mut signed = Standard.sign(body, &secret, Utc::now(), &event);
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
    }

    #[test]
    fn printed_headers_carry_no_control_characters() {
        assert_eq!(printable(b"a\x1b[31mb\n"), "a?[31mb?");
        assert_eq!(printable(&[b'x'; 500]).len(), MAX_PRINTED);
    }
}
