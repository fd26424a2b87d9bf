//! The fuzzer's stripe facts go onto NATS JetStream too, many of them with an event type
//! a hostile sender picked, and the oracle checks where each one landed: on the subject
//! the book's encoding gives (docs/src/delivery/event-bus.md; written again in the test
//! helpers as `bus_token`, never Inlet's code) — one token under the configured prefix — and never on JetStream's API:
//! another team's stream survives a type that names its purge. Needs the machine's NATS
//! with JetStream on 127.0.0.1:4222 (`.ci/run` starts it).

use crate::helpers::{bus_token, TestApp};
use async_nats::jetstream::{self, stream};
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use std::time::Duration;

const NATS_URL: &str = "nats://127.0.0.1:4222";
/// The destination's name in the outbox.
const DESTINATION: &str = "fuzz-bus";
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Another team's stream, named by this process: a type may name its purge.
pub fn victim() -> String {
    format!("INLET_FUZZ_VICTIM_{}", std::process::id())
}

/// A stripe event type: mostly a provider's, now and then one a hostile sender picks —
/// JetStream API subjects, wildcards, separators, escapes, the no-type token, non-ASCII.
pub fn event_type(rng: &mut fastrand::Rng) -> String {
    let hostile = [
        format!("$JS.API.STREAM.PURGE.{}", victim()),
        format!("$JS.API.STREAM.DELETE.{}", victim()),
        "$SYS.REQ.SERVER.PING".to_owned(),
        "_INBOX.x".to_owned(),
        "a.*".to_owned(),
        "a.>".to_owned(),
        "a._".to_owned(),
        "a.#".to_owned(),
        "#".to_owned(),
        "~".to_owned(),
        "%41".to_owned(),
        "A".to_owned(),
        "payment intent.succeeded".to_owned(),
        "ünïcødé.✓".to_owned(),
        "..".to_owned(),
    ];
    match rng.u32(0..4) {
        0 => hostile[rng.usize(..hostile.len())].clone(),
        1 => "payment_intent.succeeded".to_owned(),
        _ => "customer.updated".to_owned(),
    }
}

/// The run's stream (capturing its prefix) and the other team's.
pub struct FuzzBus {
    prefix: String,
    jetstream: jetstream::Context,
}

/// How many runs in this process use the other team's stream: the first creates it, the
/// last removes it, so runs on both backends side by side never reset it under each other.
static VICTIM_USERS: tokio::sync::Mutex<usize> = tokio::sync::Mutex::const_new(0);

impl FuzzBus {
    pub async fn new(prefix: String) -> Self {
        let client = async_nats::connect(NATS_URL).await.expect("NATS is up");
        let jetstream = jetstream::new(client);
        create_stream(&jetstream, prefix.clone()).await;
        let mut users = VICTIM_USERS.lock().await;
        if *users == 0 {
            create_stream(&jetstream, victim()).await;
            jetstream
                .publish(format!("{}.kept", victim()), "kept".into())
                .await
                .expect("publish")
                .await
                .expect("ack");
        }
        *users += 1;
        Self { prefix, jetstream }
    }

    /// The stripe source's destination table (TOML lines).
    pub fn destination(&self) -> String {
        format!(
            "url = \"{NATS_URL}\"\nname = \"{DESTINATION}\"\nsecret = \"{APP_SECRET}\"\n\
             subject = \"{}.{{source}}.{{event_type}}\"\nretry_base = \"50ms\"\n\
             retry_cap = \"500ms\"\nmax_attempts = 100\n",
            self.prefix
        )
    }

    /// Once the outbox has drained: how many messages were published, and what the oracle
    /// found wrong with where they landed.
    pub async fn check(&self, app: &TestApp) -> (usize, Vec<String>) {
        let mut failures = Vec::new();
        let rows = match drained(app).await {
            Ok(rows) => rows,
            Err(left) => return (0, vec![format!("{left} bus deliveries never delivered")]),
        };
        let messages = self.messages(&self.prefix).await;
        if messages.len() != rows {
            failures.push(format!(
                "{} messages in the stream for {rows} delivered facts",
                messages.len()
            ));
        }
        for message in &messages {
            let event_type = message.headers.get("Inlet-Event-Type").map(|v| v.as_str());
            let expected = format!("{}.stripe.{}", self.prefix, bus_token(event_type));
            if message.subject.as_str() != expected {
                failures.push(format!(
                    "type {event_type:?} published on {}, not {expected}",
                    message.subject
                ));
            }
        }
        let kept = self.messages(&victim()).await.len();
        if kept != 1 {
            failures.push(format!(
                "the other team's stream holds {kept} messages, not 1"
            ));
        }
        (messages.len(), failures)
    }

    async fn messages(&self, stream: &str) -> Vec<jetstream::message::StreamMessage> {
        let Ok(stream) = self.jetstream.get_stream(stream).await else {
            return Vec::new();
        };
        let mut messages = Vec::new();
        let mut sequence = 1;
        while let Ok(message) = stream.get_raw_message(sequence).await {
            messages.push(message);
            sequence += 1;
        }
        messages
    }

    pub async fn remove(self) {
        let _ = self.jetstream.delete_stream(&self.prefix).await;
        let mut users = VICTIM_USERS.lock().await;
        *users -= 1;
        if *users == 0 {
            let _ = self.jetstream.delete_stream(victim()).await;
        }
    }
}

/// A fresh stream `name` capturing `name.>` (one left by an earlier run is removed first).
async fn create_stream(jetstream: &jetstream::Context, name: String) {
    let _ = jetstream.delete_stream(&name).await;
    jetstream
        .create_stream(stream::Config {
            subjects: vec![format!("{name}.>")],
            name,
            ..Default::default()
        })
        .await
        .expect("create a stream");
}

/// Waits (up to a minute) until every bus delivery is delivered: their number, or how
/// many were left.
async fn drained(app: &TestApp) -> Result<usize, i64> {
    let count = |delivered: bool| {
        app.with_conn(move |c| {
            let rows = deliveries::table.filter(deliveries::destination.eq(DESTINATION));
            match delivered {
                true => rows
                    .filter(deliveries::status.eq("delivered"))
                    .count()
                    .get_result::<i64>(c),
                false => rows
                    .filter(deliveries::status.ne("delivered"))
                    .count()
                    .get_result::<i64>(c),
            }
        })
    };
    let drained = crate::helpers::holds_within(Duration::from_secs(60), || async {
        count(false).await == 0
    })
    .await;
    if drained {
        return Ok(usize::try_from(count(true).await).unwrap_or(0));
    }
    Err(count(false).await)
}
