//! Braintree: a form POST (`application/x-www-form-urlencoded`) of two fields,
//! `bt_payload` — the notification's XML in base64, with line breaks as Ruby's encoder
//! writes them — and `bt_signature` — `public_key|hex(HMAC-SHA1(bt_payload))`, keyed with
//! the raw SHA-1 of the private key, several such pairs joined with `&`. No time is signed.
//!
//! It mirrors braintree-python's `WebhookNotificationGateway.parse` (4.48.0), the
//! reference, quirks included: a payload with any character outside `[A-Za-z0-9+=/\n]` is
//! refused; the *first* pair naming the source's public key is the one compared (a right
//! signature in a later pair of the same key does not count); the signature may cover the
//! payload or the payload followed by `\n`; the hex is compared as text, so uppercase is
//! refused. A source's secret is its API key pair, written `public_key:private_key`; each
//! pair of a rotation is tried with its own public key.
//!
//! The signature covers `bt_payload`, not the body's bytes: the event is keyed on what was
//! signed (the payload's sha256, [`Verified::content_digest`]), so the same notification
//! form-encoded differently is one event.

use super::Signer;
use super::{mac_matches, too_many_signatures, Keys, Scheme, SignatureError, Verdict};
use super::{Unverified, MAX_SIGNATURES};
use crate::secret::Secret;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::Hmac;
use sha1::Sha1;
use sha2::{Digest, Sha256};

/// The form field holding the signature pairs.
pub const SIGNATURE_FIELD: &str = "bt_signature";
/// The form field holding the base64 notification.
pub const PAYLOAD_FIELD: &str = "bt_payload";
/// The longest `<kind>` read from a notification: Braintree's are short snake_case words.
const MAX_KIND: usize = 128;
/// The line length of `inlet sign`'s payload: Python's `encodebytes`, which the SDK's
/// testing gateway uses, breaks after 76 characters.
const LINE: usize = 76;

/// Braintree's scheme: the sources' secrets are API key pairs.
#[derive(Debug, Clone, Copy)]
pub struct Braintree;

pub static BRAINTREE: Braintree = Braintree;

/// The two fields of a Braintree form, decoded (the first of each name).
struct Fields {
    signature: String,
    payload: String,
}

fn fields(body: &[u8]) -> Result<Fields, SignatureError> {
    let (mut signature, mut payload) = (None, None);
    for (name, value) in form_urlencoded::parse(body) {
        match name.as_ref() {
            SIGNATURE_FIELD if signature.is_none() => signature = Some(value.into_owned()),
            PAYLOAD_FIELD if payload.is_none() => payload = Some(value.into_owned()),
            _ => {}
        }
    }
    let missing = |field: &str| SignatureError::Missing(format!("{field} form field"));
    Ok(Fields {
        signature: signature.ok_or_else(|| missing(SIGNATURE_FIELD))?,
        payload: payload.ok_or_else(|| missing(PAYLOAD_FIELD))?,
    })
}

/// A secret as `(public_key, private_key)`.
fn key_pair(secret: &Secret) -> Option<(&str, &str)> {
    let (public, private) = secret.expose().split_once(':')?;
    let fits = |key: &str| !key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic());
    let public_ok = fits(public) && !public.contains(['|', '&', ':']);
    (public_ok && fits(private)).then_some((public, private))
}

/// The signature pairs of `bt_signature`, as `(public_key, hex)`: the parts joined with
/// `&` that hold a `|` (the others are ignored, as the library ignores them).
fn pairs(signature: &str) -> Result<Vec<(&str, &str)>, SignatureError> {
    let mut pairs = Vec::new();
    for part in signature.split('&').filter(|part| part.contains('|')) {
        if pairs.len() == MAX_SIGNATURES {
            return Err(too_many_signatures(SIGNATURE_FIELD));
        }
        let mut pieces = part.split('|');
        match (pieces.next(), pieces.next(), pieces.next()) {
            (Some(public), Some(tag), None) => pairs.push((public, tag)),
            _ => {
                return Err(SignatureError::malformed(
                    SIGNATURE_FIELD,
                    "a pair holds more than one |",
                ))
            }
        }
    }
    Ok(pairs)
}

/// The HMAC key for a private key: its raw SHA-1.
fn mac_key(private: &str) -> [u8; 20] {
    Sha1::digest(private.as_bytes()).into()
}

/// Whether `tag` (40 lowercase hex digits) is the HMAC of the payload, or of the payload
/// and a line break, under `private`.
fn tag_matches(private: &str, payload: &[u8], tag: &str) -> bool {
    let lowercase = tag.len() == 40 && tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let Some(tag) = lowercase.then(|| hex::decode(tag).ok()).flatten() else {
        return false;
    };
    let key = mac_key(private);
    [&[payload][..], &[payload, b"\n"][..]]
        .iter()
        .any(|parts| mac_matches::<Hmac<Sha1>>(&key, parts, &tag))
}

/// Whether a payload holds only what the library lets through: base64 and line breaks.
fn in_alphabet(payload: &str) -> bool {
    payload
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'=' | b'/' | b'\n'))
}

/// The `<kind>` of a verified notification: its payload decoded, the text of the first
/// `<kind>` element (bounded, plain text only); `None` when there is none.
pub fn kind(body: &[u8]) -> Option<String> {
    let fields = fields(body).ok()?;
    let compact: Vec<u8> = fields.payload.bytes().filter(|b| *b != b'\n').collect();
    let xml = BASE64.decode(compact).ok()?;
    let start = find(&xml, b"<kind>")? + b"<kind>".len();
    let end = start + find(xml.get(start..)?, b"</kind>")?;
    let text = std::str::from_utf8(xml.get(start..end)?).ok()?.trim();
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    (!text.is_empty() && text.len() <= MAX_KIND && text.chars().all(plain)).then(|| text.to_owned())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// `payload` as Braintree sends it: base64 with a line break after every 76 characters
/// and at the end (Python's `encodebytes`, which the SDK's testing gateway uses).
fn encode_lines(xml: &[u8]) -> String {
    let encoded = BASE64.encode(xml);
    let mut lines = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
    for chunk in encoded.as_bytes().chunks(LINE) {
        lines.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        lines.push('\n');
    }
    lines
}

impl Scheme for Braintree {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let fields = fields(request.body)?;
        if !in_alphabet(&fields.payload) {
            return Err(SignatureError::malformed(
                PAYLOAD_FIELD,
                "it holds a character outside base64 and line breaks",
            ));
        }
        let pairs = pairs(&fields.signature)?;
        let payload = fields.payload.as_bytes();
        let verified = keys
            .secrets
            .iter()
            .filter_map(key_pair)
            .any(|(public, private)| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == public)
                    .is_some_and(|(_, tag)| tag_matches(private, payload, tag))
            });
        if !verified {
            return Err(SignatureError::Mismatch(SIGNATURE_FIELD.to_owned()));
        }
        Ok(request.into_verified_reading(Sha256::digest(payload).into(), kind))
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        let rule = "a Braintree API key pair, written public_key:private_key (the private \
                    key at least 16 characters)";
        match key_pair(secret) {
            Some((_, private)) if private.len() >= crate::secret::MIN_SECRET_BYTES => Ok(()),
            _ => Err(format!("the secret must be {rule}")),
        }
    }
}

impl Signer for Braintree {
    /// The form Braintree would POST: `body` is the notification's XML (or a Braintree
    /// form, whose `bt_payload` is signed again), signed with the source's key pair.
    fn sign_body(&self, body: &[u8], secret: &Secret) -> Option<Result<Vec<u8>, String>> {
        let Some((public, private)) = key_pair(secret) else {
            return Some(Err(
                "the secret is not a public_key:private_key pair".to_owned()
            ));
        };
        let payload = match fields(body) {
            Ok(fields) => fields.payload,
            Err(_) => encode_lines(body),
        };
        let key = mac_key(private);
        let tag = hex::encode(super::mac_of::<Hmac<Sha1>>(&key, &[payload.as_bytes()]));
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair(SIGNATURE_FIELD, &format!("{public}|{tag}"))
            .append_pair(PAYLOAD_FIELD, &payload)
            .finish();
        Some(Ok(form.into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(kind: &str) -> Vec<u8> {
        let xml = format!("<notification><kind>{kind}</kind><subject/></notification>");
        let secret = Secret::new("pk:0123456789abcdef0123456789abcdef");
        BRAINTREE
            .sign_body(xml.as_bytes(), &secret)
            .and_then(Result::ok)
            .expect("signed")
    }

    #[test]
    fn the_kind_is_read_only_when_plain_and_bounded() {
        assert_eq!(kind(&notification("check")).as_deref(), Some("check"));
        assert_eq!(
            kind(&notification("dispute_opened")).as_deref(),
            Some("dispute_opened")
        );
        assert_eq!(kind(&notification("a<b")), None);
        assert_eq!(kind(&notification(&"k".repeat(MAX_KIND + 1))), None);
        assert_eq!(kind(&notification("")), None);
        assert_eq!(kind(b"bt_payload=%%%"), None);
    }

    #[test]
    fn secrets_are_key_pairs() {
        let check = |s: &str| BRAINTREE.check_secret(&Secret::new(s)).is_ok();
        assert!(check("dgq6r8pwk3s7xv2m:4f0c2b7e9a1d83c56e0b9f7a2d4c8e15"));
        assert!(!check("4f0c2b7e9a1d83c56e0b9f7a2d4c8e15"));
        assert!(!check(":4f0c2b7e9a1d83c56e0b9f7a2d4c8e15"));
        assert!(!check("pk|x:4f0c2b7e9a1d83c56e0b9f7a2d4c8e15"));
        assert!(!check("pk:short"));
    }

    #[test]
    fn pairs_are_bounded_and_well_formed() {
        assert_eq!(pairs("a|b&c&d|e").ok(), Some(vec![("a", "b"), ("d", "e")]));
        assert!(pairs("a|b|c").is_err());
        assert!(pairs(&["a|b"; MAX_SIGNATURES + 1].join("&")).is_err());
    }
}
