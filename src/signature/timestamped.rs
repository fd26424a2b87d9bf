//! The header shape Stripe, Paddle, WorkOS, Mux and PagerDuty share: one header listing
//! `key=value` items — a timestamp where the provider signs one, and any number of hex
//! HMAC-SHA256 signatures (`t=<unix>,v1=<hex>,v1=<hex>` / `ts=<unix>;h1=<hex>;h1=<hex>` /
//! `v1=<hex>,v1=<hex>`) — signed over `"{timestamp}{joiner}{body}"`, or the body alone,
//! keyed with the secret's bytes. Every signature is tried (providers send several while a
//! secret rotates); unknown keys are ignored; more than [`MAX_SIGNATURES`] items besides
//! the timestamp are refused; a timestamp is checked against the tolerance in both
//! directions. Each provider is one [`SignatureList`] entry, read by one implementation of
//! [`Scheme`]; Stripe's and Paddle's live beside their tests, the plainer ones here:
//!
//! - WorkOS: `WorkOS-Signature: t=<unix milliseconds>, v1=<hex>` over `"{t}.{body}"`,
//!   keyed with the endpoint's webhook secret. Event id and type: the body's `id` and
//!   `event`.
//! - Mux: `Mux-Signature: t=<unix>,v1=<hex>` over `"{t}.{body}"`, keyed with the
//!   endpoint's signing secret. Event type: the body's `type`; the body's `id` is the
//!   fact (the provider table says why the event is the body's digest).
//! - PagerDuty (v3 webhooks): `X-PagerDuty-Signature: v1=<hex>[,v1=<hex>…]` over the body,
//!   keyed with the subscription's secret; one `v1` per secret while it rotates; no
//!   timestamp. Event id and type: the body's `event.id` and `event.event_type`.

use super::timestamp::{check_tolerance, TimeFormat};
use super::Signer;
use super::{
    check_hmac, secret_hmac, too_many_signatures, with_json_type, Keys, SignedHeaders, ToSign,
    Verdict,
};
use super::{Scheme, SignatureError, Unverified, Verified, MAX_SIGNATURES};
use crate::secret::{MinLength, Secret};
use chrono::{DateTime, Utc};

/// One provider's spelling of the shape.
#[derive(Debug)]
pub struct SignatureList {
    pub(super) header: &'static str,
    /// Between the header's `key=value` items.
    pub(super) separator: char,
    /// What the provider writes between them (`", "` for WorkOS).
    pub(super) written_separator: &'static str,
    /// `None`: no timestamp is signed (PagerDuty), only the body.
    pub(super) timestamp_key: Option<&'static str>,
    pub(super) signature_key: &'static str,
    /// Between the timestamp and the body in the signed bytes.
    pub(super) joiner: &'static [u8],
    /// How the timestamp counts: Unix seconds, or milliseconds (WorkOS).
    pub(super) time: TimeFormat,
    /// The provider's rule for its secrets; `None`: the floor for a chosen secret.
    pub(super) secret: Option<MinLength>,
}

pub static WORKOS: SignatureList = SignatureList {
    written_separator: ", ",
    time: TimeFormat::UnixMillis,
    ..SignatureList::stripe_like("WorkOS-Signature")
};

pub static MUX: SignatureList = SignatureList::stripe_like("Mux-Signature");

pub static PAGERDUTY: SignatureList = SignatureList {
    timestamp_key: None,
    joiner: b"",
    ..SignatureList::stripe_like("X-PagerDuty-Signature")
};

/// The parsed header: the signed timestamp (where the layout has one) and every
/// signature.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    pub timestamp: Option<i64>,
    pub signatures: Vec<Vec<u8>>,
}

impl SignatureList {
    /// Stripe's spelling under another header: `t=<unix>,v1=<hex>` over `"{t}.{body}"`,
    /// the floor for a chosen secret; what the other providers change.
    pub(super) const fn stripe_like(header: &'static str) -> Self {
        Self {
            header,
            separator: ',',
            written_separator: ",",
            timestamp_key: Some("t"),
            signature_key: "v1",
            joiner: b".",
            time: TimeFormat::UnixSeconds,
            secret: None,
        }
    }

    fn malformed(&self, detail: &str) -> SignatureError {
        SignatureError::malformed(self.header, detail)
    }

    pub(super) fn parse_header(&self, value: &[u8]) -> Result<Parsed, SignatureError> {
        let (t, v) = (self.timestamp_key, self.signature_key);
        let is_t = |key: &str| Some(key) == t;
        let t = t.unwrap_or_default();
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
            if !item.is_empty() && pair.is_none_or(|(key, _)| !is_t(key)) {
                listed += 1;
                if listed > MAX_SIGNATURES {
                    return Err(too_many_signatures(self.header));
                }
            }
            let Some((key, value)) = pair else {
                continue;
            };
            if is_t(key) {
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
        if timestamp.is_none() && self.timestamp_key.is_some() {
            return Err(self.malformed(&format!("no {t}= timestamp")));
        }
        if signatures.is_empty() {
            return Err(self.malformed(&format!("no {v}= signature")));
        }
        Ok(Parsed {
            timestamp,
            signatures,
        })
    }

    /// What is signed: the timestamp as written, the joiner and the body; or the body.
    fn signed<'a>(&'a self, timestamp: Option<&'a str>, body: &'a [u8]) -> Vec<&'a [u8]> {
        match timestamp {
            Some(timestamp) => vec![timestamp.as_bytes(), self.joiner, body],
            None => vec![body],
        }
    }

    fn check<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let parsed = self.parse_header(request.required(self.header)?)?;
        let timestamp = parsed.timestamp.map(|t| t.to_string());
        let signed = self.signed(timestamp.as_deref(), request.body);
        check_hmac(keys, &signed, &parsed.signatures, self.header)?;
        if let Some(timestamp) = parsed.timestamp {
            check_tolerance(self.time.seconds(timestamp), now, keys.tolerance)?;
        }
        Ok(request.into_verified())
    }

    fn signed_headers(
        &self,
        body: &[u8],
        secret: &Secret,
        now: DateTime<Utc>,
    ) -> Vec<(String, String)> {
        let timestamp = self.timestamp_key.map(|key| (key, self.time.write(now)));
        let signed = self.signed(timestamp.as_ref().map(|(_, t)| t.as_str()), body);
        let signature = secret_hmac(secret, &signed);
        let time = timestamp
            .map(|(key, t)| format!("{key}={t}{}", self.written_separator))
            .unwrap_or_default();
        let value = format!("{time}{}={}", self.signature_key, hex::encode(signature));
        with_json_type([(self.header, value)])
    }
}

impl Scheme for SignatureList {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        self.check(request, keys, now)
    }

    fn signs_timestamp(&self) -> bool {
        self.timestamp_key.is_some()
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::check_rule(self.secret.as_ref(), secret)
    }
}

impl Signer for SignatureList {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body, secret, now, ..
        } = signing;
        self.signed_headers(body, secret, now)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PADDLE, STRIPE};

    #[test]
    fn header_parsing_keeps_every_signature_and_ignores_unknown_keys() {
        let (a, b, c) = ("aa".repeat(32), "bb".repeat(32), "cc".repeat(32));
        for (list, header) in [
            (&STRIPE, format!("t=12,v1={a},v0={b},v1={c}")),
            (&PADDLE, format!("ts=12;h1={a};h2={b};h1={c}")),
        ] {
            let parsed = list.parse_header(header.as_bytes()).unwrap();
            assert_eq!(parsed.timestamp, Some(12), "{header}");
            assert_eq!(parsed.signatures, vec![vec![0xaa; 32], vec![0xcc; 32]]);
        }
    }
}
