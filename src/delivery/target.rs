//! What kind of destination a URL names — an HTTP endpoint, a NATS JetStream subject or a
//! RabbitMQ exchange — and where on a broker each fact goes: subjects and routing keys are
//! templates over the fact's source and event type, checked once at startup.

/// The NATS subject when none is configured.
pub const DEFAULT_NATS_SUBJECT: &str = "inlet.{source}.{event_type}";
/// The RabbitMQ exchange when none is configured: the topic exchange every broker has.
pub const DEFAULT_AMQP_EXCHANGE: &str = "amq.topic";
/// The RabbitMQ routing key when none is configured.
pub const DEFAULT_AMQP_ROUTING_KEY: &str = "inlet.{source}.{event_type}";
/// The token used for a fact without an event type.
const NO_EVENT_TYPE: &str = "none";
/// AMQP limits routing keys to a short string.
const MAX_ROUTING_KEY_BYTES: usize = 255;

/// How a destination receives facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationKind {
    /// `http(s)://`: POST with an `Idempotency-Key`.
    Http,
    /// `nats://`: publish to JetStream on `subject`, `Nats-Msg-Id` = the delivery key.
    Nats { subject: Template },
    /// `amqp(s)://`: persistent publish to `exchange` with `routing_key`, `message_id` =
    /// the delivery key, under publisher confirms.
    Amqp {
        exchange: String,
        routing_key: Template,
    },
}

impl DestinationKind {
    /// The kind named by a URL scheme, with its optional settings; on error the field at
    /// fault and why.
    pub fn from_file(
        scheme: &str,
        subject: Option<String>,
        exchange: Option<String>,
        routing_key: Option<String>,
    ) -> Result<Self, (&'static str, String)> {
        let refuse = |field: &'static str, kinds: &str| {
            Err((field, format!("only applies to {kinds} destinations")))
        };
        match scheme {
            "http" | "https" => match (&subject, &exchange, &routing_key) {
                (Some(_), _, _) => refuse("subject", "nats://"),
                (_, Some(_), _) => refuse("exchange", "amqp://"),
                (_, _, Some(_)) => refuse("routing_key", "amqp://"),
                _ => Ok(Self::Http),
            },
            "nats" => match (&exchange, &routing_key) {
                (Some(_), _) => refuse("exchange", "amqp://"),
                (_, Some(_)) => refuse("routing_key", "amqp://"),
                _ => {
                    let subject = subject.as_deref().unwrap_or(DEFAULT_NATS_SUBJECT);
                    Ok(Self::Nats {
                        subject: Template::subject(subject).map_err(|m| ("subject", m))?,
                    })
                }
            },
            "amqp" | "amqps" => {
                if subject.is_some() {
                    return refuse("subject", "nats://");
                }
                let exchange = exchange.unwrap_or_else(|| DEFAULT_AMQP_EXCHANGE.to_owned());
                if exchange.len() > MAX_ROUTING_KEY_BYTES {
                    return Err(("exchange", "must be at most 255 bytes".to_owned()));
                }
                let key = routing_key.as_deref().unwrap_or(DEFAULT_AMQP_ROUTING_KEY);
                Ok(Self::Amqp {
                    exchange,
                    routing_key: Template::routing_key(key).map_err(|m| ("routing_key", m))?,
                })
            }
            _ => Err((
                "url",
                "must be an http://, https://, nats://, amqp:// or amqps:// URL".to_owned(),
            )),
        }
    }

    /// What follows host and port in a destination's default name: the URL path for
    /// HTTP, the subject or exchange for a broker (never credentials).
    pub fn default_name_path(&self, url_path: &str) -> String {
        match self {
            Self::Http => url_path.to_owned(),
            Self::Nats { subject } => format!("/{}", subject.0),
            Self::Amqp { exchange, .. } => format!("/{exchange}"),
        }
    }

    /// A short name for logs and `check-config`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Nats { .. } => "nats",
            Self::Amqp { .. } => "amqp",
        }
    }
}

/// A subject or routing key with `{source}` and `{event_type}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(String);

impl Template {
    /// A NATS subject template: it must render to a subject JetStream accepts for a
    /// publish (dot-separated non-empty tokens, no spaces, no wildcards).
    pub fn subject(text: &str) -> Result<Self, String> {
        let template = Self::parse(text)?;
        let sample = template.render("source", Some("event.type"));
        if !is_publish_subject(&sample) {
            return Err(format!(
                "'{text}' is not a NATS subject to publish on: dot-separated non-empty \
                 tokens without spaces or wildcards (* >)"
            ));
        }
        Ok(template)
    }

    /// An AMQP routing key template (at most 255 bytes once rendered).
    pub fn routing_key(text: &str) -> Result<Self, String> {
        let template = Self::parse(text)?;
        if template.render("", None).len() > MAX_ROUTING_KEY_BYTES {
            return Err("must be at most 255 bytes".to_owned());
        }
        Ok(template)
    }

    /// Refuses unknown placeholders and stray braces.
    fn parse(text: &str) -> Result<Self, String> {
        let bare = text.replace("{source}", "").replace("{event_type}", "");
        if bare.contains(['{', '}']) {
            return Err(format!(
                "'{text}': the only placeholders are {{source}} and {{event_type}}"
            ));
        }
        if text.is_empty() {
            return Err("must not be empty".to_owned());
        }
        Ok(Self(text.to_owned()))
    }

    /// The subject or key of one fact. Values are made safe for a subject: spaces,
    /// wildcards and control characters become `_`, and an empty token `_` (event types
    /// keep their dots, so `payment_intent.succeeded` stays two tokens to filter on).
    pub fn render(&self, source: &str, event_type: Option<&str>) -> String {
        self.0.replace("{source}", &token_safe(source)).replace(
            "{event_type}",
            &token_safe(event_type.unwrap_or(NO_EVENT_TYPE)),
        )
    }
}

fn token_safe(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() || c == '*' || c == '>' {
                '_'
            } else {
                c
            }
        })
        .collect();
    cleaned
        .split('.')
        .map(|token| if token.is_empty() { "_" } else { token })
        .collect::<Vec<_>>()
        .join(".")
}

/// Whether JetStream accepts `subject` for a publish.
pub fn is_publish_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.split('.').all(|token| {
            !token.is_empty()
                && !token
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '*' || c == '>')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn defaults_render_source_and_type() {
        let kind = DestinationKind::from_file("nats", None, None, None).expect("valid");
        let DestinationKind::Nats { subject } = kind else {
            panic!("a NATS destination")
        };
        assert_eq!(
            subject.render("stripe", Some("invoice.paid")),
            "inlet.stripe.invoice.paid"
        );
        assert_eq!(subject.render("github", None), "inlet.github.none");
    }

    #[test]
    fn settings_of_another_kind_are_refused() {
        let refused = DestinationKind::from_file("nats", None, Some("x".into()), None);
        assert_eq!(refused.map_err(|e| e.0), Err("exchange"));
        let refused = DestinationKind::from_file("amqp", Some("x".into()), None, None);
        assert_eq!(refused.map_err(|e| e.0), Err("subject"));
        let refused = DestinationKind::from_file("https", None, None, Some("k".into()));
        assert_eq!(refused.map_err(|e| e.0), Err("routing_key"));
        let refused = DestinationKind::from_file("kafka", None, None, None);
        assert_eq!(refused.map_err(|e| e.0), Err("url"));
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(Template::subject("inlet.{sourc}").is_err());
        assert!(Template::subject("inlet.*.{source}").is_err());
        assert!(Template::subject("inlet..{source}").is_err());
        assert!(Template::subject("").is_err());
        assert!(Template::routing_key(&"k".repeat(256)).is_err());
        assert!(Template::routing_key("{source}#{event_type}").is_ok());
    }

    proptest! {
        #[test]
        fn any_source_and_type_render_a_valid_subject(source in ".{0,40}", kind in proptest::option::of(".{0,40}")) {
            let template = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
            let subject = template.render(&source, kind.as_deref());
            prop_assert!(is_publish_subject(&subject), "{subject:?}");
        }
    }
}
