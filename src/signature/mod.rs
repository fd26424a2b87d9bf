//! Signature verification over the raw request bytes, one file per provider scheme behind
//! one trait.
//!
//! Typestate keeps unverified input away from the ingest code: a request arrives as
//! [`Unverified`], and only a scheme's `verify` can turn it into a [`Verified`], which is
//! what event-id extraction and the ingest transaction take. Every secret of a source is
//! tried (rotation) and every comparison is constant-time (`Mac::verify_slice`); Ed25519
//! schemes verify with public keys, which need no secrecy.
//! Verification is a pure function of (headers, raw body, secrets, now).

mod adyen;
mod basic;
mod braintree;
mod discord;
mod ed25519;
mod fetch;
mod fixed;
mod graph;
mod header_token;
mod hmac;
mod hubspot;
mod paddle;
mod public_url;
mod sendgrid;
mod sns;
mod square;
mod standard;
mod stripe;
mod timestamp;
mod timestamped;
mod twilio;

pub use self::adyen::{ADYEN, MAX_ITEMS as MAX_BATCH_ITEMS};
pub use self::basic::Basic;
pub use self::braintree::{kind as braintree_kind, BRAINTREE};
pub use self::discord::Discord;
pub use self::fetch::Fetch;
pub use self::fixed::{url_validation_token as zoom_url_validation_token, FixedHmac};
pub use self::fixed::{ASANA, DROPBOX, GITHUB, LINEAR, SHOPIFY, SLACK, ZENDESK, ZOOM};
pub use self::graph::{GRAPH, REDACTED as GRAPH_REDACTED};
pub use self::header_token::HeaderToken;
pub use self::hmac::{Encoding, HmacScheme};
pub use self::hubspot::HubSpot;
pub use self::paddle::PADDLE;
pub use self::public_url::PublicUrl;
pub use self::sendgrid::{MAX_ITEMS as SENDGRID_MAX_ITEMS, SENDGRID};
pub use self::sns::{check_certificate, kind_of as sns_kind, CertificateHosts};
pub use self::sns::{Kind as SnsKind, Sns};
pub use self::square::Square;
pub use self::standard::{check_signing_secret as check_standard_secret, Standard};
pub use self::stripe::STRIPE;
pub use self::timestamp::TimeFormat;
pub use self::timestamped::{SignatureList, MUX, PAGERDUTY, WORKOS};
pub use self::twilio::Twilio;

use crate::identity::RequestParts;
use crate::secret::Secret;
use ::hmac::{Hmac, KeyInit, Mac};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// What a source verifies with: every active secret, the timestamp tolerance for schemes
/// that sign one, and the time the request is verified at (what the tolerance is
/// measured from).
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    pub secrets: &'a [Secret],
    pub tolerance: Duration,
    pub now: DateTime<Utc>,
}

/// A scheme's verdict on a request: verified, or why not.
pub type Verdict<'r> = Result<Verified<'r>, SignatureError>;

/// What a scheme signs: a body, with a secret, at a time, as an event (`inlet sign`,
/// `inlet send`, the dispatcher's own signature).
#[derive(Debug, Clone, Copy)]
pub struct ToSign<'a> {
    pub body: &'a [u8],
    pub secret: &'a Secret,
    pub now: DateTime<Utc>,
    pub event: &'a EventToSign,
}

impl<'a> ToSign<'a> {
    pub fn new(
        body: &'a [u8],
        secret: &'a Secret,
        now: DateTime<Utc>,
        event: &'a EventToSign,
    ) -> Self {
        Self {
            body,
            secret,
            now,
            event,
        }
    }
}

/// The headers a signature travels in, as `(name, value)`.
pub type SignedHeaders = Vec<(String, String)>;

/// A request's headers as the schemes read them, whatever HTTP library received them
/// (the edge implements it for its own header map).
pub trait Headers: std::fmt::Debug + Sync {
    /// The raw bytes of the first header named `name` (case-insensitive), when present.
    fn first(&self, name: &str) -> Option<&[u8]>;
    /// Every header as received: its name in lower case, its raw value.
    fn all(&self) -> Vec<(&str, &[u8])>;
}

impl Headers for http::HeaderMap {
    fn first(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(http::HeaderValue::as_bytes)
    }

    fn all(&self) -> Vec<(&str, &[u8])> {
        self.iter()
            .map(|(name, value)| (name.as_str(), value.as_bytes()))
            .collect()
    }
}

/// A request as it arrived: headers and raw body bytes, not yet trusted.
#[derive(Debug, Clone, Copy)]
pub struct Unverified<'r> {
    headers: &'r dyn Headers,
    body: &'r [u8],
}

impl<'r> Unverified<'r> {
    pub fn new(headers: &'r dyn Headers, body: &'r [u8]) -> Self {
        Self { headers, body }
    }

    /// A header's raw bytes (the first one, when repeated).
    fn header(&self, name: &str) -> Option<&'r [u8]> {
        self.headers.first(name)
    }

    /// A header's raw bytes (the first one, when repeated), or the refusal that it is
    /// missing.
    fn required(&self, name: &str) -> Result<&'r [u8], SignatureError> {
        self.header(name)
            .ok_or_else(|| SignatureError::Missing(name.to_owned()))
    }

    /// The first of `names` present, with the name it was found under.
    fn any_header(&self, names: &[&'static str]) -> Option<(&'static str, &'r [u8])> {
        names
            .iter()
            .find_map(|name| self.header(name).map(|value| (*name, value)))
    }

    /// An event no signature vouches for but the authenticated API call (over TLS) that
    /// fetched it from its provider's own record — reconciliation. Its caller answers for
    /// that call; never for a request that arrived over HTTP.
    pub(crate) fn fetched_from_provider_api(self) -> Verified<'r> {
        self.into_verified()
    }

    /// Only this module's schemes can vouch for a request.
    fn into_verified(self) -> Verified<'r> {
        Verified {
            request: self,
            signed_digest: None,
            type_reader: None,
        }
    }

    /// Verified, for a scheme that signs a canonical form of the body rather than its
    /// bytes: `digest` is the sha256 of what was signed.
    fn into_verified_as(self, digest: [u8; 32]) -> Verified<'r> {
        Verified {
            request: self,
            signed_digest: Some(digest),
            type_reader: None,
        }
    }

    /// [`Unverified::into_verified_as`], for a scheme that encodes the event's type inside
    /// what it signs: `reader` finds it in the body.
    fn into_verified_reading(self, digest: [u8; 32], reader: TypeReader) -> Verified<'r> {
        Verified {
            type_reader: Some(reader),
            ..self.into_verified_as(digest)
        }
    }
}

/// A request whose signature matched one of its source's secrets.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'r> {
    request: Unverified<'r>,
    /// The sha256 of the canonical content the signature covers, for schemes that sign a
    /// reading of the body (Twilio's sorted form parameters) instead of its bytes.
    signed_digest: Option<[u8; 32]>,
    /// How the scheme reads the event's type from the body it verified, when it encodes it.
    type_reader: Option<TypeReader>,
}

/// Reads an event's type from a verified body (Braintree's `<kind>`).
type TypeReader = fn(&[u8]) -> Option<String>;

impl<'r> Verified<'r> {
    pub fn body(&self) -> &'r [u8] {
        self.request.body
    }

    /// The sha256 (hex) of what the signature covers: the raw body's, or, where a scheme
    /// signs a canonical reading of it, that reading's — so every body that verifies as
    /// the same signed content is one event with one fingerprint.
    pub fn content_digest(&self) -> String {
        match self.signed_digest {
            Some(digest) => hex::encode(digest),
            None => hex::encode(Sha256::digest(self.request.body)),
        }
    }

    /// One item of this verified request's batch, as a verified request of its own: its
    /// bytes within the body, the same headers, and the digest of what its signature
    /// covers.
    fn item(&self, bytes: &'r [u8], digest: [u8; 32]) -> Verified<'r> {
        Unverified::new(self.request.headers, bytes).into_verified_as(digest)
    }

    /// One item of a batch signed as a whole (SendGrid's array), as a verified request of
    /// its own: its bytes within the body, the same headers, and as its digest that of its
    /// bytes — what the request's signature vouches for it.
    fn item_as_sent(&self, bytes: &'r [u8]) -> Verified<'r> {
        Unverified::new(self.request.headers, bytes).into_verified()
    }

    /// A header's value as text, when present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&'r str> {
        self.request
            .header(name)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
    }
}

/// Only a verified request is read for its identity.
impl RequestParts for Verified<'_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.request.header(name)
    }

    fn body(&self) -> &[u8] {
        Verified::body(self)
    }

    fn content_digest(&self) -> String {
        Verified::content_digest(self)
    }

    fn signed_type(&self) -> Option<String> {
        self.type_reader.and_then(|read| read(self.request.body))
    }
}

/// The items of a verified batch request.
#[derive(Debug, Default)]
pub struct Items<'r> {
    /// Each item that verified, as a request of its own (its bytes, the request's headers,
    /// the digest of what identifies it), and the bytes to store and deliver for it when
    /// they are not its bytes as received (Graph's: its credential redacted).
    pub verified: Vec<(Verified<'r>, Option<Vec<u8>>)>,
    /// Why each other item was dropped, for a provider whose rule drops an item it cannot
    /// authenticate rather than refuse the request (Graph); always empty for the others.
    pub refused: Vec<SignatureError>,
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    Missing(String),
    #[error("the {header} header is malformed: {detail}")]
    Malformed { header: String, detail: String },
    #[error("no signature in {0} matches any secret of this source")]
    Mismatch(String),
    /// The signature holds, but what it vouches for is not what this source takes (an SNS
    /// message of another topic).
    #[error("{0}")]
    NotAccepted(String),
    #[error("the signed timestamp {signed_at} is {skew_secs}s away from now, over the tolerance of {tolerance_secs}s")]
    OutOfTolerance {
        signed_at: i64,
        skew_secs: i64,
        tolerance_secs: u64,
    },
}

impl SignatureError {
    fn malformed(header: &str, detail: impl Into<String>) -> Self {
        Self::Malformed {
            header: header.to_owned(),
            detail: detail.into(),
        }
    }
}

/// An event to sign for `inlet sign` / `inlet send` (schemes that carry the id or type in
/// headers need them).
#[derive(Debug, Clone)]
pub struct EventToSign {
    pub id: String,
    pub event_type: String,
}

/// One provider's signing scheme: the common path every provider takes — verify a
/// request, say what the scheme signs and which secrets it takes — and the capabilities
/// the few providers that need one add explicitly: requests that carry several events
/// ([`Batched`]), a certificate the request names ([`Certified`]). Every scheme also signs
/// ([`Signer`]), for `inlet sign`, `inlet send` and the tests.
pub trait Scheme: Signer + Sync + std::fmt::Debug {
    /// Checks the signature over the raw bytes against every secret, then the timestamp
    /// tolerance (at `keys.now`) where the scheme signs one. A pure function of its
    /// arguments.
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r>;

    /// Whether the scheme signs a timestamp (and so has a tolerance).
    fn signs_timestamp(&self) -> bool;

    /// Headers the signature covers besides the body (Standard Webhooks' `webhook-id`).
    fn signed_headers(&self) -> &'static [&'static str] {
        &[]
    }

    /// Refuses a secret this scheme cannot use or that is too weak to trust (checked
    /// wherever a configuration is validated: startup, `check-config`, reload). By
    /// default, the floor for a secret the user chooses.
    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        crate::secret::MinLength::CHOSEN.check(secret)
    }

    /// The batch capability, for a scheme whose requests carry several events. `None`: a
    /// request is one event.
    fn batch(&self) -> Option<&dyn Batched> {
        None
    }

    /// The certificate capability, for a scheme that verifies with a certificate the
    /// request names. `None`: the keys are the source's.
    fn certified(&self) -> Option<&dyn Certified> {
        None
    }
}

/// How a scheme signs what a provider would send (`inlet sign`, `inlet send`).
pub trait Signer {
    /// The headers the provider would send for `body`, signed with `secret` at `now`. By
    /// default none: a scheme that signs inside the body ([`Signer::sign_body`]) sends no
    /// signature header.
    fn sign(&self, _signing: ToSign<'_>) -> SignedHeaders {
        Vec::new()
    }

    /// For a scheme that signs inside the body (Adyen): `body` signed with `secret`.
    /// `None`: the scheme signs in headers ([`Signer::sign`]).
    fn sign_body(&self, _body: &[u8], _secret: &Secret) -> Option<Result<Vec<u8>, String>> {
        None
    }

    /// Whether a source's configured `secret` can sign (`inlet sign`): a public key only
    /// verifies, and signing then needs the private key.
    fn signs_with(&self, _secret: &Secret) -> bool {
        true
    }

    /// Refuses a private key given to `inlet sign` / `inlet send` that this scheme cannot
    /// sign with; schemes with shared secrets sign with the source's own.
    fn check_private_key(&self, _key: &Secret) -> Result<(), String> {
        Err("this scheme signs with the source's shared secret, not a private key".to_owned())
    }
}

/// A scheme whose requests carry several events (Adyen's `notificationItems`, Microsoft
/// Graph's `value`, SendGrid's and HubSpot's arrays).
pub trait Batched {
    /// The items of a request it verified (`None`: this request is not a batch after all).
    fn items<'r>(
        &self,
        request: &Verified<'r>,
        keys: Keys<'_>,
    ) -> Option<Result<Items<'r>, SignatureError>>;
}

/// A scheme that verifies with a certificate the request names (SNS's `SigningCertURL`)
/// and confirms subscriptions by a visit.
pub trait Certified {
    /// Where to fetch the certificate, checked against the source's hosts, once what can
    /// be checked without it holds (`keys`' tolerance at `keys.now`). Its PEM is then the
    /// one key the request is verified with. `None`: the keys are the source's.
    fn certificate(
        &self,
        request: &Unverified<'_>,
        keys: Keys<'_>,
    ) -> Option<Result<Fetch, SignatureError>>;

    /// For a verified request that asks the endpoint to confirm a subscription by visiting
    /// a URL (SNS's `SubscriptionConfirmation`): that URL, checked against the source's
    /// hosts. `None`: nothing to visit.
    fn subscription(&self, request: &Verified<'_>) -> Option<Result<Fetch, SignatureError>>;
}

/// HMAC-SHA256 of the concatenated parts.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    mac_of::<Hmac<Sha256>>(key, parts)
}

/// Whether any of `tags` is the HMAC-SHA256 of the parts under any of `keys`. The MAC
/// over the parts is computed once per key, not once per (key, tag): each further tag
/// costs one constant-time comparison, however long the body.
fn any_matches<'k>(
    keys: impl IntoIterator<Item = &'k [u8]>,
    parts: &[&[u8]],
    tags: &[Vec<u8>],
) -> bool {
    keys.into_iter().any(|key| {
        let mac = mac_over::<Hmac<Sha256>>(key, parts);
        tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
    })
}

/// Refuses a request unless one of `tags` is the HMAC-SHA256 of the parts keyed with the
/// bytes of one of the source's secrets; `header` names the signature in the refusal.
fn check_hmac(
    keys: Keys<'_>,
    parts: &[&[u8]],
    tags: &[Vec<u8>],
    header: &str,
) -> Result<(), SignatureError> {
    let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
    match any_matches(secrets, parts, tags) {
        true => Ok(()),
        false => Err(SignatureError::Mismatch(header.to_owned())),
    }
}

/// The HMAC-SHA256 of the parts keyed with the secret's bytes, as a sender signs them.
fn secret_hmac(secret: &Secret, parts: &[&[u8]]) -> Vec<u8> {
    hmac_sha256(secret.expose().as_bytes(), parts)
}

/// The `Content-Type` header of a signed JSON request (`inlet sign`).
fn json_content_type() -> (String, String) {
    ("Content-Type".to_owned(), "application/json".to_owned())
}

/// The headers a scheme sends: `named`, then the JSON content type.
fn with_json_type<'a>(named: impl IntoIterator<Item = (&'a str, String)>) -> Vec<(String, String)> {
    let named = named
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value));
    named.chain([json_content_type()]).collect()
}

/// The most signatures one header may carry (Stripe's and Paddle's `v1=`/`h1=` list,
/// Standard Webhooks' `webhook-signature` entries). A sender signs once per active secret
/// — one, two while a secret rotates, a handful at most — so more is refused before any is
/// checked: the work per request stays bounded whatever the header's length.
pub const MAX_SIGNATURES: usize = 8;

/// The refusal of a header listing more than [`MAX_SIGNATURES`] signatures.
fn too_many_signatures(header: &str) -> SignatureError {
    SignatureError::malformed(
        header,
        format!("it lists more than {MAX_SIGNATURES} signatures, the most one request may carry"),
    )
}

/// The MAC `M` (an HMAC over some hash) of the concatenated parts.
fn mac_of<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    mac_over::<M>(key, parts).finalize().into_bytes().to_vec()
}

/// Whether `tag` is the MAC `M` of the parts, compared in constant time.
fn mac_matches<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    mac_over::<M>(key, parts).verify_slice(tag).is_ok()
}

fn mac_over<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> M {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <M as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in parts {
        mac.update(part);
    }
    mac
}

/// The MAC in `header`: base64 of `len` bytes (`what` names it in the refusal).
fn base64_tag(
    request: &Unverified<'_>,
    header: &str,
    len: usize,
    what: &str,
) -> Result<Vec<u8>, SignatureError> {
    use base64::Engine;
    let value = request.required(header)?;
    base64::engine::general_purpose::STANDARD
        .decode(value.trim_ascii())
        .ok()
        .filter(|tag| tag.len() == len)
        .ok_or_else(|| SignatureError::malformed(header, format!("not a base64 {what}")))
}

/// The events of a batch sent as a JSON array (SendGrid's, HubSpot's): one or more
/// objects, at most `max`, each as its bytes within the body; `provider` names them in a
/// refusal.
fn json_objects<'b>(
    body: &'b [u8],
    provider: &str,
    max: usize,
) -> Result<Vec<&'b [u8]>, SignatureError> {
    use serde_json::value::RawValue;
    let malformed = |detail: String| SignatureError::malformed("body", detail);
    let list: Vec<&RawValue> = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("not a JSON array of {provider} events: {e}")))?;
    if list.is_empty() {
        return Err(malformed(
            "an empty array: a batch carries one event or more".into(),
        ));
    }
    if list.len() > max {
        return Err(malformed(format!(
            "{} events, over the {max} one request may carry",
            list.len()
        )));
    }
    (list.into_iter().enumerate())
        .map(|(n, raw)| match raw.get().trim_start().starts_with('{') {
            true => Ok(raw.get().as_bytes()),
            false => Err(malformed(format!("event {n} is not an object"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_tag_matches_under_any_key() {
        let tag = hmac_sha256(b"key", &[b"a", b"b"]);
        let matches =
            |keys: &[&[u8]], tags: &[Vec<u8>]| any_matches(keys.iter().copied(), &[b"ab"], tags);
        assert!(matches(&[b"key"], std::slice::from_ref(&tag)));
        assert!(matches(&[b"old", b"key"], &[vec![0; 32], tag.clone()]));
        assert!(!matches(&[b"key"], &[tag[..31].to_vec()]));
        assert!(!matches(&[b"kez"], std::slice::from_ref(&tag)));
        assert!(!matches(&[], &[tag]));
    }
}
