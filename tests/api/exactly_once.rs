//! Exactly once into the application (issue 52), end to end: Inlet signs and delivers, its
//! dispatcher retries through a network that loses every first attempt — half of them
//! after the application committed — and an operator replays every event; the application,
//! built on an inbox library, applies each fact exactly once. Once with `inlet sample-app`
//! (the Rust crate, clients/rust) and once with the Python library's FastAPI example
//! (clients/python), served by uvicorn from the virtualenv `scripts/prepare` makes.

use crate::helpers::{
    eventually, nothing_left_to_send, spawn_app_with, stripe_event, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use crate::quickstart::{Receiver, ScratchFile, DESTINATION_SECRET};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

on_both_backends!(
    the_rust_sample_app_applies_each_fact_once_through_a_flaky_network_and_a_replay,
    the_python_fastapi_app_applies_each_fact_once_through_a_flaky_network_and_a_replay,
);

/// Events a provider sends at once.
const EVENTS: usize = 24;

/// The network between Inlet and the application: each delivery's first attempt is lost —
/// an odd event's request never arrives (`503` from the network), an even event's arrives,
/// is applied and committed, and its answer is lost on the way back (`502`).
#[derive(Debug)]
struct FlakyNetwork {
    application: String,
    client: reqwest::Client,
}

async fn through_the_network(
    network: actix_web::web::Data<FlakyNetwork>,
    request: actix_web::HttpRequest,
    body: actix_web::web::Bytes,
) -> actix_web::HttpResponse {
    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    let first_attempt = header("inlet-attempt") == Some("1");
    let even = header("inlet-event-id")
        .and_then(|id| id.rsplit('_').next()?.parse::<u32>().ok())
        .is_some_and(|n| n % 2 == 0);
    if first_attempt && !even {
        return actix_web::HttpResponse::ServiceUnavailable().finish();
    }
    let mut forwarded = network
        .client
        .post(format!("{}{}", network.application, request.uri()))
        .body(body.to_vec());
    for (name, value) in request.headers() {
        forwarded = forwarded.header(name.as_str(), value.as_bytes());
    }
    let Ok(answer) = forwarded.send().await else {
        return actix_web::HttpResponse::BadGateway().finish();
    };
    match first_attempt {
        true => actix_web::HttpResponse::BadGateway().finish(),
        false => actix_web::HttpResponse::build(
            actix_web::http::StatusCode::from_u16(answer.status().as_u16())
                .unwrap_or(actix_web::http::StatusCode::BAD_GATEWAY),
        )
        .finish(),
    }
}

/// Rows of an application's `table` per message id, in its SQLite file.
fn applied_per_key(database: &Path, table: &str) -> HashMap<String, i64> {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        message_id: String,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let Ok(mut conn) = diesel::SqliteConnection::establish(&database.display().to_string()) else {
        return HashMap::new();
    };
    diesel::sql_query(format!(
        "SELECT message_id, COUNT(*) AS n FROM {table} GROUP BY message_id"
    ))
    .load::<Row>(&mut conn)
    .unwrap_or_default()
    .into_iter()
    .map(|row| (row.message_id, row.n))
    .collect()
}

/// Inlet delivering to `application` through the flaky network (no breaker: every first
/// attempt fails by design), with `extra` destination settings.
async fn inlet_delivering_through_the_network(
    backend: Backend,
    application: &str,
    extra: &str,
) -> Arc<TestApp> {
    let network = actix_web::web::Data::new(FlakyNetwork {
        application: application.to_owned(),
        client: reqwest::Client::new(),
    });
    let (network_url, _network) = crate::helpers::serve_application(network, through_the_network);
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{network_url}/webhooks/inlet\"\nsecret = \"{DESTINATION_SECRET}\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\nbreaker = {{ failures = 0 }}\n{extra}"
        )),
        ..Default::default()
    };
    Arc::new(spawn_app_with(backend, options).await)
}

/// A provider's burst of `EVENTS` payments, all at once; each accepted.
async fn send_the_burst(app: &Arc<TestApp>) {
    let mut posts = tokio::task::JoinSet::new();
    for n in 0..EVENTS {
        let app = app.clone();
        let body = stripe_event(
            &format!("evt_once_{n}"),
            "payment_intent.succeeded",
            &format!("pi_once_{n}"),
        );
        posts.spawn(async move { app.post_stripe(&body).await.json()["outcome"].clone() });
    }
    let outcomes = posts.join_all().await;
    assert!(outcomes.iter().all(|o| o == "accepted"), "{outcomes:?}");
}

/// The operator replays every event: each is delivered again under its own webhook-id.
async fn replay_every_event(app: &TestApp) {
    let all = serde_json::json!({ "filter": { "source": "stripe" } });
    let reply = app
        .admin("/admin/replay", Some(&all), Some("replay-every-event"))
        .await;
    reply.assert_status(200);
    let requeued = reply.json()["results"].as_array().map_or(0, |r| r.len());
    assert_eq!(requeued, EVENTS, "{}", reply.json());
}

/// The whole campaign against an application whose `table` (in the SQLite file
/// `database`) gets one row per fact applied.
async fn campaign(app: &Arc<TestApp>, database: &Path, table: &str) {
    send_the_burst(app).await;
    eventually("every fact applied", || async {
        applied_per_key(database, table).len() == EVENTS
    })
    .await;
    nothing_left_to_send(app).await;
    replay_every_event(app).await;
    nothing_left_to_send(app).await;
    let applied = applied_per_key(database, table);
    assert_eq!(applied.len(), EVENTS, "{applied:?}");
    assert!(
        applied.values().all(|n| *n == 1),
        "each fact applied once: {applied:?}"
    );
    assert!(
        applied
            .keys()
            .all(|key| key.starts_with("stripe:evt_once_")),
        "{applied:?}"
    );
}

async fn the_rust_sample_app_applies_each_fact_once_through_a_flaky_network_and_a_replay(
    backend: Backend,
) {
    let database = ScratchFile::new("exactly-once-rust");
    let receiver = Receiver::start(&database.0);
    let app = inlet_delivering_through_the_network(backend, &receiver.address, "").await;
    campaign(&app, &database.0, "deliveries").await;
    // Its inbox answered every copy: the even events' retries (their first answer was
    // lost), then each replay — a new delivery whose first attempt the network loses as
    // well: an odd event's replay arrives once (its retry), an even one's twice.
    let copies = receiver.printed("duplicate").len();
    assert_eq!(
        copies,
        EVENTS / 2 + EVENTS / 2 + 2 * (EVENTS / 2),
        "{:?}",
        receiver.lines()
    );
    assert_eq!(
        receiver.printed("delivered").len(),
        EVENTS,
        "{:?}",
        receiver.lines()
    );
    assert!(
        receiver.printed("FAILED").is_empty(),
        "{:?}",
        receiver.lines()
    );
}

/// The Python library's FastAPI example (clients/python/examples/fastapi_app), served by
/// uvicorn on a port of its own: the child and its address.
struct FastApiApp {
    child: Child,
    address: String,
}

/// Binds a free port first and hands the socket to uvicorn, so the address is known
/// before the first request (uvicorn prints none for port 0).
const SERVE_FASTAPI: &str = "\
import socket, uvicorn
from app import from_environment
sock = socket.socket()
sock.bind(('127.0.0.1', 0))
print('listening http://127.0.0.1:%d' % sock.getsockname()[1], flush=True)
uvicorn.Server(uvicorn.Config(from_environment(), log_level='warning')).run(sockets=[sock])
";

impl FastApiApp {
    fn start(database: &Path) -> Self {
        let python = std::env::var("INLET_TEST_INBOX_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/inbox-python/bin/python")
            });
        let examples =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/python/examples/fastapi_app");
        let mut child = Command::new(&python)
            .args(["-c", SERVE_FASTAPI])
            .current_dir(examples)
            .env(
                "INLET_INBOX_DATABASE_URL",
                format!("sqlite:///{}", database.display()),
            )
            .env("INLET_WEBHOOK_SECRETS", DESTINATION_SECRET)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} (scripts/prepare makes it): {e}", python.display()));
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        stdout.read_line(&mut first).expect("its first line");
        // Whatever it prints later is read, so a write to its stdout never fails.
        std::thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(drop));
        let address = first
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        Self { child, address }
    }
}

impl Drop for FastApiApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn the_python_fastapi_app_applies_each_fact_once_through_a_flaky_network_and_a_replay(
    backend: Backend,
) {
    let database = ScratchFile::new("exactly-once-python");
    let fastapi = FastApiApp::start(&database.0);
    // The example records a payment's customer and amount: a transform gives it that shape
    // (so Inlet signs the transformed body, and the library verifies that).
    let transform = "transform = '{type: .type, data: {customer: .data.object.id, amount: .data.object.amount}}'";
    let app = inlet_delivering_through_the_network(backend, &fastapi.address, transform).await;
    campaign(&app, &database.0, "payments").await;
}
