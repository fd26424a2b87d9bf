//! Shopify: `X-Shopify-Hmac-Sha256` = base64 of HMAC-SHA256(body), keyed with the app's
//! client secret. No timestamp is signed. Event id: `X-Shopify-Webhook-Id` (one per
//! delivery to one subscription); type: `X-Shopify-Topic`; fact key: `X-Shopify-Event-Id`,
//! so one event delivered to several subscriptions is one fact.

use super::{
    any_matches, header_locator, hmac_sha256, Keys, SampleEvent, Scheme, SignatureError,
    Unverified, Verified,
};
use crate::config::Secret;
use crate::ingest::Locators;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};

const HEADER: &str = "X-Shopify-Hmac-Sha256";

#[derive(Debug)]
pub struct Shopify;

impl Scheme for Shopify {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let value = request
            .header(HEADER)
            .ok_or_else(|| SignatureError::Missing(HEADER.to_owned()))?;
        let tag = BASE64
            .decode(value.trim_ascii())
            .ok()
            .filter(|tag| tag.len() == 32)
            .ok_or_else(|| SignatureError::malformed(HEADER, "not the base64 of 32 bytes"))?;
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        if !any_matches(secrets, &[request.body], &[tag]) {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
        }
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        _now: DateTime<Utc>,
        event: &SampleEvent,
    ) -> Vec<(String, String)> {
        let tag = hmac_sha256(secret.expose().as_bytes(), &[body]);
        vec![
            (HEADER.to_owned(), BASE64.encode(tag)),
            ("X-Shopify-Webhook-Id".to_owned(), event.id.clone()),
            ("X-Shopify-Event-Id".to_owned(), event.id.clone()),
            ("X-Shopify-Topic".to_owned(), event.event_type.clone()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn locators(&self) -> Locators {
        Locators {
            event_id: header_locator("X-Shopify-Webhook-Id"),
            event_type: Some(header_locator("X-Shopify-Topic")),
            fact_key: Some(header_locator("X-Shopify-Event-Id")),
        }
    }

    fn replay_horizon(&self) -> Option<(std::time::Duration, &'static str)> {
        Some((super::days(2), "8 retries over 4 hours, with margin"))
    }

    fn signs_timestamp(&self) -> bool {
        false
    }
}
