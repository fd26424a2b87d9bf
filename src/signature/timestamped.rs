//! The header shape Stripe, Paddle, WorkOS and Mux share: one timestamp and any number
//! of hex HMAC-SHA256 signatures in one header (`t=<unix>,v1=<hex>,v1=<hex>` /
//! `ts=<unix>;h1=<hex>;h1=<hex>`), signed over `"{timestamp}{joiner}{body}"` keyed with
//! the secret's bytes. Every signature is tried (providers send several while a secret
//! rotates); unknown keys are ignored; more than [`MAX_SIGNATURES`] items besides the
//! timestamp are refused; the timestamp is checked against the tolerance in both
//! directions. Each provider is one [`TimestampedHex`] entry, read by one implementation
//! of [`Scheme`]; Stripe's and Paddle's live beside their tests, the plainer ones here:
//!
//! - WorkOS: `WorkOS-Signature: t=<unix milliseconds>, v1=<hex>` over `"{t}.{body}"`,
//!   keyed with the endpoint's webhook secret. Event id and type: the body's `id` and
//!   `event`.
//! - Mux: `Mux-Signature: t=<unix>,v1=<hex>` over `"{t}.{body}"`, keyed with the
//!   endpoint's signing secret. Event type: the body's `type`; the body's `id` is the
//!   fact (the provider table says why the event is the body's digest).

use super::{
    any_matches, check_tolerance, hmac_sha256, too_many_signatures, EventToSign, Keys, Scheme,
    SignatureError, Unverified, Verified, MAX_SIGNATURES,
};
use crate::secret::{MinLength, Secret};
use chrono::{DateTime, Utc};

/// One provider's spelling of the shape.
#[derive(Debug)]
pub struct TimestampedHex {
    pub(super) header: &'static str,
    /// Between the header's `key=value` items.
    pub(super) separator: char,
    /// What the provider writes between them (`", "` for WorkOS).
    pub(super) written_separator: &'static str,
    pub(super) timestamp_key: &'static str,
    pub(super) signature_key: &'static str,
    /// Between the timestamp and the body in the signed bytes.
    pub(super) joiner: &'static [u8],
    /// The timestamp counts milliseconds (WorkOS), not seconds.
    pub(super) millis: bool,
    /// The provider's rule for its secrets; `None`: the floor for a chosen secret.
    pub(super) secret: Option<MinLength>,
}

pub static WORKOS: TimestampedHex = TimestampedHex {
    header: "WorkOS-Signature",
    separator: ',',
    written_separator: ", ",
    timestamp_key: "t",
    signature_key: "v1",
    joiner: b".",
    millis: true,
    secret: None,
};

pub static MUX: TimestampedHex = TimestampedHex {
    header: "Mux-Signature",
    separator: ',',
    written_separator: ",",
    timestamp_key: "t",
    signature_key: "v1",
    joiner: b".",
    millis: false,
    secret: None,
};

/// The parsed header: the signed timestamp and every signature.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    pub timestamp: i64,
    pub signatures: Vec<Vec<u8>>,
}

impl TimestampedHex {
    fn malformed(&self, detail: &str) -> SignatureError {
        SignatureError::malformed(self.header, detail)
    }

    pub(super) fn parse_header(&self, value: &[u8]) -> Result<Parsed, SignatureError> {
        let (t, v) = (self.timestamp_key, self.signature_key);
        let mut timestamp = None;
        let mut signatures = Vec::new();
        // Every item but the timestamp counts toward the bound, whatever its key; items
        // past it are never read. (The separators are ASCII.)
        let mut listed = 0;
        for item in value.split(|b| char::from(*b) == self.separator) {
            let item = std::str::from_utf8(item)
                .map_err(|_| self.malformed("not valid UTF-8"))?
                .trim();
            let pair = item.split_once('=');
            if !item.is_empty() && pair.is_none_or(|(key, _)| key != t) {
                listed += 1;
                if listed > MAX_SIGNATURES {
                    return Err(too_many_signatures(self.header));
                }
            }
            let Some((key, value)) = pair else {
                continue;
            };
            if key == t {
                if timestamp.is_some() {
                    return Err(self.malformed(&format!("more than one {t}=")));
                }
                let parsed = value.parse::<i64>().map_err(|_| {
                    self.malformed(&format!("{t}= is not a whole number of seconds"))
                })?;
                timestamp = Some(parsed);
            } else if key == v {
                // A signature that is not 32 bytes of hex can never match; skipping it
                // keeps the other entries usable, as the providers' own libraries do.
                if let Some(bytes) = (value.len() == 64)
                    .then(|| hex::decode(value).ok())
                    .flatten()
                {
                    signatures.push(bytes);
                }
            }
        }
        let timestamp = timestamp.ok_or_else(|| self.malformed(&format!("no {t}= timestamp")))?;
        if signatures.is_empty() {
            return Err(self.malformed(&format!("no {v}= signature")));
        }
        Ok(Parsed {
            timestamp,
            signatures,
        })
    }

    fn check<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let header = request
            .header(self.header)
            .ok_or_else(|| SignatureError::Missing(self.header.to_owned()))?;
        let parsed = self.parse_header(header)?;
        let timestamp = parsed.timestamp.to_string();
        let signed: [&[u8]; 3] = [timestamp.as_bytes(), self.joiner, request.body];
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        if !any_matches(secrets, &signed, &parsed.signatures) {
            return Err(SignatureError::Mismatch(self.header.to_owned()));
        }
        let seconds = match self.millis {
            true => parsed.timestamp.div_euclid(1000),
            false => parsed.timestamp,
        };
        check_tolerance(seconds, now, keys.tolerance)?;
        Ok(request.into_verified())
    }

    fn signed_headers(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
    ) -> Vec<(String, String)> {
        let timestamp = match self.millis {
            true => now.timestamp_millis().to_string(),
            false => now.timestamp().to_string(),
        };
        let signature = hmac_sha256(
            secret.expose().as_bytes(),
            &[timestamp.as_bytes(), self.joiner, body],
        );
        let value = format!(
            "{}={timestamp}{}{}={}",
            self.timestamp_key,
            self.written_separator,
            self.signature_key,
            hex::encode(signature)
        );
        vec![
            (self.header.to_owned(), value),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }
}

impl Scheme for TimestampedHex {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        self.check(request, keys, now)
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
        _event: &EventToSign,
    ) -> Vec<(String, String)> {
        self.signed_headers(body, secret, now)
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        self.secret
            .as_ref()
            .unwrap_or(&MinLength::CHOSEN)
            .check(secret)
    }
}
