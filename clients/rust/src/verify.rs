//! Verifies a delivery exactly as Inlet signs it (Standard Webhooks, `v1`): HMAC-SHA256,
//! keyed with the bytes after `whsec_`, over `"{webhook-id}.{webhook-timestamp}.{body}"`,
//! sent base64 in `webhook-signature`, a space-separated list of `v1,<base64>` entries.
//!
//! The rules are Inlet's own verifier's (`src/signature/standard.rs`): the raw body bytes;
//! every secret against every entry, in constant time; an entry decoded only when it has a
//! signature's exact length (so `v1,` alone, or a truncated tag, matches nothing, whatever
//! the body); at most [`MAX_SIGNATURES`] entries; the signed time within a tolerance of
//! now in both directions, against a clock the caller may give. Every way a delivery can
//! fail is one error, [`InvalidSignature`].

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::Duration;

/// How far the signed time may be from now, either way (the specification's 5 minutes).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The most entries one `webhook-signature` may list (Inlet's own bound): a long hostile
/// list then costs no more than a short one.
pub const MAX_SIGNATURES: usize = 8;

/// The fewest bytes of a signing key (the specification's minimum, which Inlet enforces on
/// every destination secret: `whsec_` alone would be an empty key anyone can sign with).
pub const MIN_KEY_BYTES: usize = 24;

/// The longest `webhook-id` accepted (Inlet's are `<source>:<event id>`, far shorter).
pub const MAX_ID_BYTES: usize = 1024;

const TAG_BYTES: usize = 32;
const TAG_CHARS: usize = 44;

/// A delivery that did not verify: missing or malformed headers, no matching signature, or
/// a timestamp outside the tolerance. The message is for your logs, not for the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSignature(String);

impl std::fmt::Display for InvalidSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSignature {}

fn invalid(reason: impl Into<String>) -> InvalidSignature {
    InvalidSignature(reason.into())
}

/// A delivery whose signature held: only [`Verifier::verify`] makes one, so a handler that
/// takes it cannot be given an unverified body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    message_id: String,
    timestamp: i64,
    body: Vec<u8>,
}

impl Verified {
    /// Inlet's `webhook-id` (`<source>:<event id>`, the same on every retry, requeue and
    /// replay of the fact): the inbox key.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The signed time, Unix seconds.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The body's bytes, exactly as signed.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// The three signed headers of a delivery, as raw bytes (absent: `None`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Headers<'a> {
    pub id: Option<&'a [u8]>,
    pub timestamp: Option<&'a [u8]>,
    pub signature: Option<&'a [u8]>,
}

impl<'a> Headers<'a> {
    /// The headers read through `get(name)`, which answers a header's bytes by its
    /// lower-case name — whatever map the web framework keeps them in.
    pub fn from_fn(get: impl Fn(&str) -> Option<&'a [u8]>) -> Self {
        Self {
            id: get("webhook-id"),
            timestamp: get("webhook-timestamp"),
            signature: get("webhook-signature"),
        }
    }
}

/// The secrets a destination signs with (several while one is rotated) and the tolerance.
#[derive(Clone)]
pub struct Verifier {
    keys: Vec<Vec<u8>>,
    tolerance: Duration,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Verifier")
            .field("secrets", &self.keys.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl Verifier {
    /// A verifier for these `whsec_…` secrets (all those in rotation). A secret that is
    /// not base64 or whose key is under [`MIN_KEY_BYTES`] is a configuration mistake,
    /// refused here, at startup, rather than on the first delivery.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Result<Self, String> {
        let keys = secrets
            .into_iter()
            .map(|secret| signing_key(secret.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err("a verifier needs at least one whsec_ secret".to_owned());
        }
        Ok(Self {
            keys,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// The same verifier with another tolerance for the signed time.
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Verifies a delivery against the current time.
    pub fn verify(&self, headers: Headers<'_>, body: &[u8]) -> Result<Verified, InvalidSignature> {
        self.verify_at(headers, body, Utc::now())
    }

    /// Verifies a delivery as of `now` (tests move the clock instead of waiting).
    pub fn verify_at(
        &self,
        headers: Headers<'_>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Verified, InvalidSignature> {
        let id = headers.id.ok_or_else(|| invalid("no webhook-id header"))?;
        let stamp = headers
            .timestamp
            .ok_or_else(|| invalid("no webhook-timestamp header"))?;
        let list = headers
            .signature
            .ok_or_else(|| invalid("no webhook-signature header"))?;
        let message_id = message_id(id)?;
        let timestamp = timestamp(stamp)?;
        self.check_time(timestamp, now)?;
        let tags = tags(list)?;
        let matched = self.keys.iter().any(|key| {
            let mac = mac(key, &[id, b".", stamp, b".", body]);
            tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
        });
        match matched {
            true => Ok(Verified {
                message_id,
                timestamp,
                body: body.to_vec(),
            }),
            false => Err(invalid("no webhook-signature entry matches a secret")),
        }
    }

    fn check_time(&self, timestamp: i64, now: DateTime<Utc>) -> Result<(), InvalidSignature> {
        let skew = now.timestamp().abs_diff(timestamp);
        match skew <= self.tolerance.as_secs() {
            true => Ok(()),
            false => Err(invalid(format!(
                "webhook-timestamp is {skew} s from now, past the tolerance of {} s",
                self.tolerance.as_secs()
            ))),
        }
    }
}

/// The HMAC key of a `whsec_<base64>` secret (the prefix is optional, as in Inlet).
fn signing_key(secret: &str) -> Result<Vec<u8>, String> {
    let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
    let key = BASE64
        .decode(encoded)
        .map_err(|_| "a Standard Webhooks secret is whsec_ followed by base64".to_owned())?;
    match key.len() >= MIN_KEY_BYTES {
        true => Ok(key),
        false => Err(format!(
            "a Standard Webhooks secret needs at least {MIN_KEY_BYTES} bytes of key, this \
             one has {}",
            key.len()
        )),
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    for part in parts {
        mac.update(part);
    }
    mac
}

fn message_id(id: &[u8]) -> Result<String, InvalidSignature> {
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(invalid("webhook-id is empty or too long"));
    }
    String::from_utf8(id.to_vec()).map_err(|_| invalid("webhook-id is not UTF-8"))
}

/// Unix seconds as Inlet writes them: 1 to 12 ASCII digits.
fn timestamp(stamp: &[u8]) -> Result<i64, InvalidSignature> {
    let digits = !stamp.is_empty() && stamp.len() <= 12 && stamp.iter().all(u8::is_ascii_digit);
    let parsed = std::str::from_utf8(stamp).ok().and_then(|s| s.parse().ok());
    match (digits, parsed) {
        (true, Some(seconds)) => Ok(seconds),
        _ => Err(invalid("webhook-timestamp is not Unix seconds")),
    }
}

/// The `v1` tags of a signature list: entries of another version or length are skipped
/// (never decoded); more than [`MAX_SIGNATURES`] entries are refused.
fn tags(list: &[u8]) -> Result<Vec<Vec<u8>>, InvalidSignature> {
    let entries = list.split(|b| *b == b' ').filter(|entry| !entry.is_empty());
    let mut tags = Vec::new();
    for (index, entry) in entries.enumerate() {
        if index == MAX_SIGNATURES {
            return Err(invalid("webhook-signature lists too many entries"));
        }
        let tag = entry
            .strip_prefix(b"v1,")
            .filter(|encoded| encoded.len() == TAG_CHARS)
            .and_then(|encoded| BASE64.decode(encoded).ok())
            .filter(|tag| tag.len() == TAG_BYTES);
        tags.extend(tag);
    }
    Ok(tags)
}

/// The headers Inlet would send with `body` under `secret` at `at` (for tests and for
/// sending to yourself): `webhook-id`, `webhook-timestamp`, `webhook-signature`.
pub fn sign(
    secret: &str,
    message_id: &str,
    body: &[u8],
    at: DateTime<Utc>,
) -> Result<[(&'static str, String); 3], String> {
    let key = signing_key(secret)?;
    let stamp = at.timestamp().to_string();
    let tag = mac(
        &key,
        &[message_id.as_bytes(), b".", stamp.as_bytes(), b".", body],
    )
    .finalize()
    .into_bytes();
    Ok([
        ("webhook-id", message_id.to_owned()),
        ("webhook-timestamp", stamp),
        ("webhook-signature", format!("v1,{}", BASE64.encode(tag))),
    ])
}
