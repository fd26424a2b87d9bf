//! Standard Webhooks (and Svix, whose `svix-` headers are accepted as aliases):
//! `webhook-id`, `webhook-timestamp`, and `webhook-signature`, a space-separated list of
//! signatures over `"{id}.{timestamp}.{body}"`: `v1,<base64>` entries are HMAC-SHA256 keyed
//! with the base64 bytes after `whsec_`; `v1a,<base64>` entries are Ed25519, checked with
//! the base64 public keys after `whpk_`. A source's secrets may mix both kinds (a sender
//! moving to asymmetric signatures): each entry is tried against every secret of its kind;
//! unknown versions are ignored. Event id: `webhook-id`; type: the JSON body's `type`.

use super::ed25519;
use super::timestamp::{check_tolerance, parse_timestamp, TimeFormat};
use super::Signer;
use super::{
    any_matches, hmac_sha256, json_content_type, too_many_signatures, Keys, SignedHeaders, ToSign,
    Verdict,
};
use super::{Scheme, SignatureError, Unverified, MAX_SIGNATURES};
use crate::secret::{too_weak, Secret};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::{Signature, VerifyingKey};

const ID: [&str; 2] = ["webhook-id", "svix-id"];
const TIMESTAMP: [&str; 2] = ["webhook-timestamp", "svix-timestamp"];
const SIGNATURE: [&str; 2] = ["webhook-signature", "svix-signature"];
const PUBLIC_KEY: &str = "whpk_";
const PRIVATE_KEY: &str = "whsk_";

#[derive(Debug)]
pub struct Standard;

/// The signing key: the base64 after `whsec_` (the prefix is optional).
pub fn signing_key(secret: &Secret) -> Result<Vec<u8>, String> {
    let encoded = secret.expose();
    let encoded = encoded.strip_prefix("whsec_").unwrap_or(encoded);
    BASE64
        .decode(encoded)
        .map_err(|_| "a Standard Webhooks secret is whsec_ followed by base64".to_owned())
}

/// The fewest bytes of a `whsec_` signing key: the specification's minimum ("Random. At
/// least 24 bytes"), which is also what Svix issues.
pub const MIN_KEY_BYTES: usize = 24;

/// Refuses a `whsec_` secret that is not base64 or whose key is shorter than
/// [`MIN_KEY_BYTES`] (`whsec_` alone would be an empty key, which anyone can sign with).
/// For a source's secrets and for the secrets Inlet signs deliveries with.
pub fn check_signing_secret(secret: &Secret) -> Result<(), String> {
    let key = signing_key(secret)?;
    if key.len() < MIN_KEY_BYTES {
        return Err(too_weak(
            "a Standard Webhooks secret is whsec_ followed by the base64 of at least 24 \
             random bytes (the specification's minimum)",
            key.len(),
        ));
    }
    Ok(())
}

/// A `whpk_` secret's public key; `None` for secrets of the symmetric kind.
fn public_key(secret: &Secret) -> Option<Result<VerifyingKey, String>> {
    prefixed_key(secret, PUBLIC_KEY, "public", ed25519::public_key)
}

/// A `whsk_` private key, for signing `v1a` (its seed, or seed and public key).
fn private_key(secret: &Secret) -> Option<Result<ed25519_dalek::SigningKey, String>> {
    prefixed_key(secret, PRIVATE_KEY, "private", ed25519::signing_key)
}

/// The key after `prefix`, base64-decoded and parsed; `None` without the prefix.
fn prefixed_key<K>(
    secret: &Secret,
    prefix: &str,
    kind: &str,
    parse: fn(&[u8]) -> Result<K, String>,
) -> Option<Result<K, String>> {
    let encoded = secret.expose().strip_prefix(prefix)?;
    Some(
        BASE64
            .decode(encoded)
            .map_err(|_| format!("a Standard Webhooks {kind} key is {prefix} followed by base64"))
            .and_then(|bytes| parse(&bytes)),
    )
}

/// The signatures in a `webhook-signature` list, by kind.
#[derive(Debug, Default, PartialEq)]
struct Entries {
    /// `v1`: HMAC-SHA256 tags.
    v1: Vec<Vec<u8>>,
    /// `v1a`: Ed25519 signatures.
    v1a: Vec<Signature>,
}

/// Every `v1` and `v1a` signature in the list; other versions, undecodable entries and
/// entries of the wrong length are skipped. A list of more than [`MAX_SIGNATURES`] entries
/// (of any version) is refused as soon as the one too many is seen, and only entries of
/// the exact encoded length are decoded, so a long hostile list costs no more than a
/// short one.
fn entries(header: &str, list: &[u8]) -> Result<Entries, SignatureError> {
    let mut found = Entries::default();
    let listed = list.split(|b| *b == b' ').filter(|entry| !entry.is_empty());
    for (index, entry) in listed.enumerate() {
        if index == MAX_SIGNATURES {
            return Err(too_many_signatures(header));
        }
        if let Some(tag) = decoded(entry, b"v1,", 32) {
            found.v1.push(tag);
        } else if let Some(signature) =
            decoded(entry, b"v1a,", ed25519::SIGNATURE_LENGTH).and_then(|s| ed25519::signature(&s))
        {
            found.v1a.push(signature);
        }
    }
    Ok(found)
}

/// The `len` bytes after `version`, when the entry is exactly their padded base64 (the
/// only form the decoder accepts, so checking the length first refuses nothing more).
fn decoded(entry: &[u8], version: &[u8], len: usize) -> Option<Vec<u8>> {
    entry
        .strip_prefix(version)
        .filter(|encoded| Some(encoded.len()) == base64::encoded_len(len, true))
        .and_then(|encoded| BASE64.decode(encoded).ok())
}

/// Whether an entry of either kind matches a secret of its kind.
fn any_entry_matches(secrets: &[Secret], signed: &[&[u8]; 5], found: &Entries) -> bool {
    // A secret that does not parse was refused at startup; skipping it keeps this total.
    let (public, shared): (Vec<&Secret>, Vec<&Secret>) = secrets
        .iter()
        .partition(|s| s.expose().starts_with(PUBLIC_KEY));
    let hmac_keys: Vec<Vec<u8>> = shared.iter().filter_map(|s| signing_key(s).ok()).collect();
    if any_matches(hmac_keys.iter().map(Vec::as_slice), signed, &found.v1) {
        return true;
    }
    let public_keys: Vec<VerifyingKey> = public
        .iter()
        .filter_map(|s| public_key(s).and_then(Result::ok))
        .collect();
    !public_keys.is_empty()
        && !found.v1a.is_empty()
        && ed25519::any_verifies(&public_keys, &signed.concat(), &found.v1a)
}

impl Scheme for Standard {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let (_, id) = request
            .any_header(&ID)
            .ok_or_else(|| SignatureError::Missing(ID[0].to_owned()))?;
        let (timestamp_header, timestamp) = request
            .any_header(&TIMESTAMP)
            .ok_or_else(|| SignatureError::Missing(TIMESTAMP[0].to_owned()))?;
        let (signature_header, list) = request
            .any_header(&SIGNATURE)
            .ok_or_else(|| SignatureError::Missing(SIGNATURE[0].to_owned()))?;
        let signed_at = parse_timestamp(timestamp_header, timestamp)?;
        let found = entries(signature_header, list)?;
        if found == Entries::default() {
            return Err(SignatureError::malformed(
                signature_header,
                "no v1,<base64> or v1a,<base64> signature",
            ));
        }
        let signed: [&[u8]; 5] = [id, b".", timestamp, b".", request.body];
        if !any_entry_matches(keys.secrets, &signed, &found) {
            return Err(SignatureError::Mismatch(signature_header.to_owned()));
        }
        check_tolerance(signed_at, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn signed_headers(&self) -> &'static [&'static str] {
        &ID
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        if secret.expose().starts_with(PRIVATE_KEY) {
            return Err(
                "a whsk_ private key signs and belongs to the sender: configure its \
                        whpk_ public key"
                    .to_owned(),
            );
        }
        match public_key(secret) {
            Some(key) => key.map(drop),
            None => check_signing_secret(secret),
        }
    }
}

impl Signer for Standard {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body,
            secret,
            now,
            event,
        } = signing;
        let timestamp = TimeFormat::UnixSeconds.write(now);
        let signed = [event.id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
        let signature = match private_key(secret) {
            Some(key) => key.ok().map(|key| {
                format!(
                    "v1a,{}",
                    BASE64.encode(ed25519::sign(&key, &signed.concat()))
                )
            }),
            None => {
                let key = signing_key(secret).unwrap_or_default();
                Some(format!("v1,{}", BASE64.encode(hmac_sha256(&key, &signed))))
            }
        };
        let mut headers = vec![
            (ID[0].to_owned(), event.id.clone()),
            (TIMESTAMP[0].to_owned(), timestamp),
            json_content_type(),
        ];
        headers.extend(signature.map(|s| (SIGNATURE[0].to_owned(), s)));
        headers
    }

    /// A `whpk_` public key cannot sign; `whsec_` secrets can.
    fn signs_with(&self, secret: &Secret) -> bool {
        !secret.expose().starts_with(PUBLIC_KEY)
    }

    fn check_private_key(&self, key: &Secret) -> Result<(), String> {
        private_key(key)
            .unwrap_or_else(|| {
                Err("a Standard Webhooks private key is whsk_ followed by base64".to_owned())
            })
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v1a_entries_count_by_length() {
        let tag = BASE64.encode([7u8; 32]);
        let signature = BASE64.encode([9u8; 64]);
        let list = format!("v1a,{tag} v2,{tag} v1,!!! v1,{tag} v1,{signature} v1a,{signature}");
        let found = entries("webhook-signature", list.as_bytes()).unwrap();
        assert_eq!(found.v1, vec![vec![7u8; 32]]);
        assert_eq!(found.v1a, vec![Signature::from_bytes(&[9u8; 64])]);
        assert_eq!(
            entries("webhook-signature", b"").unwrap(),
            Entries::default()
        );
        let unpadded = format!("v1,{}", tag.trim_end_matches('='));
        assert_eq!(
            entries("webhook-signature", unpadded.as_bytes()).unwrap(),
            Entries::default()
        );
    }

    #[test]
    fn more_than_the_bound_of_entries_is_refused_whatever_they_are() {
        let tag = format!("v1,{}", BASE64.encode([7u8; 32]));
        let at_bound = [tag.as_str(); MAX_SIGNATURES].join("  ");
        let found = entries("webhook-signature", at_bound.as_bytes()).unwrap();
        assert_eq!(found.v1.len(), MAX_SIGNATURES);
        for extra in [tag.as_str(), "v2,anything", "junk"] {
            let over = format!("{at_bound} {extra}");
            let refused = entries("webhook-signature", over.as_bytes()).unwrap_err();
            assert!(
                refused.to_string().contains("more than 8 signatures"),
                "{refused}"
            );
        }
    }

    #[test]
    fn private_keys_are_refused_as_source_secrets() {
        let seed = Secret::new(format!("whsk_{}", BASE64.encode([3u8; 32])));
        assert!(Standard.check_secret(&seed).unwrap_err().contains("whpk_"));
        assert!(Standard.check_private_key(&seed).is_ok());
        let public = Secret::new("whpk_AAAA");
        assert!(Standard
            .check_secret(&public)
            .unwrap_err()
            .contains("32 bytes"));
        assert!(!Standard.signs_with(&public));
    }
}
