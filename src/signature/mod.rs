//! Signature verification over the raw request bytes, one file per provider scheme behind
//! one trait.
//!
//! Typestate keeps unverified input away from the ingest code: a request arrives as
//! [`Unverified`], and only a scheme's `verify` can turn it into a [`Verified`], which is
//! what event-id extraction and the ingest transaction take. Every secret of a source is
//! tried (rotation) and every comparison is constant-time (`Mac::verify_slice`).

mod stripe;

use crate::config::Secret;
use crate::error::{Problem, Reason};
use crate::ingest::Identity;
use crate::ledger::FactRule;
use actix_web::http::header::HeaderMap;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::Duration;

/// The providers' signing schemes Inlet understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeKind {
    Stripe,
}

impl SchemeKind {
    pub const ALL: [SchemeKind; 1] = [SchemeKind::Stripe];

    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Self::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown scheme '{name}' (supported: {})", known.join(", "))
            })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SchemeKind::Stripe => "stripe",
        }
    }

    /// The implementation of this scheme.
    pub fn scheme(self) -> &'static dyn Scheme {
        match self {
            SchemeKind::Stripe => &stripe::Stripe,
        }
    }

    pub fn default_fact_rules(self) -> Vec<FactRule> {
        self.scheme().default_fact_rules()
    }
}

/// What a source verifies with: every active secret, and the timestamp tolerance for
/// schemes that sign one.
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    pub secrets: &'a [Secret],
    pub tolerance: Duration,
}

/// A request as it arrived: headers and raw body bytes, not yet trusted.
#[derive(Debug, Clone, Copy)]
pub struct Unverified<'r> {
    headers: &'r HeaderMap,
    body: &'r [u8],
}

impl<'r> Unverified<'r> {
    pub fn new(headers: &'r HeaderMap, body: &'r [u8]) -> Self {
        Self { headers, body }
    }

    /// A header's raw bytes (the first one, when repeated).
    fn header(&self, name: &str) -> Option<&'r [u8]> {
        self.headers.get(name).map(|value| value.as_bytes())
    }

    /// Only this module's schemes can vouch for a request.
    fn into_verified(self) -> Verified<'r> {
        Verified { request: self }
    }
}

/// A request whose signature matched one of its source's secrets.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'r> {
    request: Unverified<'r>,
}

impl<'r> Verified<'r> {
    pub fn body(&self) -> &'r [u8] {
        self.request.body
    }

    /// A header's value as text, when it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&'r str> {
        self.request
            .header(name)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
    }
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    Missing(&'static str),
    #[error("the {header} header is malformed: {detail}")]
    Malformed {
        header: &'static str,
        detail: String,
    },
    #[error("no signature in {0} matches any secret of this source")]
    Mismatch(&'static str),
    #[error("the signed timestamp {signed_at} is {skew_secs}s away from now, over the tolerance of {tolerance_secs}s")]
    OutOfTolerance {
        signed_at: i64,
        skew_secs: i64,
        tolerance_secs: u64,
    },
}

impl From<SignatureError> for Problem {
    fn from(error: SignatureError) -> Self {
        let reason = match error {
            SignatureError::Missing(_) => Reason::MissingSignature,
            SignatureError::Malformed { .. } => Reason::MalformedSignature,
            SignatureError::Mismatch(_) => Reason::BadSignature,
            SignatureError::OutOfTolerance { .. } => Reason::TimestampOutOfTolerance,
        };
        Problem::new(reason, error.to_string())
    }
}

/// One provider's signing scheme.
pub trait Scheme: Sync {
    /// Checks the signature over the raw bytes against every secret, then the timestamp
    /// tolerance where the scheme signs one. A pure function of its arguments.
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError>;

    /// The headers the provider would send for `body`, signed with `secret` at `now`.
    fn sign(&self, body: &[u8], secret: &Secret, now: DateTime<Utc>)
        -> Vec<(&'static str, String)>;

    /// The provider's event id and type.
    fn identify(&self, request: &Verified<'_>) -> Result<Identity, Problem>;

    /// Fact rules that apply to every source of this scheme.
    fn default_fact_rules(&self) -> Vec<FactRule>;
}

/// HMAC-SHA256 of the concatenated parts.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    mac_over(key, parts).finalize().into_bytes().to_vec()
}

/// Whether `tag` is the HMAC-SHA256 of the parts, compared in constant time.
fn hmac_matches(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    mac_over(key, parts).verify_slice(tag).is_ok()
}

fn mac_over(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in parts {
        mac.update(part);
    }
    mac
}

/// Refuses a signed timestamp further than `tolerance` from `now`, in either direction.
fn check_tolerance(
    signed_at: i64,
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let skew = now.timestamp().saturating_sub(signed_at);
    if skew.unsigned_abs() > tolerance.as_secs() {
        return Err(SignatureError::OutOfTolerance {
            signed_at,
            skew_secs: skew,
            tolerance_secs: tolerance.as_secs(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_applies_in_both_directions() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let five_minutes = Duration::from_secs(300);
        assert!(check_tolerance(1_000_000 - 300, now, five_minutes).is_ok());
        assert!(check_tolerance(1_000_000 + 300, now, five_minutes).is_ok());
        assert!(check_tolerance(1_000_000 - 301, now, five_minutes).is_err());
        assert!(check_tolerance(1_000_000 + 301, now, five_minutes).is_err());
        assert!(check_tolerance(i64::MIN, now, five_minutes).is_err());
        assert!(check_tolerance(i64::MAX, now, five_minutes).is_err());
    }

    #[test]
    fn hmac_matches_only_the_exact_tag() {
        let tag = hmac_sha256(b"key", &[b"a", b"b"]);
        assert!(hmac_matches(b"key", &[b"ab"], &tag));
        assert!(!hmac_matches(b"key", &[b"ab"], &tag[..31]));
        assert!(!hmac_matches(b"kez", &[b"ab"], &tag));
    }
}
