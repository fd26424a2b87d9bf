//! The fuzzer's oracle: whether a request carries a matching signature, decided from the
//! scheme rules in the book (docs/src/providers/) with `hmac`, `sha1`, `sha2` and
//! `ed25519-dalek` directly — never with Inlet's verification code.
//!
//! Three answers. `Valid`: the canonical reading of the request (each header once, in
//! the documented format) matches an active secret, within the tolerance. `Invalid`: no
//! reading at all matches — however leniently the headers are read (any value of a
//! repeated header, any hex or base64 run of the rule's tag length (32 bytes; Twilio's
//! HMAC-SHA1 20; an Ed25519 signature 64, for Discord in hex) as the tag, any number as the
//! timestamp, trimmed or not), no tag in the request is the HMAC of what it claims to
//! sign under an active secret, within the tolerance. `Either`: only a non-canonical
//! reading matches (a repeated header, whitespace, upper-case hex, a timestamp a second
//! from the edge…): how strict to be there is Inlet's choice, but nothing else is.
//!
//! Twilio signs form parameters, not bytes, so its readings are of the body too: the
//! canonical one has no repeated parameter name, every `%` escape valid and UTF-8
//! throughout; the lenient ones take any plausible order and de-duplication of a repeated
//! name's values, the bytes as decoded or as lossy UTF-8, either content type, and
//! HMAC-SHA1 or (when the settings header names it anywhere) HMAC-SHA256.
//!
//! Ed25519 (Discord, Standard Webhooks `v1a`) is checked against the public keys with
//! `verify_strict` for the canonical reading and the permissive `verify` for the lenient
//! ones. Standard Webhooks entries keep their kind however leniently read: a run after a
//! `v1` label is only ever an HMAC tag under a `whsec_` secret, a run after `v1a` only an
//! Ed25519 signature under a `whpk_` key (a run under no label may be either); a
//! cross-kind match is no match.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use ed25519_dalek::{Signature, Verifier, VerifyingKey};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Headers as sent: names and values as bytes, in order, repeats allowed.
pub type Headers = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Valid,
    Invalid,
    Either,
}

#[derive(Debug, Clone)]
pub struct Judgement {
    pub verdict: Verdict,
    /// For Standard Webhooks, the signed `webhook-id`s of the readings that match: an
    /// accepted request must be stored under one of them.
    pub signed_ids: HashSet<Vec<u8>>,
}

/// The scheme rules, as the book states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]` over `"{t}.{body}"`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>` over the body.
    Github,
    /// `X-Shopify-Hmac-Sha256: <base64>` over the body.
    Shopify,
    /// `X-Slack-Signature: v0=<hex>` over `"v0:{ts}:{body}"`, `X-Slack-Request-Timestamp`.
    Slack,
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> …` over
    /// `"{id}.{ts}.{body}"` (or the `svix-` names); key = base64 after `whsec_`.
    Standard,
    /// The test's generic hmac source: `X-Acme-Signature: sha256=<hex>` over
    /// `"{ts}.{body}"`, `X-Acme-Timestamp`.
    Acme,
    /// `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=…]` over `"{ts}:{body}"`.
    Paddle,
    /// `x-zm-signature: v0=<hex>` over `"v0:{ts}:{body}"`, `x-zm-request-timestamp`.
    Zoom,
    /// `x-square-hmacsha256-signature: <base64>` over `"{public_url}{body}"`.
    Square,
    /// `Authorization: Basic <base64 of user:password>`, equal to a secret: no signature.
    Basic,
    /// The test's `header_token` source: `X-Webhook-Token` equal to a secret.
    Token,
    /// `X-Twilio-Signature: <base64>` of HMAC-SHA1 (key = the Auth Token) over
    /// `public_url` followed, for form bodies, by the parameters sorted by name, each name
    /// followed by its value; for JSON bodies over `public_url` with
    /// `bodySHA256=<hex sha256 of the body>` appended to its query. The URL as written or
    /// with its port toggled. With `X-Twilio-Webhooks-Signature-Settings:
    /// …,algorithm=HMAC_SHA256`, HMAC-SHA256 with the secret (a SharedKey) instead.
    Twilio,
    /// `X-Signature-Ed25519: <hex>`, the Ed25519 signature over
    /// `"{X-Signature-Timestamp}{body}"` under the application's public key (hex).
    Discord,
    /// `WorkOS-Signature: t=<Unix milliseconds>, v1=<hex>` over `"{t}.{body}"`.
    Workos,
    /// `Mux-Signature: t=<unix>,v1=<hex>[,v1=…]` over `"{t}.{body}"`.
    Mux,
    /// `X-PagerDuty-Signature: v1=<hex>[,v1=…]` over the body; no timestamp.
    Pagerduty,
    /// `Linear-Signature: <hex>` over the body; the time is the body's `webhookTimestamp`
    /// (a JSON integer, Unix milliseconds).
    Linear,
    /// `X-Zendesk-Webhook-Signature: <base64>` over `"{ts}{body}"`,
    /// `X-Zendesk-Webhook-Signature-Timestamp` an RFC 3339 date and time.
    Zendesk,
    /// In the body: each `notificationItems[].NotificationRequestItem` carries
    /// `additionalData.hmacSignature`, base64 HMAC-SHA256 (key = the hex-decoded secret)
    /// of eight of its fields joined by `:` ([`adyen_reading`]); every item must match.
    Adyen,
    /// In the body: each `value[]` notification's `clientState` equal to a secret (no
    /// signature); a request is taken when one notification matches, the others dropped.
    Graph,
    /// `X-Dropbox-Signature: <hex>` over the body; no timestamp.
    Dropbox,
    /// `X-Twilio-Email-Event-Webhook-Signature: <base64>`, an ASN.1 DER ECDSA P-256/SHA-256
    /// signature over `"{ts}{body}"` checked with the source's public keys (base64 of a
    /// P-256 SubjectPublicKeyInfo), `X-Twilio-Email-Event-Webhook-Timestamp`; the body a
    /// JSON array of events, each stored under its `sg_event_id` ([`OracleSource::judge_sendgrid`]).
    Sendgrid,
    /// `X-Hook-Signature: <hex>` over the body, keyed with the secret of the webhook's
    /// handshake (or a configured one); no timestamp.
    Asana,
    /// `X-HubSpot-Signature-v3: <base64>` over `"POST{public_url}{body}{ts}"`,
    /// `X-HubSpot-Request-Timestamp` in Unix milliseconds; the body a JSON array of
    /// events, each stored under the digest of its fields but `attemptNumber`
    /// ([`hubspot_event_ids`]).
    Hubspot,
    /// In the form body: `bt_signature` = `public_key|<hex>` pairs joined by `&`, the first
    /// pair naming the secret's public key compared: HMAC-SHA1 (key = SHA-1 of the private
    /// key) of `bt_payload` or of it and a line break; the payload only base64 and line
    /// breaks; the event the payload's sha256 ([`OracleSource::judge_braintree`]).
    Braintree,
    /// In the JSON body: `Signature` (base64), RSA PKCS#1 v1.5 with SHA-1
    /// (`SignatureVersion` 1) or SHA-256 (2) under the certificate served at
    /// `SigningCertURL`, over `"Name\nvalue\n"` of `Message`, `MessageId`, `Subject` (when a
    /// string), `Timestamp`, `TopicArn`, `Type`; the topic one of the source's, the time
    /// within the tolerance; the event its `MessageId` ([`OracleSource::judge_sns`]).
    Sns,
}

/// The header of the test's `header_token` source.
pub const TOKEN_HEADER: &str = "x-webhook-token";

/// Twilio's signature header, and the one naming a SharedKey signature's algorithm.
pub const TWILIO_SIGNATURE: &str = "x-twilio-signature";
pub const TWILIO_SETTINGS: &str = "x-twilio-webhooks-signature-settings";

/// Discord's signature and timestamp headers.
pub const DISCORD_SIGNATURE: &str = "x-signature-ed25519";
pub const DISCORD_TIMESTAMP: &str = "x-signature-timestamp";

/// An Ed25519 signature's length in bytes.
pub const ED25519_LEN: usize = 64;

/// HubSpot's headers.
pub const HUBSPOT_SIGNATURE: &str = "x-hubspot-signature-v3";
pub const HUBSPOT_TIMESTAMP: &str = "x-hubspot-request-timestamp";

/// SendGrid's headers.
pub const SENDGRID_SIGNATURE: &str = "x-twilio-email-event-webhook-signature";
pub const SENDGRID_TIMESTAMP: &str = "x-twilio-email-event-webhook-timestamp";

/// The DER of a P-256 SubjectPublicKeyInfo before its 65-byte point (RFC 5480).
const P256_SPKI_PREFIX: &str = "3059301306072a8648ce3d020106082a8648ce3d030107034200";

/// Whether `signature` (64 bytes) is `key`'s (32 bytes) over `message`: strictly (small
/// order keys and signature points refused, as RFC 8032 verifiers may) or permissively.
pub fn ed25519_verifies(key: &[u8], message: &[u8], signature: &[u8], strict: bool) -> bool {
    let (Ok(key), Ok(signature)) = (
        <&[u8; 32]>::try_from(key),
        <&[u8; ED25519_LEN]>::try_from(signature),
    ) else {
        return false;
    };
    let Ok(key) = VerifyingKey::from_bytes(key) else {
        return false;
    };
    let signature = Signature::from_bytes(signature);
    if strict {
        key.verify_strict(message, &signature).is_ok()
    } else {
        key.verify(message, &signature).is_ok()
    }
}

/// The content type whose body Twilio signs as parameters.
pub const FORM_TYPE: &[u8] = b"application/x-www-form-urlencoded";

/// Seconds either side of the tolerance edge where the server's clock and the oracle's
/// may disagree.
const EDGE: i64 = 2;

/// One source as the oracle knows it: its rule, the keys that must verify (active
/// secrets) and the tolerance.
#[derive(Debug, Clone)]
pub struct OracleSource {
    pub rule: Rule,
    pub active: Vec<Vec<u8>>,
    pub tolerance: i64,
    /// Ed25519 public keys (32 bytes) that must verify: Discord's, Standard's `whpk_`.
    pub public_keys: Vec<Vec<u8>>,
    /// Square's and Twilio's URL (`public_url`), signed before the body; empty otherwise.
    pub url: Vec<u8>,
    /// SNS: each URL that serves an active certificate, and its PEM.
    pub certificates: Vec<(Vec<u8>, Vec<u8>)>,
    /// SNS: the topics the source takes.
    pub topics: Vec<Vec<u8>>,
}

impl Rule {
    /// The HMAC key a secret string stands for.
    pub fn key(self, secret: &str) -> Vec<u8> {
        match self {
            Rule::Adyen => hex::decode(secret).expect("an Adyen key is hex"),
            Rule::Standard => STANDARD
                .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
                .expect("a Standard Webhooks secret is base64"),
            _ => secret.as_bytes().to_vec(),
        }
    }

    /// The Ed25519 public key a configured secret is, if it is one: Discord's hex key,
    /// Standard's base64 after `whpk_`.
    pub fn public_key(self, secret: &str) -> Option<Vec<u8>> {
        match self {
            Rule::Discord => Some(hex::decode(secret).expect("a Discord public key is hex")),
            Rule::Sendgrid => {
                let der = STANDARD.decode(secret).expect("a SendGrid key is base64");
                let prefix = hex::decode(P256_SPKI_PREFIX).expect("hex");
                Some(
                    der.strip_prefix(&prefix[..])
                        .expect("a P-256 SPKI")
                        .to_vec(),
                )
            }
            Rule::Standard => secret
                .strip_prefix("whpk_")
                .map(|encoded| STANDARD.decode(encoded).expect("a whpk_ key is base64")),
            _ => None,
        }
    }

    /// The oracle's source for these configured secrets: HMAC keys and public keys.
    pub fn source(self, secrets: &[&str], tolerance: i64, url: &[u8]) -> OracleSource {
        let (mut active, mut public_keys) = (Vec::new(), Vec::new());
        for secret in secrets {
            match self.public_key(secret) {
                Some(key) => public_keys.push(key),
                None => active.push(self.key(secret)),
            }
        }
        let url = match self {
            Rule::Hubspot => hubspot_url(url),
            _ => url.to_vec(),
        };
        OracleSource {
            rule: self,
            active,
            tolerance,
            public_keys,
            url,
            certificates: Vec::new(),
            topics: Vec::new(),
        }
    }

    /// (signature header, its prefix, hex or base64).
    fn signature_header(self) -> (&'static str, &'static str, bool) {
        match self {
            Rule::Stripe => ("stripe-signature", "", true),
            Rule::Github => ("x-hub-signature-256", "sha256=", true),
            Rule::Shopify => ("x-shopify-hmac-sha256", "", false),
            Rule::Slack => ("x-slack-signature", "v0=", true),
            Rule::Standard => ("webhook-signature", "", false),
            Rule::Acme => ("x-acme-signature", "sha256=", true),
            Rule::Paddle => ("paddle-signature", "", true),
            Rule::Zoom => ("x-zm-signature", "v0=", true),
            Rule::Square => ("x-square-hmacsha256-signature", "", false),
            Rule::Twilio => (TWILIO_SIGNATURE, "", false),
            Rule::Basic => ("authorization", "Basic ", false),
            Rule::Token => (TOKEN_HEADER, "", false),
            Rule::Discord => (DISCORD_SIGNATURE, "", true),
            Rule::Workos => ("workos-signature", "", true),
            Rule::Mux => ("mux-signature", "", true),
            Rule::Pagerduty => ("x-pagerduty-signature", "", true),
            Rule::Linear => ("linear-signature", "", true),
            Rule::Zendesk => ("x-zendesk-webhook-signature", "", false),
            // No header: judged apart ([`OracleSource::judge_adyen`]).
            Rule::Adyen | Rule::Graph => ("", "", false),
            Rule::Dropbox => ("x-dropbox-signature", "", true),
            Rule::Sendgrid => (SENDGRID_SIGNATURE, "", false),
            Rule::Asana => ("x-hook-signature", "", true),
            Rule::Hubspot => (HUBSPOT_SIGNATURE, "", false),
            // No header: judged apart.
            Rule::Braintree | Rule::Sns => ("", "", false),
        }
    }

    /// Whether the rule is a shared credential compared as is, not an HMAC.
    pub fn is_token(self) -> bool {
        matches!(self, Rule::Basic | Rule::Token)
    }

    /// Stripe's, Paddle's, WorkOS's, Mux's and PagerDuty's one header: (timestamp key —
    /// empty for PagerDuty, which signs none —, signature key, separator).
    pub fn timestamped_items(self) -> Option<(&'static [u8], &'static [u8], u8)> {
        match self {
            Rule::Pagerduty => Some((b"", b"v1", b',')),
            Rule::Stripe | Rule::Workos | Rule::Mux => Some((b"t", b"v1", b',')),
            Rule::Paddle => Some((b"ts", b"h1", b';')),
            _ => None,
        }
    }

    /// What the provider may write after the separator of its one header (WorkOS: a
    /// space).
    fn item_space(self) -> &'static [u8] {
        match self {
            Rule::Workos => b" ",
            _ => b"",
        }
    }

    /// How many of the signed timestamp's units make a second (WorkOS counts
    /// milliseconds).
    pub fn units_per_second(self) -> i64 {
        match self {
            Rule::Workos | Rule::Linear | Rule::Hubspot => 1000,
            _ => 1,
        }
    }

    fn timestamp_header(self) -> Option<&'static str> {
        match self {
            Rule::Slack => Some("x-slack-request-timestamp"),
            Rule::Acme => Some("x-acme-timestamp"),
            Rule::Standard => Some("webhook-timestamp"),
            Rule::Zoom => Some("x-zm-request-timestamp"),
            Rule::Discord => Some(DISCORD_TIMESTAMP),
            Rule::Zendesk => Some("x-zendesk-webhook-signature-timestamp"),
            Rule::Sendgrid => Some(SENDGRID_TIMESTAMP),
            Rule::Hubspot => Some(HUBSPOT_TIMESTAMP),
            Rule::Stripe
            | Rule::Paddle
            | Rule::Workos
            | Rule::Mux
            | Rule::Pagerduty
            | Rule::Linear
            | Rule::Dropbox
            | Rule::Asana
            | Rule::Github
            | Rule::Shopify
            | Rule::Square
            | Rule::Twilio
            | Rule::Basic
            | Rule::Token
            | Rule::Adyen
            | Rule::Graph
            | Rule::Braintree
            | Rule::Sns => None,
        }
    }

    /// Whether the signed time is in the body (Linear's `webhookTimestamp`), not a header.
    pub fn times_the_body(self) -> bool {
        self == Rule::Linear
    }

    pub fn signs_timestamp(self) -> bool {
        matches!(
            self,
            Rule::Stripe
                | Rule::Paddle
                | Rule::Workos
                | Rule::Mux
                | Rule::Slack
                | Rule::Zoom
                | Rule::Standard
                | Rule::Acme
                | Rule::Discord
                | Rule::Linear
                | Rule::Zendesk
                | Rule::Sendgrid
                | Rule::Hubspot
                | Rule::Sns
        )
    }

    /// The signed time as the provider writes `value` (in the rule's units): a decimal, or
    /// for Zendesk an RFC 3339 date and time in UTC (the decimal when out of its range).
    pub fn time_text(self, value: i64) -> String {
        match (self, chrono::DateTime::from_timestamp(value, 0)) {
            (Rule::Zendesk, Some(time)) => time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            _ => value.to_string(),
        }
    }

    /// The value of a signed time's text however leniently read (surrounding whitespace,
    /// for Zendesk any RFC 3339 form); `None` when it is none.
    pub fn time_value(self, text: &[u8]) -> Option<i64> {
        let text = std::str::from_utf8(text).ok()?.trim();
        match self {
            Rule::Zendesk => chrono::DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|time| time.timestamp()),
            _ => text.parse().ok(),
        }
    }

    /// The value of a signed time written exactly as the provider writes it.
    fn canonical_time(self, text: &[u8]) -> Option<i64> {
        match self {
            Rule::Zendesk => {
                let value = self.time_value(text)?;
                (self.time_text(value).as_bytes() == text).then_some(value)
            }
            _ => canonical_decimal(text),
        }
    }

    /// Every (text, value) a timestamp header's value could be signed as: for Zendesk the
    /// text as sent or trimmed, read as any RFC 3339 form; else any number in it.
    fn time_candidates(self, value: &[u8]) -> Vec<(Vec<u8>, Option<i64>)> {
        match self {
            Rule::Zendesk => [value.to_vec(), value.trim_ascii().to_vec()]
                .into_iter()
                .map(|text| {
                    let value = self.time_value(&text);
                    (text, value)
                })
                .collect(),
            _ => timestamp_candidates(value),
        }
    }

    /// The tag lengths the rule's MACs have: 32 bytes (SHA-256); Twilio's HMAC-SHA1 20.
    pub fn tag_lens(self) -> &'static [usize] {
        match self {
            Rule::Twilio => &[20, 32],
            Rule::Discord => &[ED25519_LEN],
            _ => &[32],
        }
    }

    /// What is signed, from its parts; `id` is Standard's `webhook-id` or the URL (Square,
    /// Twilio: a form body, see [`twilio_content`]).
    pub fn content(self, timestamp: &[u8], id: &[u8], body: &[u8]) -> Vec<u8> {
        if self == Rule::Twilio {
            return twilio_content(id, body, true);
        }
        let parts: Vec<&[u8]> = match self {
            Rule::Twilio => unreachable!("above"),
            Rule::Stripe | Rule::Acme | Rule::Workos | Rule::Mux => vec![timestamp, b".", body],
            Rule::Discord | Rule::Zendesk | Rule::Sendgrid => vec![timestamp, body],
            Rule::Paddle => vec![timestamp, b":", body],
            Rule::Github
            | Rule::Shopify
            | Rule::Basic
            | Rule::Token
            | Rule::Pagerduty
            | Rule::Linear
            | Rule::Dropbox
            | Rule::Adyen
            | Rule::Graph
            | Rule::Braintree
            | Rule::Sns
            | Rule::Asana => vec![body],
            Rule::Slack | Rule::Zoom => vec![b"v0:", timestamp, b":", body],
            Rule::Standard => vec![id, b".", timestamp, b".", body],
            Rule::Square => vec![id, body],
            Rule::Hubspot => vec![b"POST", id, body, timestamp],
        };
        parts.concat()
    }

    /// The header value carrying `tag`, as the provider writes it (Stripe: with `t=`).
    pub fn signature_value(self, tag: &[u8], timestamp: &[u8]) -> Vec<u8> {
        match self {
            Rule::Stripe | Rule::Mux => {
                [b"t=", timestamp, b",v1=", hex::encode(tag).as_bytes()].concat()
            }
            Rule::Paddle => [b"ts=", timestamp, b";h1=", hex::encode(tag).as_bytes()].concat(),
            Rule::Workos => [b"t=", timestamp, b", v1=", hex::encode(tag).as_bytes()].concat(),
            Rule::Github | Rule::Acme => format!("sha256={}", hex::encode(tag)).into_bytes(),
            Rule::Pagerduty => format!("v1={}", hex::encode(tag)).into_bytes(),
            Rule::Discord | Rule::Linear | Rule::Dropbox | Rule::Asana | Rule::Braintree => {
                hex::encode(tag).into_bytes()
            }
            Rule::Slack | Rule::Zoom => format!("v0={}", hex::encode(tag)).into_bytes(),
            Rule::Shopify
            | Rule::Square
            | Rule::Twilio
            | Rule::Zendesk
            | Rule::Adyen
            | Rule::Graph
            | Rule::Sendgrid
            | Rule::Sns
            | Rule::Hubspot => STANDARD.encode(tag).into_bytes(),
            // An Ed25519 signature is a `v1a` entry.
            Rule::Standard if tag.len() == ED25519_LEN => {
                format!("v1a,{}", STANDARD.encode(tag)).into_bytes()
            }
            Rule::Standard => format!("v1,{}", STANDARD.encode(tag)).into_bytes(),
            // The credential itself, as the sender writes it.
            Rule::Basic => format!("Basic {}", STANDARD.encode(tag)).into_bytes(),
            Rule::Token => tag.to_vec(),
        }
    }
}

pub fn hmac_sha256(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

pub fn hmac_sha1(key: &[u8], content: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(content);
    mac.finalize().into_bytes().to_vec()
}

/// Twilio's two MACs: HMAC-SHA1 with the Auth Token (the default), HMAC-SHA256 with a
/// SharedKey when the settings header names `algorithm=HMAC_SHA256`. Either way the key
/// is the secret as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwilioMac {
    Sha1,
    Sha256,
}

impl TwilioMac {
    pub fn mac(self, key: &[u8], content: &[u8]) -> Vec<u8> {
        match self {
            TwilioMac::Sha1 => hmac_sha1(key, content),
            TwilioMac::Sha256 => hmac_sha256(key, content),
        }
    }

    fn tag_len(self) -> usize {
        match self {
            TwilioMac::Sha1 => 20,
            TwilioMac::Sha256 => 32,
        }
    }
}

/// Decoded form parameters, names and values as bytes, in order.
type Params = Vec<(Vec<u8>, Vec<u8>)>;

/// `text` with `+` as a space and `%XX` decoded, an invalid escape kept as written (as
/// the URL standard's form decoding does); and whether every escape was valid.
fn percent_decode(text: &[u8]) -> (Vec<u8>, bool) {
    let mut decoded = Vec::with_capacity(text.len());
    let mut valid = true;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => decoded.push(b' '),
            b'%' => match text
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(byte) => {
                    decoded.push(byte);
                    i += 2;
                }
                None => {
                    decoded.push(b'%');
                    valid = false;
                }
            },
            other => decoded.push(other),
        }
        i += 1;
    }
    (decoded, valid)
}

/// A form body's parameters, decoded, in order (an empty piece skipped, a piece without
/// `=` a name with an empty value); and whether the body is in canonical form: every
/// piece `name=value` with a name, every escape valid, everything UTF-8.
fn form_pairs(body: &[u8]) -> (Params, bool) {
    let mut canonical = true;
    let mut pairs = Vec::new();
    if body.is_empty() {
        return (pairs, true);
    }
    for piece in body.split(|b| *b == b'&') {
        if piece.is_empty() {
            canonical = false;
            continue;
        }
        let (name, value) = match piece.iter().position(|b| *b == b'=') {
            Some(at) => (&piece[..at], &piece[at + 1..]),
            None => {
                canonical = false;
                (piece, &b""[..])
            }
        };
        let (name, name_ok) = percent_decode(name);
        let (value, value_ok) = percent_decode(value);
        canonical &= name_ok
            && value_ok
            && !name.is_empty()
            && std::str::from_utf8(&name).is_ok()
            && std::str::from_utf8(&value).is_ok();
        pairs.push((name, value));
    }
    (pairs, canonical)
}

/// Whether a form body repeats a parameter name: no canonical reading then, only lenient
/// ones (Twilio's documented one among them).
pub fn repeats_a_param(body: &[u8]) -> bool {
    let (pairs, _) = form_pairs(body);
    grouped(&pairs).len() != pairs.len()
}

/// The parameters grouped by name (sorted by name: byte order, which is code point order
/// for UTF-8), each name's values in the order sent.
fn grouped(pairs: &Params) -> std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut groups: std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>> = Default::default();
    for (name, value) in pairs {
        groups.entry(name.clone()).or_default().push(value.clone());
    }
    groups
}

/// How a reader may take a repeated name's values.
#[derive(Debug, Clone, Copy)]
enum Repeats {
    AsSent,
    Sorted,
    /// Twilio's reading: each distinct value once, sorted.
    DistinctSorted,
    DistinctAsSent,
    First,
    Last,
}

/// Name followed by value, for each name in order and each of its values as `repeats`
/// takes them.
fn concatenated(pairs: &Params, repeats: Repeats) -> Vec<u8> {
    let mut signed = Vec::new();
    for (name, mut values) in grouped(pairs) {
        match repeats {
            Repeats::AsSent => {}
            Repeats::Sorted => values.sort(),
            Repeats::DistinctSorted => {
                values.sort();
                values.dedup();
            }
            Repeats::DistinctAsSent => {
                let mut seen = HashSet::new();
                values.retain(|v| seen.insert(v.clone()));
            }
            Repeats::First => values.truncate(1),
            Repeats::Last => values = values.split_off(values.len() - 1),
        }
        for value in values {
            signed.extend_from_slice(&name);
            signed.extend_from_slice(&value);
        }
    }
    signed
}

fn lossy(pairs: &Params) -> Params {
    pairs
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned().into_bytes(),
                String::from_utf8_lossy(v).into_owned().into_bytes(),
            )
        })
        .collect()
}

/// The parameters as Twilio documents signing them: sorted by name, each name followed by
/// its value (a repeated name: each distinct value, sorted), text as UTF-8.
pub fn twilio_params(body: &[u8]) -> Vec<u8> {
    concatenated(&lossy(&form_pairs(body).0), Repeats::DistinctSorted)
}

/// `url` with `bodySHA256=<hex sha256 of body>` appended to its query (the fuzzer's and
/// the vectors' URLs have no fragment).
pub fn with_body_hash(url: &[u8], body: &[u8]) -> Vec<u8> {
    let separator: &[u8] = if url.contains(&b'?') { b"&" } else { b"?" };
    [
        url,
        separator,
        b"bodySHA256=",
        hex::encode(Sha256::digest(body)).as_bytes(),
    ]
    .concat()
}

/// The URL as written and with its port toggled: an explicit port dropped, or the
/// scheme's default one (443 for https, 80 for http) added.
pub fn port_variants(url: &[u8]) -> [Vec<u8>; 2] {
    let Some(at) = url.windows(3).position(|w| w == b"://") else {
        return [url.to_vec(), url.to_vec()];
    };
    let (scheme, rest) = (&url[..at], &url[at + 3..]);
    let end = rest
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let toggled = match authority.iter().rposition(|b| *b == b':') {
        Some(colon)
            if colon + 1 < authority.len()
                && authority[colon + 1..].iter().all(u8::is_ascii_digit) =>
        {
            [scheme, b"://", &authority[..colon], tail].concat()
        }
        _ => {
            let port: &[u8] = if scheme == b"https" { b":443" } else { b":80" };
            [scheme, b"://", authority, port, tail].concat()
        }
    };
    [url.to_vec(), toggled]
}

/// What Twilio signs, as documented: the URL and the sorted parameters of a form body, or
/// the URL with the body's hash for a JSON one.
pub fn twilio_content(url: &[u8], body: &[u8], form: bool) -> Vec<u8> {
    if form {
        [url, twilio_params(body).as_slice()].concat()
    } else {
        with_body_hash(url, body)
    }
}

/// Every value of the header `name` (any case), in order.
pub fn values<'h>(headers: &'h Headers, name: &str) -> Vec<&'h [u8]> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
        .map(|(_, v)| v.as_slice())
        .collect()
}

fn printable(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|b| (0x20..0x7f).contains(b))
}

fn canonical_decimal(text: &[u8]) -> Option<i64> {
    let canonical = text == b"0"
        || (text.first().is_some_and(|b| (b'1'..=b'9').contains(b))
            && text.iter().all(u8::is_ascii_digit));
    if !canonical {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

fn lowercase_hex_tag(text: &[u8], len: usize) -> Option<Vec<u8>> {
    if text.len() != 2 * len
        || !text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    hex::decode(text).ok()
}

fn canonical_base64_tag(text: &[u8], len: usize) -> Option<Vec<u8>> {
    let tag = STANDARD.decode(text).ok().filter(|t| t.len() == len)?;
    (STANDARD.encode(&tag).as_bytes() == text).then_some(tag)
}

/// A reading of the request: the timestamp text signed, its value, the id signed.
struct Reading {
    timestamp: Vec<u8>,
    value: Option<i64>,
    id: Vec<u8>,
    /// HMAC tags.
    tags: Vec<Vec<u8>>,
    /// Ed25519 signatures.
    signatures: Vec<Vec<u8>>,
}

impl OracleSource {
    pub fn judge(&self, headers: &Headers, body: &[u8], now: i64) -> Judgement {
        // What the receiver gets: a field value without the whitespace around it (RFC
        // 9110, 5.5).
        let headers: Headers = headers
            .iter()
            .map(|(name, value)| {
                let start = value.iter().position(|b| !matches!(b, b' ' | b'\t'));
                let end = value.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
                let trimmed = match (start, end) {
                    (Some(start), Some(end)) => value[start..=end].to_vec(),
                    _ => Vec::new(),
                };
                (name.clone(), trimmed)
            })
            .collect();
        let headers = &headers;
        if self.rule.is_token() {
            return self.judge_token(headers);
        }
        if self.rule == Rule::Twilio {
            return self.judge_twilio(headers, body);
        }
        if self.rule == Rule::Adyen {
            return self.judge_adyen(body);
        }
        if self.rule == Rule::Graph {
            return self.judge_graph(body);
        }
        if self.rule == Rule::Sendgrid {
            return self.judge_sendgrid(headers, body, now);
        }
        if self.rule == Rule::Hubspot {
            return self.judge_hubspot(headers, body, now);
        }
        if self.rule == Rule::Braintree {
            return self.judge_braintree(body);
        }
        if self.rule == Rule::Sns {
            return self.judge_sns(body, now);
        }
        self.judge_signed(headers, body, now)
    }

    /// A request signed in its headers: `Valid` when the canonical reading of them
    /// matches, `Either` when only a lenient one does, `Invalid` when none does.
    fn judge_signed(&self, headers: &Headers, body: &[u8], now: i64) -> Judgement {
        let lenient = self.lenient_matches(headers, body, now);
        if lenient.is_empty() {
            return Judgement {
                verdict: Verdict::Invalid,
                signed_ids: HashSet::new(),
            };
        }
        let verdict = match self.canonical(headers) {
            Some(reading) if self.matches(&reading, body, now, -EDGE, true) => Verdict::Valid,
            _ => Verdict::Either,
        };
        Judgement {
            verdict,
            signed_ids: lenient,
        }
    }

    /// HubSpot: the request judged as signed in its headers, then its body: a JSON array of
    /// 1 to 1,000 objects, or `Invalid` (refused however signed). `signed_ids`: each
    /// event's id ([`hubspot_event_ids`]), even when the signature fails — a broken
    /// verifier (the fuzzer's self-check) that accepts the request stores them.
    fn judge_hubspot(&self, headers: &Headers, body: &[u8], now: i64) -> Judgement {
        match hubspot_event_ids(body) {
            Some(signed_ids) => Judgement {
                verdict: self.judge_signed(headers, body, now).verdict,
                signed_ids,
            },
            None => Judgement {
                verdict: Verdict::Invalid,
                signed_ids: HashSet::new(),
            },
        }
    }

    /// Braintree: `Valid` when the form (canonical: every piece `name=value`, every escape
    /// valid, UTF-8) has a `bt_signature` and a `bt_payload` (the first of each), the
    /// payload only base64 characters and line breaks, at most 8 pairs each with one `|`,
    /// and for an active key pair the first pair naming its public key holds 40 lowercase
    /// hex digits, the HMAC-SHA1 (key = SHA-1 of the private key) of the payload or of the
    /// payload and `\n`; `Either` when that holds of a form that is not canonical;
    /// `Invalid` otherwise. `signed_ids`: the payload's sha256, whatever the verdict.
    fn judge_braintree(&self, body: &[u8]) -> Judgement {
        let (pairs, canonical) = form_pairs(body);
        let pairs = lossy(&pairs);
        let first = |name: &[u8]| {
            pairs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let (signature, payload) = (first(b"bt_signature"), first(b"bt_payload"));
        let signed_ids: HashSet<Vec<u8>> = payload
            .iter()
            .map(|payload| hex::encode(Sha256::digest(payload)).into_bytes())
            .collect();
        let matches = match (signature, payload) {
            (Some(signature), Some(payload)) => self.braintree_matches(&signature, &payload),
            _ => false,
        };
        let verdict = match (matches, canonical) {
            (false, _) => Verdict::Invalid,
            (true, true) => Verdict::Valid,
            (true, false) => Verdict::Either,
        };
        Judgement {
            verdict,
            signed_ids,
        }
    }

    /// Whether a Braintree signature field and payload match an active key pair.
    fn braintree_matches(&self, signature: &[u8], payload: &[u8]) -> bool {
        let base64 = |b: &u8| b.is_ascii_alphanumeric() || b"+=/\n".contains(b);
        let parts: Vec<&[u8]> = (signature.split(|b| *b == b'&'))
            .filter(|part| part.contains(&b'|'))
            .collect();
        let well_formed = parts.len() <= 8
            && parts
                .iter()
                .all(|part| part.iter().filter(|b| **b == b'|').count() == 1);
        if !payload.iter().all(base64) || !well_formed {
            return false;
        }
        self.active.iter().any(|secret| {
            let text = String::from_utf8_lossy(secret);
            let Some((public, private)) = text.split_once(':') else {
                return false;
            };
            let named = parts.iter().find_map(|part| {
                let at = part.iter().position(|b| *b == b'|')?;
                (&part[..at] == public.as_bytes()).then(|| &part[at + 1..])
            });
            let Some(tag) = named.and_then(|tag| lowercase_hex_tag(tag, 20)) else {
                return false;
            };
            let key = Sha1::digest(private.as_bytes());
            [payload.to_vec(), [payload, b"\n"].concat()]
                .iter()
                .any(|signed| hmac_sha1(&key, signed) == tag)
        })
    }

    /// A shared credential: `Valid` when the one header is exactly an active credential as
    /// the sender writes it; `Invalid` when no value of the header, however read, is one.
    fn judge_token(&self, headers: &Headers) -> Judgement {
        let (name, _, _) = self.rule.signature_header();
        let found = values(headers, name);
        let any = found
            .iter()
            .flat_map(|value| self.credential_candidates(value))
            .any(|candidate| self.active.contains(&candidate));
        let exact = found.len() == 1
            && printable(found[0])
            && self
                .active
                .iter()
                .any(|key| self.rule.signature_value(key, b"") == found[0]);
        let verdict = match (any, exact) {
            (_, true) => Verdict::Valid,
            (true, false) => Verdict::Either,
            (false, false) => Verdict::Invalid,
        };
        Judgement {
            verdict,
            signed_ids: if any {
                HashSet::from([Vec::new()])
            } else {
                HashSet::new()
            },
        }
    }

    /// Adyen: `Valid` when the body is the documented envelope of 1 to 1,000 items, each
    /// with its signature as 44 base64 characters matching its reading under an active
    /// key, and every signed field text, a whole number, a boolean or absent; `Either`
    /// when every item matches only leniently (a signature with whitespace around it, an
    /// amount written as a fraction, over 1,000 items); `Invalid` otherwise. The headers
    /// play no part. `signed_ids` are the items' events: the sha256 (hex) of each reading.
    fn judge_adyen(&self, body: &[u8]) -> Judgement {
        let invalid = Judgement {
            verdict: Verdict::Invalid,
            signed_ids: HashSet::new(),
        };
        let document: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let items = document
            .as_ref()
            .and_then(|d| d.get("notificationItems")?.as_array());
        let Some(items) = items.filter(|items| !items.is_empty()) else {
            return invalid;
        };
        let mut canonical = items.len() <= 1000;
        let mut signed_ids = HashSet::new();
        for wrapper in items {
            let Some((reading, plain, exact)) = self.adyen_match(wrapper) else {
                return invalid;
            };
            canonical &= plain && exact;
            signed_ids.insert(hex::encode(Sha256::digest(reading.as_bytes())).into_bytes());
        }
        Judgement {
            verdict: if canonical {
                Verdict::Valid
            } else {
                Verdict::Either
            },
            signed_ids,
        }
    }

    /// Graph: `Valid` when the body is the documented envelope of 1 to 1,000
    /// notifications and one of them has a `clientState` equal to an active secret (the
    /// request is taken, the others dropped); `Either` when that holds only with over
    /// 1,000; `Invalid` when no notification's `clientState` is an active secret.
    fn judge_graph(&self, body: &[u8]) -> Judgement {
        let document: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let items = document.as_ref().and_then(|d| d.get("value")?.as_array());
        let items = items.map(Vec::as_slice).unwrap_or_default();
        let matches = items.iter().any(|item| {
            let state = item.get("clientState").and_then(serde_json::Value::as_str);
            state.is_some_and(|state| self.active.iter().any(|key| key == state.as_bytes()))
        });
        let verdict = match (matches, items.len() <= 1000) {
            (false, _) => Verdict::Invalid,
            (true, true) => Verdict::Valid,
            (true, false) => Verdict::Either,
        };
        Judgement {
            verdict,
            signed_ids: HashSet::new(),
        }
    }

    /// SendGrid: `Valid` when the request has one signature header, canonical base64 of a
    /// signature that verifies over the one timestamp header (a canonical decimal within
    /// the tolerance, less the edge) followed by the body under a configured public key,
    /// and the body is a JSON array of 1 to 10,000 objects; `Either` when some signature
    /// and timestamp value, however read, verify and the time is within the tolerance plus
    /// the edge; `Invalid` otherwise. `signed_ids`: each event's `sg_event_id`.
    fn judge_sendgrid(&self, headers: &Headers, body: &[u8], now: i64) -> Judgement {
        let signatures = values(headers, SENDGRID_SIGNATURE);
        let timestamps = values(headers, SENDGRID_TIMESTAMP);
        let verifies = |signature: &[u8], timestamp: &[u8]| {
            let message = [timestamp, body].concat();
            self.public_keys.iter().any(|point| {
                ring::signature::UnparsedPublicKey::new(
                    &ring::signature::ECDSA_P256_SHA256_ASN1,
                    point,
                )
                .verify(&message, signature)
                .is_ok()
            })
        };
        let fresh =
            |value: i64, margin: i64| now.abs_diff(value) <= (self.tolerance + margin) as u64;
        let lenient = signatures.iter().any(|signature| {
            let Ok(signature) = STANDARD.decode(signature.trim_ascii()) else {
                return false;
            };
            timestamps.iter().any(|timestamp| {
                (timestamp_candidates(timestamp).iter())
                    .any(|(_, value)| value.is_some_and(|value| fresh(value, EDGE)))
                    && verifies(&signature, timestamp)
            })
        });
        let events = sendgrid_events(body);
        let signed_ids: HashSet<Vec<u8>> = (events.iter().flatten())
            .filter_map(|event| Some(event.get("sg_event_id")?.as_str()?.as_bytes().to_vec()))
            .collect();
        if !lenient {
            // The ids the body names all the same: a broken verifier (the fuzzer's
            // self-check) that accepts the request stores them.
            return Judgement {
                verdict: Verdict::Invalid,
                signed_ids,
            };
        }
        let canonical = match (&signatures[..], &timestamps[..]) {
            ([signature], [timestamp]) => {
                let decoded = STANDARD.decode(signature).ok();
                decoded.is_some_and(|decoded| {
                    STANDARD.encode(&decoded).as_bytes() == *signature
                        && canonical_decimal(timestamp).is_some_and(|value| fresh(value, -EDGE))
                        && verifies(&decoded, timestamp)
                })
            }
            _ => false,
        };
        let shaped = events.is_some_and(|events| (1..=10_000).contains(&events.len()));
        Judgement {
            verdict: if canonical && shaped {
                Verdict::Valid
            } else {
                Verdict::Either
            },
            signed_ids,
        }
    }

    /// An Adyen item whose signature matches under an active key: its reading, whether
    /// every signed field is plain, and whether the signature is written exactly.
    fn adyen_match(&self, wrapper: &serde_json::Value) -> Option<(String, bool, bool)> {
        let item = wrapper.get("NotificationRequestItem")?;
        let (reading, plain) = adyen_reading(item)?;
        let text = item.pointer("/additionalData/hmacSignature")?.as_str()?;
        let exact = STANDARD.decode(text).ok().filter(|tag| tag.len() == 32);
        let tag = exact
            .clone()
            .or_else(|| STANDARD.decode(text.trim()).ok())
            .filter(|tag| tag.len() == 32)?;
        (self.active.iter())
            .any(|key| hmac_sha256(key, reading.as_bytes()) == tag)
            .then_some((reading, plain, exact.is_some()))
    }

    /// Twilio: `Valid` when the canonical reading (one signature, one settings header or
    /// none, one form or JSON content type, a canonical body) matches under an active
    /// secret, the URL as written or its port toggled; `Invalid` when no lenient reading
    /// does.
    fn judge_twilio(&self, headers: &Headers, body: &[u8]) -> Judgement {
        let lenient = self.twilio_lenient(headers, body);
        let verdict = match (lenient, self.twilio_canonical(headers, body)) {
            (false, _) => Verdict::Invalid,
            (true, true) => Verdict::Valid,
            (true, false) => Verdict::Either,
        };
        Judgement {
            verdict,
            signed_ids: if lenient {
                HashSet::from([self.url.clone()])
            } else {
                HashSet::new()
            },
        }
    }

    fn twilio_lenient(&self, headers: &Headers, body: &[u8]) -> bool {
        let tags: HashSet<Vec<u8>> = values(headers, TWILIO_SIGNATURE)
            .iter()
            .flat_map(|value| tag_candidates(value, self.rule.tag_lens()))
            .collect();
        if tags.is_empty() {
            return false;
        }
        // HMAC-SHA1 however the settings read; HMAC-SHA256 when any settings value names
        // it, in any case.
        let settings = values(headers, TWILIO_SETTINGS);
        let mut macs = vec![TwilioMac::Sha1];
        if settings.iter().any(|v| {
            v.to_ascii_lowercase()
                .windows(11)
                .any(|w| w == b"hmac_sha256")
        }) {
            macs.push(TwilioMac::Sha256);
        }
        // A form when any content type says so; JSON when none does, or one does not.
        let types = values(headers, "content-type");
        let form = types.iter().any(|v| {
            v.to_ascii_lowercase()
                .windows(FORM_TYPE.len())
                .any(|w| w == FORM_TYPE)
        });
        let json = types.is_empty()
            || types
                .iter()
                .any(|v| !v.to_ascii_lowercase().starts_with(FORM_TYPE));
        let mut contents: HashSet<Vec<u8>> = HashSet::new();
        if form {
            let (pairs, _) = form_pairs(body);
            let readings = [pairs.clone(), lossy(&pairs)];
            for pairs in &readings {
                for repeats in [
                    Repeats::AsSent,
                    Repeats::Sorted,
                    Repeats::DistinctSorted,
                    Repeats::DistinctAsSent,
                    Repeats::First,
                    Repeats::Last,
                ] {
                    let params = concatenated(pairs, repeats);
                    for url in port_variants(&self.url) {
                        contents.insert([url, params.clone()].concat());
                    }
                }
            }
        }
        if json {
            contents.extend(port_variants(&with_body_hash(&self.url, body)));
        }
        self.active.iter().any(|key| {
            macs.iter().any(|mac| {
                contents
                    .iter()
                    .any(|content| tags.contains(&mac.mac(key, content)))
            })
        })
    }

    fn twilio_canonical(&self, headers: &Headers, body: &[u8]) -> bool {
        let single = |name: &str| -> Option<Vec<u8>> {
            let found = values(headers, name);
            (found.len() == 1 && printable(found[0])).then(|| found[0].to_vec())
        };
        let mac = match values(headers, TWILIO_SETTINGS).len() {
            0 => Some(TwilioMac::Sha1),
            _ => single(TWILIO_SETTINGS).and_then(|settings| canonical_settings(&settings)),
        };
        let Some(mac) = mac else {
            return false;
        };
        let Some(tag) = single(TWILIO_SIGNATURE)
            .and_then(|signature| canonical_base64_tag(&signature, mac.tag_len()))
        else {
            return false;
        };
        let Some(content_type) = single("content-type") else {
            return false;
        };
        let content_type = content_type.to_ascii_lowercase();
        let is = |media: &[u8]| {
            content_type == media
                || content_type
                    .strip_prefix(media)
                    .is_some_and(|rest| rest.starts_with(b";"))
        };
        let contents: Vec<Vec<u8>> = if is(FORM_TYPE) {
            let (pairs, canonical) = form_pairs(body);
            if !canonical || repeats_a_param(body) {
                return false;
            }
            let params = concatenated(&pairs, Repeats::AsSent);
            port_variants(&self.url)
                .into_iter()
                .map(|url| [url, params.clone()].concat())
                .collect()
        } else if is(b"application/json") {
            port_variants(&with_body_hash(&self.url, body)).to_vec()
        } else {
            return false;
        };
        self.active
            .iter()
            .any(|key| contents.iter().any(|content| mac.mac(key, content) == tag))
    }

    /// Every credential a header value could be read as: the value, trimmed or not;
    /// for Basic, what follows `basic` in any case, decoded as base64 however padded.
    fn credential_candidates(&self, value: &[u8]) -> Vec<Vec<u8>> {
        let trimmed = value.trim_ascii();
        if self.rule == Rule::Token {
            return vec![value.to_vec(), trimmed.to_vec()];
        }
        let rest = match trimmed.split_at_checked(5) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"basic") => rest.trim_ascii(),
            _ => return Vec::new(),
        };
        lenient_base64().decode(rest).into_iter().collect()
    }

    /// Whether an active key signs the reading, with its timestamp within the tolerance
    /// widened by `slack` seconds; Ed25519 verified strictly or not.
    fn matches(&self, reading: &Reading, body: &[u8], now: i64, slack: i64, strict: bool) -> bool {
        if self.rule.signs_timestamp() {
            let value = match self.rule.times_the_body() {
                true => body_millis(body),
                false => reading.value,
            };
            let Some(value) = value else {
                return false;
            };
            let value = value.div_euclid(self.rule.units_per_second());
            if now.abs_diff(value) > (self.tolerance + slack).max(0).unsigned_abs() {
                return false;
            }
        }
        let content = self.rule.content(&reading.timestamp, &reading.id, body);
        self.active
            .iter()
            .any(|key| reading.tags.contains(&hmac_sha256(key, &content)))
            || self.public_keys.iter().any(|key| {
                reading
                    .signatures
                    .iter()
                    .any(|signature| ed25519_verifies(key, &content, signature, strict))
            })
    }

    /// The request read exactly as documented, or `None` when it is not in that form.
    fn canonical(&self, headers: &Headers) -> Option<Reading> {
        let (sig_name, prefix, is_hex) = self.rule.signature_header();
        let single = |name: &str| -> Option<Vec<u8>> {
            let found = values(headers, name);
            (found.len() == 1 && printable(found[0])).then(|| found[0].to_vec())
        };
        let len = self.rule.tag_lens()[0];
        let decode = |text: &[u8]| {
            if is_hex {
                lowercase_hex_tag(text, len)
            } else {
                canonical_base64_tag(text, len)
            }
        };
        match self.rule {
            Rule::Stripe | Rule::Paddle | Rule::Workos | Rule::Mux | Rule::Pagerduty => {
                let (t_key, v_key, separator) = self.rule.timestamped_items()?;
                let value = single(sig_name)?;
                let mut timestamp = None;
                let mut tags = Vec::new();
                for (n, item) in value.split(|b| *b == separator).enumerate() {
                    // WorkOS writes a space after the comma; its SDK reads either.
                    let item = match n {
                        0 => item,
                        _ => item.strip_prefix(self.rule.item_space()).unwrap_or(item),
                    };
                    let at = item.iter().position(|b| *b == b'=')?;
                    let (key, text) = (&item[..at], &item[at + 1..]);
                    let key_ok = !key.is_empty()
                        && key
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
                    if !key_ok || text.is_empty() || !text.iter().all(u8::is_ascii_alphanumeric) {
                        return None;
                    }
                    if key == t_key {
                        if timestamp.is_some() {
                            return None;
                        }
                        timestamp = Some(text.to_vec());
                    } else if key == v_key {
                        tags.push(decode(text)?);
                    }
                }
                let (timestamp, value) = match self.rule.signs_timestamp() {
                    true => {
                        let timestamp = timestamp?;
                        let value = Some(canonical_decimal(&timestamp)?);
                        (timestamp, value)
                    }
                    false => (Vec::new(), None),
                };
                (!tags.is_empty()).then_some(Reading {
                    timestamp,
                    value,
                    id: Vec::new(),
                    tags,
                    signatures: Vec::new(),
                })
            }
            Rule::Github
            | Rule::Shopify
            | Rule::Slack
            | Rule::Acme
            | Rule::Zoom
            | Rule::Square
            | Rule::Discord
            | Rule::Linear
            | Rule::Dropbox
            | Rule::Asana
            | Rule::Zendesk
            | Rule::Adyen
            | Rule::Graph
            | Rule::Hubspot => {
                let signature = single(sig_name)?;
                let tag = decode(signature.strip_prefix(prefix.as_bytes())?)?;
                let (timestamp, value) = match self.rule.timestamp_header() {
                    Some(name) => {
                        let text = single(name)?;
                        let value = self.rule.canonical_time(&text)?;
                        (text, Some(value))
                    }
                    None => (Vec::new(), None),
                };
                let (tags, signatures) = if self.rule == Rule::Discord {
                    (Vec::new(), vec![tag])
                } else {
                    (vec![tag], Vec::new())
                };
                Some(Reading {
                    timestamp,
                    value,
                    id: self.url.clone(),
                    tags,
                    signatures,
                })
            }
            // Judged apart.
            Rule::Basic
            | Rule::Token
            | Rule::Twilio
            | Rule::Sendgrid
            | Rule::Braintree
            | Rule::Sns => None,
            Rule::Standard => {
                // One family of names, each header once.
                let family = ["webhook-", "svix-"]
                    .into_iter()
                    .filter(|family| {
                        ["id", "timestamp", "signature"]
                            .iter()
                            .any(|h| !values(headers, &format!("{family}{h}")).is_empty())
                    })
                    .collect::<Vec<_>>();
                let [family] = family[..] else {
                    return None;
                };
                let id = single(&format!("{family}id"))?;
                let timestamp = single(&format!("{family}timestamp"))?;
                let value = Some(canonical_decimal(&timestamp)?);
                let list = single(&format!("{family}signature"))?;
                let (mut tags, mut signatures) = (Vec::new(), Vec::new());
                for entry in list.split(|b| *b == b' ') {
                    let at = entry.iter().position(|b| *b == b',')?;
                    let (version, text) = (&entry[..at], &entry[at + 1..]);
                    let version_ok = version.first() == Some(&b'v')
                        && version.len() > 1
                        && version[1..].iter().all(u8::is_ascii_alphanumeric);
                    if !version_ok || text.is_empty() {
                        return None;
                    }
                    if version == b"v1" {
                        tags.push(decode(text)?);
                    } else if version == b"v1a" {
                        signatures.push(canonical_base64_tag(text, ED25519_LEN)?);
                    }
                }
                (!tags.is_empty() || !signatures.is_empty()).then_some(Reading {
                    timestamp,
                    value,
                    id,
                    tags,
                    signatures,
                })
            }
        }
    }

    /// The ids of every lenient reading that matches (one empty id for schemes that sign
    /// none); empty when nothing in the request matches.
    fn lenient_matches(&self, headers: &Headers, body: &[u8], now: i64) -> HashSet<Vec<u8>> {
        let (sig_name, _, _) = self.rule.signature_header();
        let mut signature_values = values(headers, sig_name);
        let mut timestamp_values = match self.rule.timestamp_header() {
            Some(name) => values(headers, name),
            None => Vec::new(),
        };
        let mut ids = Vec::new();
        if self.rule == Rule::Standard {
            signature_values.extend(values(headers, "svix-signature"));
            timestamp_values.extend(values(headers, "svix-timestamp"));
            for value in values(headers, "webhook-id")
                .into_iter()
                .chain(values(headers, "svix-id"))
            {
                ids.push(value.to_vec());
                ids.push(value.trim_ascii().to_vec());
            }
        } else {
            ids.push(self.url.clone());
        }
        if self.rule.timestamped_items().is_some() {
            timestamp_values = signature_values.clone();
        }
        let (tags, signatures) = match self.rule {
            Rule::Discord => (
                Vec::new(),
                distinct(
                    signature_values
                        .iter()
                        .flat_map(|value| hex_candidates(value, ED25519_LEN)),
                ),
            ),
            Rule::Standard => {
                let (mut tags, mut signatures) = (Vec::new(), Vec::new());
                for value in &signature_values {
                    for (kind, text) in standard_segments(value) {
                        if kind != Some(true) {
                            tags.extend(tag_candidates(text, &[32]));
                        }
                        if kind != Some(false) {
                            signatures.extend(tag_candidates(text, &[ED25519_LEN]));
                        }
                    }
                }
                (distinct(tags), distinct(signatures))
            }
            _ => (
                distinct(
                    signature_values
                        .iter()
                        .flat_map(|value| tag_candidates(value, self.rule.tag_lens())),
                ),
                Vec::new(),
            ),
        };
        // Linear's time is read from the body, whatever the headers say.
        let timestamps: Vec<(Vec<u8>, Option<i64>)> =
            if self.rule.signs_timestamp() && !self.rule.times_the_body() {
                timestamp_values
                    .iter()
                    .flat_map(|value| self.rule.time_candidates(value))
                    .collect::<HashSet<_>>()
                    .into_iter()
                    .collect()
            } else {
                vec![(Vec::new(), None)]
            };
        let mut matched = HashSet::new();
        for id in &ids {
            for (timestamp, value) in &timestamps {
                let reading = Reading {
                    timestamp: timestamp.clone(),
                    value: *value,
                    id: id.clone(),
                    tags: tags.clone(),
                    signatures: signatures.clone(),
                };
                if self.matches(&reading, body, now, EDGE, false) {
                    matched.insert(id.clone());
                }
            }
        }
        matched
    }
}

/// The body's `webhookTimestamp` (Linear): a JSON integer at the top level of a JSON
/// object, the last one where the key is repeated (as JSON parsers read it).
fn body_millis(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("webhookTimestamp")?
        .as_i64()
}

/// Twilio's settings header in its documented form — comma-separated `name=value`
/// items, one `algorithm` of `HMAC_SHA1` or `HMAC_SHA256` — and the MAC it names.
fn canonical_settings(settings: &[u8]) -> Option<TwilioMac> {
    let mut named = None;
    for item in settings.split(|b| *b == b',') {
        let at = item.iter().position(|b| *b == b'=')?;
        let (name, value) = (&item[..at], &item[at + 1..]);
        if name.is_empty() || value.is_empty() || item.contains(&b' ') {
            return None;
        }
        if name == b"algorithm" {
            if named.is_some() {
                return None;
            }
            named = Some(match value {
                b"HMAC_SHA1" => TwilioMac::Sha1,
                b"HMAC_SHA256" => TwilioMac::Sha256,
                _ => return None,
            });
        }
    }
    named
}

/// Each distinct item once.
fn distinct(items: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    items
        .into_iter()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect()
}

/// A `webhook-signature` value cut where an entry label starts (`v` and letters or
/// digits, then `,`, spaces allowed before the comma, at the start or after a space or
/// comma; base64 has neither), each piece with its kind: `Some(false)` after a `v1`
/// label (HMAC), `Some(true)` after `v1a` (Ed25519), in any case; `None` before any
/// label or after another one (either kind).
fn standard_segments(value: &[u8]) -> Vec<(Option<bool>, &[u8])> {
    let label_at = |i: usize| -> Option<(usize, Option<bool>)> {
        if !value[i].eq_ignore_ascii_case(&b'v')
            || (i > 0 && !matches!(value[i - 1], b' ' | b'\t' | b','))
        {
            return None;
        }
        let name_end = i + value[i..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric())
            .count();
        let comma = name_end
            + value[name_end..]
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
        if value.get(comma) != Some(&b',') {
            return None;
        }
        let kind = match value[i..name_end].to_ascii_lowercase().as_slice() {
            b"v1" => Some(false),
            b"v1a" => Some(true),
            _ => None,
        };
        Some((comma + 1, kind))
    };
    let mut segments = Vec::new();
    let (mut start, mut kind) = (0, None);
    let mut i = 0;
    while i < value.len() {
        match label_at(i) {
            Some((after, label)) => {
                segments.push((kind, &value[start..i]));
                (start, kind) = (after, label);
                i = after;
            }
            None => i += 1,
        }
    }
    segments.push((kind, &value[start..]));
    segments
}

/// Every `len`-byte value written in hex (any case) anywhere in `value`.
fn hex_candidates(value: &[u8], len: usize) -> Vec<Vec<u8>> {
    value
        .windows(2 * len)
        .filter(|window| window.iter().all(u8::is_ascii_hexdigit))
        .filter_map(|window| hex::decode(window).ok())
        .collect()
}

/// Every value of one of the `lens` (in bytes) written in hex (any case) or base64
/// (padded or not, trailing bits or not) anywhere in `value`.
fn tag_candidates(value: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let lenient = lenient_base64();
    let mut tags = Vec::new();
    for &len in lens {
        for start in 0..value.len() {
            if let Some(window) = value.get(start..start + 2 * len) {
                if window.iter().all(u8::is_ascii_hexdigit) {
                    if let Ok(tag) = hex::decode(window) {
                        tags.push(tag);
                    }
                }
            }
            // Unpadded and padded base64 lengths.
            for chars in [(4 * len).div_ceil(3), 4 * len.div_ceil(3)] {
                if let Some(window) = value.get(start..start + chars) {
                    if let Ok(tag) = lenient.decode(window) {
                        if tag.len() == len {
                            tags.push(tag);
                        }
                    }
                }
            }
        }
    }
    tags
}

/// Base64 decoding that takes padding or none and ignores trailing bits.
fn lenient_base64() -> GeneralPurpose {
    GeneralPurpose::new(
        &alphabet::STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    )
}

/// Every way a timestamp could be read from `value`: the whole value (as is, and
/// trimmed) and every run of digits with its sign, each as written and in canonical form.
fn timestamp_candidates(value: &[u8]) -> Vec<(Vec<u8>, Option<i64>)> {
    let parse =
        |text: &[u8]| -> Option<i64> { std::str::from_utf8(text).ok()?.trim().parse::<i64>().ok() };
    let mut texts: Vec<Vec<u8>> = vec![value.to_vec(), value.trim_ascii().to_vec()];
    let mut start = 0;
    while start < value.len() {
        let digits_from = |i: usize| value[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let sign = usize::from(matches!(value[start], b'+' | b'-'));
        let digits = if start + sign < value.len() {
            digits_from(start + sign)
        } else {
            0
        };
        if digits > 0 {
            texts.push(value[start..start + sign + digits].to_vec());
            if sign == 1 {
                texts.push(value[start + 1..start + 1 + digits].to_vec());
            }
            start += sign + digits;
        } else {
            start += 1;
        }
    }
    let mut candidates = Vec::new();
    for text in texts {
        let value = parse(&text);
        if let Some(v) = value {
            candidates.push((v.to_string().into_bytes(), Some(v)));
        }
        candidates.push((text, value));
    }
    candidates
}

/// What a Twilio request's event is keyed on, as docs/src/providers/twilio.md says: the
/// sha256 (hex) of the sorted parameters of a form (`content_type`, its first value, names one), of the bytes
/// of anything else.
pub fn twilio_event_id(content_type: Option<&[u8]>, body: &[u8]) -> String {
    // HTTP drops the whitespace around a header's value.
    let form = content_type.map(<[u8]>::trim_ascii).is_some_and(|value| {
        value.len() >= FORM_TYPE.len() && value[..FORM_TYPE.len()].eq_ignore_ascii_case(FORM_TYPE)
    });
    let signed = if form {
        twilio_params(body)
    } else {
        body.to_vec()
    };
    hex::encode(Sha256::digest(signed))
}

/// What a copy of an accepted Twilio form, re-encoded as its signature allows, must be
/// answered: the stored answer, or `400` with a reason when the copy's own reading is
/// refused before it is looked up (no `MessageStatus`, or one that is no storable type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyAnswer {
    Stored,
    Refused(&'static str),
}

/// What the book allows as an event type: at most 255 bytes of text without a control
/// character (a form value is read as UTF-8, a stray byte as U+FFFD).
fn storable_type(value: &[u8]) -> bool {
    let text = String::from_utf8_lossy(value);
    text.len() <= 255 && !text.chars().any(char::is_control)
}

/// The body with `MessageStatus`'s value swallowing the parameter that follows it in the
/// signed order (name and value run together), that parameter dropped, and how it must be
/// answered (refused when the longer status is no storable type): `None` when there is
/// none to swallow.
fn absorbing(body: &[u8]) -> Option<(Vec<u8>, CopyAnswer)> {
    let (pairs, _) = form_pairs(body);
    let mut sorted = pairs.clone();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let at = sorted.iter().position(|(n, _)| n == b"MessageStatus")?;
    let (next_name, next_value) = sorted.get(at + 1)?.clone();
    let encode = |bytes: &[u8]| -> Vec<u8> {
        bytes
            .iter()
            .flat_map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => vec![*b],
                other => format!("%{other:02X}").into_bytes(),
            })
            .collect()
    };
    let pieces: Vec<Vec<u8>> = pairs
        .iter()
        .filter(|(n, v)| !(n == &next_name && v == &next_value))
        .map(|(n, v)| {
            let value = match n.as_slice() {
                b"MessageStatus" => [v.as_slice(), &next_name, &next_value].concat(),
                _ => v.clone(),
            };
            [encode(n), b"=".to_vec(), encode(&value)].concat()
        })
        .collect();
    let status = sorted[at].1.iter().chain(&next_name).chain(&next_value);
    let answer = match storable_type(&status.copied().collect::<Vec<u8>>()) {
        true => CopyAnswer::Stored,
        false => CopyAnswer::Refused("invalid_event_type"),
    };
    Some((pieces.join(&b'&'), answer))
}

/// Copies of a Twilio form body that read as the same signed parameters — so the same
/// signature verifies them — each with what was done and how it must be answered:
/// reordered, a trailing `&`, a letter of a value `%`-escaped, `MessageStatus=v` re-split
/// as `MessageStatu=sv` (no status left: `missing_fact_key`, unless `SmsStatus=received`
/// makes it an incoming message's shape: the stored answer), `MessageStatus` absorbing
/// the next parameter. A copy that would not read as the same parameters (a body that
/// repeats or escapes oddly) is left out.
pub fn twilio_variants(body: &[u8]) -> Vec<(&'static str, Vec<u8>, CopyAnswer)> {
    let pieces: Vec<&[u8]> = body.split(|b| *b == b'&').collect();
    let mut reversed = pieces.clone();
    reversed.reverse();
    let escaped = pieces
        .iter()
        .position(|piece| {
            piece
                .iter()
                .skip_while(|b| **b != b'=')
                .any(u8::is_ascii_alphabetic)
        })
        .map(|at| {
            let mut pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
            let piece = &mut pieces[at];
            let eq = piece.iter().position(|b| *b == b'=').unwrap_or(0);
            let letter = eq
                + piece[eq..]
                    .iter()
                    .position(u8::is_ascii_alphabetic)
                    .unwrap_or(0);
            let escape = format!("%{:02X}", piece[letter]).into_bytes();
            piece.splice(letter..=letter, escape);
            pieces.join(&b'&')
        });
    let resplit = pieces
        .iter()
        .any(|p| p.starts_with(b"MessageStatus="))
        .then(|| {
            let moved: Vec<Vec<u8>> = pieces
                .iter()
                .map(|p| match p.strip_prefix(b"MessageStatus=".as_slice()) {
                    Some(value) => [b"MessageStatu=s".as_slice(), value].concat(),
                    None => p.to_vec(),
                })
                .collect();
            moved.join(&b'&')
        });
    let stored = |copy: Option<Vec<u8>>| copy.map(|copy| (copy, CopyAnswer::Stored));
    let resplit_answer = match pieces.iter().any(|p| *p == b"SmsStatus=received") {
        true => CopyAnswer::Stored,
        false => CopyAnswer::Refused("missing_fact_key"),
    };
    let candidates = [
        ("reordered", stored(Some(reversed.join(&b'&')))),
        ("a trailing &", stored(Some([body, b"&"].concat()))),
        ("a letter %-escaped", stored(escaped)),
        (
            "MessageStatus re-split",
            resplit.map(|copy| (copy, resplit_answer)),
        ),
        (
            "MessageStatus absorbing the next parameter",
            absorbing(body),
        ),
    ];
    let signed = twilio_params(body);
    candidates
        .into_iter()
        .filter_map(|(what, copy)| copy.map(|(variant, answer)| (what, variant, answer)))
        .filter(|(_, variant, _)| twilio_params(variant) == signed)
        .collect()
}

/// What an Adyen item's signature covers, as Adyen's libraries build it: `pspReference`,
/// `originalReference`, `merchantAccountCode`, `merchantReference`, `amount.value`,
/// `amount.currency`, `eventCode` and `success` joined by `:` — text as it is, numbers and
/// booleans as written, absent (or null) empty — and whether every field was plain (no
/// fraction or exponent in a number). `None` when the item cannot be read: not an object,
/// no `amount` object, a signed field that is an object or a list.
pub fn adyen_reading(item: &serde_json::Value) -> Option<(String, bool)> {
    use serde_json::Value;
    let amount = item.get("amount")?.as_object()?;
    let fields = [
        item.get("pspReference"),
        item.get("originalReference"),
        item.get("merchantAccountCode"),
        item.get("merchantReference"),
        amount.get("value"),
        amount.get("currency"),
        item.get("eventCode"),
        item.get("success"),
    ];
    let mut plain = true;
    let mut parts = Vec::new();
    for field in fields {
        parts.push(match field {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => {
                plain &= n.is_i64() || n.is_u64();
                n.to_string()
            }
            Some(_) => return None,
        });
    }
    Some((parts.join(":"), plain))
}

/// A SendGrid body's events: a JSON array whose every element is an object.
fn sendgrid_events(body: &[u8]) -> Option<Vec<serde_json::Map<String, serde_json::Value>>> {
    let list: Vec<serde_json::Value> = serde_json::from_slice(body).ok()?;
    (list.into_iter())
        .map(|event| match event {
            serde_json::Value::Object(fields) => Some(fields),
            _ => None,
        })
        .collect()
}

/// The ids HubSpot's events are stored under, when `body` is a JSON array of 1 to 1,000
/// objects each holding `eventId`, `subscriptionId`, `portalId` and `occurredAt` as
/// numbers and `subscriptionType` as a non-empty string: for each, the hex sha256 of its
/// members but `attemptNumber` in key order (the last of a repeated key), each key and
/// each value's bytes as sent preceded by their length (8 bytes, big-endian).
pub fn hubspot_event_ids(body: &[u8]) -> Option<HashSet<Vec<u8>>> {
    use serde_json::value::RawValue;
    let list: Vec<&RawValue> = serde_json::from_slice(body).ok()?;
    if !(1..=1000).contains(&list.len()) {
        return None;
    }
    let mut ids = HashSet::new();
    for item in list {
        let members: std::collections::BTreeMap<String, &RawValue> =
            serde_json::from_str(item.get()).ok()?;
        let number = |name: &str| {
            let value: serde_json::Value = serde_json::from_str(members.get(name)?.get()).ok()?;
            value.is_number().then_some(())
        };
        ["eventId", "subscriptionId", "portalId", "occurredAt"]
            .into_iter()
            .try_for_each(number)?;
        let kind: serde_json::Value =
            serde_json::from_str(members.get("subscriptionType")?.get()).ok()?;
        kind.as_str().filter(|kind| !kind.is_empty())?;
        let mut hash = Sha256::new();
        for (key, value) in members.iter().filter(|(key, _)| *key != "attemptNumber") {
            for part in [key.as_bytes(), value.get().as_bytes()] {
                hash.update((part.len() as u64).to_be_bytes());
                hash.update(part);
            }
        }
        ids.insert(hex::encode(hash.finalize()).into_bytes());
    }
    Some(ids)
}

/// The URL as HubSpot signs it: an escape `%XX` of one of `:/?@!$'()*,;` decoded, every
/// other byte as written.
fn hubspot_url(url: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(url.len());
    let mut i = 0;
    while i < url.len() {
        let escaped = (url[i] == b'%')
            .then(|| std::str::from_utf8(url.get(i + 1..i + 3)?).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|byte| b":/?@!$'()*,;".contains(byte));
        match escaped {
            Some(byte) => {
                signed.push(byte);
                i += 3;
            }
            None => {
                signed.push(url[i]);
                i += 1;
            }
        }
    }
    signed
}

/// An SNS body's members as sent, in order, repeats kept (a JSON object; `None` else).
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// What an SNS message says, read as the oracle reads it: the last of each name.
struct SnsReading {
    strings: std::collections::HashMap<String, String>,
    /// No name twice, every member the signature involves a string, none but `Message`
    /// with a line break.
    canonical: bool,
}

const SNS_SIGNED: [&str; 8] = [
    "Type",
    "MessageId",
    "TopicArn",
    "Message",
    "Timestamp",
    "SignatureVersion",
    "Signature",
    "SigningCertURL",
];

impl SnsReading {
    fn of(body: &[u8]) -> Option<Self> {
        let Members(members) = serde_json::from_slice(body).ok()?;
        let mut names = HashSet::new();
        let mut canonical = members.iter().all(|(name, _)| names.insert(name.clone()));
        let mut strings = std::collections::HashMap::new();
        let mut kinds = std::collections::HashMap::new();
        for (name, value) in members {
            kinds.insert(name.clone(), value.clone());
            strings.remove(&name);
            if let serde_json::Value::String(text) = value {
                strings.insert(name, text);
            }
        }
        // A member Inlet reads must be a string (Subject may also be null: no Subject).
        let readable = |name: &str| match kinds.get(name) {
            None | Some(serde_json::Value::String(_)) => true,
            Some(serde_json::Value::Null) => name == "Subject",
            Some(_) => false,
        };
        let read = ["Subject", "SubscribeURL", "Token", "UnsubscribeURL"];
        if !SNS_SIGNED
            .iter()
            .chain(read.iter())
            .all(|name| readable(name))
        {
            return None;
        }
        canonical &= (strings.iter()).all(|(name, text)| name == "Message" || !text.contains('\n'));
        Some(Self { strings, canonical })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.strings.get(name).map(String::as_str)
    }

    /// The string signed, as AWS documents it.
    fn signed(&self) -> Option<Vec<u8>> {
        let names: &[&str] = match self.get("Type")? {
            "Notification" => &[
                "Message",
                "MessageId",
                "Subject",
                "Timestamp",
                "TopicArn",
                "Type",
            ],
            _ => &[
                "Message",
                "MessageId",
                "SubscribeURL",
                "Timestamp",
                "Token",
                "TopicArn",
                "Type",
            ],
        };
        let mut signed = String::new();
        for name in names {
            match self.get(name) {
                Some(value) => signed.push_str(&format!("{name}\n{value}\n")),
                None if *name == "Subject" => {}
                None => return None,
            }
        }
        Some(signed.into_bytes())
    }
}

/// Whether `signature` is an RSA signature of `signed` under the certificate `pem` with
/// `digest` (openssl directly; the certificate must be within its validity at `now`).
fn rsa_verifies(
    pem: &[u8],
    digest: openssl::hash::MessageDigest,
    signed: &[u8],
    signature: &[u8],
    now: i64,
) -> bool {
    let Ok(certificate) = openssl::x509::X509::from_pem(pem) else {
        return false;
    };
    let Ok(at) = openssl::asn1::Asn1Time::from_unix(now) else {
        return false;
    };
    if certificate.not_before() > at || certificate.not_after() < at {
        return false;
    }
    let verified = || -> Result<bool, openssl::error::ErrorStack> {
        let key = certificate.public_key()?;
        let mut verifier = openssl::sign::Verifier::new(digest, &key)?;
        verifier.update(signed)?;
        verifier.verify(signature)
    };
    verified().unwrap_or(false)
}

impl OracleSource {
    /// SNS: `Valid` when the body is a JSON object naming each member once, its signed
    /// members strings (no line break but in `Message`), any `UnsubscribeURL` on the
    /// certificate's host, `SignatureVersion` `1` or `2`, the
    /// `Signature` canonical base64 of an RSA signature of AWS's string to sign under the
    /// certificate its `SigningCertURL` (one of the source's) serves, the topic the
    /// source's and the `Timestamp` within the tolerance; `Either` when only a lenient
    /// reading matches (another URL, a repeated name, lenient base64, a
    /// time at the tolerance's edge); `Invalid` when none does. `signed_ids`: its
    /// `MessageId`.
    fn judge_sns(&self, body: &[u8], now: i64) -> Judgement {
        let invalid = Judgement {
            verdict: Verdict::Invalid,
            signed_ids: HashSet::new(),
        };
        let Some(reading) = SnsReading::of(body) else {
            return invalid;
        };
        let (Some(signed), Some(signature), Some(url), Some(topic), Some(time)) = (
            reading.signed(),
            reading.get("Signature"),
            reading.get("SigningCertURL"),
            reading.get("TopicArn"),
            reading.get("Timestamp"),
        ) else {
            return invalid;
        };
        let Some(at) = chrono::DateTime::parse_from_rfc3339(time)
            .ok()
            .map(|t| t.timestamp())
        else {
            return invalid;
        };
        let skew = now.saturating_sub(at).abs();
        if !self.topics.iter().any(|t| t == topic.as_bytes()) || skew > self.tolerance + EDGE {
            return invalid;
        }
        let lenient = GeneralPurpose::new(
            &alphabet::STANDARD,
            GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
        );
        let canonical_signature = STANDARD.decode(signature).ok();
        let Some(tag) = canonical_signature
            .clone()
            .or_else(|| lenient.decode(signature).ok())
        else {
            return invalid;
        };
        use openssl::hash::MessageDigest;
        let version = reading.get("SignatureVersion");
        let Some(digest) = (match version {
            Some("1") => Some(MessageDigest::sha1()),
            Some("2") => Some(MessageDigest::sha256()),
            _ => None,
        }) else {
            return invalid;
        };
        let served = self.certificates.iter().find(|(u, _)| u == url.as_bytes());
        let verifies = |pem: &[u8]| rsa_verifies(pem, digest, &signed, &tag, now);
        let canonical_match = served.is_some_and(|(_, pem)| verifies(pem));
        let any_match = canonical_match || (self.certificates.iter()).any(|(_, pem)| verifies(pem));
        // An unsubscribe link, when there is one, on the certificate's host.
        let host = |url: &str| url.splitn(4, '/').take(3).collect::<Vec<_>>().join("/");
        let unsubscribe = reading
            .get("UnsubscribeURL")
            .is_none_or(|u| host(u) == host(url));
        let exact = reading.canonical
            && unsubscribe
            && canonical_signature.is_some_and(|t| STANDARD.encode(t) == signature)
            && skew <= self.tolerance - EDGE
            && reading.get("Type") == Some("Notification");
        let verdict = match (any_match, canonical_match && exact) {
            (false, _) => Verdict::Invalid,
            (true, true) => Verdict::Valid,
            (true, false) => Verdict::Either,
        };
        let signed_ids = reading.get("MessageId").map(|id| id.as_bytes().to_vec());
        Judgement {
            verdict,
            signed_ids: signed_ids.into_iter().collect(),
        }
    }
}
