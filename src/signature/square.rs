//! Square: `x-square-hmacsha256-signature: <base64>` of HMAC-SHA256 over the notification
//! URL followed by the raw body, keyed with the subscription's signature key. The URL is
//! the one registered with Square — behind a proxy not the one Inlet sees — so each source
//! states it (`public_url`), byte for byte. No timestamp is signed. Event id and type come
//! from the JSON body (`event_id`, `type`).

use super::{
    any_matches, base64_tag, hmac_sha256, EventToSign, Keys, PublicUrl, Scheme, SignatureError,
    Unverified, Verified,
};
use crate::secret::{MinLength, Secret};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};

const HEADER: &str = "x-square-hmacsha256-signature";

/// A Square subscription's scheme: the notification URL it signs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Square {
    notification_url: PublicUrl,
}

impl Square {
    pub fn new(notification_url: PublicUrl) -> Self {
        Self { notification_url }
    }
}

impl Scheme for Square {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let tag = base64_tag(&request, HEADER, 32, "32-byte HMAC-SHA256")?;
        let signed: [&[u8]; 2] = [self.notification_url.as_str().as_bytes(), request.body];
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        if !any_matches(secrets, &signed, &[tag]) {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
        }
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        _now: DateTime<Utc>,
        _event: &EventToSign,
    ) -> Vec<(String, String)> {
        let tag = hmac_sha256(
            secret.expose().as_bytes(),
            &[self.notification_url.as_str().as_bytes(), body],
        );
        vec![
            (HEADER.to_owned(), BASE64.encode(tag)),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::issued(
            22,
            "a Square signature key is 22 characters, as Square issues it",
        )
        .check(secret)
    }
}
