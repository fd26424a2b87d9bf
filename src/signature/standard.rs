//! Standard Webhooks (and Svix, whose `svix-` headers are accepted as aliases):
//! `webhook-id`, `webhook-timestamp`, and `webhook-signature`, a space-separated list of
//! `v1,<base64>` entries, each an HMAC-SHA256 over `"{id}.{timestamp}.{body}"` keyed with
//! the base64 bytes after `whsec_`. Every `v1` entry is tried against every secret;
//! `v1a` (asymmetric) and unknown versions are ignored. Event id: `webhook-id`; type: the
//! JSON body's `type`.

use super::{
    any_matches, check_tolerance, hmac_sha256, parse_timestamp, EventToSign, Keys, Scheme,
    SignatureError, Unverified, Verified,
};
use crate::secret::Secret;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};

const ID: [&str; 2] = ["webhook-id", "svix-id"];
const TIMESTAMP: [&str; 2] = ["webhook-timestamp", "svix-timestamp"];
const SIGNATURE: [&str; 2] = ["webhook-signature", "svix-signature"];

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

/// Every `v1` signature in the list; other versions and undecodable entries are skipped.
fn v1_signatures(list: &[u8]) -> Vec<Vec<u8>> {
    list.split(|b| *b == b' ')
        .filter_map(|entry| entry.strip_prefix(b"v1,"))
        .filter_map(|encoded| BASE64.decode(encoded).ok())
        .filter(|tag| tag.len() == 32)
        .collect()
}

impl Scheme for Standard {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
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
        let tags = v1_signatures(list);
        if tags.is_empty() {
            return Err(SignatureError::malformed(
                signature_header,
                "no v1,<base64> signature",
            ));
        }
        // A secret that is not valid base64 was refused at startup; skipping it here keeps
        // verification total.
        let secret_keys: Vec<Vec<u8>> = keys
            .secrets
            .iter()
            .filter_map(|s| signing_key(s).ok())
            .collect();
        let signed: [&[u8]; 5] = [id, b".", timestamp, b".", request.body];
        if !any_matches(secret_keys.iter().map(Vec::as_slice), &signed, &tags) {
            return Err(SignatureError::Mismatch(signature_header.to_owned()));
        }
        check_tolerance(signed_at, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
        event: &EventToSign,
    ) -> Vec<(String, String)> {
        let timestamp = now.timestamp().to_string();
        let key = signing_key(secret).unwrap_or_default();
        let tag = hmac_sha256(
            &key,
            &[event.id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
        );
        vec![
            (ID[0].to_owned(), event.id.clone()),
            (TIMESTAMP[0].to_owned(), timestamp),
            (
                SIGNATURE[0].to_owned(),
                format!("v1,{}", BASE64.encode(tag)),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn signed_headers(&self) -> &'static [&'static str] {
        &ID
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        signing_key(secret).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_v1_entries_count() {
        let tag = BASE64.encode([7u8; 32]);
        let list = format!("v1a,{tag} v2,{tag} v1,!!! v1,{tag}");
        assert_eq!(v1_signatures(list.as_bytes()), vec![vec![7u8; 32]]);
        assert!(v1_signatures(b"").is_empty());
    }
}
