//! The headers every delivery carries, whatever the transport: HTTP headers on a POST,
//! message headers on NATS, the headers table on RabbitMQ. A consumer reads the same
//! names everywhere: the delivery key, Inlet's source, event id and type, a Standard
//! Webhooks signature made with the destination's secret, so it can verify the origin,
//! and (tracing on) the `traceparent` of the attempt's span.

use super::outbox::Leased;
use super::DestinationSettings;
use crate::signature::ToSign;
use crate::signature::{EventToSign, Signer, Standard};
use chrono::{DateTime, Utc};

/// The headers of an attempt; `trace_parent` (W3C Trace Context, tracing on) puts the
/// consumer's spans in the webhook's trace, under the attempt's span.
pub fn delivery_headers(
    destination: &DestinationSettings,
    delivery: &Leased,
    now: DateTime<Utc>,
    trace_parent: Option<&str>,
) -> Vec<(String, String)> {
    let key = delivery.idempotency_key();
    let message = EventToSign {
        id: key.clone(),
        event_type: delivery.event_type.clone().unwrap_or_default(),
    };
    let mut headers: Vec<(String, String)> = Standard
        .sign(ToSign::new(
            delivery.body(),
            &destination.secret,
            now,
            &message,
        ))
        .into_iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("content-type"))
        .collect();
    headers.push(("Content-Type".to_owned(), delivery.content_type.clone()));
    headers.push(("Idempotency-Key".to_owned(), key));
    headers.push(("Inlet-Source".to_owned(), delivery.source.clone()));
    headers.push(("Inlet-Event-Id".to_owned(), delivery.event_id.clone()));
    if let Some(event_type) = &delivery.event_type {
        headers.push(("Inlet-Event-Type".to_owned(), event_type.clone()));
    }
    headers.push(("Inlet-Attempt".to_owned(), delivery.attempt.to_string()));
    if let Some(trace_parent) = trace_parent {
        headers.push(("traceparent".to_owned(), trace_parent.to_owned()));
    }
    headers
}
