//! GitHub: `X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(body)>`, keyed with the
//! webhook secret's bytes. No timestamp is signed. Event id: `X-GitHub-Delivery` (kept on
//! redelivery); event type: `X-GitHub-Event`.

use super::{
    Encoding, EventToSign, HmacScheme, Keys, Scheme, SignatureError, Unverified, Verified,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};
use std::sync::OnceLock;

/// GitHub's signature is the generic HMAC scheme with fixed parameters.
fn signing() -> &'static HmacScheme {
    static SCHEME: OnceLock<HmacScheme> = OnceLock::new();
    super::hmac::built_in(
        &SCHEME,
        "X-Hub-Signature-256",
        Some("sha256="),
        Encoding::Hex,
        None,
    )
}

#[derive(Debug)]
pub struct Github;

impl Scheme for Github {
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
        headers.push(("X-GitHub-Delivery".to_owned(), event.id.clone()));
        headers.push(("X-GitHub-Event".to_owned(), event.event_type.clone()));
        headers
    }

    fn signs_timestamp(&self) -> bool {
        false
    }
}
