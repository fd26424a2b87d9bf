//! Publishing to NATS JetStream: `Nats-Msg-Id` is the delivery key, so a re-publish of
//! the same delivery within the stream's duplicate window is dropped by JetStream and
//! acknowledged as a duplicate. Delivered means JetStream's publish ack arrived.

use super::super::outbox::Leased;
use super::super::DestinationSettings;
use super::failure::Failure;
use async_nats::header::{HeaderMap, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::context::PublishErrorKind;
use std::time::Duration;

/// A client (it reconnects by itself, with backoff) and its JetStream context.
pub(super) struct Session {
    jetstream: async_nats::jetstream::Context,
}

pub(super) async fn connect(settings: &DestinationSettings) -> Result<Session, String> {
    let client = async_nats::ConnectOptions::new()
        .name(concat!("inlet/", env!("CARGO_PKG_VERSION")))
        .connection_timeout(settings.connect_timeout)
        .connect(settings.url.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let mut jetstream = async_nats::jetstream::new(client);
    jetstream.set_timeout(settings.timeout);
    Ok(Session { jetstream })
}

/// Publishes and waits for the ack; `Ok(true)` when JetStream had it already.
pub(super) async fn publish(
    session: &Session,
    subject: String,
    headers: Vec<(String, String)>,
    delivery: &Leased,
    timeout: Duration,
) -> Result<bool, Failure> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(name.as_str(), header_value(&name, &value)?);
    }
    let key = delivery.idempotency_key();
    map.insert(NATS_MESSAGE_ID, header_value("Nats-Msg-Id", &key)?);
    let payload = delivery.body().to_vec().into();
    let sent = tokio::time::timeout(timeout, async {
        let jetstream = &session.jetstream;
        jetstream
            .publish_with_headers(subject.clone(), map, payload)
            .await?
            .await
    })
    .await;
    match sent {
        Ok(Ok(ack)) => Ok(ack.duplicate),
        Ok(Err(error)) => Err(classify(&subject, error)),
        Err(_) => Err(Failure::transient(format!(
            "no JetStream publish ack within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// A stored value a NATS header cannot carry (a line break) is never going to be sent.
fn header_value(name: &str, value: &str) -> Result<HeaderValue, Failure> {
    value
        .parse()
        .map_err(|_| Failure::dead(format!("header {name} has a value NATS cannot carry")))
}

fn classify(subject: &str, error: async_nats::jetstream::context::PublishError) -> Failure {
    match error.kind() {
        PublishErrorKind::MaxPayloadExceeded => {
            Failure::dead(format!("JetStream refused the message: {error}"))
        }
        // The stream may be created (or JetStream come back) later: retried.
        PublishErrorKind::StreamNotFound => Failure::transient(format!(
            "no JetStream stream captures subject '{subject}': {error}"
        )),
        _ => Failure::transient(format!("JetStream publish failed: {error}")),
    }
}
