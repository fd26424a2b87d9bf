//! Broker destinations: NATS JetStream and RabbitMQ. One connection per destination per
//! Inlet instance, opened at the first publish (or the startup probe) and reopened with
//! backoff after it breaks. A publish counts as delivered only once the broker confirmed
//! it (JetStream's publish ack, RabbitMQ's publisher confirm); anything else is a failed
//! attempt that the dispatcher retries under the destination's policy like an HTTP one.

mod amqp;
mod failure;
mod nats;

use super::headers::delivery_headers;
use super::outbox::Leased;
use super::policy::Verdict;
use super::sender::AttemptResult;
use super::target::DestinationKind;
use super::DestinationSettings;
use chrono::{DateTime, Utc};
use failure::Failure;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The first wait before reconnecting to a broker that refused a connection; it doubles
/// per failure up to [`RECONNECT_CAP`]. Attempts in between fail at once, without
/// another connection attempt, so an outage costs one connect per interval.
const RECONNECT_BASE: Duration = Duration::from_millis(100);
const RECONNECT_CAP: Duration = Duration::from_secs(5);

/// What a broker destination looks like from this instance, for readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerState {
    /// No connection tried yet (connections open at the first publish).
    NotConnected,
    Up,
    /// The last connection or publish failed, and why.
    Degraded(String),
}

/// Each broker destination's state (`source/destination` → state). Readiness reports
/// them per destination: a broker outage degrades that destination, not the service.
#[derive(Debug, Default)]
pub struct BrokerHealth {
    states: Mutex<BTreeMap<String, BrokerState>>,
}

impl BrokerHealth {
    /// Every broker destination and its state.
    pub fn states(&self) -> Vec<(String, BrokerState)> {
        lock(&self.states)
            .iter()
            .map(|(name, state)| (name.clone(), state.clone()))
            .collect()
    }

    /// Records `label`'s state (`source/destination`); the gauge is labelled with the
    /// destination's name, as the delivery metrics are.
    fn set(&self, label: &str, name: &str, state: BrokerState) {
        let up = if state == BrokerState::Up { 1.0 } else { 0.0 };
        metrics::gauge!("inlet_broker_up", "destination" => name.to_owned()).set(up);
        lock(&self.states).insert(label.to_owned(), state);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An open connection to a broker.
#[derive(Clone)]
enum Session {
    Nats(Arc<nats::Session>),
    Amqp(Arc<amqp::Session>),
}

impl Session {
    /// Whether the connection can still publish. A NATS client reconnects by itself; a
    /// RabbitMQ connection or channel, once closed, stays closed.
    fn alive(&self) -> bool {
        match self {
            Session::Nats(_) => true,
            Session::Amqp(session) => session.alive(),
        }
    }
}

#[derive(Default)]
struct Slot {
    session: Option<Session>,
    failures: u32,
    retry_at: Option<Instant>,
}

/// The connection of one broker destination.
pub(super) struct Link {
    /// `source/destination`: the health key.
    label: String,
    settings: DestinationSettings,
    slot: tokio::sync::Mutex<Slot>,
    health: Arc<BrokerHealth>,
}

impl Link {
    /// A link for `settings` (a broker destination of `source`); nothing is connected yet.
    pub(super) fn new(
        source: &str,
        settings: &DestinationSettings,
        health: Arc<BrokerHealth>,
    ) -> Self {
        let label = format!("{source}/{}", settings.name);
        health.set(&label, &settings.name, BrokerState::NotConnected);
        Self {
            label,
            settings: settings.clone(),
            slot: tokio::sync::Mutex::new(Slot::default()),
            health,
        }
    }

    /// Connects now (the startup probe) and logs the outcome; never fails the caller.
    pub(super) async fn probe(&self) {
        let kind = self.settings.kind.label();
        match self.session().await {
            Ok(_) => tracing::info!(destination = %self.label, kind, "broker reachable"),
            Err(error) => tracing::error!(
                destination = %self.label,
                kind,
                %error,
                "broker unreachable: webhooks are still accepted, and their deliveries wait in \
                 the outbox and are retried until it answers"
            ),
        }
    }

    /// Publishes one delivery and waits for the broker's confirmation.
    pub(super) async fn publish(
        &self,
        delivery: &Leased,
        now: DateTime<Utc>,
        trace_parent: Option<&str>,
    ) -> AttemptResult {
        let published = match self.session().await {
            Ok(session) => self.publish_on(&session, delivery, now, trace_parent).await,
            Err(error) => Err(Failure::transient(error)),
        };
        match published {
            Ok(()) => {
                self.report(BrokerState::Up);
                AttemptResult {
                    status: None,
                    verdict: Verdict::Delivered,
                    error: None,
                }
            }
            Err(failure) => {
                if failure.broken {
                    self.slot.lock().await.session = None;
                }
                if failure.verdict != Verdict::Dead {
                    self.report(BrokerState::Degraded(failure.error.clone()));
                }
                AttemptResult {
                    status: None,
                    verdict: failure.verdict,
                    error: Some(failure.error),
                }
            }
        }
    }

    async fn publish_on(
        &self,
        session: &Session,
        delivery: &Leased,
        now: DateTime<Utc>,
        trace_parent: Option<&str>,
    ) -> Result<(), Failure> {
        let headers = delivery_headers(&self.settings, delivery, now, trace_parent);
        let timeout = self.settings.timeout;
        let source = delivery.source.as_str();
        let event_type = delivery.event_type.as_deref();
        match (session, &self.settings.kind) {
            (Session::Nats(session), DestinationKind::Nats { subject }) => {
                let subject = subject.render(source, event_type);
                let duplicate = nats::publish(session, subject, headers, delivery, timeout).await?;
                if duplicate {
                    // A re-publish after a lost settlement: JetStream kept the first copy.
                    metrics::counter!("inlet_broker_duplicates_total", "destination" => delivery.destination.clone())
                        .increment(1);
                    tracing::info!(delivery = delivery.id, destination = %self.label, "JetStream dropped a duplicate publish");
                }
                Ok(())
            }
            (
                Session::Amqp(session),
                DestinationKind::Amqp {
                    exchange,
                    routing_key,
                },
            ) => {
                let routing_key = routing_key.render(source, event_type);
                amqp::publish(session, exchange, routing_key, headers, delivery, timeout).await
            }
            _ => Err(Failure::dead("the destination changed kind".to_owned())),
        }
    }

    fn report(&self, state: BrokerState) {
        self.health.set(&self.label, &self.settings.name, state);
    }

    /// The open connection, or a new one; fails at once while waiting to reconnect.
    async fn session(&self) -> Result<Session, String> {
        let mut slot = self.slot.lock().await;
        if let Some(session) = slot.session.as_ref().filter(|s| s.alive()) {
            return Ok(session.clone());
        }
        slot.session = None;
        if let Some(at) = slot.retry_at.filter(|at| *at > Instant::now()) {
            let wait = at.saturating_duration_since(Instant::now());
            return Err(format!(
                "broker unreachable, next connection attempt in {} ms",
                wait.as_millis()
            ));
        }
        match self.connect().await {
            Ok(session) => {
                *slot = Slot {
                    session: Some(session.clone()),
                    ..Slot::default()
                };
                self.report(BrokerState::Up);
                Ok(session)
            }
            Err(error) => {
                slot.failures = slot.failures.saturating_add(1);
                slot.retry_at = Some(Instant::now() + reconnect_delay(slot.failures));
                self.report(BrokerState::Degraded(error.clone()));
                Err(error)
            }
        }
    }

    async fn connect(&self) -> Result<Session, String> {
        let settings = &self.settings;
        let connecting = async {
            match &settings.kind {
                DestinationKind::Nats { .. } => nats::connect(settings)
                    .await
                    .map(|s| Session::Nats(Arc::new(s))),
                DestinationKind::Amqp { exchange, .. } => amqp::connect(settings, exchange)
                    .await
                    .map(|s| Session::Amqp(Arc::new(s))),
                DestinationKind::Http => Err("not a broker destination".to_owned()),
            }
        };
        match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(result) => result.map_err(|e| format!("cannot connect: {e}")),
            Err(_) => Err(format!(
                "cannot connect within {} ms",
                settings.connect_timeout.as_millis()
            )),
        }
    }
}

/// Exponential, from [`RECONNECT_BASE`] to [`RECONNECT_CAP`].
fn reconnect_delay(failures: u32) -> Duration {
    RECONNECT_BASE
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
        .min(RECONNECT_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_delay_doubles_up_to_the_cap() {
        assert_eq!(reconnect_delay(1), Duration::from_millis(100));
        assert_eq!(reconnect_delay(2), Duration::from_millis(200));
        assert_eq!(reconnect_delay(7), Duration::from_millis(5000));
        assert_eq!(reconnect_delay(u32::MAX), RECONNECT_CAP);
    }
}
