//! The destinations a dispatcher sends to, built from their settings: an HTTP client
//! (one per connect timeout, all on one TLS connector) or a broker link each, with its
//! retry budget; kept across a reload while their settings stay the same.

use super::bus::{self, BrokerHealth};
use super::filters::{self, Subject};
use super::policy::Verdict;
use super::sender::{attempt, Clients};
use super::{
    filter_error, AttemptResult, DestinationKind, DestinationSettings, Destinations, Leased,
    RetryBudget,
};
use crate::delivery::DestinationKey;
use crate::jq::{EvalError, Limits, Program};
use crate::traces::{self, Attribute, Kind, Span, Traces};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A destination ready to send to.
pub(super) struct Destination {
    pub(super) settings: DestinationSettings,
    pub(super) transport: Transport,
    pub(super) budget: Mutex<RetryBudget>,
    /// The bounds of its transform (`[jq]`).
    pub(super) jq: Limits,
}

/// How a destination's attempts go out.
pub(super) enum Transport {
    Http(reqwest::Client),
    /// NATS JetStream or RabbitMQ: one connection per destination.
    Broker(Box<bus::Link>),
}

impl Destination {
    pub(super) fn new(
        source: &str,
        settings: &DestinationSettings,
        jq: Limits,
        health: &Arc<BrokerHealth>,
        clients: &mut Clients,
    ) -> reqwest::Result<Self> {
        let transport = match settings.kind {
            DestinationKind::Http => Transport::Http(clients.client_for(settings)?),
            _ => Transport::Broker(Box::new(bus::Link::new(source, settings, health.clone()))),
        };
        Ok(Self {
            transport,
            budget: Mutex::new(RetryBudget::new(settings.retry_rate, settings.retry_burst)),
            settings: settings.clone(),
            jq,
        })
    }

    /// One attempt, in a span of the webhook's trace (tracing on) whose `traceparent` the
    /// delivery carries.
    pub(super) async fn attempt(
        &self,
        delivery: &Leased,
        now: DateTime<Utc>,
        traces: &Traces,
    ) -> AttemptResult {
        let mut span = self.attempt_span(traces, delivery);
        let result = self
            .send(delivery, now, span.trace_parent().as_deref())
            .await;
        close_attempt_span(&mut span, &result);
        result
    }

    /// A client span of an HTTP attempt, a producer span of a broker publish, with
    /// OpenTelemetry's HTTP or messaging attributes (the address, never the URL's path,
    /// query or credentials).
    fn attempt_span(&self, traces: &Traces, delivery: &Leased) -> Span {
        if !traces.is_on() {
            return Span::none();
        }
        let parent = traces::parent_of(delivery.trace_parent.as_deref());
        let settings = &self.settings;
        let (name, kind, mut attributes) = match &settings.kind {
            DestinationKind::Http => ("POST".to_owned(), Kind::Client, http_attributes(settings)),
            DestinationKind::Nats { subject } => {
                let subject = subject.render(&delivery.source, delivery.event_type.as_deref());
                (
                    format!("publish {subject}"),
                    Kind::Producer,
                    messaging("nats", subject, delivery),
                )
            }
            DestinationKind::Amqp {
                exchange,
                routing_key,
            } => {
                let key = routing_key.render(&delivery.source, delivery.event_type.as_deref());
                // The default exchange has no name; OpenTelemetry calls it amq.default.
                let exchange = match exchange.as_str() {
                    "" => "amq.default",
                    named => named,
                };
                let mut attributes = messaging("rabbitmq", exchange.to_owned(), delivery);
                attributes.push(Attribute::new(
                    "messaging.rabbitmq.destination.routing_key",
                    key,
                ));
                (format!("publish {exchange}"), Kind::Producer, attributes)
            }
        };
        attributes.extend([
            Attribute::new("inlet.source", delivery.source.clone()),
            Attribute::new("inlet.destination", delivery.destination.clone()),
            Attribute::new("inlet.event.id", delivery.event_id.clone()),
            Attribute::new("inlet.delivery.attempt", i64::from(delivery.attempt)),
        ]);
        if delivery.attempt > 1 && settings.kind == DestinationKind::Http {
            let resends = i64::from(delivery.attempt - 1);
            attributes.push(Attribute::new("http.request.resend_count", resends));
        }
        if let Some(event_type) = &delivery.event_type {
            attributes.push(Attribute::new("inlet.event.type", event_type.clone()));
        }
        traces.span(name, kind, &parent, None, || attributes)
    }

    /// One attempt: a POST, or a publish waiting for the broker's confirmation — of the
    /// transform's output when the destination has one.
    async fn send(
        &self,
        delivery: &Leased,
        now: DateTime<Utc>,
        trace_parent: Option<&str>,
    ) -> AttemptResult {
        if delivery.payload.is_none() {
            // Neither the row nor its event holds the bytes (written by hand, or the event
            // deleted outside the sweeper): nothing to send, ever. A dead letter, with why.
            return dead("the payload is gone: neither the delivery nor its event holds it");
        }
        if delivery.filter_pending {
            if let Some(unsent) = self.filter(delivery).await {
                return unsent;
            }
        }
        let transformed;
        let delivery = match &self.settings.transform {
            None => delivery,
            Some(transform) => match self.transform(transform, delivery).await {
                Ok(body) => {
                    transformed = body;
                    &transformed
                }
                // Nothing evaluated (every evaluator busy): later, as a retry.
                Err(error) if error.is_transient() => {
                    return unevaluated(format!("transform not evaluated yet: {error}"))
                }
                // The same bytes make the same error: no retry can fix it, a fixed
                // transform (and a requeue) can.
                Err(error) => return dead(&format!("transform failed: {error}")),
            },
        };
        match &self.transport {
            Transport::Http(client) => {
                attempt(client, &self.settings, delivery, now, trace_parent).await
            }
            Transport::Broker(link) => link.publish(delivery, now, trace_parent).await,
        }
    }
}

/// An HTTP client span's attributes: the method, the scheme and the address.
fn http_attributes(settings: &DestinationSettings) -> Vec<Attribute> {
    let mut attributes = vec![Attribute::new("http.request.method", "POST")];
    if let Ok(url) = reqwest::Url::parse(&settings.url) {
        attributes.push(Attribute::new("url.scheme", url.scheme().to_owned()));
        if let Some(host) = url.host_str() {
            attributes.push(Attribute::new("server.address", host.to_owned()));
        }
        if let Some(port) = url.port_or_known_default() {
            attributes.push(Attribute::new("server.port", i64::from(port)));
        }
    }
    attributes
}

/// A producer span's attributes: the system, where it publishes, and the message id (the
/// delivery key, which JetStream and consumers deduplicate on).
fn messaging(system: &'static str, destination: String, delivery: &Leased) -> Vec<Attribute> {
    vec![
        Attribute::new("messaging.system", system),
        Attribute::new("messaging.operation.type", "send"),
        Attribute::new("messaging.operation.name", "publish"),
        Attribute::new("messaging.destination.name", destination),
        Attribute::new("messaging.message.id", delivery.idempotency_key()),
    ]
}

/// The attempt's outcome on its span: the status, and for anything but a delivery the
/// error's kind (`HTTP 503`, `connection refused`, …) and its text.
fn close_attempt_span(span: &mut Span, result: &AttemptResult) {
    if !span.is_recording() {
        return;
    }
    if let Some(status) = result.status {
        span.set(Attribute::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    let verdict = match result.verdict {
        Verdict::Delivered => "delivered",
        Verdict::Retry { .. } => "retry",
        Verdict::Dead => "dead",
        Verdict::Filtered => "filtered",
        Verdict::Unevaluated => "unevaluated",
    };
    span.set(Attribute::new("inlet.delivery.verdict", verdict));
    if let Some(error) = &result.error {
        // Only the kind: the stored error quotes the destination's answer, which may
        // echo the payload.
        let kind = match result.status {
            Some(status) => status.to_string(),
            None => error_type(error).to_owned(),
        };
        span.fail(&kind, &kind);
    }
}

/// The kind of an unanswered attempt's error, from the closed set its stored text starts
/// with (`sender::unanswered`, the bus, the transform); `_OTHER` otherwise, as
/// OpenTelemetry's `error.type` has it.
fn error_type(error: &str) -> &'static str {
    const KINDS: [&str; 16] = [
        "connection refused",
        "connection reset",
        "connect timed out",
        "timed out",
        "TLS failed",
        "DNS lookup failed",
        "connection failed",
        "request failed",
        "transform failed",
        "transform not evaluated yet",
        "filter failed",
        "filter not evaluated yet",
        "the payload is gone",
        "the request cannot be built",
        "broker unreachable",
        "JetStream publish failed",
    ];
    KINDS
        .into_iter()
        .find(|kind| error.starts_with(kind))
        .unwrap_or("_OTHER")
}

impl Destination {
    /// The filter of a delivery it could not decide when enqueued, evaluated now with the
    /// destination's filter as it is now: `None` when it takes the delivery (or has no
    /// filter any more), else why it is not sent.
    async fn filter(&self, delivery: &Leased) -> Option<AttemptResult> {
        let filter = self.settings.filter.as_ref()?;
        let subject = Subject {
            source: delivery.source.clone(),
            event_id: delivery.event_id.clone(),
            event_type: delivery.event_type.clone(),
            payload: bytes::Bytes::from(delivery.body().to_vec()),
            headers: delivery.headers.clone(),
        };
        let decision = filters::decide_late(&self.jq, &self.settings.name, filter, &subject).await;
        match decision {
            Ok(true) => None,
            Ok(false) => Some(AttemptResult {
                status: None,
                verdict: super::Verdict::Filtered,
                error: None,
            }),
            Err(error) if error.is_transient() => Some(unevaluated(filter_error(&error))),
            Err(error) => Some(dead(&filter_error(&error))),
        }
    }

    /// `delivery` with the transform's output as its JSON body.
    async fn transform(&self, transform: &Program, delivery: &Leased) -> Result<Leased, EvalError> {
        let subject = Subject {
            source: delivery.source.clone(),
            event_id: delivery.event_id.clone(),
            event_type: delivery.event_type.clone(),
            payload: bytes::Bytes::from(delivery.body().to_vec()),
            headers: None,
        };
        let body = filters::transformed(&self.jq, &self.settings.name, transform, &subject).await?;
        Ok(Leased {
            payload: Some(body),
            content_type: "application/json".to_owned(),
            ..delivery.clone()
        })
    }
}

/// A result that leaves `delivery` for a later attempt: nothing was sent.
fn unevaluated(error: String) -> AttemptResult {
    AttemptResult {
        status: None,
        verdict: super::Verdict::Unevaluated,
        error: Some(error),
    }
}

/// A result that sends `delivery` to the dead letters at once.
fn dead(error: &str) -> AttemptResult {
    AttemptResult {
        status: None,
        verdict: super::Verdict::Dead,
        error: Some(error.to_owned()),
    }
}

/// Destinations ready to send to, and how many HTTP clients building them took.
pub(super) struct Prepared {
    pub(super) ready: DestinationMap,
    /// The destinations built anew (the others are kept from before).
    pub(super) built: Vec<Arc<Destination>>,
    pub(super) clients_built: usize,
}

/// Every destination of `wanted`, reusing those of `current` whose settings are the
/// same. HTTP destinations share one client per connect timeout (the ones `current` has
/// first), all on the `tls` connector: nothing per destination but its settings.
pub(super) fn prepare(
    wanted: &Destinations,
    current: &DestinationMap,
    brokers: &Arc<BrokerHealth>,
    tls: &native_tls::TlsConnector,
) -> anyhow::Result<Prepared> {
    let mut clients = Clients::new(tls);
    for destination in current.values() {
        if let Transport::Http(client) = &destination.transport {
            clients.reuse(destination.settings.connect_timeout, client);
        }
    }
    let mut ready = HashMap::new();
    let mut built = Vec::new();
    for (source, settings) in wanted.iter() {
        let key = settings.key_in(source);
        let destination = match current.get(&key) {
            Some(kept) if same_destination(&kept.settings, settings) && kept.jq == wanted.jq => {
                kept.clone()
            }
            _ => {
                let fresh = Destination::new(source, settings, wanted.jq, brokers, &mut clients)?;
                let fresh = Arc::new(fresh);
                built.push(fresh.clone());
                fresh
            }
        };
        ready.insert(key, destination);
    }
    Ok(Prepared {
        ready,
        built,
        clients_built: clients.built(),
    })
}

/// Connects to each broker destination and logs whether it answered.
pub(super) async fn probe(destinations: &[Arc<Destination>]) {
    for destination in destinations {
        if let Transport::Broker(link) = &destination.transport {
            link.probe().await;
        }
    }
}

/// The destinations ready to send to, by (source, name).
pub(super) type DestinationMap = HashMap<DestinationKey, Arc<Destination>>;

/// Whether two destination settings send alike (a reload keeps the one it has). `Debug`
/// shows every field but the signing secret, which is compared itself.
pub fn same_destination(a: &DestinationSettings, b: &DestinationSettings) -> bool {
    a.secret == b.secret && format!("{a:?}") == format!("{b:?}")
}
