//! `inlet sample-app`: a sample application to deliver to, where the quickstart ends, and
//! the first user of the inbox library (`clients/rust`, crate `inlet-inbox`). As every
//! application behind Inlet should, it verifies each delivery's Standard Webhooks
//! signature with the destination's secret before it trusts the body, then applies it
//! exactly once: the delivery's `webhook-id` is claimed in the inbox table of its own
//! SQLite database in the same transaction as the application's write (a row in
//! `deliveries`), and the answer comes after the commit. It answers `200` — to a copy
//! (a retry whose first answer was lost, an operator's replay) as well, without applying
//! it again — `401` to a delivery it cannot verify, `500` when its database fails (Inlet
//! retries), and prints one line per delivery: the key, the event's source, id and type,
//! the attempt, and whether it was applied or was a copy of one applied before.

use crate::config::Settings;
use crate::secret::Secret;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::sql_types::Text;
use diesel::{RunQueryDsl, SqliteConnection};
use inlet_inbox::diesel::{create_table, process, SqliteSetup};
use inlet_inbox::verify::Headers;
use inlet_inbox::{Claim, Force, Verified, Verifier};
use std::path::Path;

/// The largest delivery body read (Inlet's default `server.max_body_bytes`).
const MAX_BODY: usize = 1024 * 1024;
/// Connections served at once: each may hold a body of up to [`MAX_BODY`] before its
/// signature is checked.
const MAX_CONNECTIONS: usize = 256;
/// The most characters of a header value printed.
const MAX_PRINTED: usize = 200;
/// The inbox's consumer name: this application's one handler.
const CONSUMER: &str = "sample-app";

/// The application's own table: one row per delivery applied.
const DELIVERIES: &str = "CREATE TABLE IF NOT EXISTS deliveries (
    message_id TEXT NOT NULL,
    source     TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    event_type TEXT NOT NULL,
    attempt    TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

type Connections = Pool<ConnectionManager<SqliteConnection>>;

/// The receiver's state: the verifier and its database.
struct Receiver {
    verifier: Verifier,
    database: Connections,
}

/// The sample application's database at `path` (made, with its folder, when missing): the
/// inbox table and `deliveries`.
fn open_database(path: &Path) -> anyhow::Result<Connections> {
    if let Some(folder) = path.parent().filter(|f| !f.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)?;
    }
    let pool = Pool::builder()
        .max_size(4)
        .connection_customizer(Box::new(SqliteSetup::default()))
        .build(ConnectionManager::new(path.display().to_string()))?;
    let mut conn = pool.get()?;
    create_table(&mut *conn)?;
    conn.batch_execute(DELIVERIES)?;
    Ok(pool)
}

/// What a delivery says of itself, ready to print. The key is the signed `webhook-id`
/// (Inlet sends the delivery key there and in `Idempotency-Key`); source, event id, type
/// and attempt come from Inlet's own headers, which the signature does not cover.
struct Delivery {
    key: Option<String>,
    line: String,
    /// Source, event id, type and attempt, as recorded in `deliveries`.
    fields: [String; 4],
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
        let fields = [
            header("inlet-source"),
            header("inlet-event-id"),
            header("inlet-event-type"),
            header("inlet-attempt"),
        ];
        let line = format!(
            "key={} source={} event={} type={} attempt={}",
            header("webhook-id"),
            fields[0],
            fields[1],
            fields[2],
            fields[3],
        );
        Self { key, line, fields }
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

/// Verifies a delivery and applies it once: 200 (applied, or a copy), 401, or 500.
async fn take_delivery(
    receiver: web::Data<Receiver>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let delivery = Delivery::of(&request);
    let headers = Headers::from_fn(|name| request.headers().get(name).map(|v| v.as_bytes()));
    let verified = match receiver.verifier.verify(headers, &body) {
        Err(error) => Err(error.to_string()),
        Ok(verified) => match delivery.unsigned_key(&request) {
            None => Ok(verified),
            Some(reason) => Err(reason),
        },
    };
    let verified = match verified {
        Ok(verified) => verified,
        Err(reason) => {
            say(&format!("REFUSED    {}: {reason}", delivery.line));
            return problem(401, "the delivery's signature does not verify", &reason);
        }
    };
    let (database, fields) = (receiver.database.clone(), delivery.fields.clone());
    let applied = web::block(move || apply(&database, &verified, &fields)).await;
    match applied.map_err(|error| error.to_string()).and_then(|a| a) {
        Ok(Claim::New) => say(&format!("delivered  {}", delivery.line)),
        Ok(Claim::Duplicate) => say(&format!(
            "duplicate  {} (applied before: a retry or a replay, not applied again)",
            delivery.line
        )),
        Err(error) => {
            say(&format!("FAILED     {}: {error}", delivery.line));
            return problem(
                500,
                "the delivery was not applied",
                "rolled back: send it again",
            );
        }
    }
    HttpResponse::Ok().finish()
}

/// The claim and the application's write, in one transaction (blocking).
fn apply(
    database: &Connections,
    delivery: &Verified,
    fields: &[String; 4],
) -> Result<Claim, String> {
    let mut conn = database.get().map_err(|error| error.to_string())?;
    let outcome = process(&mut *conn, CONSUMER, delivery, Force::No, |tx, delivery| {
        diesel::sql_query("INSERT INTO deliveries (message_id, source, event_id, event_type, attempt) VALUES (?, ?, ?, ?, ?)")
            .bind::<Text, _>(delivery.message_id())
            .bind::<Text, _>(&fields[0])
            .bind::<Text, _>(&fields[1])
            .bind::<Text, _>(&fields[2])
            .bind::<Text, _>(&fields[3])
            .execute(tx)
            .map(drop)
            .map_err(inlet_inbox::Error::Diesel)
    });
    outcome.map_err(|error: inlet_inbox::Error| error.to_string())
}

/// A `problem+json` answer.
fn problem(status: u16, title: &str, detail: &str) -> HttpResponse {
    let status = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status)
        .content_type("application/problem+json")
        .body(
            serde_json::json!({
                "type": "about:blank",
                "title": title,
                "status": status.as_u16(),
                "detail": detail,
            })
            .to_string(),
        )
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

/// Serves the receiver at `bind` until Ctrl-C or SIGTERM, applying each delivery once to
/// the SQLite database at `database` and printing it.
pub async fn run_sample_app(
    bind: &str,
    secrets: Vec<Secret>,
    database: &Path,
) -> anyhow::Result<()> {
    let count = secrets.len();
    let verifier = Verifier::new(secrets.iter().map(Secret::expose)).map_err(anyhow::Error::msg)?;
    let receiver = web::Data::new(Receiver {
        verifier,
        database: open_database(database)?,
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
             signatures with {count} secret{}, applying each once to {}",
            if count == 1 { "" } else { "s" },
            database.display()
        ));
    }
    server.run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::EventToSign;
    use crate::signature::{Signer, Standard, ToSign};
    use actix_web::test::{call_service, init_service, TestRequest};
    use chrono::Utc;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[actix_web::test]
    async fn a_signed_delivery_is_accepted_and_a_forged_one_refused() {
        let secret = Secret::resolve(SECRET).expect("a secret");
        let path = std::env::temp_dir().join(format!("sample-app-{}.db", std::process::id()));
        let receiver = web::Data::new(Receiver {
            verifier: Verifier::new([SECRET]).expect("a secret"),
            database: open_database(&path).expect("its database"),
        });
        let applied = || -> i64 {
            #[derive(diesel::QueryableByName)]
            struct Count {
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                n: i64,
            }
            let mut conn = receiver.database.get().expect("a connection");
            diesel::sql_query("SELECT COUNT(*) AS n FROM deliveries")
                .get_result::<Count>(&mut *conn)
                .expect("a count")
                .n
        };
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
        assert_eq!(call_service(&app, post(&signed, body)).await.status(), 200);
        assert_eq!(applied(), 1, "the copy was answered, not applied");
        let forged = call_service(&app, post(&signed, br#"{"id":"evt_2"}"#)).await;
        assert_eq!(forged.status(), 401);
        // A captured delivery re-sent under another (unsigned) Idempotency-Key.
        let mut relabelled = signed.clone();
        relabelled.retain(|(name, _)| name != "Idempotency-Key");
        relabelled.push(("Idempotency-Key".to_owned(), "stripe:evt_9".to_owned()));
        let copy = call_service(&app, post(&relabelled, body)).await;
        assert_eq!(copy.status(), 401);
        assert_eq!(applied(), 1, "refusals apply nothing");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn printed_headers_can_neither_move_the_cursor_nor_forge_a_field() {
        assert_eq!(printable(b"a\x1b[31mb\n"), "a\\u{1b}[31mb\\u{a}");
        assert_eq!(printable(b"x source=evil"), "x\\u{20}source=evil");
        assert_eq!(printable("\u{202e}".as_bytes()), "\\u{202e}");
        assert_eq!(printable(&[b'x'; 500]).len(), MAX_PRINTED);
    }
}
