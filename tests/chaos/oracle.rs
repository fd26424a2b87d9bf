//! The fuzzer's oracle: whether a request carries a matching signature, decided from the
//! scheme rules in the README with `hmac` and `sha2` directly — never with Inlet's
//! verification code.
//!
//! Three answers. `Valid`: the canonical reading of the request (each header once, in
//! the documented format) matches an active secret, within the tolerance. `Invalid`: no
//! reading at all matches — however leniently the headers are read (any value of a
//! repeated header, any 32-byte hex or base64 run as the tag, any number as the
//! timestamp, trimmed or not), no tag in the request is the HMAC of what it claims to
//! sign under an active secret, within the tolerance. `Either`: only a non-canonical
//! reading matches (a repeated header, whitespace, upper-case hex, a timestamp a second
//! from the edge…): how strict to be there is Inlet's choice, but nothing else is.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
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

/// The scheme rules, as the README states them.
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
}

/// The header of the test's `header_token` source.
pub const TOKEN_HEADER: &str = "x-webhook-token";

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
    /// Square's notification URL (`public_url`), signed before the body; empty otherwise.
    pub url: Vec<u8>,
}

impl Rule {
    /// The HMAC key a secret string stands for.
    pub fn key(self, secret: &str) -> Vec<u8> {
        match self {
            Rule::Standard => STANDARD
                .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
                .expect("a Standard Webhooks secret is base64"),
            _ => secret.as_bytes().to_vec(),
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
            Rule::Basic => ("authorization", "Basic ", false),
            Rule::Token => (TOKEN_HEADER, "", false),
        }
    }

    /// Whether the rule is a shared credential compared as is, not an HMAC.
    pub fn is_token(self) -> bool {
        matches!(self, Rule::Basic | Rule::Token)
    }

    /// Stripe's and Paddle's one header: (timestamp key, signature key, separator).
    pub fn timestamped_items(self) -> Option<(&'static [u8], &'static [u8], u8)> {
        match self {
            Rule::Stripe => Some((b"t", b"v1", b',')),
            Rule::Paddle => Some((b"ts", b"h1", b';')),
            _ => None,
        }
    }

    fn timestamp_header(self) -> Option<&'static str> {
        match self {
            Rule::Slack => Some("x-slack-request-timestamp"),
            Rule::Acme => Some("x-acme-timestamp"),
            Rule::Standard => Some("webhook-timestamp"),
            Rule::Zoom => Some("x-zm-request-timestamp"),
            Rule::Stripe
            | Rule::Paddle
            | Rule::Github
            | Rule::Shopify
            | Rule::Square
            | Rule::Basic
            | Rule::Token => None,
        }
    }

    pub fn signs_timestamp(self) -> bool {
        matches!(
            self,
            Rule::Stripe | Rule::Paddle | Rule::Slack | Rule::Zoom | Rule::Standard | Rule::Acme
        )
    }

    /// What is signed, from its parts; `id` is Standard's `webhook-id` or Square's URL.
    pub fn content(self, timestamp: &[u8], id: &[u8], body: &[u8]) -> Vec<u8> {
        let parts: Vec<&[u8]> = match self {
            Rule::Stripe | Rule::Acme => vec![timestamp, b".", body],
            Rule::Paddle => vec![timestamp, b":", body],
            Rule::Github | Rule::Shopify | Rule::Basic | Rule::Token => vec![body],
            Rule::Slack | Rule::Zoom => vec![b"v0:", timestamp, b":", body],
            Rule::Standard => vec![id, b".", timestamp, b".", body],
            Rule::Square => vec![id, body],
        };
        parts.concat()
    }

    /// The header value carrying `tag`, as the provider writes it (Stripe: with `t=`).
    pub fn signature_value(self, tag: &[u8], timestamp: &[u8]) -> Vec<u8> {
        match self {
            Rule::Stripe => [b"t=", timestamp, b",v1=", hex::encode(tag).as_bytes()].concat(),
            Rule::Paddle => [b"ts=", timestamp, b";h1=", hex::encode(tag).as_bytes()].concat(),
            Rule::Github | Rule::Acme => format!("sha256={}", hex::encode(tag)).into_bytes(),
            Rule::Slack | Rule::Zoom => format!("v0={}", hex::encode(tag)).into_bytes(),
            Rule::Shopify | Rule::Square => STANDARD.encode(tag).into_bytes(),
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

fn lowercase_hex_tag(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() != 64
        || !text
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    hex::decode(text).ok()
}

fn canonical_base64_tag(text: &[u8]) -> Option<Vec<u8>> {
    let tag = STANDARD.decode(text).ok().filter(|t| t.len() == 32)?;
    (STANDARD.encode(&tag).as_bytes() == text).then_some(tag)
}

/// A reading of the request: the timestamp text signed, its value, the id signed.
struct Reading {
    timestamp: Vec<u8>,
    value: Option<i64>,
    id: Vec<u8>,
    tags: Vec<Vec<u8>>,
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
        let lenient = self.lenient_matches(headers, body, now);
        if lenient.is_empty() {
            return Judgement {
                verdict: Verdict::Invalid,
                signed_ids: HashSet::new(),
            };
        }
        let verdict = match self.canonical(headers) {
            Some(reading) if self.matches(&reading, body, now, -EDGE) => Verdict::Valid,
            _ => Verdict::Either,
        };
        Judgement {
            verdict,
            signed_ids: lenient,
        }
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
    /// widened by `slack` seconds.
    fn matches(&self, reading: &Reading, body: &[u8], now: i64, slack: i64) -> bool {
        if self.rule.signs_timestamp() {
            let Some(value) = reading.value else {
                return false;
            };
            if now.abs_diff(value) > (self.tolerance + slack).max(0).unsigned_abs() {
                return false;
            }
        }
        let content = self.rule.content(&reading.timestamp, &reading.id, body);
        self.active
            .iter()
            .any(|key| reading.tags.contains(&hmac_sha256(key, &content)))
    }

    /// The request read exactly as documented, or `None` when it is not in that form.
    fn canonical(&self, headers: &Headers) -> Option<Reading> {
        let (sig_name, prefix, is_hex) = self.rule.signature_header();
        let single = |name: &str| -> Option<Vec<u8>> {
            let found = values(headers, name);
            (found.len() == 1 && printable(found[0])).then(|| found[0].to_vec())
        };
        let decode = |text: &[u8]| {
            if is_hex {
                lowercase_hex_tag(text)
            } else {
                canonical_base64_tag(text)
            }
        };
        match self.rule {
            Rule::Stripe | Rule::Paddle => {
                let (t_key, v_key, separator) = self.rule.timestamped_items()?;
                let value = single(sig_name)?;
                let mut timestamp = None;
                let mut tags = Vec::new();
                for item in value.split(|b| *b == separator) {
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
                let timestamp = timestamp?;
                let value = Some(canonical_decimal(&timestamp)?);
                (!tags.is_empty()).then_some(Reading {
                    timestamp,
                    value,
                    id: Vec::new(),
                    tags,
                })
            }
            Rule::Github | Rule::Shopify | Rule::Slack | Rule::Acme | Rule::Zoom | Rule::Square => {
                let signature = single(sig_name)?;
                let tag = decode(signature.strip_prefix(prefix.as_bytes())?)?;
                let (timestamp, value) = match self.rule.timestamp_header() {
                    Some(name) => {
                        let text = single(name)?;
                        let value = canonical_decimal(&text)?;
                        (text, Some(value))
                    }
                    None => (Vec::new(), None),
                };
                Some(Reading {
                    timestamp,
                    value,
                    id: self.url.clone(),
                    tags: vec![tag],
                })
            }
            Rule::Basic | Rule::Token => None,
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
                let mut tags = Vec::new();
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
                    }
                }
                (!tags.is_empty()).then_some(Reading {
                    timestamp,
                    value,
                    id,
                    tags,
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
        let tags: Vec<Vec<u8>> = signature_values
            .iter()
            .flat_map(|value| tag_candidates(value))
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let timestamps: Vec<(Vec<u8>, Option<i64>)> = if self.rule.signs_timestamp() {
            timestamp_values
                .iter()
                .flat_map(|value| timestamp_candidates(value))
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
                };
                if self.matches(&reading, body, now, EDGE) {
                    matched.insert(id.clone());
                }
            }
        }
        matched
    }
}

/// Every 32-byte value written in hex (any case) or base64 (padded or not, trailing bits
/// or not) anywhere in `value`.
fn tag_candidates(value: &[u8]) -> Vec<Vec<u8>> {
    let lenient = lenient_base64();
    let mut tags = Vec::new();
    for start in 0..value.len() {
        if let Some(window) = value.get(start..start + 64) {
            if window.iter().all(u8::is_ascii_hexdigit) {
                if let Ok(tag) = hex::decode(window) {
                    tags.push(tag);
                }
            }
        }
        for len in [43, 44] {
            if let Some(window) = value.get(start..start + len) {
                if let Ok(tag) = lenient.decode(window) {
                    if tag.len() == 32 {
                        tags.push(tag);
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
