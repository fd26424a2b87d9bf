//! The providers whose signature is the generic HMAC scheme with fixed parameters, as
//! data: one [`FixedHmac`] entry each, read by one implementation of [`Scheme`].
//!
//! - GitHub: `X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(body)>`, keyed with the
//!   webhook secret's bytes. No timestamp is signed. Event id: `X-GitHub-Delivery` (kept
//!   on redelivery); event type: `X-GitHub-Event`.
//! - Shopify: `X-Shopify-Hmac-Sha256` = base64 of HMAC-SHA256(body), keyed with the app's
//!   client secret. No timestamp is signed. Event id: `X-Shopify-Webhook-Id` (one per
//!   delivery to one subscription); type: `X-Shopify-Topic`; fact key:
//!   `X-Shopify-Event-Id`, so one event delivered to several subscriptions is one fact.
//! - Slack: `X-Slack-Signature: v0=<hex>` of HMAC-SHA256 over `"v0:{ts}:{body}"`, with
//!   `X-Slack-Request-Timestamp` (five-minute window by default). Event id: the Events API
//!   body's `event_id`; type: `event.type`. Form-encoded requests (slash commands,
//!   interactivity) carry no `event_id`: they are refused unless the source configures
//!   one (e.g. `event_id = "form:trigger_id"`). The Events API's `url_verification`
//!   handshake is answered with its challenge and never stored.
//! - Zoom: `x-zm-signature: v0=<hex>` of HMAC-SHA256 over `"v0:{ts}:{body}"` keyed with
//!   the app's secret token, with `x-zm-request-timestamp` (Unix seconds). The
//!   `endpoint.url_validation` challenge is answered with the plain token and its
//!   HMAC-SHA256 under the secret that verified the request (the provider profile decides
//!   when a request is that challenge).
//! - Linear: `Linear-Signature: <hex of HMAC-SHA256(body)>`, keyed with the webhook's
//!   signing secret; the time is the signed body's `webhookTimestamp` (Unix milliseconds),
//!   checked against the tolerance once the signature matches, as `@linear/sdk` does.
//!   `Linear-Delivery` and `Linear-Event` travel beside it, unsigned.
//! - Zendesk: `X-Zendesk-Webhook-Signature` = base64 of HMAC-SHA256 over
//!   `"{timestamp}{body}"`, keyed with the webhook's signing secret (its text), the time in
//!   `X-Zendesk-Webhook-Signature-Timestamp` as an RFC 3339 date and time. Event id:
//!   `X-Zendesk-Webhook-Invocation-Id` (unsigned, so the fact is the body's digest); type:
//!   the body's `type` (event subscriptions; a trigger's payload is the account's own).
//! - Dropbox: `X-Dropbox-Signature: <hex of HMAC-SHA256(body)>`, keyed with the app
//!   secret. No timestamp is signed and the body names only the accounts that changed:
//!   the event is the body's digest. The endpoint's `GET ?challenge=` verification is
//!   answered by the provider profile's handshakes, unsigned.
//! - Asana: `X-Hook-Signature: <hex of HMAC-SHA256(body)>`, keyed with the secret Asana
//!   sent in `X-Hook-Secret` when the webhook was created (which the handshake stored).
//!   No timestamp is signed, and no event id is sent: the event is
//!   the body's digest.

use super::timestamp::{check_tolerance, TimeFormat};
use super::Signer;
use super::{
    hmac_sha256, Encoding, HmacScheme, Keys, Scheme, SignatureError, SignedHeaders, ToSign, Verdict,
};
use super::{Unverified, Verified};
use crate::secret::{MinLength, Secret};
use chrono::{DateTime, Utc};
use std::sync::OnceLock;
use std::time::Duration;

/// What the provider's event carries in a header beside the signature, for `inlet sign`.
#[derive(Debug, Clone, Copy)]
enum Sent {
    EventId,
    EventType,
}

/// One provider's fixed HMAC parameters and what its requests carry beside them, read by
/// one implementation of [`Scheme`].
#[derive(Debug)]
pub struct FixedHmac {
    params: Params,
    scheme: OnceLock<HmacScheme>,
}

/// The parameters themselves: plain data, so that each provider's entry states only what
/// it changes from [`Params::hex_of_body`].
#[derive(Debug)]
struct Params {
    header: &'static str,
    prefix: Option<&'static str>,
    encoding: Encoding,
    /// The timestamp header and the signed template, where the provider signs a time.
    timestamp: Option<(&'static str, &'static str)>,
    /// How the timestamp header writes the time.
    time_format: TimeFormat,
    /// Headers `inlet sign` adds: the event id or type under the provider's names.
    sends: &'static [(&'static str, Sent)],
    /// Slack: a body that is not JSON is a form (slash commands, interactivity).
    forms: bool,
    /// Where the signed body carries the signing time in Unix milliseconds (a JSON
    /// pointer), for a provider that signs no timestamp header (Linear).
    body_time: Option<&'static str>,
    /// The provider's rule for its secrets; `None`: the floor for a chosen secret.
    secret: Option<MinLength>,
}

impl Params {
    /// A provider that sends the hex HMAC-SHA256 of the body alone in `header`, keyed with
    /// a secret of at least the floor for a chosen one, and nothing beside it: what the
    /// others change.
    const fn hex_of_body(header: &'static str) -> Self {
        Self {
            header,
            prefix: None,
            encoding: Encoding::Hex,
            timestamp: None,
            time_format: TimeFormat::UnixSeconds,
            sends: &[],
            forms: false,
            body_time: None,
            secret: None,
        }
    }
}

pub static GITHUB: FixedHmac = FixedHmac::new(Params {
    prefix: Some("sha256="),
    sends: &[
        ("X-GitHub-Delivery", Sent::EventId),
        ("X-GitHub-Event", Sent::EventType),
    ],
    ..Params::hex_of_body("X-Hub-Signature-256")
});

pub static SHOPIFY: FixedHmac = FixedHmac::new(Params {
    encoding: Encoding::Base64,
    sends: &[
        ("X-Shopify-Webhook-Id", Sent::EventId),
        ("X-Shopify-Event-Id", Sent::EventId),
        ("X-Shopify-Topic", Sent::EventType),
    ],
    // Shopify issues 32 hex characters (an app's client secret, `shpss_` before them in
    // newer apps) or 64 (a store's notification key).
    secret: Some(MinLength {
        prefix: "shpss_",
        prefix_required: false,
        min: 32,
        rule: "a Shopify client secret or webhook key has at least 32 characters \
               (after shpss_ where it has one), as Shopify issues them",
    }),
    ..Params::hex_of_body("X-Shopify-Hmac-Sha256")
});

pub static SLACK: FixedHmac = FixedHmac::new(Params {
    prefix: Some("v0="),
    timestamp: Some(("X-Slack-Request-Timestamp", "v0:{timestamp}:{body}")),
    forms: true,
    secret: Some(MinLength::issued(
        32,
        "a Slack signing secret is 32 characters, as Slack issues it",
    )),
    ..Params::hex_of_body("X-Slack-Signature")
});

pub static ZOOM: FixedHmac = FixedHmac::new(Params {
    prefix: Some("v0="),
    timestamp: Some(("x-zm-request-timestamp", "v0:{timestamp}:{body}")),
    ..Params::hex_of_body("x-zm-signature")
});

pub static LINEAR: FixedHmac = FixedHmac::new(Params {
    sends: &[
        ("Linear-Delivery", Sent::EventId),
        ("Linear-Event", Sent::EventType),
    ],
    body_time: Some("/webhookTimestamp"),
    ..Params::hex_of_body("Linear-Signature")
});

pub static ZENDESK: FixedHmac = FixedHmac::new(Params {
    encoding: Encoding::Base64,
    // The timestamp, then the body: what Zendesk sends (docs/src/providers/zendesk.md says
    // why not the order of the published example).
    timestamp: Some(("X-Zendesk-Webhook-Signature-Timestamp", "{timestamp}{body}")),
    time_format: TimeFormat::Rfc3339,
    sends: &[("X-Zendesk-Webhook-Invocation-Id", Sent::EventId)],
    ..Params::hex_of_body("X-Zendesk-Webhook-Signature")
});

pub static DROPBOX: FixedHmac = FixedHmac::new(Params {
    // Dropbox issues 15-character app secrets: below the floor for a chosen secret.
    secret: Some(MinLength::issued(
        15,
        "a Dropbox app secret is 15 characters, as Dropbox issues it",
    )),
    ..Params::hex_of_body("X-Dropbox-Signature")
});

// The secret is the one Asana's handshake sent (64 hex characters in its example), or one
// an operator moved over: the floor for a secret applies to both.
pub static ASANA: FixedHmac = FixedHmac::new(Params::hex_of_body("X-Hook-Signature"));

impl FixedHmac {
    const fn new(params: Params) -> Self {
        Self {
            params,
            scheme: OnceLock::new(),
        }
    }

    /// The generic HMAC scheme with this provider's parameters.
    fn hmac(&self) -> &HmacScheme {
        self.scheme.get_or_init(|| {
            HmacScheme::new(
                self.params.header.to_owned(),
                self.params.prefix.map(str::to_owned),
                self.params.encoding,
                self.params.timestamp.map(|(header, _)| header.to_owned()),
                self.params
                    .timestamp
                    .map(|(_, template)| template.to_owned()),
            )
            .unwrap_or_else(|_| unreachable!("built-in HMAC parameters are valid"))
            .with_time_format(self.params.time_format)
        })
    }
}

impl Scheme for FixedHmac {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let verified = self.hmac().verify(request, keys)?;
        if let Some(pointer) = self.params.body_time {
            // Read only once the signature matched: the time is part of what was signed.
            let millis = serde_json::from_slice::<serde_json::Value>(verified.body())
                .ok()
                .and_then(|body| body.pointer(pointer).and_then(serde_json::Value::as_i64))
                .ok_or_else(|| {
                    SignatureError::malformed(
                        self.params.header,
                        format!("the signed body has no whole number of milliseconds at {pointer}"),
                    )
                })?;
            check_tolerance(millis.div_euclid(1000), now, keys.tolerance)?;
        }
        Ok(verified)
    }

    fn signs_timestamp(&self) -> bool {
        self.params.timestamp.is_some() || self.params.body_time.is_some()
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::check_rule(self.params.secret.as_ref(), secret)
    }
}

impl Signer for FixedHmac {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let (body, event) = (signing.body, signing.event);
        let mut headers = self.hmac().sign(signing);
        if self.params.forms && !body.trim_ascii_start().starts_with(b"{") {
            for (name, value) in &mut headers {
                if name == "Content-Type" {
                    "application/x-www-form-urlencoded".clone_into(value);
                }
            }
        }
        for (name, sent) in self.params.sends {
            let value = match sent {
                Sent::EventId => &event.id,
                Sent::EventType => &event.event_type,
            };
            headers.push(((*name).to_owned(), value.clone()));
        }
        headers
    }
}

/// Zoom's `encryptedToken` for a verified `endpoint.url_validation` request: the hex
/// HMAC-SHA256 of `plain_token` under the secret whose signature the request carries
/// (during a rotation, the one Zoom holds). `None` if no secret signed it.
pub fn url_validation_token(
    request: &Verified<'_>,
    secrets: &[Secret],
    plain_token: &str,
) -> Option<String> {
    // The request already passed the tolerance check; here only the signing secret counts.
    let any_time = Duration::MAX;
    let signer = secrets.iter().find(|secret| {
        let keys = Keys {
            secrets: std::slice::from_ref(*secret),
            tolerance: any_time,
            now: DateTime::<Utc>::UNIX_EPOCH,
        };
        ZOOM.hmac().verify(request.request, keys).is_ok()
    })?;
    Some(hex::encode(hmac_sha256(
        signer.expose().as_bytes(),
        &[plain_token.as_bytes()],
    )))
}
