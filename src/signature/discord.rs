//! Discord interactions: `X-Signature-Ed25519`, the hex Ed25519 signature over
//! `X-Signature-Timestamp` (Unix seconds) followed by the raw body, made with the
//! application's private key and checked with its public key (hex, from the developer
//! portal), which is what a discord source's secrets hold. Several public keys may be
//! configured (moving to another application); the signed timestamp is held to the
//! source's tolerance in both directions.

use super::ed25519::{self, SIGNATURE_LENGTH};
use super::timestamp::{check_tolerance, signature_and_timestamp, timestamp_signed_headers};
use super::Signer;
use super::{Keys, Scheme, SignatureError, Unverified, Verdict};
use super::{SignedHeaders, ToSign};
use crate::secret::Secret;
use ed25519_dalek::VerifyingKey;

const SIGNATURE: &str = "X-Signature-Ed25519";
const TIMESTAMP: &str = "X-Signature-Timestamp";

#[derive(Debug)]
pub struct Discord;

/// An application's public key: 64 hex characters.
fn public_key(secret: &Secret) -> Result<VerifyingKey, String> {
    let bytes = hex::decode(secret.expose().trim()).map_err(|_| {
        "a Discord public key is 64 hex characters (the application's PUBLIC KEY in the \
         developer portal)"
            .to_owned()
    })?;
    ed25519::public_key(&bytes).map_err(|m| format!("not a Discord public key: {m}"))
}

/// A private key for `inlet sign`: the hex seed (64 characters) or seed and public key
/// (128 characters, tweetnacl's `secretKey`).
fn signing_key(secret: &Secret) -> Result<ed25519_dalek::SigningKey, String> {
    let bytes = hex::decode(secret.expose().trim())
        .map_err(|_| "a Discord private key for signing is hex".to_owned())?;
    ed25519::signing_key(&bytes)
}

/// The signature header's value. Discord requires 401 for any signature that fails
/// validation (and probes endpoints with invalid ones), so a value that is not 128 hex
/// characters is a mismatch (401), not a malformed header (400).
fn signature(value: &[u8]) -> Result<ed25519_dalek::Signature, SignatureError> {
    hex::decode(value)
        .ok()
        .and_then(|bytes| ed25519::signature(&bytes))
        .ok_or_else(|| {
            SignatureError::Mismatch(format!(
                "{SIGNATURE} (not {} hex characters)",
                SIGNATURE_LENGTH * 2
            ))
        })
}

impl Scheme for Discord {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let (signed, timestamp, signed_at) =
            signature_and_timestamp(&request, SIGNATURE, TIMESTAMP)?;
        let signature = signature(signed)?;
        // A key that does not parse was refused at startup; skipping it keeps this total.
        let public_keys: Vec<VerifyingKey> = keys
            .secrets
            .iter()
            .filter_map(|s| public_key(s).ok())
            .collect();
        let message = [timestamp, request.body].concat();
        if !ed25519::any_verifies(&public_keys, &message, &[signature]) {
            return Err(SignatureError::Mismatch(SIGNATURE.to_owned()));
        }
        check_tolerance(signed_at, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        public_key(secret).map(drop)
    }
}

impl Signer for Discord {
    /// `secret` is the private key (the source's secrets are public keys, which cannot
    /// sign); a key that does not parse signs nothing.
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body, secret, now, ..
        } = signing;
        timestamp_signed_headers((SIGNATURE, TIMESTAMP), body, now, |message| {
            let key = signing_key(secret).ok()?;
            Some(hex::encode(ed25519::sign(&key, message)))
        })
    }

    fn signs_with(&self, _secret: &Secret) -> bool {
        false
    }

    fn check_private_key(&self, key: &Secret) -> Result<(), String> {
        signing_key(key).map(drop)
    }
}
