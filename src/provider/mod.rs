//! Each provider's profile: which signature scheme it uses, where its event id, type and
//! fact key live, how late it can send a copy (its replay horizon), the fact rules that
//! hold for all its sources, and the setup handshake it expects. Mostly data; the
//! signature arithmetic lives in [`crate::signature`].
//!
//! A *source* is one configured sender of a provider: `POST /webhooks/{name}`.

mod source;

pub use source::{FactRuleFile, HmacFile, SourceFile, SourceName, SourceSettings};

use crate::idempotency::Answer;
use crate::identity::{JsonPointer, Locator, Locators};
use crate::ledger::FactRule;
use crate::secret::Secret;
use crate::signature::{
    zoom_url_validation_token, Basic, Discord, HeaderToken, HmacScheme, Paddle, PublicUrl, Scheme,
    Square, Standard, Stripe, Twilio, Verified, GITHUB, SHOPIFY, SLACK, ZOOM,
};
use std::time::Duration;

/// A source's provider, with its scheme's parameters where it has some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemeConfig {
    Stripe,
    Github,
    Standard,
    Shopify,
    Slack,
    Paddle,
    Zoom,
    /// Discord interactions (Ed25519; the secrets are the application's public keys).
    Discord,
    /// With the notification URL registered with Square.
    Square(Square),
    /// With the URL Twilio calls.
    Twilio(Twilio),
    Hmac(HmacScheme),
    /// HTTP Basic credentials: authenticates the sender only.
    Basic,
    /// A shared token in a named header: authenticates the sender only.
    HeaderToken(HeaderToken),
}

/// The scheme names accepted in `sources[].scheme`.
pub const SCHEME_NAMES: [&str; 13] = [
    "stripe",
    "github",
    "standard",
    "shopify",
    "slack",
    "paddle",
    "zoom",
    "discord",
    "square",
    "twilio",
    "hmac",
    "basic",
    "header_token",
];

/// Stripe event types that happen once per real-world object: keyed on `data.object.id`,
/// so the same payment arriving under another event id has no second effect.
pub const STRIPE_ONCE_PER_OBJECT_TYPES: [&str; 4] = [
    "payment_intent.succeeded",
    "charge.succeeded",
    "invoice.paid",
    "checkout.session.completed",
];

/// Square event types that happen once per payment or refund: keyed on `data.id`.
pub const SQUARE_ONCE_PER_OBJECT_TYPES: [&str; 2] = ["payment.created", "refund.created"];

/// Paddle Billing event types that happen once per transaction or subscription: keyed on
/// `data.id`, so the same transaction under another event id has no second effect.
pub const PADDLE_ONCE_PER_OBJECT_TYPES: [&str; 3] = [
    "transaction.paid",
    "transaction.completed",
    "subscription.created",
];

/// The schemes that sign the URL the provider called, so need `public_url`.
pub const PUBLIC_URL_SCHEMES: [&str; 2] = ["square", "twilio"];

const fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}

fn header(name: &str) -> Locator {
    Locator::Header(vec![name.to_owned()])
}

/// Twilio sends no event id, and one message's status callbacks (queued, sent,
/// delivered) share its MessageSid: the event is what was signed — the sorted parameters
/// of a form, the bytes of a JSON body — (a retry resends the same; the unsigned
/// I-Twilio-Idempotency-Token is never the id); the fact is one status of one message, so
/// the same status re-sent in another signed content (a second callback) has no second
/// effect. A form must carry both.
fn twilio_locators() -> Locators {
    Locators {
        event_id: Locator::BodyDigest,
        event_type: Some(Locator::Form("MessageStatus".to_owned())),
        fact_key: Some(Locator::Form("MessageSid".to_owned())),
        form_requires_fact: true,
    }
}

impl SchemeConfig {
    /// The scheme named `name`; `hmac` needs its parameters, `header_token` its header,
    /// `square` and `twilio` the URL they call.
    pub fn named(
        name: &str,
        hmac: Option<HmacScheme>,
        token_header: Option<HeaderToken>,
        public_url: Option<PublicUrl>,
    ) -> Result<Self, String> {
        if public_url.is_some() && !PUBLIC_URL_SCHEMES.contains(&name) {
            return Err(format!(
                "public_url applies only to scheme = {}, not {name}",
                PUBLIC_URL_SCHEMES.join(" or ")
            ));
        }
        let public_url = public_url.ok_or_else(|| {
            format!(
                "the {name} scheme needs public_url = \"https://…\", the URL registered with \
                 the provider, exactly as registered (it is signed)"
            )
        });
        if hmac.is_some() && name != "hmac" {
            return Err(format!(
                "[sources.hmac] applies only to scheme = \"hmac\", not {name}"
            ));
        }
        if token_header.is_some() && name != "header_token" {
            return Err(format!(
                "token_header applies only to scheme = \"header_token\", not {name}"
            ));
        }
        let scheme = match name {
            "stripe" => Self::Stripe,
            "github" => Self::Github,
            "standard" => Self::Standard,
            "shopify" => Self::Shopify,
            "slack" => Self::Slack,
            "paddle" => Self::Paddle,
            "zoom" => Self::Zoom,
            "discord" => Self::Discord,
            "square" => Self::Square(Square::new(public_url?)),
            "twilio" => Self::Twilio(Twilio::new(public_url?)),
            "hmac" => Self::Hmac(
                hmac.ok_or("the hmac scheme needs a [sources.hmac] table (header, encoding, …)")?,
            ),
            "basic" => Self::Basic,
            "header_token" => Self::HeaderToken(
                token_header.ok_or("the header_token scheme needs token_header = \"NAME\"")?,
            ),
            other => {
                return Err(format!(
                    "unknown scheme '{other}' (supported: {})",
                    SCHEME_NAMES.join(", ")
                ))
            }
        };
        Ok(scheme)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Github => "github",
            Self::Standard => "standard",
            Self::Shopify => "shopify",
            Self::Slack => "slack",
            Self::Paddle => "paddle",
            Self::Zoom => "zoom",
            Self::Discord => "discord",
            Self::Square(_) => "square",
            Self::Twilio(_) => "twilio",
            Self::Hmac(_) => "hmac",
            Self::Basic => "basic",
            Self::HeaderToken(_) => "header_token",
        }
    }

    /// The signature scheme that verifies and signs this provider's requests.
    pub fn scheme(&self) -> &dyn Scheme {
        match self {
            Self::Stripe => &Stripe,
            Self::Github => &GITHUB,
            Self::Standard => &Standard,
            Self::Shopify => &SHOPIFY,
            Self::Slack => &SLACK,
            Self::Paddle => &Paddle,
            Self::Zoom => &ZOOM,
            Self::Discord => &Discord,
            Self::Square(scheme) => scheme,
            Self::Twilio(scheme) => scheme,
            Self::Hmac(scheme) => scheme,
            Self::Basic => &Basic,
            Self::HeaderToken(scheme) => scheme,
        }
    }

    /// Where the event id, type and fact key are found by default; `None` for generic
    /// hmac and token sources, which must say where their event id is.
    pub fn default_locators(&self) -> Option<Locators> {
        let (event_id, event_type, fact_key) = match self {
            Self::Stripe => (Locator::json("/id"), Some(Locator::json("/type")), None),
            Self::Github => (
                header("X-GitHub-Delivery"),
                Some(header("X-GitHub-Event")),
                None,
            ),
            Self::Standard => (
                Locator::Header(vec!["webhook-id".to_owned(), "svix-id".to_owned()]),
                Some(Locator::json("/type")),
                None,
            ),
            // One event delivered to several subscriptions shares X-Shopify-Event-Id; the
            // source's validation replaces it with the body digest (the header is unsigned).
            Self::Shopify => (
                header("X-Shopify-Webhook-Id"),
                Some(header("X-Shopify-Topic")),
                Some(header("X-Shopify-Event-Id")),
            ),
            Self::Slack => (
                Locator::json("/event_id"),
                Some(Locator::json("/event/type")),
                None,
            ),
            Self::Paddle => (
                Locator::json("/event_id"),
                Some(Locator::json("/event_type")),
                None,
            ),
            // Zoom's body carries no event id; a retry resends the same signed body, so the
            // event is its body's digest.
            Self::Zoom => (Locator::BodyDigest, Some(Locator::json("/event")), None),
            // An interaction's type is a number (2 = application command, 3 = message
            // component, 4 = autocomplete, 5 = modal submit): recorded as its text, "2".
            Self::Discord => (Locator::json("/id"), Some(Locator::json("/type")), None),
            Self::Square(_) => (
                Locator::json("/event_id"),
                Some(Locator::json("/type")),
                None,
            ),
            Self::Twilio(_) => return Some(twilio_locators()),
            Self::Hmac(_) | Self::Basic | Self::HeaderToken(_) => return None,
        };
        Some(Locators {
            event_id,
            event_type,
            fact_key,
            form_requires_fact: false,
        })
    }

    /// How late a copy of an event can still arrive from this provider, and why; `None`
    /// when it has no documented window (generic hmac and token sources).
    pub fn resend_horizon(&self) -> Option<(Duration, &'static str)> {
        match self {
            Self::Stripe => Some((
                days(30),
                "events can be listed and resent for 30 days (live-mode retries end after 3 days)",
            )),
            Self::Github => Some((
                days(3),
                "GitHub redelivers for 3 days (7 on Enterprise Server: set replay_horizon = \"7d\")",
            )),
            Self::Standard => Some((
                days(5),
                "common Standard Webhooks/Svix schedules end within about 3 days, with margin",
            )),
            Self::Shopify => Some((days(2), "8 retries over 4 hours, with margin")),
            Self::Slack => Some((days(1), "Slack retries 3 times within the hour, with margin")),
            Self::Paddle => Some((
                days(90),
                "notifications can be replayed, under the same event_id, for 90 days (live-mode \
                 retries end after 3 days)",
            )),
            Self::Square(_) => Some((
                days(4),
                "Square retries unacknowledged notifications for up to 72 hours, with margin",
            )),
            Self::Twilio(_) => Some((
                days(1),
                "Twilio retries a failed connection at most 5 times within 15 seconds \
                 (connection overrides rc, tt), Event Streams for up to 4 hours, with margin",
            )),
            Self::Zoom => Some((
                days(1),
                "Zoom retries 3 times (after 5, 20 and 60 minutes), with margin",
            )),
            Self::Discord => Some((
                days(1),
                "Discord sends an interaction once and never retries it (it waits 3 seconds \
                 for the answer; the interaction's token lives 15 minutes), with margin",
            )),
            Self::Hmac(_) | Self::Basic | Self::HeaderToken(_) => None,
        }
    }

    /// For schemes that only authenticate the sender (nothing is signed), what that means;
    /// printed by `inlet check-config` and logged at startup.
    pub fn authenticates_sender_only(&self) -> Option<&'static str> {
        match self {
            Self::Basic | Self::HeaderToken(_) => Some(
                "proves who sent a request (a shared credential), not that its body is \
                 unaltered or fresh: nothing is signed, and anyone who sees one request can \
                 send any body; use it only over TLS, for senders that cannot sign",
            ),
            _ => None,
        }
    }

    /// The header that carries a shared credential (never stored or shown), for schemes
    /// that authenticate with one.
    pub fn credential_header(&self) -> Option<&str> {
        match self {
            Self::Basic => Some("authorization"),
            Self::HeaderToken(scheme) => Some(scheme.header()),
            _ => None,
        }
    }

    /// Fact rules that apply to every source of this provider.
    pub fn default_fact_rules(&self) -> Vec<FactRule> {
        match self {
            Self::Stripe => vec![once_per_object(
                &STRIPE_ONCE_PER_OBJECT_TYPES,
                "/data/object/id",
            )],
            Self::Paddle => vec![once_per_object(&PADDLE_ONCE_PER_OBJECT_TYPES, "/data/id")],
            Self::Square(_) => vec![once_per_object(&SQUARE_ONCE_PER_OBJECT_TYPES, "/data/id")],
            _ => Vec::new(),
        }
    }

    /// A verified request that is part of the provider's setup protocol rather than an
    /// event (Slack's `url_verification`, Zoom's `endpoint.url_validation`, Discord's
    /// PING): answered directly, never stored.
    pub fn handshake(&self, request: &Verified<'_>, secrets: &[Secret]) -> Option<Answer> {
        match self {
            Self::Slack => slack_url_verification(request),
            Self::Zoom => zoom_url_validation(request, secrets),
            Self::Discord => discord_ping(request),
            _ => None,
        }
    }

    /// The answer the provider needs for an event in place of Inlet's receipt, stored and
    /// replayed like it: a Discord interaction's deferred response (see
    /// [`discord_deferred_answer`]). `None`: the receipt.
    pub fn event_answer(&self, request: &Verified<'_>) -> Option<Answer> {
        match self {
            Self::Discord => discord_deferred_answer(request),
            _ => None,
        }
    }

    /// Whether the signature covers a reading of the body rather than its bytes — one
    /// that other field values can produce too (Twilio runs the sorted parameters
    /// together: `MessageStatus=deliveredSmsSidSM1` reads as `MessageStatus=delivered`
    /// followed by `SmsSid=SM1`). Every event of such a source also records what was
    /// signed as a permanent fact, so no re-split copy is a new fact, even once its event
    /// has expired.
    pub fn signs_a_reading(&self) -> bool {
        matches!(self, Self::Twilio(_))
    }

    /// Whether a value read through `locator` is covered by the signature: the body is
    /// always signed, a header only when the scheme signs it.
    pub fn signs(&self, locator: &Locator) -> bool {
        match locator {
            Locator::Header(names) => names.iter().all(|name| {
                self.scheme()
                    .signed_headers()
                    .iter()
                    .any(|signed| signed.eq_ignore_ascii_case(name))
            }),
            Locator::Json(_) | Locator::Form(_) | Locator::BodyDigest => true,
        }
    }
}

/// A built-in rule keying `types` on the object at `pointer`.
fn once_per_object(types: &[&str], pointer: &str) -> FactRule {
    FactRule::new(
        types.iter().map(|t| (*t).to_owned()).collect(),
        JsonPointer::parse(pointer).unwrap_or_else(|_| unreachable!("a valid pointer")),
    )
}

/// Slack's Events API `url_verification`: answer `{"challenge": …}`.
fn slack_url_verification(request: &Verified<'_>) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("type")?.as_str()? != "url_verification" {
        return None;
    }
    let challenge = document.get("challenge")?.as_str()?;
    Some(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: serde_json::json!({ "challenge": challenge })
            .to_string()
            .into_bytes(),
    })
}

/// Discord's PING (`"type": 1`), sent when the interactions endpoint URL is saved and now
/// and then after: answer PONG, `{"type":1}`.
fn discord_ping(request: &Verified<'_>) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("type")?.as_u64()? != 1 {
        return None;
    }
    Some(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: br#"{"type":1}"#.to_vec(),
    })
}

/// Discord shows the user whatever the endpoint answers within 3 seconds, and an answer
/// that is not an interaction response fails the interaction. Inlet cannot know the
/// application's reply, so it defers: application commands and modal submits get
/// `{"type":5}` (the user sees "thinking…"), message components `{"type":6}` (nothing
/// visible); the application, handed the interaction by delivery, then edits the original
/// response with the interaction's token within 15 minutes. Autocomplete cannot be
/// deferred: it gets no choices (`{"type":8,"data":{"choices":[]}}`).
fn discord_deferred_answer(request: &Verified<'_>) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    let body: &[u8] = match document.get("type")?.as_u64()? {
        2 | 5 => br#"{"type":5}"#,
        3 => br#"{"type":6}"#,
        4 => br#"{"type":8,"data":{"choices":[]}}"#,
        _ => return None,
    };
    Some(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: body.to_vec(),
    })
}

/// Zoom's `endpoint.url_validation`: answer `{"plainToken": …, "encryptedToken": …}`,
/// the token's HMAC-SHA256 (hex) under the secret token.
fn zoom_url_validation(request: &Verified<'_>, secrets: &[Secret]) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("event")?.as_str()? != "endpoint.url_validation" {
        return None;
    }
    let plain_token = document.get("payload")?.get("plainToken")?.as_str()?;
    let encrypted_token = zoom_url_validation_token(request, secrets, plain_token)?;
    Some(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body: serde_json::json!({
            "plainToken": plain_token,
            "encryptedToken": encrypted_token,
        })
        .to_string()
        .into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_names_round_trip() {
        let configured = ["hmac", "header_token", "square", "twilio"];
        for name in SCHEME_NAMES.iter().filter(|n| !configured.contains(n)) {
            assert_eq!(
                SchemeConfig::named(name, None, None, None).unwrap().name(),
                *name
            );
        }
        for name in configured {
            assert!(
                SchemeConfig::named(name, None, None, None).is_err(),
                "{name}"
            );
        }
        let token = HeaderToken::new("X-Token".to_owned()).unwrap();
        assert_eq!(
            SchemeConfig::named("header_token", None, Some(token.clone()), None)
                .unwrap()
                .name(),
            "header_token"
        );
        assert!(SchemeConfig::named("github", None, Some(token), None).is_err());
        let url = PublicUrl::parse("https://example.com/hook".to_owned()).unwrap();
        for name in PUBLIC_URL_SCHEMES {
            let scheme = SchemeConfig::named(name, None, None, Some(url.clone())).unwrap();
            assert_eq!(scheme.name(), name);
        }
        assert!(SchemeConfig::named("stripe", None, None, Some(url)).is_err());
        assert!(SchemeConfig::named("paypal", None, None, None).is_err());
    }

    #[test]
    fn only_signed_headers_count_as_signed() {
        let id = Locator::Header(vec!["webhook-id".to_owned()]);
        assert!(SchemeConfig::Standard.signs(&id));
        assert!(!SchemeConfig::Github.signs(&header("X-GitHub-Delivery")));
        assert!(SchemeConfig::Github.signs(&Locator::json("/id")));
    }
}
