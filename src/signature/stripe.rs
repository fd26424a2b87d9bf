//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 over
//! `"{t}.{body}"` keyed with the whole `whsec_…` string. Every `v1` is tried (Stripe sends
//! several while a secret rolls); other schemes such as `v0` are ignored. Event id and type
//! come from the JSON body (`id`, `type`).

use super::{
    any_matches, check_tolerance, hmac_sha256, EventToSign, Keys, Scheme, SignatureError,
    Unverified, Verified,
};
use crate::secret::Secret;
use chrono::{DateTime, Utc};

const HEADER: &str = "Stripe-Signature";

#[derive(Debug)]
pub struct Stripe;

/// The parsed header: the signed timestamp and every `v1` signature.
#[derive(Debug, PartialEq, Eq)]
struct StripeHeader {
    timestamp: i64,
    signatures: Vec<Vec<u8>>,
}

fn malformed(detail: &str) -> SignatureError {
    SignatureError::malformed(HEADER, detail)
}

fn parse_header(value: &[u8]) -> Result<StripeHeader, SignatureError> {
    let text = std::str::from_utf8(value).map_err(|_| malformed("not valid UTF-8"))?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in text.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" => {
                if timestamp.is_some() {
                    return Err(malformed("more than one t="));
                }
                let parsed = value
                    .parse::<i64>()
                    .map_err(|_| malformed("t= is not a whole number of seconds"))?;
                timestamp = Some(parsed);
            }
            // A v1 that is not 32 bytes of hex can never match; skipping it keeps the
            // other entries usable, as Stripe's own libraries do.
            "v1" => {
                if let Ok(bytes) = hex::decode(value) {
                    if bytes.len() == 32 {
                        signatures.push(bytes);
                    }
                }
            }
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| malformed("no t= timestamp"))?;
    if signatures.is_empty() {
        return Err(malformed("no v1= signature"));
    }
    Ok(StripeHeader {
        timestamp,
        signatures,
    })
}

impl Scheme for Stripe {
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
        let signed: [&[u8]; 3] = [timestamp.as_bytes(), b".", request.body];
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
            &[timestamp.as_bytes(), b".", body],
        );
        vec![
            (
                HEADER.to_owned(),
                format!("t={timestamp},v1={}", hex::encode(signature)),
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
    use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
    use std::time::Duration;

    fn headers(value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            HeaderName::from_static("stripe-signature"),
            HeaderValue::from_str(value).unwrap(),
        );
        map
    }

    #[test]
    fn header_parsing_keeps_every_v1_and_ignores_other_schemes() {
        let parsed = parse_header(
            format!(
                "t=12,v1={},v0={},v1={}",
                "aa".repeat(32),
                "bb".repeat(32),
                "cc".repeat(32)
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(parsed.timestamp, 12);
        assert_eq!(parsed.signatures, vec![vec![0xaa; 32], vec![0xcc; 32]]);
        assert!(parse_header(b"v1=00").is_err());
        assert!(parse_header(b"t=12").is_err());
        assert!(parse_header(b"t=x,v1=00").is_err());
        assert!(parse_header(b"t=1,t=2,v1=00").is_err());
        assert!(parse_header(b"").is_err());
    }

    #[test]
    fn signs_what_it_verifies_with_any_rotated_secret() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let old = Secret::new("whsec_old");
        let new = Secret::new("whsec_new");
        let body = br#"{"id":"evt_1"}"#;
        let event = EventToSign {
            id: "evt_1".into(),
            event_type: "x".into(),
        };
        let signed = Stripe.sign(body, &old, now, &event);
        let map = headers(&signed[0].1);
        let secrets = [new.clone(), old];
        let keys = Keys {
            secrets: &secrets,
            tolerance: Duration::from_secs(300),
        };
        assert!(Stripe
            .verify(Unverified::new(&map, body), keys, now)
            .is_ok());
        let only_new = [new];
        let keys = Keys {
            secrets: &only_new,
            tolerance: Duration::from_secs(300),
        };
        assert_eq!(
            Stripe
                .verify(Unverified::new(&map, body), keys, now)
                .unwrap_err(),
            SignatureError::Mismatch(HEADER.to_owned())
        );
    }
}
