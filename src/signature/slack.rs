//! Slack: `X-Slack-Signature: v0=<hex>` of HMAC-SHA256 over `"v0:{ts}:{body}"`, with
//! `X-Slack-Request-Timestamp` (five-minute window by default). Event id: the Events API
//! body's `event_id`; type: `event.type`. Form-encoded requests (slash commands,
//! interactivity) carry no `event_id`: they are refused unless the source configures one
//! (e.g. `event_id = "form:trigger_id"`). The Events API's `url_verification` handshake is
//! answered with its challenge and never stored.

use super::{
    Encoding, EventToSign, HmacScheme, Keys, Scheme, SignatureError, Unverified, Verified,
};
use crate::secret::{MinLength, Secret};
use chrono::{DateTime, Utc};
use std::sync::OnceLock;

/// Slack's signature is the generic HMAC scheme with fixed parameters.
fn signing() -> &'static HmacScheme {
    static SCHEME: OnceLock<HmacScheme> = OnceLock::new();
    super::hmac::built_in(
        &SCHEME,
        "X-Slack-Signature",
        Some("v0="),
        Encoding::Hex,
        Some(("X-Slack-Request-Timestamp", "v0:{timestamp}:{body}")),
    )
}

#[derive(Debug)]
pub struct Slack;

impl Scheme for Slack {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        signing().verify(request, keys, now)
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
        event: &EventToSign,
    ) -> Vec<(String, String)> {
        // Events API callbacks are JSON; slash commands and interactivity are forms.
        let content_type = if body.trim_ascii_start().starts_with(b"{") {
            "application/json"
        } else {
            "application/x-www-form-urlencoded"
        };
        signing()
            .sign(body, secret, now, event)
            .into_iter()
            .map(|(name, value)| match name.as_str() {
                "Content-Type" => (name, content_type.to_owned()),
                _ => (name, value),
            })
            .collect()
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::issued(
            32,
            "a Slack signing secret is 32 characters, as Slack issues it",
        )
        .check(secret)
    }
}
