//! The quickstart, as a newcomer runs it: `inlet sample-app` (the sample application, the
//! real binary) and Inlet delivering to it. The receiver prints one delivery for a
//! payment, nothing for its duplicate nor for the same payment under another id, and
//! refuses — and prints — a delivery whose signature does not verify.

use crate::helpers::{
    eventually, nothing_left_to_send, serve_logging_json, spawn_app_with, stripe_event, Backend,
    TestOptions,
};
use crate::on_both_backends;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

on_both_backends!(
    the_receiver_prints_one_delivery_per_fact_and_refuses_a_forgery,
    through_a_flaky_network_and_a_replay_the_application_applies_each_fact_once,
);

const DESTINATION_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `inlet sample-app` on a free port: the child, its address, and the lines it prints.
struct Receiver {
    child: Child,
    address: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    /// `inlet sample-app`, applying deliveries to the SQLite file `database`.
    fn start(database: &std::path::Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_inlet"))
            .args([
                "sample-app",
                "--bind",
                "127.0.0.1:0",
                "--secret",
                DESTINATION_SECRET,
                "--database",
            ])
            .arg(database)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run inlet sample-app");
        let stdout = child.stdout.take().expect("its stdout");
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        reader.read_line(&mut first).expect("its first line");
        let address = first
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                collected.lock().expect("lines").push(line);
            }
        });
        Self {
            child,
            address,
            lines,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    fn printed(&self, prefix: &str) -> Vec<String> {
        let lines = self.lines();
        lines
            .into_iter()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch path for the sample application's database, removed with its guard.
struct ScratchFile(std::path::PathBuf);

impl ScratchFile {
    fn new(label: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("inlet-{label}-{}-{n}.db", std::process::id());
        Self(std::env::temp_dir().join(name))
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

async fn the_receiver_prints_one_delivery_per_fact_and_refuses_a_forgery(backend: Backend) {
    let database = ScratchFile::new("sample-app");
    let receiver = Receiver::start(&database.0);
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"{DESTINATION_SECRET}\"",
            receiver.address
        )),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let payment = stripe_event("evt_quick_1", "payment_intent.succeeded", "pi_quick_1");
    let first = app.post_stripe(&payment).await;
    assert_eq!(first.json()["outcome"], "accepted");
    assert!(app.post_stripe(&payment).await.replayed());
    let resent = stripe_event("evt_quick_2", "payment_intent.succeeded", "pi_quick_1");
    assert_eq!(
        app.post_stripe(&resent).await.json()["outcome"],
        "duplicate_fact"
    );

    eventually("the receiver to print the delivery", || async {
        !receiver.printed("delivered").is_empty()
    })
    .await;
    let forged = app
        .client
        .post(format!("{}/events", receiver.address))
        .header("webhook-id", "stripe:evt_forged")
        .header(
            "webhook-timestamp",
            chrono::Utc::now().timestamp().to_string(),
        )
        .header("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJlIGF0IGFsbA==")
        .header("Idempotency-Key", "stripe:evt_forged")
        .body(payment.clone())
        .send()
        .await
        .expect("the receiver answers");
    assert_eq!(forged.status(), 401);
    eventually("the receiver to print the refusal", || async {
        !receiver.printed("REFUSED").is_empty()
    })
    .await;
    // A second delivery, were there one, would be made before this holds.
    nothing_left_to_send(&app).await;

    let delivered = receiver.printed("delivered");
    assert_eq!(delivered.len(), 1, "{:?}", receiver.lines());
    for expected in [
        "source=stripe",
        "event=evt_quick_1",
        "type=payment_intent.succeeded",
        "attempt=1",
    ] {
        assert!(delivered[0].contains(expected), "{expected}: {delivered:?}");
    }
    let refused = receiver.printed("REFUSED");
    assert!(refused[0].contains("key=stripe:evt_forged"), "{refused:?}");
    assert!(refused[0].contains("signature"), "{refused:?}");
}

/// `inlet serve` says where to point a provider: each source's webhook URL, then the
/// metrics and the console, with the port it listens on.
#[test]
fn serve_logs_each_sources_webhook_url_and_the_metrics_and_console_urls() {
    let dir = std::env::temp_dir().join(format!("inlet-urls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("inlet.toml");
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\n[database]\nurl = \"sqlite://{}\"\n\
         [operator]\ntoken = \"quickstart-operator-token-0123456789\"\n\
         [console]\nenabled = true\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{DESTINATION_SECRET}\"]\n\
         [[sources]]\nname = \"shop\"\nscheme = \"shopify\"\nsecrets = [\"shopify-secret-0123456789abcdefgh\"]\n",
        dir.join("inlet.db").display()
    );
    std::fs::write(&config, toml).expect("write config");
    let (mut child, lines) = serve_logging_json(&config);
    let mut urls = Vec::new();
    let mut port = None;
    for line in lines.map_while(Result::ok) {
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let fields = &entry["fields"];
        if fields["message"] == "inlet is listening" {
            port = fields["port"].as_u64();
        }
        if let Some(url) = fields["url"].as_str() {
            urls.push(url.to_owned());
        }
        // The console's line also says how to sign in.
        if fields["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("console"))
        {
            assert!(
                fields["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("operator's token")),
                "{entry}"
            );
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let base = format!("http://127.0.0.1:{}", port.expect("the port is logged"));
    assert_eq!(
        urls,
        [
            format!("{base}/webhooks/stripe"),
            format!("{base}/webhooks/shop"),
            format!("{base}/metrics"),
            format!("{base}/console"),
        ]
    );
}

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

/// Rows of the sample application's `deliveries` table per message id.
fn applied_per_key(database: &std::path::Path) -> std::collections::HashMap<String, i64> {
    use diesel::prelude::*;
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        message_id: String,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = diesel::SqliteConnection::establish(&database.display().to_string())
        .expect("the sample application's database");
    diesel::sql_query("SELECT message_id, COUNT(*) AS n FROM deliveries GROUP BY message_id")
        .load::<Row>(&mut conn)
        .expect("its deliveries")
        .into_iter()
        .map(|row| (row.message_id, row.n))
        .collect()
}

/// Issue 52's end-to-end case: Inlet's signer, its dispatcher retrying through a network
/// that loses every first attempt (half of them after the application committed), and an
/// operator replaying every event — the application (`inlet sample-app`, on the inbox
/// library) applies each fact exactly once and answers every copy from its inbox.
async fn through_a_flaky_network_and_a_replay_the_application_applies_each_fact_once(
    backend: Backend,
) {
    const EVENTS: usize = 24;
    let database = ScratchFile::new("exactly-once");
    let receiver = Receiver::start(&database.0);
    let network = actix_web::web::Data::new(FlakyNetwork {
        application: receiver.address.clone(),
        client: reqwest::Client::new(),
    });
    let (network_url, _network) = crate::helpers::serve_application(network, through_the_network);
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{network_url}/events\"\nsecret = \"{DESTINATION_SECRET}\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\n\
             breaker = {{ failures = 0 }}"
        )),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    // Every event at once, as a provider's burst.
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
    eventually("every fact applied", || async {
        applied_per_key(&database.0).len() == EVENTS
    })
    .await;
    nothing_left_to_send(&app).await;

    // The operator replays every event: each arrives again under its own webhook-id.
    let all = serde_json::json!({ "filter": { "source": "stripe" } });
    let reply = app
        .admin("/admin/replay", Some(&all), Some("replay-every-event"))
        .await;
    reply.assert_status(200);
    let copies = |lines: &[String]| lines.iter().filter(|l| l.starts_with("duplicate")).count();
    // Copies: the even events' retries (their first answer was lost), then each replay —
    // a new delivery whose first attempt the network loses as well: an odd event's replay
    // arrives once (its retry), an even one's twice (the lost answer and the retry).
    eventually("the replays answered from the inbox", || async {
        copies(&receiver.lines()) == EVENTS / 2 + EVENTS / 2 + 2 * (EVENTS / 2)
    })
    .await;
    nothing_left_to_send(&app).await;

    let applied = applied_per_key(&database.0);
    assert_eq!(applied.len(), EVENTS, "{applied:?}");
    assert!(
        applied.values().all(|n| *n == 1),
        "each fact applied once: {applied:?}"
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
