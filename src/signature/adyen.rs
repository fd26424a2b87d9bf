//! Adyen's standard webhooks: one request carries a batch, `{"live": …,
//! "notificationItems": [{"NotificationRequestItem": {…}}, …]}`, and each item is signed
//! on its own. The item's `additionalData.hmacSignature` is the base64 HMAC-SHA256, keyed
//! with the hex-decoded HMAC key, of eight of its fields joined by `:` —
//!
//! ```text
//! pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success
//! ```
//!
//! (`value` and `currency` from `amount`; an absent field is empty), as Adyen's own
//! libraries compute it (`HmacValidator.getDataToSign` in `@adyen/api-library`). Nothing
//! else in the request is signed and no time is: what an item *means* is what those eight
//! fields say, so an item's digest is the digest of that signed reading.
//!
//! The rule for a batch: every item must verify, or the request is refused and none of it
//! is stored. Adyen acknowledges per request (`[accepted]`) and retries the whole request
//! otherwise, so a refusal costs one retry of items that are each answered from their
//! stored copy; accepting part would acknowledge an item no one authenticated.

use super::{
    any_matches, hmac_sha256, Items, Keys, Scheme, SignatureError, Unverified, Verdict, Verified,
};
use super::{Batched, Signer};
use crate::secret::Secret;
use base64::Engine;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Where an item's signature travels, as a refusal names it.
const SIGNATURE_FIELD: &str = "additionalData.hmacSignature";

/// The most items one request may carry. Adyen sends one item per request today and
/// documents batches of several; a thousand bounds the work one request can ask for.
pub const MAX_ITEMS: usize = 1000;

/// The fields an item's signature covers, in their signed order (`amount` read apart).
const SIGNED_BEFORE_AMOUNT: [&str; 4] = [
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
];
const SIGNED_AFTER_AMOUNT: [&str; 2] = ["eventCode", "success"];

#[derive(Debug)]
pub struct Adyen;

pub static ADYEN: Adyen = Adyen;

/// The request's envelope, its items left as the bytes they arrived as.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "notificationItems", borrow)]
    items: Vec<&'a RawValue>,
}

/// One item: its `NotificationRequestItem`, and its bytes within the body.
struct Item<'r> {
    bytes: &'r [u8],
    fields: serde_json::Map<String, Value>,
}

fn malformed(detail: impl Into<String>) -> SignatureError {
    SignatureError::malformed("notificationItems", detail)
}

/// The items of an Adyen request, each with its bytes within `body`.
fn items(body: &[u8]) -> Result<Vec<Item<'_>>, SignatureError> {
    let envelope: Envelope<'_> = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not an Adyen notification: {e}")))?;
    if envelope.items.is_empty() {
        return Err(malformed(
            "the list is empty: a request carries one item or more",
        ));
    }
    if envelope.items.len() > MAX_ITEMS {
        return Err(malformed(format!(
            "{} items, over the {MAX_ITEMS} one request may carry",
            envelope.items.len()
        )));
    }
    envelope
        .items
        .into_iter()
        .enumerate()
        .map(|(n, raw)| {
            let mut wrapper: serde_json::Map<String, Value> =
                serde_json::from_str(raw.get()).map_err(|_| item_error(n, "is not an object"))?;
            match wrapper.remove("NotificationRequestItem") {
                Some(Value::Object(fields)) => Ok(Item {
                    bytes: raw.get().as_bytes(),
                    fields,
                }),
                _ => Err(item_error(n, "has no NotificationRequestItem object")),
            }
        })
        .collect()
}

fn item_error(n: usize, detail: &str) -> SignatureError {
    malformed(format!("item {n} {detail}"))
}

/// A signed field as Adyen's libraries write it into the signed text: a string as it is,
/// a number or a boolean as written, an absent field (or null) empty.
fn signed_text(value: Option<&Value>) -> Result<String, String> {
    match value {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        Some(_) => Err("is neither text, a number nor a boolean".to_owned()),
    }
}

/// The text item `n`'s signature covers, from its `NotificationRequestItem` fields.
fn signed_reading(
    fields: &serde_json::Map<String, Value>,
    n: usize,
) -> Result<String, SignatureError> {
    let field = |name: &str, value: Option<&Value>| {
        signed_text(value).map_err(|detail| item_error(n, &format!("field {name} {detail}")))
    };
    let amount = match fields.get("amount") {
        Some(Value::Object(amount)) => amount,
        _ => return Err(item_error(n, "has no amount object (it is signed)")),
    };
    let mut parts = Vec::with_capacity(8);
    for name in SIGNED_BEFORE_AMOUNT {
        parts.push(field(name, fields.get(name))?);
    }
    parts.push(field("amount.value", amount.get("value"))?);
    parts.push(field("amount.currency", amount.get("currency"))?);
    for name in SIGNED_AFTER_AMOUNT {
        parts.push(field(name, fields.get(name))?);
    }
    Ok(parts.join(":"))
}

impl Item<'_> {
    fn signed_reading(&self, n: usize) -> Result<String, SignatureError> {
        signed_reading(&self.fields, n)
    }

    /// The item's signature: base64 of 32 bytes.
    fn signature(&self, n: usize) -> Result<Vec<u8>, SignatureError> {
        let text = self
            .fields
            .get("additionalData")
            .and_then(|data| data.get("hmacSignature"))
            .and_then(Value::as_str)
            .ok_or_else(|| SignatureError::Missing(format!("item {n}'s {SIGNATURE_FIELD}")))?;
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .ok()
            .filter(|tag| tag.len() == 32)
            .ok_or_else(|| {
                SignatureError::malformed(
                    &format!("item {n}'s {SIGNATURE_FIELD}"),
                    "not a base64 HMAC-SHA256",
                )
            })
    }
}

/// An Adyen HMAC key: hex, 32 bytes or more once decoded.
fn key_of(secret: &Secret) -> Option<Vec<u8>> {
    hex::decode(secret.expose().trim())
        .ok()
        .filter(|key| key.len() >= 32)
}

impl Adyen {
    /// Every item of a verified request, as a verified request of its own: its bytes, the
    /// request's headers, and as its digest that of its signed reading.
    pub fn split<'r>(&self, request: &Verified<'r>) -> Result<Vec<Verified<'r>>, SignatureError> {
        let body = request.body();
        let mut split = Vec::new();
        for (n, item) in items(body)?.iter().enumerate() {
            let digest: [u8; 32] = Sha256::digest(item.signed_reading(n)?.as_bytes()).into();
            split.push(request.item(item.bytes, digest));
        }
        Ok(split)
    }

    /// `body` with every item's `additionalData.hmacSignature` set, signed with `secret`
    /// (tests, `inlet send`): the items as Adyen writes them, in order.
    pub fn sign_items(&self, body: &[u8], secret: &Secret) -> Result<Vec<u8>, String> {
        let key = key_of(secret).ok_or("an Adyen HMAC key is hex, 32 bytes or more")?;
        let mut document: Value =
            serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let list = document
            .get_mut("notificationItems")
            .and_then(Value::as_array_mut)
            .ok_or("no notificationItems array")?;
        for (n, wrapper) in list.iter_mut().enumerate() {
            let fields = wrapper
                .get_mut("NotificationRequestItem")
                .and_then(Value::as_object_mut)
                .ok_or("an item without NotificationRequestItem")?;
            let reading = signed_reading(fields, n).map_err(|e| e.to_string())?;
            let tag = base64::engine::general_purpose::STANDARD
                .encode(hmac_sha256(&key, &[reading.as_bytes()]));
            let data = fields
                .entry("additionalData")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            data.as_object_mut()
                .ok_or("additionalData is not an object")?
                .insert("hmacSignature".to_owned(), Value::String(tag));
        }
        serde_json::to_vec(&document).map_err(|e| e.to_string())
    }
}

impl Scheme for Adyen {
    /// Every item's signature must match one of the source's keys: one request, one
    /// verdict.
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let decoded: Vec<Vec<u8>> = keys.secrets.iter().filter_map(key_of).collect();
        for (n, item) in items(request.body)?.iter().enumerate() {
            let tag = item.signature(n)?;
            let reading = item.signed_reading(n)?;
            let keys = decoded.iter().map(Vec::as_slice);
            if !any_matches(keys, &[reading.as_bytes()], std::slice::from_ref(&tag)) {
                return Err(SignatureError::Mismatch(format!(
                    "item {n}'s {SIGNATURE_FIELD}"
                )));
            }
        }
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        match key_of(secret) {
            Some(_) => Ok(()),
            None => Err(
                "an Adyen HMAC key is the hex text Adyen generates: 64 hex digits \
                         (32 bytes) or more"
                    .to_owned(),
            ),
        }
    }

    fn batch(&self) -> Option<&dyn Batched> {
        Some(self)
    }
}

impl Signer for Adyen {
    fn sign_body(&self, body: &[u8], secret: &Secret) -> Option<Result<Vec<u8>, String>> {
        Some(self.sign_items(body, secret))
    }
}

impl Batched for Adyen {
    /// Every item: [`Scheme::verify`] refused the request unless each verified.
    fn items<'r>(
        &self,
        request: &Verified<'r>,
        _keys: Keys<'_>,
    ) -> Option<Result<Items<'r>, SignatureError>> {
        Some(self.split(request).map(|verified| Items {
            verified: verified.into_iter().map(|item| (item, None)).collect(),
            refused: Vec::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

    fn item(psp: &str, code: &str) -> String {
        format!(
            r#"{{"NotificationRequestItem":{{"pspReference":"{psp}","merchantAccountCode":"M",
            "merchantReference":"r","amount":{{"value":1130,"currency":"EUR"}},
            "eventCode":"{code}","success":"true","additionalData":{{}}}}}}"#
        )
    }

    fn signed(items: &[String]) -> Vec<u8> {
        let body = format!(
            r#"{{"live":"false","notificationItems":[{}]}}"#,
            items.join(",")
        );
        ADYEN
            .sign_items(body.as_bytes(), &Secret::new(KEY))
            .unwrap()
    }

    fn verify(body: &[u8], key: &str) -> Result<usize, SignatureError> {
        let headers = http::HeaderMap::new();
        let keys = Keys {
            secrets: &[Secret::new(key)],
            tolerance: std::time::Duration::from_secs(300),
            now: chrono::Utc::now(),
        };
        let verified = ADYEN.verify(Unverified::new(&headers, body), keys)?;
        Ok(ADYEN.split(&verified)?.len())
    }

    #[test]
    fn every_item_must_verify() {
        let body = signed(&[item("A", "AUTHORISATION"), item("B", "CAPTURE")]);
        assert_eq!(verify(&body, KEY), Ok(2));
        let other = "00".repeat(32);
        assert!(matches!(
            verify(&body, &other),
            Err(SignatureError::Mismatch(_))
        ));
        // A signed field changed in the second item: the whole request is refused.
        let text = String::from_utf8(body).unwrap();
        let tampered = text.replacen("\"CAPTURE\"", "\"REFUND\"", 1);
        assert!(matches!(
            verify(tampered.as_bytes(), KEY),
            Err(SignatureError::Mismatch(detail)) if detail.starts_with("item 1")
        ));
        // An unsigned field changed: still verified, and the same signed reading.
        let unsigned = text.replacen("\"live\":\"false\"", "\"live\":\"true\"", 1);
        assert_eq!(verify(unsigned.as_bytes(), KEY), Ok(2));
    }

    #[test]
    fn items_are_their_bytes_and_digest_their_signed_reading() {
        let body = signed(&[item("A", "AUTHORISATION")]);
        let headers = http::HeaderMap::new();
        let verified = Unverified::new(&headers, &body).into_verified();
        let split = ADYEN.split(&verified).unwrap();
        let text = std::str::from_utf8(split[0].body()).unwrap();
        assert!(text.starts_with(r#"{"NotificationRequestItem""#), "{text}");
        let reading = "A::M:r:1130:EUR:AUTHORISATION:true";
        assert_eq!(
            split[0].content_digest(),
            hex::encode(Sha256::digest(reading.as_bytes()))
        );
    }

    #[test]
    fn malformed_batches_are_refused_with_the_item_named() {
        for body in [
            &b"[accepted]"[..],
            br#"{"notificationItems":{}}"#,
            br#"{"notificationItems":[1]}"#,
            br#"{"notificationItems":[{"NotificationRequestItem":{"amount":{},"additionalData":{"hmacSignature":"x"}}}]}"#,
            br#"{"notificationItems":[{"NotificationRequestItem":{"eventCode":"A"}}]}"#,
        ] {
            assert!(
                matches!(verify(body, KEY), Err(SignatureError::Malformed { .. } | SignatureError::Missing(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let many = vec![item("A", "X"); MAX_ITEMS + 1];
        let body = format!(r#"{{"notificationItems":[{}]}}"#, many.join(","));
        assert!(verify(body.as_bytes(), KEY).is_err());
        assert!(verify(br#"{"notificationItems":[]}"#, KEY).is_err());
    }

    #[test]
    fn keys_are_hex_of_32_bytes_or_more() {
        assert!(ADYEN.check_secret(&Secret::new(KEY)).is_ok());
        assert!(ADYEN.check_secret(&Secret::new(&KEY[..62])).is_err());
        assert!(ADYEN.check_secret(&Secret::new("z".repeat(64))).is_err());
    }
}
