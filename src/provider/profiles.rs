//! The provider table: one static [`Profile`] per provider — its signature scheme, where
//! its event id, type and fact key live, how late it can send a copy, the facts it keys
//! on objects, and the handshake it expects. Adding a provider is one entry here, plus
//! its scheme in [`crate::signature`] when no existing one fits, its vectors and tests.

use super::fingerprint::{self, Fingerprint};
use super::handshake::{
    adyen_accepted, batch_ok, discord_deferred_answer, discord_ping, dropbox_challenge,
    graph_accepted, graph_validation, slack_url_verification, sns_confirmation,
    zoom_url_validation,
};
use crate::idempotency::Answer;
use crate::secret::Secret;
use crate::signature::{
    Basic, Discord, HubSpot, PublicUrl, Scheme, Sns, Square, Standard, Twilio, Verified, ADYEN,
    ASANA, BRAINTREE, DROPBOX, GITHUB, GRAPH, LINEAR, MUX, PADDLE, PAGERDUTY, SENDGRID, SHOPIFY,
    SLACK, STRIPE, WORKOS, ZENDESK, ZOOM,
};
use std::time::Duration;

/// Where a profile reads a value, as static data (a source's own `event_id`, `event_type`
/// and `fact_key` override it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A JSON pointer into the body.
    Json(&'static str),
    /// The first of these headers that is present.
    Headers(&'static [&'static str]),
    /// A field of a form body.
    Form(&'static str),
    /// A field of a form body, or, in a form without it, the value (the third) that
    /// another field (the second) holds exactly ([`crate::identity::Locator::FormOrMarked`]).
    FormOrMarked(&'static str, &'static str, &'static str),
    /// What was signed: the sha256 of the body, or of the scheme's canonical reading.
    BodyDigest,
    /// The type the scheme reads from the content it verified (Braintree's `<kind>`).
    SignedType,
}

/// Where a provider's event id, type and fact key live.
#[derive(Debug, Clone, Copy)]
pub struct Places {
    pub event_id: Place,
    pub event_type: Option<Place>,
    pub fact_key: Option<Place>,
    /// A form body must carry both the type and the fact key.
    pub form_requires_fact: bool,
}

/// How a provider's requests are verified, and what its source's table must give for it.
#[derive(Clone, Copy)]
pub enum Signing {
    /// A scheme with no parameters of its own.
    Fixed(&'static dyn Scheme),
    /// A scheme that signs the URL the provider calls: built from `public_url`.
    PublicUrl(fn(PublicUrl) -> Configured),
    /// The generic HMAC scheme: `[sources.hmac]`.
    Hmac,
    /// A shared token in the header that `token_header` names.
    HeaderToken,
    /// Signed with the key of a certificate the request names (Amazon SNS): built from
    /// `[sources.sns]`, the topics the source takes.
    Certificate,
}

/// A scheme built from a source's own parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    Square(Square),
    Twilio(Twilio),
    HubSpot(HubSpot),
    Hmac(crate::signature::HmacScheme),
    HeaderToken(crate::signature::HeaderToken),
    Sns(Sns),
}

impl Configured {
    pub fn scheme(&self) -> &dyn Scheme {
        match self {
            Self::Square(scheme) => scheme,
            Self::Twilio(scheme) => scheme,
            Self::HubSpot(scheme) => scheme,
            Self::Hmac(scheme) => scheme,
            Self::HeaderToken(scheme) => scheme,
            Self::Sns(scheme) => scheme,
        }
    }
}

/// A verified request that is part of the provider's setup protocol: its answer.
pub type Handshake = fn(&Verified<'_>, &[Secret]) -> Option<Answer>;

/// An unauthenticated request that validates the endpoint, recognised by the URL's query
/// string (Graph's `?validationToken=`): its answer, or why it is refused; `None` when the
/// query does not make the request one.
pub type Validation = fn(&str) -> Option<Result<Answer, String>>;
/// An unsigned `GET` that verifies the endpoint, from its query string: the answer, or
/// why the request is refused.
pub type Challenge = fn(&str) -> Result<Answer, String>;

/// One provider, as data.
pub struct Profile {
    /// As written in `sources[].scheme`.
    pub name: &'static str,
    pub signing: Signing,
    /// `None`: the source must say where its event id is (generic and token schemes).
    pub places: Option<Places>,
    /// How late a copy of an event can still arrive, and why; `None` when the provider
    /// has no documented window (the source must state one).
    pub horizon: Option<(Duration, &'static str)>,
    /// Event types that happen once per real-world object, and the JSON pointer to it.
    pub once_per_object: Option<(&'static [&'static str], &'static str)>,
    pub handshake: Option<Handshake>,
    /// Answered before any verification, when the query string makes a request one.
    pub validation: Option<Validation>,
    /// The provider verifies the endpoint with a `GET` (Dropbox): the only sources whose
    /// webhook URL answers one.
    pub challenge: Option<Challenge>,
    /// The answer an event needs in place of Inlet's receipt, stored and replayed like it.
    pub event_answer: Option<fn(&Verified<'_>) -> Option<Answer>>,
    /// For schemes that authenticate the sender only (nothing is signed), what that means.
    pub sender_only: Option<&'static str>,
    /// The header that carries a shared credential, when it is always the same one.
    pub credential_header: Option<&'static str>,
    /// The signature covers a reading of the body that other field values can produce
    /// too (Twilio's sorted parameters run together).
    pub signs_a_reading: bool,
    /// The header in which the provider sends the secret it will sign with, once, when
    /// a webhook is created (Asana's `X-Hook-Secret`): the source's secret is the one that
    /// handshake stored (the `hook_secrets` table), so `secrets` may be left out.
    pub secret_by_handshake: Option<&'static str>,
    /// The tolerance of a signed timestamp when the source sets none (else
    /// [`DEFAULT_TOLERANCE_SECS`](super::source::DEFAULT_TOLERANCE_SECS)): SNS's signed
    /// `Timestamp` is its message's, and every retry carries it.
    pub tolerance_secs: Option<u64>,
    /// What the event fingerprint covers where legitimate copies differ in their bytes
    /// (`None`: what the signature covers, [`Verified::content_digest`]).
    pub fingerprint: Option<Fingerprint>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

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

const fn days(n: u64) -> Duration {
    Duration::from_secs(n * 86_400)
}

const SENDER_ONLY: &str = "proves who sent a request (a shared credential), not that its body \
    is unaltered or fresh: nothing is signed, and anyone who sees one request can send any \
    body; use it only over TLS, for senders that cannot sign";

/// A provider whose event id, type and fact key are where `places` says, with nothing
/// else special: the common shape, filled in by each entry that needs more.
const fn plain(
    name: &'static str,
    signing: Signing,
    places: Places,
    horizon: (Duration, &'static str),
) -> Profile {
    Profile {
        places: Some(places),
        horizon: Some(horizon),
        ..configured(name, signing)
    }
}

/// The id and type at these places, the event its own fact.
const fn at(event_id: Place, event_type: Place) -> Places {
    Places {
        event_id,
        event_type: Some(event_type),
        fact_key: None,
        form_requires_fact: false,
    }
}

/// A provider with nothing of its own: a source of it must say where its event id is and
/// how late a copy can come.
const fn configured(name: &'static str, signing: Signing) -> Profile {
    Profile {
        name,
        signing,
        places: None,
        horizon: None,
        once_per_object: None,
        handshake: None,
        validation: None,
        challenge: None,
        event_answer: None,
        sender_only: None,
        credential_header: None,
        signs_a_reading: false,
        secret_by_handshake: None,
        tolerance_secs: None,
        fingerprint: None,
    }
}

fn square(url: PublicUrl) -> Configured {
    Configured::Square(Square::new(url))
}

fn twilio(url: PublicUrl) -> Configured {
    Configured::Twilio(Twilio::new(url))
}

fn hubspot(url: PublicUrl) -> Configured {
    Configured::HubSpot(HubSpot::new(url))
}

/// Every provider, in the order the documentation lists them.
pub static PROFILES: [Profile; 26] = [
    // A Stripe event listed by its API (reconciliation) is written otherwise than its
    // webhook: the fingerprint is its canonical form.
    Profile {
        once_per_object: Some((&STRIPE_ONCE_PER_OBJECT_TYPES, "/data/object/id")),
        fingerprint: Some(fingerprint::stripe),
        ..plain(
            "stripe",
            Signing::Fixed(&STRIPE),
            at(Place::Json("/id"), Place::Json("/type")),
            (
                days(30),
                "events can be listed and resent for 30 days (live-mode retries end after 3 days)",
            ),
        )
    },
    plain(
        "github",
        Signing::Fixed(&GITHUB),
        at(
            Place::Headers(&["X-GitHub-Delivery"]),
            Place::Headers(&["X-GitHub-Event"]),
        ),
        (
            days(3),
            "GitHub redelivers for 3 days (7 on Enterprise Server: set replay_horizon = \"7d\")",
        ),
    ),
    plain(
        "standard",
        Signing::Fixed(&Standard),
        at(
            Place::Headers(&["webhook-id", "svix-id"]),
            Place::Json("/type"),
        ),
        (
            days(5),
            "common Standard Webhooks/Svix schedules end within about 3 days, with margin",
        ),
    ),
    // One event delivered to several subscriptions shares X-Shopify-Event-Id; the
    // source's validation replaces it with the body digest (the header is unsigned).
    plain(
        "shopify",
        Signing::Fixed(&SHOPIFY),
        Places {
            fact_key: Some(Place::Headers(&["X-Shopify-Event-Id"])),
            ..at(
                Place::Headers(&["X-Shopify-Webhook-Id"]),
                Place::Headers(&["X-Shopify-Topic"]),
            )
        },
        (days(2), "8 retries over 4 hours, with margin"),
    ),
    Profile {
        handshake: Some(slack_url_verification),
        ..plain(
            "slack",
            Signing::Fixed(&SLACK),
            at(Place::Json("/event_id"), Place::Json("/event/type")),
            (
                days(1),
                "Slack retries 3 times within the hour, with margin",
            ),
        )
    },
    // A replay carries a new notification_id under the same event_id.
    Profile {
        once_per_object: Some((&PADDLE_ONCE_PER_OBJECT_TYPES, "/data/id")),
        fingerprint: Some(fingerprint::paddle),
        ..plain(
            "paddle",
            Signing::Fixed(&PADDLE),
            at(Place::Json("/event_id"), Place::Json("/event_type")),
            (
                days(90),
                "notifications can be replayed, under the same event_id, for 90 days (live-mode \
                 retries end after 3 days)",
            ),
        )
    },
    // Zoom's body carries no event id; a retry resends the same signed body, so the event
    // is its body's digest.
    Profile {
        handshake: Some(zoom_url_validation),
        ..plain(
            "zoom",
            Signing::Fixed(&ZOOM),
            at(Place::BodyDigest, Place::Json("/event")),
            (
                days(1),
                "Zoom retries 3 times (after 5, 20 and 60 minutes), with margin",
            ),
        )
    },
    // Ed25519; the secrets are the application's public keys. An interaction's type is a
    // number (2 = application command, 3 = message component, 4 = autocomplete, 5 = modal
    // submit): recorded as its text, "2".
    Profile {
        handshake: Some(discord_ping),
        event_answer: Some(discord_deferred_answer),
        ..plain(
            "discord",
            Signing::Fixed(&Discord),
            at(Place::Json("/id"), Place::Json("/type")),
            (
                days(1),
                "Discord sends an interaction once and never retries it (it waits 3 seconds \
                 for the answer; the interaction's token lives 15 minutes), with margin",
            ),
        )
    },
    // Signs the notification URL registered with Square.
    Profile {
        once_per_object: Some((&SQUARE_ONCE_PER_OBJECT_TYPES, "/data/id")),
        ..plain(
            "square",
            Signing::PublicUrl(square),
            at(Place::Json("/event_id"), Place::Json("/type")),
            (
                days(4),
                "Square retries unacknowledged notifications for up to 72 hours, with margin",
            ),
        )
    },
    // Twilio signs the URL it calls, and sends no event id; one message's status
    // callbacks (queued, sent, delivered) share its MessageSid. The event is what was
    // signed — the sorted parameters of a form, the bytes of a JSON body — (a retry
    // resends the same; the unsigned I-Twilio-Idempotency-Token is never the id); the
    // fact is one status of one message, so the same status re-sent in another signed
    // content (a second callback) has no second effect. A form must carry both. An
    // incoming message has no MessageStatus: its SmsStatus says `received`, its kind, and
    // its MessageSid names it (a form with neither shape is still refused).
    Profile {
        signs_a_reading: true,
        ..plain(
            "twilio",
            Signing::PublicUrl(twilio),
            Places {
                event_id: Place::BodyDigest,
                event_type: Some(Place::FormOrMarked(
                    "MessageStatus",
                    "SmsStatus",
                    "received",
                )),
                fact_key: Some(Place::Form("MessageSid")),
                form_requires_fact: true,
            },
            (
                days(1),
                "Twilio retries a failed connection at most 5 times within 15 seconds \
                 (connection overrides rc, tt), Event Streams for up to 4 hours, with margin",
            ),
        )
    },
    plain(
        "workos",
        Signing::Fixed(&WORKOS),
        at(Place::Json("/id"), Place::Json("/event")),
        (
            days(4),
            "WorkOS retries up to 12 times with exponential backoff over 3 days, with margin",
        ),
    ),
    // Mux's body lists the delivery attempts made so far (`attempts`), so a retry is
    // signed over another body under the same `id`: the event is what was signed (its
    // digest), and the body's `id` is the fact, so a retry after a lost answer has no
    // second effect instead of a 422.
    plain(
        "mux",
        Signing::Fixed(&MUX),
        Places {
            fact_key: Some(Place::Json("/id")),
            ..at(Place::BodyDigest, Place::Json("/type"))
        },
        (
            days(4),
            "Mux retries for 24 hours (older documentation: 3 days), with margin",
        ),
    ),
    plain(
        "pagerduty",
        Signing::Fixed(&PAGERDUTY),
        at(Place::Json("/event/id"), Place::Json("/event/event_type")),
        (
            days(1),
            "PagerDuty retries a failed delivery 4 times within about 20 minutes, with margin",
        ),
    ),
    // Linear signs the body, its time (`webhookTimestamp`) inside it, and re-sends a
    // failed delivery with a fresh time — another signed body. The event is what was
    // signed (its digest), the fact the delivery (`Linear-Delivery`, taken to be the
    // same on every attempt of one payload): a retry after a lost answer has no second
    // effect instead of a 422. `webhookId` names the webhook, not the event.
    plain(
        "linear",
        Signing::Fixed(&LINEAR),
        Places {
            fact_key: Some(Place::Headers(&["Linear-Delivery"])),
            ..at(Place::BodyDigest, Place::Json("/type"))
        },
        (
            days(1),
            "Linear retries a failed delivery 3 times, after 1 minute, 1 hour and 6 hours, \
             with margin",
        ),
    ),
    // Zendesk's body is the same on every retry (a trigger's is the account's own, without
    // an id); its invocation id is unsigned, so the fact is the body's digest.
    plain(
        "zendesk",
        Signing::Fixed(&ZENDESK),
        at(
            Place::Headers(&["X-Zendesk-Webhook-Invocation-Id"]),
            Place::Json("/type"),
        ),
        (
            days(1),
            "Zendesk retries a failed request at most 3 times, within minutes, with margin",
        ),
    ),
    // A batch: each notificationItems entry is an event of its own, identified by what its
    // signature covers (eight of its fields); the request is answered `[accepted]`.
    Profile {
        event_answer: Some(adyen_accepted),
        // The eight signed fields run together with `:` inside them: the reading is
        // recorded as a permanent fact too, so no re-split copy is ever a new fact.
        signs_a_reading: true,
        ..plain(
            "adyen",
            Signing::Fixed(&ADYEN),
            at(
                Place::BodyDigest,
                Place::Json("/NotificationRequestItem/eventCode"),
            ),
            (
                days(31),
                "Adyen retries an unacknowledged webhook from its queue for 30 days",
            ),
        )
    },
    // A batch of change notifications, each authenticated by its subscription's clientState
    // (nothing is signed) and stored with it redacted; the event is what is stored.
    Profile {
        event_answer: Some(graph_accepted),
        validation: Some(graph_validation),
        sender_only: Some(
            "proves that the sender knows a subscription's clientState, not that a \
             notification is unaltered or fresh: nothing is signed. A notification only says \
             which resource changed; read the resource from Graph before acting on it",
        ),
        ..plain(
            "graph",
            Signing::Fixed(&GRAPH),
            at(Place::BodyDigest, Place::Json("/changeType")),
            (
                days(1),
                "Graph retries an undelivered notification for up to 4 hours, then drops it",
            ),
        )
    },
    // Dropbox's notification names only the accounts that changed ("go and look"): no id,
    // no time, the same bytes on every retry. The event is the body's digest and, being
    // the event's, so is the fact: the same accounts named again within the horizon ask
    // for the same look. Setup is an unsigned GET ?challenge=, echoed.
    Profile {
        challenge: Some(dropbox_challenge),
        ..plain(
            "dropbox",
            Signing::Fixed(&DROPBOX),
            Places {
                event_id: Place::BodyDigest,
                event_type: None,
                fact_key: None,
                form_requires_fact: false,
            },
            (
                days(1),
                "Dropbox retries a failed notification with exponential backoff for about ten \
                 minutes, with margin",
            ),
        )
    },
    // A batch signed as a whole (ECDSA P-256; the secrets are verification keys): each
    // element of the array is an event of its own, identified by its sg_event_id ("unique
    // for every event", SendGrid's advice for deduplicating its duplicates); each event
    // its own fact (two opens are two opens). The request is answered with an empty 200.
    Profile {
        event_answer: Some(batch_ok),
        ..plain(
            "sendgrid",
            Signing::Fixed(&SENDGRID),
            at(Place::Json("/sg_event_id"), Place::Json("/event")),
            (
                days(2),
                "SendGrid retries a batch at increasing intervals for up to 24 hours after \
                 the event, with margin",
            ),
        )
    },
    // Asana sends its secret once, in the webhook's creation handshake, and signs every
    // later request with it. Its body (`{"events": […]}`, an empty list for a heartbeat)
    // carries no request id, and no event in it has an id: the event is what was signed
    // (its digest), and so is the fact.
    Profile {
        secret_by_handshake: Some("X-Hook-Secret"),
        ..plain(
            "asana",
            Signing::Fixed(&ASANA),
            Places {
                event_id: Place::BodyDigest,
                event_type: None,
                fact_key: None,
                form_requires_fact: false,
            },
            (
                days(2),
                "Asana resends an unanswered webhook for up to 24 hours, with margin",
            ),
        )
    },
    // Braintree posts a form whose bt_payload (base64 XML) is signed; a notification has
    // no id (its subject's id is not documented as stable across retries, and one subject
    // has many notifications of one kind), and a retry re-sends the same payload: the event
    // is what was signed (the payload's digest), and the event its own fact.
    plain(
        "braintree",
        Signing::Fixed(&BRAINTREE),
        Places {
            event_id: Place::BodyDigest,
            event_type: Some(Place::SignedType),
            fact_key: None,
            form_requires_fact: false,
        },
        (
            days(2),
            "Braintree retries a failing webhook every hour for up to 24 hours, with margin",
        ),
    ),
    // A batch signed as a whole with the URL HubSpot calls: each element of the array is
    // an event of its own. Its `eventId` is not unique and its `attemptNumber` grows with
    // each retry (in a new request, signed anew), so the event is the digest of its every
    // other field, and the event its own fact. The request is answered with an empty 200.
    Profile {
        event_answer: Some(batch_ok),
        ..plain(
            "hubspot",
            Signing::PublicUrl(hubspot),
            at(Place::BodyDigest, Place::Json("/subscriptionType")),
            (
                days(2),
                "HubSpot retries a failed notification up to 10 times over 24 hours, with \
                 margin",
            ),
        )
    },
    // Amazon SNS signs each message with the key of the certificate at its SigningCertURL
    // (fetched by the intake from an allowed host); the source names the topics it takes.
    // A subscription is confirmed by visiting its SubscribeURL, answered and never stored.
    // The signed Timestamp is the message's own, carried by every retry, and SNS retries an
    // HTTP/S endpoint for at most 3,600 s: the tolerance is that and five minutes.
    // What is signed is a reading of the body (some of its members), so every event also
    // records that reading's digest as a fact: an event id read from an unsigned member
    // cannot make a re-sent copy a new fact.
    Profile {
        handshake: Some(sns_confirmation),
        tolerance_secs: Some(3_900),
        signs_a_reading: true,
        ..plain(
            "sns",
            Signing::Certificate,
            at(Place::Json("/MessageId"), Place::Json("/Type")),
            (
                days(1),
                "SNS stops retrying an HTTP/S endpoint within 3,600 seconds (a hard limit), \
                 with margin",
            ),
        )
    },
    configured("hmac", Signing::Hmac),
    // HTTP Basic credentials: authenticates the sender only.
    Profile {
        sender_only: Some(SENDER_ONLY),
        credential_header: Some("authorization"),
        ..configured("basic", Signing::Fixed(&Basic))
    },
    // A shared token in a named header: authenticates the sender only.
    Profile {
        sender_only: Some(SENDER_ONLY),
        ..configured("header_token", Signing::HeaderToken)
    },
];

/// The profile named `name`.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|profile| profile.name == name)
}
