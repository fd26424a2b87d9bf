//! Signed Stripe load as providers make it: many clients at once, about 30 % exact
//! duplicates (retries and resends of earlier events, re-signed at send time), some
//! payments arriving again under a regenerated event id, and every answer recorded.

use crate::support::{load_client, post_stripe, stripe_body, Answer};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Share of requests that repeat an earlier event byte for byte.
pub const DUPLICATE_SHARE: f64 = 0.30;
/// Share of new events that are a payment already sent, under a new event id.
pub const REGENERATED_SHARE: f64 = 0.10;

/// One event: its body, and what every attempt at sending it got.
#[derive(Debug, Clone, Default)]
pub struct SentEvent {
    pub body: Vec<u8>,
    /// The 2xx answers (the receipt, then stored answers).
    pub acks: Vec<Answer>,
}

/// Every event sent, with its answers, and the counts by outcome.
#[derive(Default)]
pub struct Ledger {
    pub events: HashMap<String, SentEvent>,
    /// Event ids in the order first sent, for picking duplicates.
    order: Vec<String>,
    /// Payment objects sent, for regenerated event ids.
    objects: Vec<String>,
    pub requests: u64,
    pub duplicates_sent: u64,
    pub regenerated_sent: u64,
    pub connection_errors: u64,
    pub statuses: BTreeMap<u16, u64>,
    /// Answers that break the contract under load (anything but 200, or a 409 without
    /// `Retry-After`), with the event.
    pub unexpected: Vec<String>,
    next: u64,
}

impl Ledger {
    /// The receipt of every acknowledged event (its first 2xx answer).
    pub fn acknowledged(&self) -> HashMap<String, serde_json::Value> {
        self.events
            .iter()
            .filter_map(|(id, sent)| sent.acks.first().map(|a| (id.clone(), a.json())))
            .collect()
    }

    /// Events that never got a 2xx: the provider still owes them a retry.
    pub fn unacknowledged(&self) -> Vec<(String, Vec<u8>)> {
        self.events
            .iter()
            .filter(|(_, sent)| sent.acks.is_empty())
            .map(|(id, sent)| (id.clone(), sent.body.clone()))
            .collect()
    }

    pub fn acknowledged_requests(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(s, _)| (200..300).contains(*s))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every 2xx answer of an event must be the same bytes, and at most one of them a
    /// fresh (not replayed) answer; returns the differences.
    pub fn stored_answer_differences(&self) -> Vec<String> {
        let mut differences = Vec::new();
        for (id, sent) in &self.events {
            let Some(first) = sent.acks.first() else {
                continue;
            };
            if let Some(other) = sent.acks.iter().find(|a| a.body != first.body) {
                differences.push(format!(
                    "{id}: {} and {}",
                    String::from_utf8_lossy(&first.body),
                    String::from_utf8_lossy(&other.body)
                ));
            }
            let fresh = sent.acks.iter().filter(|a| !a.replayed).count();
            if fresh > 1 {
                differences.push(format!("{id}: {fresh} answers without Idempotent-Replayed"));
            }
        }
        differences
    }

    /// What to send next: a new event, a regenerated payment, or a duplicate.
    pub fn next_request(&mut self, rng: &mut fastrand::Rng, tag: &str) -> (String, Vec<u8>) {
        if !self.order.is_empty() && rng.f64() < DUPLICATE_SHARE {
            let id = self.order[rng.usize(..self.order.len())].clone();
            self.duplicates_sent += 1;
            let body = self.events[&id].body.clone();
            return (id, body);
        }
        self.next += 1;
        let id = format!("evt_{tag}_{}", self.next);
        let body = if !self.objects.is_empty() && rng.f64() < REGENERATED_SHARE {
            self.regenerated_sent += 1;
            let object = self.objects[rng.usize(..self.objects.len())].clone();
            stripe_body(&id, "payment_intent.succeeded", &object)
        } else if rng.bool() {
            let object = format!("pi_{tag}_{}", self.next);
            self.objects.push(object.clone());
            stripe_body(&id, "payment_intent.succeeded", &object)
        } else {
            let event_type = if rng.bool() {
                "charge.captured"
            } else {
                "customer.updated"
            };
            stripe_body(&id, event_type, &format!("obj_{tag}_{}", self.next))
        };
        self.order.push(id.clone());
        self.events.insert(
            id.clone(),
            SentEvent {
                body: body.clone(),
                acks: Vec::new(),
            },
        );
        (id, body)
    }

    pub fn record(&mut self, id: &str, result: Result<Answer, reqwest::Error>) {
        self.requests += 1;
        match result {
            Ok(answer) => {
                *self.statuses.entry(answer.status).or_default() += 1;
                let conflict_with_retry = answer.status == 409 && answer.retry_after.is_some();
                if answer.status != 200 && !conflict_with_retry {
                    self.unexpected.push(format!(
                        "{id}: {} {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body)
                    ));
                }
                if (200..300).contains(&answer.status) {
                    if let Some(sent) = self.events.get_mut(id) {
                        sent.acks.push(answer);
                    }
                }
            }
            Err(_) => self.connection_errors += 1,
        }
    }
}

/// Clients posting to whichever port `target` holds, until stopped.
pub struct Load {
    stop: Arc<AtomicBool>,
    clients: tokio::task::JoinSet<()>,
}

impl Load {
    /// `clients` concurrent senders against `target` (the port of the current server).
    pub fn start(
        ledger: Arc<Mutex<Ledger>>,
        target: Arc<AtomicU16>,
        clients: usize,
        tag: &str,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut set = tokio::task::JoinSet::new();
        // One client for all: building one loads the TLS roots, which would stall the
        // runtime for most of a second if each sender built its own.
        let client = load_client();
        for c in 0..clients {
            let (ledger, target, stop) = (ledger.clone(), target.clone(), stop.clone());
            let client = client.clone();
            let tag = format!("{tag}c{c}");
            let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(c as u64));
            set.spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let (id, body) = ledger.lock().expect("ledger").next_request(&mut rng, &tag);
                    let result = post_stripe(&client, target.load(Ordering::SeqCst), &body).await;
                    let failed = result.is_err();
                    ledger.lock().expect("ledger").record(&id, result);
                    if failed {
                        // The server is gone; a provider backs off before its retry (real
                        // time must pass).
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            });
        }
        Self { stop, clients: set }
    }

    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        while let Some(done) = self.clients.join_next().await {
            done.expect("a load client");
        }
    }
}

/// The provider's retries: sends every unacknowledged event again until it is
/// acknowledged (409 is retried after a moment). Returns how many were retried.
pub async fn retry_unacknowledged(ledger: &Arc<Mutex<Ledger>>, port: u16) -> usize {
    let pending = ledger.lock().expect("ledger").unacknowledged();
    let client = load_client();
    let mut tasks = tokio::task::JoinSet::new();
    let count = pending.len();
    for chunk in pending.chunks(pending.len().div_ceil(16).max(1)) {
        let (chunk, client, ledger) = (chunk.to_vec(), client.clone(), ledger.clone());
        tasks.spawn(async move {
            for (id, body) in chunk {
                for attempt in 0.. {
                    let result = post_stripe(&client, port, &body).await;
                    let acknowledged = matches!(&result, Ok(a) if a.status == 200);
                    ledger.lock().expect("ledger").record(&id, result);
                    if acknowledged {
                        break;
                    }
                    assert!(
                        attempt < 50,
                        "{id} was never acknowledged after the restart"
                    );
                    // Real time must pass: a provider retries after a moment, as 409 asks.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a retry task");
    }
    count
}
