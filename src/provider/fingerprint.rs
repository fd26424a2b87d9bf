//! What a provider's event fingerprint covers, where every legitimate copy of an event is
//! not the same bytes: a Stripe event listed by its API is serialised otherwise than its
//! webhook (pretty-printed there, keys in another order), and a Paddle replay carries a
//! new `notification_id` under the same `event_id`. The fingerprint of such an event is
//! the sha256 of a canonical form of its JSON — keys sorted, no whitespace, the fields
//! that differ between legitimate copies left out — so that every copy gets the stored
//! answer and only a genuinely different body under the same id is refused.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// A provider's fingerprint of an event, from its body as already parsed (the request's
/// identity reads it once, for every locator): the sha256 (hex) of its canonical form, or
/// `None` when it has none (not a JSON object): the raw body's digest is used then.
pub type Fingerprint = fn(&Value) -> Option<String>;

/// Stripe: the event, canonically written, without `pending_webhooks` — the endpoints
/// still owed it when this copy was written, a count the API's listing and each webhook
/// retry give as it is at that moment.
pub fn stripe(document: &Value) -> Option<String> {
    canonical_digest(document, &["pending_webhooks"])
}

/// Paddle Billing: the event without its `notification_id` (a replay's is new).
pub fn paddle(document: &Value) -> Option<String> {
    canonical_digest(document, &["notification_id"])
}

/// The sha256 (hex) of `document`, a JSON object, written canonically without its
/// top-level fields named in `without` (left out as it is written: nothing is copied).
pub fn canonical_digest(document: &Value, without: &[&str]) -> Option<String> {
    let Value::Object(object) = document else {
        return None;
    };
    let mut out = Vec::with_capacity(1024);
    let kept = object
        .iter()
        .filter(|(key, _)| !without.contains(&key.as_str()));
    write_object(kept, &mut out);
    Some(hex::encode(Sha256::digest(&out)))
}

/// `value` as JSON with object keys sorted and no whitespace (strings and numbers as
/// serde_json writes them).
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(object) => write_object(object.iter(), out),
        Value::Array(items) => {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// An object's fields, keys sorted (serde_json's map keeps them sorted already unless
/// `preserve_order` is on: sorting a sorted list is one pass).
fn write_object<'v>(fields: impl Iterator<Item = (&'v String, &'v Value)>, out: &mut Vec<u8>) {
    let mut fields: Vec<(&String, &Value)> = fields.collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (n, (key, value)) in fields.into_iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        write_key(key, out);
        out.push(b':');
        write_canonical(value, out);
    }
    out.push(b'}');
}

/// A key as a JSON string (as serde_json writes strings), without copying it.
fn write_key(key: &str, out: &mut Vec<u8>) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, key);
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    /// The fingerprints as ingest computes them: from the body parsed once.
    fn stripe(body: &[u8]) -> Option<String> {
        super::stripe(&serde_json::from_slice(body).ok()?)
    }

    fn paddle(body: &[u8]) -> Option<String> {
        super::paddle(&serde_json::from_slice(body).ok()?)
    }

    #[test]
    fn key_order_and_whitespace_do_not_change_the_fingerprint() {
        let compact = br#"{"id":"evt_1","data":{"object":{"id":"pi_1","amount":2000}},"type":"x"}"#;
        let pretty = b"{\n  \"type\": \"x\",\n  \"id\": \"evt_1\",\n  \"data\": {\n    \"object\": {\"amount\": 2000, \"id\": \"pi_1\"}\n  }\n}";
        assert_eq!(stripe(compact), stripe(pretty));
        assert!(stripe(compact).is_some());
        let owed = br#"{"id":"evt_1","pending_webhooks":2,"data":{"object":{"id":"pi_1","amount":2000}},"type":"x"}"#;
        let listed = br#"{"id":"evt_1","pending_webhooks":1,"data":{"object":{"id":"pi_1","amount":2000}},"type":"x"}"#;
        assert_eq!(stripe(owed), stripe(listed));
        assert_eq!(stripe(owed), stripe(compact));
    }

    #[test]
    fn a_different_value_is_a_different_fingerprint() {
        let one = br#"{"id":"evt_1","data":{"amount":2000}}"#;
        let other = br#"{"id":"evt_1","data":{"amount":2001}}"#;
        assert_ne!(stripe(one), stripe(other));
        // Array order is content.
        assert_ne!(stripe(br#"{"a":[1,2]}"#), stripe(br#"{"a":[2,1]}"#));
    }

    #[test]
    fn a_paddle_replay_is_the_same_event_but_not_another_body() {
        let sent = br#"{"event_id":"evt_1","notification_id":"ntf_1","data":{"id":"txn_1"}}"#;
        let replay = br#"{"notification_id":"ntf_2","event_id":"evt_1","data":{"id":"txn_1"}}"#;
        let altered = br#"{"event_id":"evt_1","notification_id":"ntf_2","data":{"id":"txn_2"}}"#;
        assert_eq!(paddle(sent), paddle(replay));
        assert_ne!(paddle(sent), paddle(altered));
        assert_ne!(stripe(sent), stripe(replay));
    }

    #[test]
    fn a_body_that_is_not_a_json_object_has_no_canonical_form() {
        assert_eq!(stripe(b"not json"), None);
        assert_eq!(stripe(b"[1]"), None);
    }
}
