//! Shopify: `X-Shopify-Hmac-Sha256` = base64 of HMAC-SHA256(body), keyed with the app's
//! client secret. No timestamp is signed. Event id: `X-Shopify-Webhook-Id` (one per
//! delivery to one subscription); type: `X-Shopify-Topic`; fact key: `X-Shopify-Event-Id`,
//! so one event delivered to several subscriptions is one fact.

use super::{
    Encoding, EventToSign, HmacScheme, Keys, Scheme, SignatureError, Unverified, Verified,
};
use crate::secret::{MinLength, Secret};
use chrono::{DateTime, Utc};
use std::sync::OnceLock;

/// Shopify's signature is the generic HMAC scheme with fixed parameters.
fn signing() -> &'static HmacScheme {
    static SCHEME: OnceLock<HmacScheme> = OnceLock::new();
    super::hmac::built_in(
        &SCHEME,
        "X-Shopify-Hmac-Sha256",
        None,
        Encoding::Base64,
        None,
    )
}

#[derive(Debug)]
pub struct Shopify;

impl Scheme for Shopify {
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
        let mut headers = signing().sign(body, secret, now, event);
        headers.push(("X-Shopify-Webhook-Id".to_owned(), event.id.clone()));
        headers.push(("X-Shopify-Event-Id".to_owned(), event.id.clone()));
        headers.push(("X-Shopify-Topic".to_owned(), event.event_type.clone()));
        headers
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    /// Shopify issues 32 hex characters (an app's client secret, `shpss_` before them
    /// in newer apps) or 64 (a store's notification key).
    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength {
            prefix: "shpss_",
            prefix_required: false,
            min: 32,
            rule: "a Shopify client secret or webhook key has at least 32 characters \
                   (after shpss_ where it has one), as Shopify issues them",
        }
        .check(secret)
    }
}
