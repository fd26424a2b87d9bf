//! SendGrid's Event Webhook: one request carries a batch, a JSON array of events, and the
//! whole request is signed once. `X-Twilio-Email-Event-Webhook-Signature` is the base64 of
//! an ASN.1 DER ECDSA P-256 / SHA-256 signature over `X-Twilio-Email-Event-Webhook-Timestamp`
//! (Unix seconds, as sent) followed by the raw body, made with a private key SendGrid holds
//! and checked with its public key — the "Verification Key" SendGrid shows, base64 of a DER
//! SubjectPublicKeyInfo — which is what a sendgrid source's secrets hold. Several keys may
//! be configured (a key re-generated in SendGrid). As `@sendgrid/eventwebhook`'s
//! `EventWebhook.verifySignature` (8.0.0) checks it, over the bytes as received.
//!
//! The signed timestamp is held to the source's tolerance in both directions, as every
//! scheme here that signs one (SendGrid's libraries do not check it at all).
//!
//! Each element of the array is an event of its own: its bytes within the body are its
//! payload, and since the request is signed as a whole, what the signature vouches for an
//! item is those bytes — its digest is theirs.

use super::json_objects;
use super::timestamp::{check_tolerance, signature_and_timestamp, timestamp_signed_headers};
use super::{Batched, Signer};
use super::{Items, Keys, Scheme, SignatureError, Unverified, Verdict, Verified};
use super::{SignedHeaders, ToSign};
use crate::secret::Secret;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::signature::{EcdsaKeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_ASN1};

const SIGNATURE: &str = "X-Twilio-Email-Event-Webhook-Signature";
const TIMESTAMP: &str = "X-Twilio-Email-Event-Webhook-Timestamp";

/// The DER of a P-256 SubjectPublicKeyInfo up to its point: SEQUENCE { SEQUENCE {
/// id-ecPublicKey, prime256v1 }, BIT STRING (66 bytes, no unused bits) … }.
const SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// An uncompressed P-256 point: 0x04, x, y.
const POINT_LENGTH: usize = 65;

/// The most events one request may carry. SendGrid posts a batch every 30 seconds or when
/// it reaches 768 KB; an event is a few hundred bytes, so a batch holds a few thousand at
/// most. Ten thousand bounds the work one request can ask for without refusing one.
pub const MAX_ITEMS: usize = 10_000;

#[derive(Debug)]
pub struct SendGrid;

pub static SENDGRID: SendGrid = SendGrid;

/// The bytes of a key as SendGrid and OpenSSL write it: base64, PEM armour lines and
/// whitespace ignored (as `@sendgrid/eventwebhook` reads it).
fn key_bytes(secret: &Secret) -> Option<Vec<u8>> {
    let text: String = (secret.expose().lines())
        .filter(|line| !line.trim_start().starts_with("-----"))
        .flat_map(|line| line.chars().filter(|c| !c.is_whitespace()))
        .collect();
    BASE64.decode(text).ok()
}

/// A Verification Key: the 65-byte point of its P-256 SubjectPublicKeyInfo.
fn public_key(secret: &Secret) -> Result<Vec<u8>, String> {
    let der = key_bytes(secret).ok_or(
        "a SendGrid verification key is base64 (the Verification Key shown under Mail \
         Settings, Signed Event Webhook Requests)",
    )?;
    match der.strip_prefix(&SPKI_PREFIX[..]) {
        Some(point) if point.len() == POINT_LENGTH && point[0] == 0x04 => Ok(point.to_vec()),
        _ => Err(
            "not a SendGrid verification key: the DER of a P-256 public key \
             (SubjectPublicKeyInfo, 91 bytes, uncompressed point)"
                .to_owned(),
        ),
    }
}

/// A private key for `inlet sign`: base64 (or PEM) of its PKCS#8 DER, public key included.
fn signing_key(secret: &Secret) -> Result<EcdsaKeyPair, String> {
    let der = key_bytes(secret)
        .ok_or("a SendGrid private key for signing is base64 or PEM of its PKCS#8 DER")?;
    let rng = ring::rand::SystemRandom::new();
    EcdsaKeyPair::from_pkcs8(&ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING, &der, &rng)
        .map_err(|e| format!("not a P-256 private key in PKCS#8 (with its public key): {e}"))
}

/// The events of a body: a non-empty JSON array of objects, each as its bytes within it.
pub fn events(body: &[u8]) -> Result<Vec<&[u8]>, SignatureError> {
    json_objects(body, "SendGrid", MAX_ITEMS)
}

impl Scheme for SendGrid {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let (signed, timestamp, signed_at) =
            signature_and_timestamp(&request, SIGNATURE, TIMESTAMP)?;
        let signature = BASE64
            .decode(signed.trim_ascii())
            .map_err(|_| SignatureError::malformed(SIGNATURE, "not base64"))?;
        let message = [timestamp, request.body].concat();
        // A key that does not parse was refused at startup; skipping it keeps this total.
        // Public keys and signatures are public: nothing here needs constant time.
        let verifies = (keys.secrets.iter())
            .filter_map(|secret| public_key(secret).ok())
            .any(|point| {
                UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
                    .verify(&message, &signature)
                    .is_ok()
            });
        if !verifies {
            return Err(SignatureError::Mismatch(SIGNATURE.to_owned()));
        }
        check_tolerance(signed_at, now, keys.tolerance)?;
        events(request.body)?;
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        public_key(secret).map(drop)
    }

    fn batch(&self) -> Option<&dyn Batched> {
        Some(self)
    }
}

impl Signer for SendGrid {
    /// `secret` is the private key (the source's secrets are public keys, which cannot
    /// sign); a key that does not parse signs nothing.
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body, secret, now, ..
        } = signing;
        timestamp_signed_headers((SIGNATURE, TIMESTAMP), body, now, |message| {
            let rng = ring::rand::SystemRandom::new();
            let signature = signing_key(secret).ok()?.sign(&rng, message).ok()?;
            Some(BASE64.encode(signature.as_ref()))
        })
    }

    fn signs_with(&self, _secret: &Secret) -> bool {
        false
    }

    fn check_private_key(&self, key: &Secret) -> Result<(), String> {
        signing_key(key).map(drop)
    }
}

impl Batched for SendGrid {
    /// Each event of the array, its digest that of its own bytes (the request is signed
    /// as a whole: an item is what it is byte for byte).
    fn items<'r>(
        &self,
        request: &Verified<'r>,
        _keys: Keys<'_>,
    ) -> Option<Result<Items<'r>, SignatureError>> {
        Some(events(request.body()).map(|events| {
            Items {
                verified: (events.into_iter())
                    .map(|bytes| (request.item_as_sent(bytes), None))
                    .collect(),
                refused: Vec::new(),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::EventToSign;
    use chrono::Utc;

    /// A P-256 key pair made with Node's crypto (PKCS#8 and SPKI DER, base64).
    const PRIVATE: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg31jOBCaKSexhRAswJBOovG0Hi/lffNCGyipy7gK6VaqhRANCAASspFU3Y5aPBIhzEZv1FipVb841CrDt2CZjEHmB6uDaCpoX8Fu7a4ASIwZX4UVB0uvBUZ504+0xUgOI6AoxzHtA";
    const PUBLIC: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErKRVN2OWjwSIcxGb9RYqVW/ONQqw7dgmYxB5gerg2gqaF/Bbu2uAEiMGV+FFQdLrwVGedOPtMVIDiOgKMcx7QA==";

    fn verify(
        body: &[u8],
        headers: &[(String, String)],
        key: &str,
    ) -> Result<usize, SignatureError> {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let keys = Keys {
            secrets: &[Secret::new(key)],
            tolerance: std::time::Duration::from_secs(300),
            now: Utc::now(),
        };
        let verified = SENDGRID.verify(Unverified::new(&map, body), keys)?;
        Ok(SENDGRID.items(&verified, keys).unwrap()?.verified.len())
    }

    fn event() -> EventToSign {
        EventToSign {
            id: "e".into(),
            event_type: "delivered".into(),
        }
    }

    #[test]
    fn a_batch_signed_as_a_whole_verifies_and_splits() {
        let body =
            br#"[{"sg_event_id":"a","event":"delivered"},{"sg_event_id":"b","event":"open"}]"#;
        let headers = SENDGRID.sign(ToSign::new(
            body,
            &Secret::new(PRIVATE),
            Utc::now(),
            &event(),
        ));
        assert_eq!(verify(body, &headers, PUBLIC), Ok(2));
        let changed =
            br#"[{"sg_event_id":"a","event":"delivered"},{"sg_event_id":"b","event":"click"}]"#;
        assert!(matches!(
            verify(changed, &headers, PUBLIC),
            Err(SignatureError::Mismatch(_))
        ));
        let stale = SENDGRID.sign(ToSign::new(
            body,
            &Secret::new(PRIVATE),
            Utc::now() - chrono::Duration::minutes(6),
            &event(),
        ));
        assert!(matches!(
            verify(body, &stale, PUBLIC),
            Err(SignatureError::OutOfTolerance { .. })
        ));
    }

    #[test]
    fn items_are_their_bytes() {
        let body = br#"[ {"sg_event_id":"a"} ,{"sg_event_id":"b"}]"#;
        let headers = http::HeaderMap::new();
        let verified = Unverified::new(&headers, body).into_verified();
        let keys = Keys {
            secrets: &[],
            tolerance: std::time::Duration::from_secs(300),
            now: chrono::Utc::now(),
        };
        let items = SENDGRID.items(&verified, keys).unwrap().unwrap().verified;
        assert_eq!(items[0].0.body(), br#"{"sg_event_id":"a"}"#);
        assert_eq!(items[1].0.body(), br#"{"sg_event_id":"b"}"#);
        use sha2::Digest;
        assert_eq!(
            items[1].0.content_digest(),
            hex::encode(sha2::Sha256::digest(br#"{"sg_event_id":"b"}"#))
        );
    }

    #[test]
    fn malformed_batches_and_keys_are_refused() {
        for body in [&b"{}"[..], b"[]", b"[1]", b"not json", b"[{}"] {
            let headers = SENDGRID.sign(ToSign::new(
                body,
                &Secret::new(PRIVATE),
                Utc::now(),
                &event(),
            ));
            assert!(
                matches!(
                    verify(body, &headers, PUBLIC),
                    Err(SignatureError::Malformed { .. })
                ),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(SENDGRID.check_secret(&Secret::new(PUBLIC)).is_ok());
        let pem = format!("-----BEGIN PUBLIC KEY-----\n{PUBLIC}\n-----END PUBLIC KEY-----\n");
        assert!(SENDGRID.check_secret(&Secret::new(pem)).is_ok());
        assert!(SENDGRID.check_secret(&Secret::new(PRIVATE)).is_err());
        assert!(SENDGRID.check_secret(&Secret::new("not base64!")).is_err());
        assert!(SENDGRID.check_private_key(&Secret::new(PRIVATE)).is_ok());
        assert!(SENDGRID.check_private_key(&Secret::new(PUBLIC)).is_err());
    }
}
