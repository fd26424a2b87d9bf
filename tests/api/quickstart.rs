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

on_both_backends!(the_receiver_prints_one_delivery_per_fact_and_refuses_a_forgery);

pub(crate) const DESTINATION_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `inlet sample-app` on a free port: the child, its address, and the lines it prints.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) address: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    /// `inlet sample-app`, applying deliveries to the SQLite file `database`.
    pub(crate) fn start(database: &std::path::Path) -> Self {
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

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines").clone()
    }

    pub(crate) fn printed(&self, prefix: &str) -> Vec<String> {
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
pub(crate) struct ScratchFile(pub(crate) std::path::PathBuf);

impl ScratchFile {
    pub(crate) fn new(label: &str) -> Self {
        let name = format!("{}-{label}.db", crate::helpers::unique_name());
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
