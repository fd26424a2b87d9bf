//! What kind of destination a URL names — an HTTP endpoint, a NATS JetStream subject or a
//! RabbitMQ exchange — and where on a broker each fact goes: subjects and routing keys are
//! templates over the fact's source and event type, checked once at startup.

/// The NATS subject when none is configured.
pub const DEFAULT_NATS_SUBJECT: &str = "inlet.{source}.{event_type}";
/// The RabbitMQ exchange when none is configured: the topic exchange every broker has.
pub const DEFAULT_AMQP_EXCHANGE: &str = "amq.topic";
/// The RabbitMQ routing key when none is configured.
pub const DEFAULT_AMQP_ROUTING_KEY: &str = "inlet.{source}.{event_type}";
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
///
/// What a sender controls (the event type) must never choose where on the broker a
/// message lands beyond the one token it fills: a template starts with a fixed token of
/// the configuration, and every value is encoded into exactly one token that can be
/// neither a wildcard nor a system (`$…`) token ([`encode_token`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(String);

/// The token of a fact without an event type: no encoded value is `~` alone (a `~` in a
/// value is encoded).
pub const NO_EVENT_TYPE_TOKEN: &str = "~";

/// The placeholders a template may hold.
const PLACEHOLDERS: [&str; 2] = ["{source}", "{event_type}"];

impl Template {
    /// A NATS subject template: it must render to a subject JetStream accepts for a
    /// publish (dot-separated non-empty tokens, no spaces, no wildcards), outside the
    /// system subjects.
    pub fn subject(text: &str) -> Result<Self, String> {
        Self::parse(text, "NATS subject")
    }

    /// An AMQP routing key template (at most 255 bytes once rendered, with the same
    /// rules for its tokens as a subject).
    pub fn routing_key(text: &str) -> Result<Self, String> {
        let template = Self::parse(text, "routing key")?;
        if template.render("", None).len() > MAX_ROUTING_KEY_BYTES {
            return Err("must be at most 255 bytes".to_owned());
        }
        Ok(template)
    }

    /// Refuses unknown placeholders and stray braces, a placeholder sharing its token (so
    /// that no two (source, type) pairs render alike), and any fixed part a sender could
    /// use to leave the template's namespace: the first token must be fixed by the
    /// configuration (text or `{source}`, never `{event_type}`), and no fixed token may
    /// be empty, a wildcard, hold a space or start with `$` (NATS' system subjects:
    /// `$JS.API…`, `$SYS…`), nor may the subject start with `_INBOX` (request replies).
    fn parse(text: &str, what: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("must not be empty".to_owned());
        }
        let bare = PLACEHOLDERS
            .iter()
            .fold(text.to_owned(), |t, p| t.replace(p, ""));
        if bare.contains(['{', '}']) {
            return Err(format!(
                "'{text}': the only placeholders are {{source}} and {{event_type}}"
            ));
        }
        let shared = text.split('.').find(|token| {
            PLACEHOLDERS.iter().any(|p| token.contains(p)) && !PLACEHOLDERS.contains(token)
        });
        if let Some(token) = shared {
            return Err(format!(
                "'{text}': a placeholder fills a whole token ('{token}' holds more): a value \
                 beside text or another value could read as another source's or type's"
            ));
        }
        let first = text.split('.').next().unwrap_or_default();
        if first.contains("{event_type}") {
            return Err(format!(
                "'{text}' must start with a fixed {what} token (such as 'inlet.'), not one \
                 the event chooses: {{event_type}} may only fill a later token"
            ));
        }
        if first.starts_with('$') || first == "_INBOX" {
            return Err(format!(
                "'{text}' names a system {what} ('$…' or '_INBOX'): publish under a \
                 prefix of your own"
            ));
        }
        let template = Self(text.to_owned());
        if !is_publish_subject(&template.render("source", Some("type"))) {
            return Err(format!(
                "'{text}' is not a {what} to publish on: dot-separated non-empty tokens \
                 without spaces, wildcards (* > #) or a leading '$'"
            ));
        }
        Ok(template)
    }

    /// The subject or key of one fact: each placeholder becomes one token's worth of
    /// [`encode_token`]; a fact without a type is [`NO_EVENT_TYPE_TOKEN`].
    pub fn render(&self, source: &str, event_type: Option<&str>) -> String {
        let event_type = event_type.map_or_else(|| NO_EVENT_TYPE_TOKEN.to_owned(), encode_token);
        self.0
            .replace("{source}", &encode_token(source))
            .replace("{event_type}", &event_type)
    }
}

/// A value as part of one subject or routing-key token, injectively: ASCII letters,
/// digits, `-` and `_` stay; every other byte of its UTF-8 — `.`, `*`, `>`, `#`, `$`,
/// `%`, `~`, spaces, control characters, non-ASCII — becomes `%XX` (upper-case hex). So
/// a value adds no token, no wildcard and no `$`-prefixed token, and two values never
/// share an encoding (`a.*` is `a%2E%2A`, `a.>` is `a%2E%3E`). An empty value (none
/// reaches here: types are non-empty) would be `%`, which no other value encodes to.
pub fn encode_token(value: &str) -> String {
    if value.is_empty() {
        return "%".to_owned();
    }
    let mut token = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            token.push(char::from(byte));
        } else {
            token.push_str(&format!("%{byte:02X}"));
        }
    }
    token
}

/// Whether a broker accepts `subject` for a publish, and it is outside what a sender
/// must never reach: non-empty dot-separated tokens, none with a space, a control
/// character or a wildcard (`*`, `>`, `#`), none starting with `$`.
pub fn is_publish_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.split('.').all(|token| {
            !token.is_empty()
                && !token.starts_with('$')
                && !token.chars().any(|c| {
                    c.is_whitespace() || c.is_control() || c == '*' || c == '>' || c == '#'
                })
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
            "inlet.stripe.invoice%2Epaid"
        );
        assert_eq!(subject.render("github", None), "inlet.github.~");
        assert_eq!(subject.render("github", Some("none")), "inlet.github.none");
        assert_eq!(
            subject.render("shopify", Some("orders/create")),
            "inlet.shopify.orders%2Fcreate"
        );
    }

    #[test]
    fn event_types_never_reach_a_system_subject_or_another_token() {
        let subject = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
        let rendered = subject.render("stripe", Some("$JS.API.STREAM.PURGE.orders"));
        assert_eq!(
            rendered,
            "inlet.stripe.%24JS%2EAPI%2ESTREAM%2EPURGE%2Eorders"
        );
        assert_eq!(rendered.split('.').count(), 3);
        // Wildcards land on distinct subjects, neither of them a wildcard.
        let star = subject.render("a", Some("a.*"));
        let chevron = subject.render("a", Some("a.>"));
        assert_ne!(star, chevron);
        assert!(is_publish_subject(&star) && is_publish_subject(&chevron));
        let key = Template::routing_key(DEFAULT_AMQP_ROUTING_KEY).expect("valid");
        assert_eq!(key.render("s", Some("#")), "inlet.s.%23");
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
        assert!(Template::routing_key("{source}.x.{event_type}").is_ok());
        assert!(Template::routing_key("inlet.#.{event_type}").is_err());
        // The leading token is the configuration's, never the event's.
        for text in [
            "{event_type}",
            "{event_type}.inlet",
            "x{event_type}.inlet",
            "$JS.API.{event_type}",
            "$SYS.{source}",
            "_INBOX.{source}.{event_type}",
            "inlet.$JS.{event_type}",
            ".inlet.{event_type}",
        ] {
            assert!(Template::subject(text).is_err(), "{text}");
            assert!(Template::routing_key(text).is_err(), "{text}");
        }
        assert!(Template::subject("{source}.events.{event_type}").is_ok());
        // A placeholder fills a whole token: `a` + `b-x` and `a-b` + `x` would meet.
        assert!(Template::subject("inlet.v1-{event_type}").is_err());
        assert!(Template::subject("inlet.{source}-{event_type}").is_err());
        assert!(Template::routing_key("inlet.{source}{event_type}").is_err());
    }

    proptest! {
        #[test]
        fn any_source_and_type_render_a_valid_subject(source in ".{0,40}", kind in proptest::option::of(".{0,40}")) {
            let template = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
            let subject = template.render(&source, kind.as_deref());
            prop_assert!(is_publish_subject(&subject), "{subject:?}");
            prop_assert_eq!(subject.split('.').count(), 3, "{}", subject);
        }

        #[test]
        fn the_encoding_is_injective(a in proptest::option::of(".{0,12}"), b in proptest::option::of(".{0,12}")) {
            let template = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
            let (x, y) = (template.render("s", a.as_deref()), template.render("s", b.as_deref()));
            prop_assert_eq!(x == y, a == b, "{:?} {:?} → {} {}", a, b, x, y);
        }

        #[test]
        fn two_sources_never_share_a_subject(a in "[a-z_-]{1,6}", b in "[a-z_-]{1,6}", x in ".{0,6}", y in ".{0,6}") {
            let template = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
            prop_assume!((a.as_str(), x.as_str()) != (b.as_str(), y.as_str()));
            prop_assert_ne!(template.render(&a, Some(&x)), template.render(&b, Some(&y)));
        }

        #[test]
        fn similar_types_never_share_a_subject(stem in "[a-z.*>#$% ~]{0,6}", tail in "[.*>#$% ~_-]") {
            let template = Template::subject(DEFAULT_NATS_SUBJECT).expect("valid");
            let a = format!("{stem}{tail}");
            let b = format!("{stem}_");
            prop_assume!(a != b);
            prop_assert_ne!(template.render("s", Some(&a)), template.render("s", Some(&b)));
        }
    }
}
