//! Square: `x-square-hmacsha256-signature: <base64>` of HMAC-SHA256 over the notification
//! URL followed by the raw body, keyed with the subscription's signature key. The URL is
//! the one registered with Square — behind a proxy not the one Inlet sees — so each source
//! states it (`public_url`), byte for byte. No timestamp is signed. Event id and type come
//! from the JSON body (`event_id`, `type`).

use super::Signer;
use super::{
    base64_tag, check_hmac, secret_hmac, with_json_type, Keys, PublicUrl, SignedHeaders, ToSign,
    Verdict,
};
use super::{Scheme, Unverified};
use crate::secret::{MinLength, Secret};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

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
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let tag = base64_tag(&request, HEADER, 32, "32-byte HMAC-SHA256")?;
        let signed: [&[u8]; 2] = [self.notification_url.as_str().as_bytes(), request.body];
        check_hmac(keys, &signed, &[tag], HEADER)?;
        Ok(request.into_verified())
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

impl Signer for Square {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign { body, secret, .. } = signing;
        let tag = secret_hmac(secret, &[self.notification_url.as_str().as_bytes(), body]);
        with_json_type([(HEADER, BASE64.encode(tag))])
    }
}
