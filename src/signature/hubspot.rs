//! HubSpot's webhooks (signature v3): one request carries a batch, a JSON array of up to
//! 100 events, and the whole request is signed once. `X-HubSpot-Signature-v3` is the
//! base64 HMAC-SHA256, keyed with the app's client secret, of
//!
//! ```text
//! POST{uri}{body}{X-HubSpot-Request-Timestamp}
//! ```
//!
//! — the method, the URL HubSpot called (its target URL, registered with HubSpot: each
//! source states it as `public_url`), the raw body, and the timestamp header's value as
//! sent (Unix milliseconds). HubSpot's documentation decodes a fixed set of
//! percent-escapes in the URL before signing (`%3A` `:`, `%2F` `/`, `%3F` `?`, `%40` `@`,
//! `%21` `!`, `%24` `$`, `%27` `'`, `%28` `(`, `%29` `)`, `%2A` `*`, `%2C` `,`, `%3B` `;`),
//! so a `public_url` written with them is signed decoded. As `hubspot-api-client`'s
//! `Signature.is_valid` (12.0.0) checks it, with the timestamp held to the source's
//! tolerance in both directions (the library refuses only one older than 5 minutes).
//!
//! Each element of the array is an event of its own. HubSpot's `eventId` is "not
//! guaranteed to be unique", and a retried event comes back with its `attemptNumber`
//! raised — in another request, signed anew. What identifies an event is therefore its
//! every field but `attemptNumber`: an item's digest is that reading's, so a retry of it
//! is the same event and fingerprint, answered from the stored copy. An element without
//! what every HubSpot event carries ([`REQUIRED`]) refuses the whole request: it would be
//! stored and delivered without a type.

use super::timestamp::{parse_timestamp, TimeFormat};
use super::{
    base64_tag, check_hmac, json_objects, secret_hmac, with_json_type, SignedHeaders, ToSign,
    Verdict,
};
use super::{Batched, Signer};
use super::{Items, Keys, PublicUrl, Scheme, SignatureError, Unverified, Verified};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

const SIGNATURE: &str = "X-HubSpot-Signature-v3";
const TIMESTAMP: &str = "X-HubSpot-Request-Timestamp";

/// HubSpot sends a webhook with `POST`, and signs the method.
const METHOD: &[u8] = b"POST";

/// The field that changes between the attempts of one event.
const ATTEMPT: &str = "attemptNumber";

/// What every HubSpot event carries, and must, for an element to be one: its ids and time
/// as numbers, its type as text (the event's type).
const REQUIRED: [(&str, Kind); 5] = [
    ("eventId", Kind::Number),
    ("subscriptionId", Kind::Number),
    ("portalId", Kind::Number),
    ("occurredAt", Kind::Number),
    ("subscriptionType", Kind::Text),
];

/// The JSON type a required field must have.
#[derive(Clone, Copy)]
enum Kind {
    Number,
    Text,
}

/// The most events one request may carry: HubSpot sends at most 100; a thousand bounds the
/// work one request can ask for without refusing a real one.
pub const MAX_ITEMS: usize = 1000;

/// The percent-escapes HubSpot's documentation decodes in the URL before signing.
const DECODED: [(&str, &str); 12] = [
    ("%3A", ":"),
    ("%2F", "/"),
    ("%3F", "?"),
    ("%40", "@"),
    ("%21", "!"),
    ("%24", "$"),
    ("%27", "'"),
    ("%28", "("),
    ("%29", ")"),
    ("%2A", "*"),
    ("%2C", ","),
    ("%3B", ";"),
];

/// A HubSpot app's scheme: the target URL it signs, as HubSpot signs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSpot {
    signed_url: String,
}

impl HubSpot {
    pub fn new(target_url: PublicUrl) -> Self {
        Self {
            signed_url: signed_url(target_url.as_str()),
        }
    }

    fn signed<'a>(&'a self, body: &'a [u8], timestamp: &'a [u8]) -> [&'a [u8]; 4] {
        [METHOD, self.signed_url.as_bytes(), body, timestamp]
    }
}

/// `url` with the escapes of [`DECODED`] decoded (either case of hex digit), one pass, so
/// a decoded `%` never starts another escape.
fn signed_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3).unwrap_or("%");
        match DECODED.iter().find(|(e, _)| e.eq_ignore_ascii_case(escape)) {
            Some((_, plain)) => {
                out.push_str(plain);
                rest = &rest[at + escape.len()..];
            }
            // Not one of the table's: the `%` alone, so an escape right after it is read.
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The digest of what identifies an event: its fields but `attemptNumber`, in key order,
/// each value as the bytes it arrived as (no number is re-read), lengths framing each.
fn reading_digest(n: usize, item: &[u8]) -> Result<[u8; 32], SignatureError> {
    let fields: BTreeMap<String, &RawValue> = serde_json::from_slice(item).map_err(|e| {
        SignatureError::malformed("body", format!("event {n} is not a JSON object: {e}"))
    })?;
    check_required(n, &fields)?;
    let mut hash = Sha256::new();
    for (key, value) in fields.iter().filter(|(key, _)| key.as_str() != ATTEMPT) {
        for part in [key.as_bytes(), value.get().as_bytes()] {
            hash.update((part.len() as u64).to_be_bytes());
            hash.update(part);
        }
    }
    Ok(hash.finalize().into())
}

/// Refuses event `n` when one of [`REQUIRED`] is absent or of another JSON type (the last
/// of a repeated key counts, as in the digest): the first such field, named.
fn check_required(n: usize, fields: &BTreeMap<String, &RawValue>) -> Result<(), SignatureError> {
    for (name, kind) in REQUIRED {
        let value = fields.get(name).map(|value| value.get().trim_start());
        let fits = value.is_some_and(|value| match kind {
            Kind::Number => value.starts_with(|c: char| c == '-' || c.is_ascii_digit()),
            Kind::Text => value.starts_with('"') && value != "\"\"",
        });
        if !fits {
            let wanted = match kind {
                Kind::Number => "a number",
                Kind::Text => "a non-empty string",
            };
            return Err(SignatureError::malformed(
                "body",
                format!("event {n} has no {name} ({wanted}): not a HubSpot event"),
            ));
        }
    }
    Ok(())
}

impl Scheme for HubSpot {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let tag = base64_tag(&request, SIGNATURE, 32, "32-byte HMAC-SHA256")?;
        let timestamp = request.required(TIMESTAMP)?;
        let millis = parse_timestamp(TIMESTAMP, timestamp)?;
        check_hmac(
            keys,
            &self.signed(request.body, timestamp),
            &[tag],
            SIGNATURE,
        )?;
        TimeFormat::UnixMillis.check(millis, now, keys.tolerance)?;
        json_objects(request.body, "HubSpot", MAX_ITEMS)?;
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn batch(&self) -> Option<&dyn Batched> {
        Some(self)
    }
}

impl Signer for HubSpot {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body, secret, now, ..
        } = signing;
        let timestamp = TimeFormat::UnixMillis.write(now);
        let tag = secret_hmac(secret, &self.signed(body, timestamp.as_bytes()));
        with_json_type([(SIGNATURE, BASE64.encode(tag)), (TIMESTAMP, timestamp)])
    }
}

impl Batched for HubSpot {
    /// Each event of the array, its digest that of its fields but `attemptNumber`.
    fn items<'r>(
        &self,
        request: &Verified<'r>,
        _keys: Keys<'_>,
    ) -> Option<Result<Items<'r>, SignatureError>> {
        let split = || -> Result<Items<'r>, SignatureError> {
            let events = json_objects(request.body(), "HubSpot", MAX_ITEMS)?;
            let mut verified = Vec::with_capacity(events.len());
            for (n, bytes) in events.into_iter().enumerate() {
                verified.push((request.item(bytes, reading_digest(n, bytes)?), None));
            }
            Ok(Items {
                verified,
                refused: Vec::new(),
            })
        };
        Some(split())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use crate::signature::EventToSign;
    use chrono::{DateTime, Utc};
    use std::time::Duration;

    const SECRET: &str = "0f2a6c1e-8d4b-4f3a-9c7e-5b1d2e3f4a5b";
    const URL: &str = "https://hooks.example.com/webhooks/hubspot";

    fn scheme() -> HubSpot {
        HubSpot::new(PublicUrl::parse(URL.to_owned()).expect("absolute"))
    }

    fn event(id: u64, attempt: u32) -> String {
        format!(
            r#"{{"eventId":{id},"subscriptionId":7,"portalId":62515,"appId":54321,"occurredAt":1764850000000,"subscriptionType":"contact.creation","attemptNumber":{attempt},"objectId":{id},"changeSource":"CRM"}}"#
        )
    }

    fn split(
        body: &str,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, SignatureError> {
        let secret = Secret::new(SECRET);
        let event = EventToSign {
            id: String::new(),
            event_type: String::new(),
        };
        let mut headers = http::HeaderMap::new();
        for (name, value) in scheme().sign(ToSign::new(body.as_bytes(), &secret, at, &event)) {
            headers.insert(
                http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        let secrets = [secret];
        let keys = Keys {
            secrets: &secrets,
            tolerance: Duration::from_secs(300),
            now,
        };
        let verified = scheme().verify(Unverified::new(&headers, body.as_bytes()), keys)?;
        let items = scheme().items(&verified, keys).expect("a batch")?;
        Ok(items
            .verified
            .iter()
            .map(|(item, _)| item.content_digest())
            .collect())
    }

    #[test]
    fn a_retried_event_is_the_same_event_and_others_are_not() {
        let now = Utc::now();
        let first = split(&format!("[{},{}]", event(1, 0), event(2, 0)), now, now).expect("signed");
        let retry = split(&format!("[{}]", event(1, 3)), now, now).expect("signed");
        assert_eq!(first.len(), 2);
        assert_ne!(first[0], first[1]);
        assert_eq!(retry, [first[0].clone()]);
    }

    #[test]
    fn the_timestamp_is_held_to_the_tolerance_both_ways() {
        let now = Utc::now();
        let body = format!("[{}]", event(1, 0));
        // To the millisecond: 300 s is within, 300.001 s beyond, either way.
        for skew in [-300_001, 300_001, -300_999, 300_999] {
            let at = now + chrono::Duration::milliseconds(skew);
            assert!(matches!(
                split(&body, at, now),
                Err(SignatureError::OutOfTolerance { .. })
            ));
        }
        for skew in [-300_000, 300_000, -299_999, 0] {
            let at = now + chrono::Duration::milliseconds(skew);
            assert!(split(&body, at, now).is_ok(), "{skew}");
        }
    }

    #[test]
    fn a_batch_must_be_an_array_of_objects() {
        let now = Utc::now();
        for body in ["[]", "{}", "[1]", "[{}, 2]", "not json"] {
            assert!(
                matches!(split(body, now, now), Err(SignatureError::Malformed { .. })),
                "{body}"
            );
        }
    }

    #[test]
    fn an_element_without_a_hubspot_events_fields_is_refused() {
        let now = Utc::now();
        let good = event(1, 0);
        let without = |field: &str, value: &str| {
            let mut item: serde_json::Value = serde_json::from_str(&good).unwrap_or_default();
            match value {
                "" => item.as_object_mut().map(|o| o.remove(field)),
                _ => item.as_object_mut().map(|o| {
                    o.insert(
                        field.to_owned(),
                        serde_json::from_str(value).unwrap_or_default(),
                    )
                }),
            };
            item.to_string()
        };
        assert!(split(&format!("[{good}]"), now, now).is_ok());
        for (item, named) in [
            ("{}".to_owned(), "eventId"),
            (r#"{"eventId":1}"#.to_owned(), "subscriptionId"),
            (
                without("subscriptionType", r#"{"a":1}"#),
                "subscriptionType",
            ),
            (without("subscriptionType", r#""""#), "subscriptionType"),
            (without("subscriptionType", "null"), "subscriptionType"),
            (without("occurredAt", r#""1764850000000""#), "occurredAt"),
            (without("portalId", ""), "portalId"),
        ] {
            let body = format!("[{good},{item}]");
            match split(&body, now, now) {
                Err(SignatureError::Malformed { detail, .. }) => {
                    assert!(
                        detail.contains("event 1") && detail.contains(named),
                        "{detail}"
                    )
                }
                other => panic!("{item}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_documented_escapes_are_decoded_and_no_others() {
        assert_eq!(
            signed_url("https://h.example/a%3Ab%2fc%3F%40%21%24%27%28%29%2A%2C%3Bd"),
            "https://h.example/a:b/c?@!$'()*,;d"
        );
        assert_eq!(signed_url("https://h/x%20y%25%3"), "https://h/x%20y%25%3");
        assert_eq!(signed_url("https://h/%253A"), "https://h/%253A");
        assert_eq!(signed_url("%"), "%");
        assert_eq!(signed_url("https://h/%%3A"), "https://h/%:");
        assert_eq!(signed_url("https://h/%3%3A"), "https://h/%3:");
        assert_eq!(signed_url("https://h/%2%2F"), "https://h/%2/");
    }
}
