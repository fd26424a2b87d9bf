//! Publishing to RabbitMQ (AMQP 0-9-1): persistent messages (`delivery_mode` 2) with
//! `message_id` = the delivery key, `mandatory` set and publisher confirms on. Delivered
//! means the broker acked the message and did not return it; a nack, a return
//! (unroutable: no queue bound) or a lost connection is a failed attempt.

use super::super::outbox::Leased;
use super::super::DestinationSettings;
use super::failure::Failure;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use std::time::Duration;

/// A connection and its one channel, in confirm mode.
pub(super) struct Session {
    connection: Connection,
    channel: Channel,
}

impl Session {
    pub(super) fn alive(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

/// Connects, opens a channel in confirm mode, and checks that `exchange` exists (a
/// passive declare), so a missing exchange shows at connection time with its name.
pub(super) async fn connect(
    settings: &DestinationSettings,
    exchange: &str,
) -> Result<Session, String> {
    let name = ShortString::try_new(exchange.to_owned()).map_err(|e| e.to_string())?;
    let open = async {
        let connection =
            Connection::connect(&settings.url, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        if !exchange.is_empty() {
            let passive = ExchangeDeclareOptions {
                passive: true,
                ..ExchangeDeclareOptions::default()
            };
            channel
                .exchange_declare(name, ExchangeKind::Topic, passive, FieldTable::default())
                .await?;
        }
        Ok::<_, lapin::Error>(Session {
            connection,
            channel,
        })
    };
    open.await.map_err(|e| e.to_string())
}

/// Publishes and waits for the publisher confirm.
pub(super) async fn publish(
    session: &Session,
    exchange: &str,
    routing_key: String,
    headers: Vec<(String, String)>,
    delivery: &Leased,
    timeout: Duration,
) -> Result<(), Failure> {
    let properties = properties(headers, delivery)?;
    let exchange_name = short(exchange)?;
    let key = short(&routing_key)?;
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let sent = tokio::time::timeout(timeout, async {
        let channel = &session.channel;
        channel
            .basic_publish(exchange_name, key, options, delivery.body(), properties)
            .await?
            .await
    })
    .await;
    match sent {
        Ok(Ok(Confirmation::Ack(None))) => Ok(()),
        Ok(Ok(Confirmation::Ack(Some(returned)))) => Err(Failure::transient(format!(
            "returned by the broker ({} {}): no queue is bound to exchange '{exchange}' for \
             routing key '{routing_key}'",
            returned.reply_code, returned.reply_text
        ))),
        Ok(Ok(Confirmation::Nack(_))) => Err(Failure::transient(
            "the broker refused the message (basic.nack)".to_owned(),
        )),
        Ok(Ok(Confirmation::NotRequested)) => Err(Failure::broken(
            "publisher confirms are off on this channel".to_owned(),
        )),
        Ok(Err(error)) => Err(Failure::broken(format!("publish failed: {error}"))),
        // A confirm that never comes means a stuck connection: open a new one.
        Err(_) => Err(Failure::broken(format!(
            "no publisher confirm within {} ms",
            timeout.as_millis()
        ))),
    }
}

/// Persistent, `message_id` = the delivery key, Inlet's headers in the headers table.
fn properties(
    headers: Vec<(String, String)>,
    delivery: &Leased,
) -> Result<BasicProperties, Failure> {
    let mut table = FieldTable::default();
    for (name, value) in headers {
        table.insert(
            short(&name)?,
            AMQPValue::LongString(LongString::from(value)),
        );
    }
    Ok(BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(short(&delivery.idempotency_key())?)
        .with_content_type(short(&delivery.content_type)?)
        .with_headers(table))
}

/// AMQP short strings hold at most 255 bytes: a longer stored value is a dead letter.
fn short(value: &str) -> Result<ShortString, Failure> {
    ShortString::try_new(value.to_owned()).map_err(|_| {
        Failure::dead(format!(
            "'{}…' is longer than the 255 bytes AMQP allows here",
            value.chars().take(40).collect::<String>()
        ))
    })
}
