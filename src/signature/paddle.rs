//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]`, HMAC-SHA256 over
//! `"{ts}:{body}"` keyed with the endpoint's secret key (`pdl_ntfset_…`) as written. Every
//! `h1` is tried (Paddle sends one per active secret while a secret rotates); unknown
//! keys are ignored. Event id and type come from the JSON body (`event_id`, `event_type`).

use super::{
    any_matches, check_tolerance, hmac_sha256, EventToSign, Keys, Scheme, SignatureError,
    Unverified, Verified,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};

const HEADER: &str = "Paddle-Signature";

#[derive(Debug)]
pub struct Paddle;

/// The parsed header: the signed timestamp and every `h1` signature.
#[derive(Debug, PartialEq, Eq)]
struct PaddleHeader {
    timestamp: i64,
    signatures: Vec<Vec<u8>>,
}

fn malformed(detail: &str) -> SignatureError {
    SignatureError::malformed(HEADER, detail)
}

fn parse_header(value: &[u8]) -> Result<PaddleHeader, SignatureError> {
    let text = std::str::from_utf8(value).map_err(|_| malformed("not valid UTF-8"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in text.split(';') {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "ts" => {
                if timestamp.is_some() {
                    return Err(malformed("more than one ts="));
                }
                let parsed = value
                    .parse::<i64>()
                    .map_err(|_| malformed("ts= is not a whole number of seconds"))?;
                timestamp = Some(parsed);
            }
            // An h1 that is not 32 bytes of hex can never match; skipping it keeps the
            // other entries usable.
            "h1" => {
                if let Ok(bytes) = hex::decode(value) {
                    if bytes.len() == 32 {
                        signatures.push(bytes);
                    }
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| malformed("no ts= timestamp"))?;
    if signatures.is_empty() {
        return Err(malformed("no h1= signature"));
    }
    Ok(PaddleHeader {
        timestamp,
        signatures,
    })
}

impl Scheme for Paddle {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let header = request
            .header(HEADER)
            .ok_or_else(|| SignatureError::Missing(HEADER.to_owned()))?;
        let parsed = parse_header(header)?;
        let timestamp = parsed.timestamp.to_string();
        let signed: [&[u8]; 3] = [timestamp.as_bytes(), b":", request.body];
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        if !any_matches(secrets, &signed, &parsed.signatures) {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
        }
        check_tolerance(parsed.timestamp, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
        _event: &EventToSign,
    ) -> Vec<(String, String)> {
        let timestamp = now.timestamp().to_string();
        let signature = hmac_sha256(
            secret.expose().as_bytes(),
            &[timestamp.as_bytes(), b":", body],
        );
        vec![
            (
                HEADER.to_owned(),
                format!("ts={timestamp};h1={}", hex::encode(signature)),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn signs_timestamp(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parsing_keeps_every_h1_and_ignores_unknown_keys() {
        let parsed = parse_header(
            format!(
                "ts=12;h1={};h2={};h1={}",
                "aa".repeat(32),
                "bb".repeat(32),
                "cc".repeat(32)
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(parsed.timestamp, 12);
        assert_eq!(parsed.signatures, vec![vec![0xaa; 32], vec![0xcc; 32]]);
        assert!(parse_header(format!("h1={}", "aa".repeat(32)).as_bytes()).is_err());
        assert!(parse_header(b"ts=12").is_err());
        assert!(parse_header(b"ts=12;h1=00").is_err());
        assert!(parse_header(b"ts=x;h1=00").is_err());
        assert!(parse_header(b"ts=1;ts=2;h1=00").is_err());
        assert!(parse_header(b"").is_err());
        assert!(parse_header(&[0xff, 0xfe]).is_err());
    }
}
