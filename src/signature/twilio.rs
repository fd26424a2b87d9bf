//! Twilio: `X-Twilio-Signature: <base64>` of an HMAC over the URL Twilio called followed,
//! for `application/x-www-form-urlencoded` bodies, by the form parameters sorted by name,
//! each name immediately followed by its value — or, for other (JSON) bodies, over the URL
//! alone, which then carries `bodySHA256`, the hex sha256 of the raw body. No timestamp is
//! signed.
//!
//! It mirrors twilio-python's `RequestValidator` (9.13.0), Twilio's reference, quirks
//! included: a repeated name contributes each of its *distinct* values, sorted; the URL is
//! tried as written and with its port toggled (the library: "sig generation on back end is
//! inconsistent"); the key is the Auth Token with HMAC-SHA1, or a SharedKey with
//! HMAC-SHA256 when `X-Twilio-Webhooks-Signature-Settings` names `algorithm=HMAC_SHA256`.
//!
//! The URL is the one Twilio saw — behind a proxy not the one Inlet sees — so each source
//! states it (`public_url`). For JSON bodies Inlet appends `bodySHA256` of the body it
//! received to that URL, as Twilio does, so a body that does not match its hash does not
//! match the signature.
//!
//! The signature covers the decoded parameters, not the raw bytes: a body re-encoded
//! (`+` for `%20`, parameters reordered, a trailing `&`), or even re-split
//! (`MessageStatu=sdelivered` reads as the same concatenation as
//! `MessageStatus=delivered`), verifies too. So a form's event is keyed on what was signed —
//! the sha256 of the sorted parameters ([`Verified::content_digest`]) — and every variant
//! that verifies is one event with one fingerprint; see the provider profile for its fact.

use super::Signer;
use super::Unverified;
use super::{
    base64_tag, mac_matches, mac_of, Keys, PublicUrl, Scheme, SignatureError, SignedHeaders,
    ToSign, Verdict,
};
use crate::secret::{MinLength, Secret};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::Hmac;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

const HEADER: &str = "x-twilio-signature";
const SETTINGS_HEADER: &str = "x-twilio-webhooks-signature-settings";
const FORM: &str = "application/x-www-form-urlencoded";

/// A Twilio webhook's scheme: the URL Twilio calls (and signs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Twilio {
    url: PublicUrl,
}

impl Twilio {
    pub fn new(url: PublicUrl) -> Self {
        Self { url }
    }

    /// The URL Twilio signs for this body (with `bodySHA256` unless it is a form) and the
    /// sorted parameters that follow it (none for JSON).
    fn signed_parts(&self, body: &[u8], form: bool) -> (String, String) {
        if form {
            (self.url.as_str().to_owned(), sorted_params(body))
        } else {
            let digest = hex::encode(Sha256::digest(body));
            (with_body_hash(self.url.as_str(), &digest), String::new())
        }
    }
}

/// The hash the HMAC is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    /// The Auth Token signature (the default).
    HmacSha1,
    /// A SharedKey signature, named in the settings header.
    HmacSha256,
}

impl Algorithm {
    /// As twilio-python's `get_signature_algorithm`: the first non-empty `algorithm=` of
    /// the comma-separated settings header, HMAC_SHA1 without one; unknown ones refused.
    fn of(request: &Unverified<'_>) -> Result<Self, SignatureError> {
        let Some(raw) = request.header(SETTINGS_HEADER) else {
            return Ok(Self::HmacSha1);
        };
        let text = std::str::from_utf8(raw)
            .map_err(|_| SignatureError::malformed(SETTINGS_HEADER, "not UTF-8"))?;
        let named = text.split(',').find_map(|part| {
            let (name, value) = part.split_once('=')?;
            (name.trim() == "algorithm" && !value.trim().is_empty()).then(|| value.trim())
        });
        match named.map(str::to_ascii_uppercase).as_deref() {
            None | Some("HMAC_SHA1") => Ok(Self::HmacSha1),
            Some("HMAC_SHA256") => Ok(Self::HmacSha256),
            Some(other) => Err(SignatureError::malformed(
                SETTINGS_HEADER,
                format!("unsupported algorithm {other} (HMAC_SHA1 or HMAC_SHA256)"),
            )),
        }
    }

    fn tag_len(self) -> usize {
        match self {
            Self::HmacSha1 => 20,
            Self::HmacSha256 => 32,
        }
    }

    fn matches(self, key: &[u8], signed: &[&[u8]], tag: &[u8]) -> bool {
        match self {
            Self::HmacSha1 => mac_matches::<Hmac<Sha1>>(key, signed, tag),
            Self::HmacSha256 => mac_matches::<Hmac<Sha256>>(key, signed, tag),
        }
    }
}

/// The form parameters as Twilio signs them: sorted by name (code point order), each name
/// followed by its value; a repeated name by each of its distinct values, sorted.
fn sorted_params(body: &[u8]) -> String {
    let mut params: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, value) in form_urlencoded::parse(body) {
        params
            .entry(name.into_owned())
            .or_default()
            .insert(value.into_owned());
    }
    let mut signed = String::new();
    for (name, values) in &params {
        for value in values {
            signed.push_str(name);
            signed.push_str(value);
        }
    }
    signed
}

/// `url` with `bodySHA256=<digest>` appended to its query (before any fragment).
fn with_body_hash(url: &str, digest: &str) -> String {
    let (base, fragment) = match url.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (url, None),
    };
    let separator = match base.contains('?') {
        false => "?",
        true if base.ends_with(['?', '&']) => "",
        true => "&",
    };
    let mut with_hash = format!("{base}{separator}bodySHA256={digest}");
    if let Some(fragment) = fragment {
        with_hash.push('#');
        with_hash.push_str(fragment);
    }
    with_hash
}

/// The URL without and with its port, as twilio-python's `remove_port` / `add_port`: an
/// explicit port is dropped (the host is what precedes the first ':'); a missing one
/// becomes 443 for https, else 80.
fn without_and_with_port(url: &str) -> [String; 2] {
    let Some((scheme, rest)) = url.split_once("://") else {
        return [url.to_owned(), url.to_owned()];
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (netloc, tail) = rest.split_at(end);
    let host_and_port = netloc.rsplit_once('@').map_or(netloc, |(_, host)| host);
    let has_port = host_and_port
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    if has_port {
        let host = netloc.split(':').next().unwrap_or(netloc);
        [format!("{scheme}://{host}{tail}"), url.to_owned()]
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        [url.to_owned(), format!("{scheme}://{netloc}:{port}{tail}")]
    }
}

/// Whether the request says its body is a form (the content type is not signed; a wrong
/// one only makes the signature fail).
fn is_form(request: &Unverified<'_>) -> bool {
    request
        .header("content-type")
        .is_some_and(crate::identity::is_form_type)
}

impl Scheme for Twilio {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let algorithm = Algorithm::of(&request)?;
        let tag = base64_tag(&request, HEADER, algorithm.tag_len(), "HMAC")?;
        let form = is_form(&request);
        let (url, params) = self.signed_parts(request.body, form);
        let urls = without_and_with_port(&url);
        let matched = keys.secrets.iter().any(|secret| {
            urls.iter().any(|url| {
                let signed: [&[u8]; 2] = [url.as_bytes(), params.as_bytes()];
                algorithm.matches(secret.expose().as_bytes(), &signed, &tag)
            })
        });
        if !matched {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
        }
        // A form is signed as its sorted parameters, not its bytes: every body that reads
        // as the same parameters (reordered, re-encoded, `Statu=sdelivered` for
        // `Status=delivered`) verifies alike, so it is one event, keyed on what was signed.
        Ok(match form {
            true => request.into_verified_as(Sha256::digest(params.as_bytes()).into()),
            false => request.into_verified(),
        })
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::issued(
            32,
            "a Twilio Auth Token is 32 characters, as Twilio issues it",
        )
        .check(secret)
    }
}

impl Signer for Twilio {
    /// Signs as Twilio does with an Auth Token: a JSON body with `bodySHA256`, anything
    /// else as a form.
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign { body, secret, .. } = signing;
        let form = serde_json::from_slice::<serde_json::Value>(body).is_err();
        let (url, params) = self.signed_parts(body, form);
        let tag = mac_of::<Hmac<Sha1>>(
            secret.expose().as_bytes(),
            &[url.as_bytes(), params.as_bytes()],
        );
        let content_type = if form { FORM } else { "application/json" };
        vec![
            (HEADER.to_owned(), BASE64.encode(tag)),
            ("Content-Type".to_owned(), content_type.to_owned()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_sorted_and_repeated_values_deduplicated() {
        assert_eq!(
            sorted_params(b"To=%2B1&From=a+b&Media=2&Media=1&Media=2"),
            "Froma bMedia1Media2To+1"
        );
        assert_eq!(sorted_params(b""), "");
    }

    #[test]
    fn the_port_is_toggled_as_the_library_does() {
        assert_eq!(
            without_and_with_port("https://example.com/sms?x=1"),
            [
                "https://example.com/sms?x=1",
                "https://example.com:443/sms?x=1"
            ]
        );
        assert_eq!(
            without_and_with_port("http://example.com:8080"),
            ["http://example.com", "http://example.com:8080"]
        );
        assert_eq!(
            without_and_with_port("http://example.com#rc=2"),
            ["http://example.com#rc=2", "http://example.com:80#rc=2"]
        );
    }

    #[test]
    fn the_body_hash_joins_the_query() {
        assert_eq!(
            with_body_hash("https://h/p", "ab"),
            "https://h/p?bodySHA256=ab"
        );
        assert_eq!(
            with_body_hash("https://h/p?x=1#rc=2", "ab"),
            "https://h/p?x=1&bodySHA256=ab#rc=2"
        );
    }
}
