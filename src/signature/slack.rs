//! Slack: `X-Slack-Signature: v0=<hex>` of HMAC-SHA256 over `"v0:{ts}:{body}"`, with
//! `X-Slack-Request-Timestamp` (five-minute window by default). Event id: the Events API
//! body's `event_id`; type: `event.type`. Form-encoded requests (slash commands,
//! interactivity) carry no `event_id`: they are refused unless the source configures one
//! (e.g. `event_id = "form:trigger_id"`). The Events API's `url_verification` handshake is
//! answered with its challenge and never stored.

use super::{
    any_matches, check_tolerance, hmac_sha256, parse_timestamp, Keys, SampleEvent, Scheme,
    SignatureError, Unverified, Verified,
};
use crate::config::Secret;
use crate::ingest::{Answer, Locator, Locators};
use chrono::{DateTime, Utc};

const SIGNATURE: &str = "X-Slack-Signature";
const TIMESTAMP: &str = "X-Slack-Request-Timestamp";

#[derive(Debug)]
pub struct Slack;

impl Scheme for Slack {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let value = request
            .header(SIGNATURE)
            .ok_or_else(|| SignatureError::Missing(SIGNATURE.to_owned()))?;
        let timestamp_value = request
            .header(TIMESTAMP)
            .ok_or_else(|| SignatureError::Missing(TIMESTAMP.to_owned()))?;
        let signed_at = parse_timestamp(TIMESTAMP, timestamp_value)?;
        let tag = value
            .strip_prefix(b"v0=")
            .and_then(|hex_digest| hex::decode(hex_digest).ok())
            .filter(|tag| tag.len() == 32)
            .ok_or_else(|| SignatureError::malformed(SIGNATURE, "not v0= and 64 hex digits"))?;
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        let signed: [&[u8]; 4] = [b"v0:", timestamp_value, b":", request.body];
        if !any_matches(secrets, &signed, &[tag]) {
            return Err(SignatureError::Mismatch(SIGNATURE.to_owned()));
        }
        check_tolerance(signed_at, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
        _event: &SampleEvent,
    ) -> Vec<(String, String)> {
        let timestamp = now.timestamp().to_string();
        let tag = hmac_sha256(
            secret.expose().as_bytes(),
            &[b"v0:", timestamp.as_bytes(), b":", body],
        );
        let content_type = if body.trim_ascii_start().starts_with(b"{") {
            "application/json"
        } else {
            "application/x-www-form-urlencoded"
        };
        vec![
            (SIGNATURE.to_owned(), format!("v0={}", hex::encode(tag))),
            (TIMESTAMP.to_owned(), timestamp),
            ("Content-Type".to_owned(), content_type.to_owned()),
        ]
    }

    fn locators(&self) -> Locators {
        Locators {
            event_id: Locator::json("/event_id"),
            event_type: Some(Locator::json("/event/type")),
            fact_key: None,
        }
    }

    fn replay_horizon(&self) -> Option<(std::time::Duration, &'static str)> {
        Some((
            super::days(1),
            "Slack retries 3 times within the hour, with margin",
        ))
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn handshake(&self, request: &Verified<'_>) -> Option<Answer> {
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
}
