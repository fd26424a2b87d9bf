//! Zoom: `x-zm-signature: v0=<hex>` of HMAC-SHA256 over `"v0:{ts}:{body}"` keyed with the
//! app's secret token, with `x-zm-request-timestamp` (Unix seconds). The
//! `endpoint.url_validation` challenge is answered with the plain token and its
//! HMAC-SHA256 under the secret that verified the request (the provider profile decides
//! when a request is that challenge).

use super::{
    hmac_sha256, Encoding, EventToSign, HmacScheme, Keys, Scheme, SignatureError, Unverified,
    Verified,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};
use std::sync::OnceLock;
use std::time::Duration;

/// Zoom's signature is the generic HMAC scheme with fixed parameters.
fn signing() -> &'static HmacScheme {
    static SCHEME: OnceLock<HmacScheme> = OnceLock::new();
    super::hmac::built_in(
        &SCHEME,
        "x-zm-signature",
        Some("v0="),
        Encoding::Hex,
        Some(("x-zm-request-timestamp", "v0:{timestamp}:{body}")),
    )
}

#[derive(Debug)]
pub struct Zoom;

impl Scheme for Zoom {
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
        signing().sign(body, secret, now, event)
    }

    fn signs_timestamp(&self) -> bool {
        true
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
        };
        signing()
            .verify(request.request, keys, DateTime::<Utc>::UNIX_EPOCH)
            .is_ok()
    })?;
    Some(hex::encode(hmac_sha256(
        signer.expose().as_bytes(),
        &[plain_token.as_bytes()],
    )))
}
