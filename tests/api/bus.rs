//! Facts onto the event bus: NATS JetStream and RabbitMQ destinations, on the brokers this
//! machine runs (NATS on 127.0.0.1:4222, RabbitMQ on 127.0.0.1:5672, started by `.ci/run`).
//! Each test publishes on subjects and routing keys of its own, into a stream and a queue
//! of its own. The outage test stops a NATS server of its own (never the shared one) and
//! cuts RabbitMQ through a TCP proxy it controls.

use crate::helpers::{
    bus_token, eventually, holds_within, spawn_app_with, stripe_event, unique_name, wait_for,
    wait_for_blocking, Backend, OtlpReceiver, TestApp, TestOptions, ToggleProxy, EVENTUALLY,
    STRIPE_SECRET,
};
use crate::on_both_backends;
use async_nats::jetstream::{self, stream};
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

on_both_backends!(
    facts_are_published_with_inlet_headers_and_the_delivery_key,
    a_thousand_facts_arrive_once_each_after_dedupe,
    a_broker_outage_fails_attempts_then_delivers_everything,
    a_republish_after_a_lost_settlement_is_dropped_by_jetstream_and_keeps_its_message_id,
    an_unreachable_broker_degrades_its_destination_not_the_service,
    event_types_fill_one_token_under_the_configured_prefix,
    a_publish_carries_the_webhooks_trace_in_its_headers,
);

const NATS_URL: &str = "nats://127.0.0.1:4222";
const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const AMQP_SERVER: &str = "127.0.0.1:5672";
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A name no other test (or run) uses, valid as a stream, queue and subject token.
fn unique_prefix() -> String {
    unique_name()
}

/// A test's NATS stream and RabbitMQ queue, each capturing `prefix.>` / `prefix.#`.
struct Bus {
    prefix: String,
    jetstream: jetstream::Context,
    channel: Channel,
    _amqp: Connection,
}

impl Bus {
    async fn new(nats_url: &str) -> Self {
        let prefix = unique_prefix();
        let client = async_nats::connect(nats_url).await.expect("NATS is up");
        let jetstream = jetstream::new(client);
        jetstream
            .create_stream(stream::Config {
                name: prefix.clone(),
                subjects: vec![format!("{prefix}.>")],
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .expect("create the test stream");
        let amqp = Connection::connect(AMQP_URL, ConnectionProperties::default())
            .await
            .expect("RabbitMQ is up");
        let channel = amqp.create_channel().await.expect("a channel");
        channel
            .queue_declare(
                prefix.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare the test queue");
        channel
            .queue_bind(
                prefix.as_str().into(),
                "amq.topic".into(),
                format!("{prefix}.#").into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind the test queue");
        Self {
            prefix,
            jetstream,
            channel,
            _amqp: amqp,
        }
    }

    /// Two destinations of the stripe source: `nats` and `rabbit`.
    fn destinations(&self, nats_url: &str, amqp_url: &str, extra: &str) -> String {
        let prefix = &self.prefix;
        format!(
            "url = \"{nats_url}\"\nname = \"nats\"\nsecret = \"{APP_SECRET}\"\n\
             subject = \"{prefix}.{{source}}.{{event_type}}\"\n{extra}\n\
             [[sources.destinations]]\n\
             url = \"{amqp_url}\"\nname = \"rabbit\"\nsecret = \"{APP_SECRET}\"\n\
             routing_key = \"{prefix}.{{source}}.{{event_type}}\"\n{extra}\n"
        )
    }

    /// Every message in the stream, in order.
    async fn nats_messages(&self) -> Vec<jetstream::message::StreamMessage> {
        let stream = self
            .jetstream
            .get_stream(&self.prefix)
            .await
            .expect("the stream");
        let mut messages = Vec::new();
        let mut sequence = 1;
        while let Ok(message) = stream.get_raw_message(sequence).await {
            messages.push(message);
            sequence += 1;
        }
        messages
    }

    async fn nats_count(&self) -> u64 {
        let mut stream = self
            .jetstream
            .get_stream(&self.prefix)
            .await
            .expect("the stream");
        stream.info().await.expect("stream info").state.messages
    }

    /// Takes every message waiting in the queue.
    async fn rabbit_messages(&self) -> Vec<lapin::message::BasicGetMessage> {
        let mut messages = Vec::new();
        let options = BasicGetOptions { no_ack: true };
        while let Ok(Some(message)) = self
            .channel
            .basic_get(self.prefix.as_str().into(), options)
            .await
        {
            messages.push(message);
        }
        messages
    }

    async fn remove(self) {
        let _ = self.jetstream.delete_stream(&self.prefix).await;
        let _ = self
            .channel
            .queue_delete(self.prefix.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
}

async fn app_publishing_to(backend: Backend, destinations: String) -> TestApp {
    let options = TestOptions {
        destination: Some(destinations),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// Fast retries, and enough attempts to outlast an outage in a test.
/// Quick retries, and a breaker that probes a broker that is away every 200 ms at most.
const FAST_RETRIES: &str = "retry_base = \"20ms\"\nretry_cap = \"200ms\"\nmax_attempts = 1000\n\
     timeout = \"2s\"\nconnect_timeout = \"1s\"\n\
     breaker = { cooldown = \"100ms\", cooldown_cap = \"200ms\" }";

#[derive(Debug, Clone, Queryable)]
struct Row {
    status: String,
    attempt: i32,
    last_error: Option<String>,
}

async fn rows(app: &TestApp) -> Vec<Row> {
    app.with_conn(|conn| {
        deliveries::table
            .order(deliveries::id)
            .select((
                deliveries::status,
                deliveries::attempt,
                deliveries::last_error,
            ))
            .load::<Row>(conn)
    })
    .await
}

/// Waits (up to 60 s: an outage test waits out reconnect backoff) until every delivery
/// row is delivered.
async fn all_delivered(app: &TestApp, expected: usize) {
    let delivered = holds_within(Duration::from_secs(60), || async {
        let rows = rows(app).await;
        rows.len() == expected && rows.iter().all(|r| r.status == "delivered")
    })
    .await;
    if delivered {
        return;
    }
    let rows = rows(app).await;
    let pending: Vec<_> = rows
        .iter()
        .filter(|r| r.status != "delivered")
        .take(5)
        .collect();
    panic!("not all {expected} deliveries were delivered: {pending:?}");
}

fn nats_header<'a>(message: &'a jetstream::message::StreamMessage, name: &str) -> Option<&'a str> {
    message.headers.get(name).map(|v| v.as_str())
}

fn rabbit_header(message: &lapin::message::BasicGetMessage, name: &str) -> Option<String> {
    let headers = message.delivery.properties.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(value) => Some(value.to_string()),
        _ => None,
    }
}

fn rabbit_message_id(message: &lapin::message::BasicGetMessage) -> Option<String> {
    message
        .delivery
        .properties
        .message_id()
        .as_ref()
        .map(|id| id.to_string())
}

async fn facts_are_published_with_inlet_headers_and_the_delivery_key(backend: Backend) {
    let bus = Bus::new(NATS_URL).await;
    let app = app_publishing_to(backend, bus.destinations(NATS_URL, AMQP_URL, FAST_RETRIES)).await;
    let body = stripe_event("evt_bus_1", "customer.created", "cus_1");
    app.post_stripe(&body).await.assert_status(200);
    all_delivered(&app, 2).await;

    let published = bus.nats_messages().await;
    assert_eq!(published.len(), 1);
    let message = &published[0];
    assert_eq!(
        message.subject.as_str(),
        format!("{}.stripe.customer%2Ecreated", bus.prefix)
    );
    assert_eq!(message.payload.as_ref(), body.as_slice());
    for (name, value) in [
        ("Nats-Msg-Id", "stripe:evt_bus_1"),
        ("Idempotency-Key", "stripe:evt_bus_1"),
        ("webhook-id", "stripe:evt_bus_1"),
        ("Inlet-Source", "stripe"),
        ("Inlet-Event-Id", "evt_bus_1"),
        ("Inlet-Event-Type", "customer.created"),
    ] {
        assert_eq!(nats_header(message, name), Some(value), "{name}");
    }
    for name in ["webhook-signature", "webhook-timestamp"] {
        assert!(nats_header(message, name).is_some(), "{name}");
    }

    let received = bus.rabbit_messages().await;
    assert_eq!(received.len(), 1);
    let message = &received[0];
    assert_eq!(message.delivery.data, body);
    assert_eq!(
        message.delivery.routing_key.as_str(),
        format!("{}.stripe.customer%2Ecreated", bus.prefix)
    );
    assert_eq!(
        rabbit_message_id(message).as_deref(),
        Some("stripe:evt_bus_1")
    );
    assert_eq!(*message.delivery.properties.delivery_mode(), Some(2));
    for (name, value) in [
        ("webhook-id", "stripe:evt_bus_1"),
        ("Inlet-Source", "stripe"),
        ("Inlet-Event-Id", "evt_bus_1"),
        ("Inlet-Event-Type", "customer.created"),
    ] {
        assert_eq!(
            rabbit_header(message, name).as_deref(),
            Some(value),
            "{name}"
        );
    }
    assert!(rabbit_header(message, "webhook-signature").is_some());

    // A duplicate webhook is no new fact: nothing more is published.
    app.post_stripe(&body).await.assert_status(200);
    assert_eq!(rows(&app).await.len(), 2);
    bus.remove().await;
}

/// Types a sender chooses, from an attacker's campaign: each fills exactly one token after
/// the configured prefix, encoded injectively (the book's encoding, rewritten in the
/// helpers) — never a JetStream API subject, a wildcard, or a token a binding could pick.
async fn event_types_fill_one_token_under_the_configured_prefix(backend: Backend) {
    let bus = Bus::new(NATS_URL).await;
    // Another team's stream, which a type `$JS.API.STREAM.PURGE.<name>` once purged.
    let victim = unique_prefix();
    bus.jetstream
        .create_stream(stream::Config {
            name: victim.clone(),
            subjects: vec![format!("{victim}.>")],
            ..Default::default()
        })
        .await
        .expect("create the other team's stream");
    bus.jetstream
        .publish(format!("{victim}.kept"), "kept".into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    // A consumer of one type family, which dotted types used to reach.
    let family = format!("{}-family", bus.prefix);
    bus.channel
        .queue_declare(
            family.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    bus.channel
        .queue_bind(
            family.as_str().into(),
            "amq.topic".into(),
            format!("{}.stripe.a.*", bus.prefix).into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    let app = app_publishing_to(backend, bus.destinations(NATS_URL, AMQP_URL, FAST_RETRIES)).await;
    let purge = format!("$JS.API.STREAM.PURGE.{victim}");
    let types = [
        purge.as_str(),
        "a.*",
        "a.>",
        "a._",
        "a.#",
        "a b",
        "%41",
        "A",
        "~",
        "$SYS.x",
        "ünï.côdé",
    ];
    for (n, event_type) in types.iter().enumerate() {
        let body = stripe_event(&format!("evt_hostile_{n}"), event_type, &format!("obj_{n}"));
        app.post_stripe(&body).await.assert_status(200);
    }
    all_delivered(&app, 2 * types.len()).await;

    let expected: HashSet<String> = types
        .iter()
        .map(|t| format!("{}.stripe.{}", bus.prefix, bus_token(Some(t))))
        .collect();
    assert_eq!(expected.len(), types.len(), "one subject per type");
    let subjects: HashSet<String> = bus
        .nats_messages()
        .await
        .iter()
        .map(|m| m.subject.to_string())
        .collect();
    assert_eq!(subjects, expected);
    let keys: HashSet<String> = bus
        .rabbit_messages()
        .await
        .iter()
        .map(|m| m.delivery.routing_key.to_string())
        .collect();
    assert_eq!(keys, expected);
    let mut other = bus
        .jetstream
        .get_stream(&victim)
        .await
        .expect("still there");
    assert_eq!(other.info().await.expect("info").state.messages, 1);
    let options = BasicGetOptions { no_ack: true };
    let leaked = bus.channel.basic_get(family.as_str().into(), options).await;
    assert!(matches!(leaked, Ok(None)), "the a.* binding got a message");
    let _ = bus.jetstream.delete_stream(&victim).await;
    let _ = bus
        .channel
        .queue_delete(family.as_str().into(), QueueDeleteOptions::default())
        .await;
    bus.remove().await;
}

async fn a_thousand_facts_arrive_once_each_after_dedupe(backend: Backend) {
    const FACTS: usize = 1_000;
    let bus = Bus::new(NATS_URL).await;
    let app = app_publishing_to(backend, bus.destinations(NATS_URL, AMQP_URL, FAST_RETRIES)).await;
    let ids: Vec<String> = (0..FACTS).map(|n| format!("evt_many_{n}")).collect();
    for id in &ids {
        app.post_stripe(&stripe_event(id, "customer.created", id))
            .await
            .assert_status(200);
    }
    all_delivered(&app, 2 * FACTS).await;

    let expected: HashSet<String> = ids.iter().map(|id| format!("stripe:{id}")).collect();
    let nats: Vec<String> = bus
        .nats_messages()
        .await
        .iter()
        .filter_map(|m| nats_header(m, "Nats-Msg-Id").map(str::to_owned))
        .collect();
    assert!(nats.len() >= FACTS, "JetStream holds {}", nats.len());
    assert_eq!(nats.iter().cloned().collect::<HashSet<_>>(), expected);

    let rabbit: Vec<String> = bus
        .rabbit_messages()
        .await
        .iter()
        .filter_map(rabbit_message_id)
        .collect();
    assert!(rabbit.len() >= FACTS, "RabbitMQ delivered {}", rabbit.len());
    assert_eq!(rabbit.iter().cloned().collect::<HashSet<_>>(), expected);
    bus.remove().await;
}

/// A NATS server of this test's own, on its own port and store directory.
struct OwnNats {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl OwnNats {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(unique_prefix());
        let mut nats = Self {
            port,
            dir,
            child: None,
        };
        nats.resume();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn resume(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is installed (.ci/run installs it)");
        self.child = Some(child);
        let address: SocketAddr = ([127, 0, 0, 1], self.port).into();
        wait_for_blocking(
            "the test's nats-server to start",
            Duration::from_secs(5),
            || std::net::TcpStream::connect(address).ok(),
        );
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn a_broker_outage_fails_attempts_then_delivers_everything(backend: Backend) {
    let mut nats = OwnNats::start();
    let proxy = ToggleProxy::start(AMQP_SERVER.parse().expect("an address")).await;
    let bus = Bus::new(&nats.url()).await;
    let amqp_url = format!("amqp://guest:guest@127.0.0.1:{}/%2f", proxy.port);
    let app = app_publishing_to(
        backend,
        bus.destinations(&nats.url(), &amqp_url, FAST_RETRIES),
    )
    .await;
    app.post_stripe(&stripe_event("evt_before", "customer.created", "c0"))
        .await
        .assert_status(200);
    all_delivered(&app, 2).await;

    nats.stop();
    proxy.down();
    let during: Vec<String> = (0..5).map(|n| format!("evt_during_{n}")).collect();
    for id in &during {
        // Webhooks are still accepted while the brokers are away.
        app.post_stripe(&stripe_event(id, "customer.created", id))
            .await
            .assert_status(200);
    }
    eventually("attempts to fail on both brokers", || async {
        let rows = rows(&app).await;
        rows.iter()
            .filter(|r| r.status != "delivered")
            .filter(|r| r.attempt >= 2 && r.last_error.is_some())
            .count()
            == 2 * during.len()
    })
    .await;
    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    let destinations = &ready.json()["destinations"];
    for name in ["stripe/nats", "stripe/rabbit"] {
        let state = destinations[name].as_str().unwrap_or_default();
        assert!(state.starts_with("degraded"), "{name}: {state}");
    }

    nats.resume();
    proxy.up();
    all_delivered(&app, 2 + 2 * during.len()).await;
    let ids = |list: Vec<String>| list.into_iter().collect::<HashSet<_>>();
    let expected = ids(std::iter::once("evt_before".to_owned())
        .chain(during.iter().cloned())
        .map(|id| format!("stripe:{id}"))
        .collect());
    let nats_ids = bus
        .nats_messages()
        .await
        .iter()
        .filter_map(|m| nats_header(m, "Nats-Msg-Id").map(str::to_owned))
        .collect();
    assert_eq!(ids(nats_ids), expected);
    let rabbit_ids = bus
        .rabbit_messages()
        .await
        .iter()
        .filter_map(rabbit_message_id)
        .collect();
    assert_eq!(ids(rabbit_ids), expected);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.json()["destinations"]["stripe/rabbit"], "ok");
    bus.remove().await;
}

async fn a_republish_after_a_lost_settlement_is_dropped_by_jetstream_and_keeps_its_message_id(
    backend: Backend,
) {
    let bus = Bus::new(NATS_URL).await;
    let app = app_publishing_to(backend, bus.destinations(NATS_URL, AMQP_URL, FAST_RETRIES)).await;
    // The dispatcher "dies" after each of the two publishes, before settling them.
    app.faults.crash_after_send_of("evt_twice", 2);
    app.post_stripe(&stripe_event("evt_twice", "customer.created", "c1"))
        .await
        .assert_status(200);
    eventually("the first publishes", || async {
        bus.nats_count().await == 1
    })
    .await;
    let first = wait_for("the first RabbitMQ message", EVENTUALLY, || async {
        let got = bus.rabbit_messages().await;
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert!(rows(&app).await.iter().all(|r| r.status == "in_progress"));

    // The lease (15 s in tests) expires: the next lease publishes again.
    app.clock.advance(chrono::Duration::seconds(16));
    all_delivered(&app, 2).await;
    assert!(
        rows(&app).await.iter().all(|r| r.attempt == 2),
        "{:?}",
        rows(&app).await
    );

    // JetStream dropped the re-publish: one message, acked as a duplicate.
    assert_eq!(bus.nats_count().await, 1);
    // Counted (the metrics are the process's: other tests may have added theirs).
    let metrics = app.get("/metrics").await.text();
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("inlet_broker_duplicates_total{destination=\"nats\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(dropped.is_some_and(|n| n >= 1.0), "{metrics}");
    // RabbitMQ has no duplicate window: the second copy carries the same message_id.
    let second = bus.rabbit_messages().await;
    let ids: Vec<Option<String>> = first.iter().chain(&second).map(rabbit_message_id).collect();
    assert_eq!(ids, vec![Some("stripe:evt_twice".to_owned()); 2]);
    bus.remove().await;
}

async fn an_unreachable_broker_degrades_its_destination_not_the_service(backend: Backend) {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let destination = format!(
        "url = \"nats://127.0.0.1:{port}\"\nname = \"gone\"\nsecret = \"{APP_SECRET}\"\n{FAST_RETRIES}"
    );
    let app = app_publishing_to(backend, destination).await;
    app.post_stripe(&stripe_event("evt_waits", "customer.created", "c2"))
        .await
        .assert_status(200);
    eventually("a failed attempt", || async {
        rows(&app)
            .await
            .iter()
            .any(|r| r.attempt >= 1 && r.status == "pending")
    })
    .await;
    let row = rows(&app).await.remove(0);
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("connect"),
        "{row:?}"
    );
    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    let state = ready.json()["destinations"]["stripe/gone"].clone();
    assert!(
        state.as_str().unwrap_or_default().starts_with("degraded"),
        "{state}"
    );
}

/// `inlet check-config` (no broker is contacted) with one destination of the stripe
/// source: its exit status and what it printed.
fn check_config(destination: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(unique_name());
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("inlet.toml");
    let toml = format!(
        "[database]\nurl = \"sqlite://{}\"\n[[sources]]\nname = \"stripe\"\n\
         scheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n[[sources.destinations]]\n\
         secret = \"{APP_SECRET}\"\n{destination}\n",
        dir.join("inlet.db").display()
    );
    std::fs::write(&config, toml).expect("write the configuration");
    let output = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .arg("--config")
        .arg(&config)
        .arg("check-config")
        .output()
        .expect("run inlet");
    let _ = std::fs::remove_dir_all(&dir);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), printed)
}

#[test]
fn check_config_validates_broker_destinations() {
    for good in [
        "url = \"nats://127.0.0.1:4222\"\nsubject = \"orders.{source}.{event_type}\"",
        "url = \"amqps://user:pw@rabbit:5671/%2f\"\nexchange = \"events\"",
    ] {
        let (ok, printed) = check_config(good);
        assert!(ok, "{good}: {printed}");
        assert!(!printed.contains("user:pw"), "{printed}");
    }
    for (bad, key) in [
        (
            "url = \"nats://127.0.0.1:4222\"\nsubject = \"a.*.{source}\"",
            "subject",
        ),
        (
            "url = \"nats://127.0.0.1:4222\"\nsubject = \"a.{sorce}\"",
            "subject",
        ),
        (
            "url = \"nats://127.0.0.1:4222\"\nexchange = \"x\"",
            "exchange",
        ),
        ("url = \"amqp://127.0.0.1\"\nsubject = \"x\"", "subject"),
        ("url = \"kafka://127.0.0.1:9092\"", "url"),
        // Leading tokens the event chooses, and system subjects, are refused.
        (
            "url = \"nats://127.0.0.1:4222\"\nsubject = \"{event_type}\"",
            "subject",
        ),
        (
            "url = \"nats://127.0.0.1:4222\"\nsubject = \"$JS.API.{event_type}\"",
            "subject",
        ),
        (
            "url = \"nats://127.0.0.1:4222\"\nsubject = \"_INBOX.{source}\"",
            "subject",
        ),
        (
            "url = \"amqp://127.0.0.1\"\nrouting_key = \"{event_type}.{source}\"",
            "routing_key",
        ),
        (
            "url = \"amqp://127.0.0.1\"\nrouting_key = \"inlet.#.{event_type}\"",
            "routing_key",
        ),
        ("url = \"nats:///nohost\"", "url"),
    ] {
        let (ok, printed) = check_config(bad);
        assert!(!ok, "{bad} was accepted: {printed}");
        let expected = format!("sources[0].destinations[0].{key}");
        assert!(printed.contains(&expected), "{bad}: {printed}");
    }
}

/// With tracing on, each publish is a producer span of the webhook's trace, and the message
/// carries that span as its `traceparent` (a NATS header, an AMQP header-table entry), so
/// a consumer's spans join the trace.
async fn a_publish_carries_the_webhooks_trace_in_its_headers(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let bus = Bus::new(NATS_URL).await;
    let options = TestOptions {
        destination: Some(bus.destinations(NATS_URL, AMQP_URL, FAST_RETRIES)),
        telemetry: Some(receiver.telemetry(1.0)),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let body = stripe_event("evt_bus_traced", "customer.created", "cus_traced");
    app.post_stripe(&body).await.assert_status(200);
    all_delivered(&app, 2).await;
    let publishes = |spans: &[crate::helpers::ReceivedSpan]| {
        spans
            .iter()
            .filter(|s| s.name.starts_with("publish "))
            .count()
    };
    eventually("both publish spans", || async {
        publishes(&receiver.spans().await) == 2
    })
    .await;
    let spans = receiver.spans().await;
    let webhook = (spans.iter())
        .find(|s| s.name == "POST /webhooks/{source}")
        .expect("the webhook's span");
    let span_of = |system: &str| {
        (spans.iter())
            .find(|s| s.name.starts_with("publish ") && s.attribute("messaging.system") == system)
            .unwrap_or_else(|| panic!("a {system} publish span"))
            .clone()
    };
    let subject = format!("{}.stripe.customer%2Ecreated", bus.prefix);
    let nats = span_of("nats");
    let rabbit = span_of("rabbitmq");
    for span in [&nats, &rabbit] {
        assert_eq!(span.trace_id, webhook.trace_id);
        assert_eq!(span.parent_span_id, webhook.span_id);
        assert_eq!(span.kind, 4, "a producer span");
        assert_eq!(span.attribute("messaging.operation.name"), "publish");
        assert_eq!(
            span.attribute("messaging.message.id"),
            "stripe:evt_bus_traced"
        );
    }
    assert_eq!(nats.attribute("messaging.destination.name"), subject);
    assert_eq!(
        rabbit.attribute("messaging.rabbitmq.destination.routing_key"),
        subject
    );

    let traceparent =
        |span: &crate::helpers::ReceivedSpan| format!("00-{}-{}-01", span.trace_id, span.span_id);
    let published = bus.nats_messages().await;
    assert_eq!(
        nats_header(&published[0], "traceparent"),
        Some(traceparent(&nats).as_str())
    );
    let received = bus.rabbit_messages().await;
    assert_eq!(
        rabbit_header(&received[0], "traceparent"),
        Some(traceparent(&rabbit))
    );
    bus.remove().await;
}
