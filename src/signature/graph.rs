//! Microsoft Graph change notifications: one request carries a batch, `{"value": [{…},
//! …]}`, and each notification carries the `clientState` its subscription was created
//! with. Nothing is signed: `clientState` is a shared credential, compared in constant
//! time with every secret of the source, and it proves only that the sender knows it.
//!
//! Microsoft's rule is per notification ("if the clientState does not match, don't
//! consider the change notification valid"), and a request may carry notifications of
//! several subscriptions: a notification whose `clientState` matches no secret is
//! dropped, its siblings kept; a request none of whose notifications match is refused.
//!
//! The credential is no part of what the application needs: each notification is stored
//! and delivered with its `clientState` value replaced by `"[redacted]"`, every other byte
//! as received, and its event is the digest of those bytes.

use super::adyen::MAX_ITEMS;
use super::basic::any_secret_equals;
use super::{Batched, Signer};
use super::{Items, Keys, Scheme, SignatureError, Unverified, Verdict, Verified};
use crate::secret::{MinLength, Secret};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Where the credential travels, as a refusal names it.
const FIELD: &str = "clientState";

/// What a stored notification holds in place of its `clientState`.
pub const REDACTED: &str = "\"[redacted]\"";

/// Graph takes a `clientState` of at most 128 characters.
const MAX_CLIENT_STATE: usize = 128;

#[derive(Debug)]
pub struct Graph;

pub static GRAPH: Graph = Graph;

/// The request's envelope, its notifications left as the bytes they arrived as.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    value: Vec<&'a RawValue>,
}

/// One notification's fields, each as the bytes it arrived as. A name given twice (however
/// escaped) refuses the notification: only one `clientState` could be redacted, and the
/// other would be stored.
struct Fields<'a>(HashMap<String, &'a RawValue>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Fields<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object, each member named once")
            }

            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut fields = HashMap::new();
                while let Some((name, value)) = map.next_entry::<String, &'de RawValue>()? {
                    if fields.insert(name, value).is_some() {
                        return Err(serde::de::Error::custom("a member named twice"));
                    }
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

fn malformed(detail: impl Into<String>) -> SignatureError {
    SignatureError::malformed("value", detail)
}

/// The notifications of a Graph request.
fn notifications(body: &[u8]) -> Result<Vec<&RawValue>, SignatureError> {
    let envelope: Envelope<'_> = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("the body is not a Graph notification: {e}")))?;
    match envelope.value.len() {
        0 => Err(malformed(
            "the list is empty: a request carries one notification or more",
        )),
        n if n > MAX_ITEMS => Err(malformed(format!(
            "{n} notifications, over the {MAX_ITEMS} one request may carry"
        ))),
        _ => Ok(envelope.value),
    }
}

/// A notification whose `clientState` is one of `secrets`: its bytes with the credential
/// redacted; why not otherwise.
fn authenticated(n: usize, item: &RawValue, secrets: &[Secret]) -> Result<Vec<u8>, SignatureError> {
    let text = item.get();
    let Fields(fields) = serde_json::from_str(text).map_err(|_| {
        malformed(format!(
            "notification {n} is not an object, each member named once"
        ))
    })?;
    let raw = fields
        .get(FIELD)
        .ok_or_else(|| SignatureError::Missing(format!("notification {n}'s {FIELD}")))?;
    let state: String = serde_json::from_str(raw.get()).map_err(|_| {
        SignatureError::malformed(&format!("notification {n}'s {FIELD}"), "not text")
    })?;
    if !any_secret_equals(secrets, state.as_bytes()) {
        return Err(SignatureError::Mismatch(format!(
            "notification {n}'s {FIELD}"
        )));
    }
    // The value's place in the notification's text: `raw` is a slice of it.
    let start = (raw.get().as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
    let end = start.saturating_add(raw.get().len());
    match (text.get(..start), text.get(end..)) {
        (Some(before), Some(after)) => Ok([before, REDACTED, after].concat().into_bytes()),
        _ => Err(malformed(format!(
            "notification {n}'s {FIELD} could not be redacted"
        ))),
    }
}

impl Scheme for Graph {
    /// At least one notification's `clientState` must be a secret of the source; the
    /// others are dropped when the request is split ([`Scheme::items`]).
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let mut first_refusal = None;
        for (n, item) in notifications(request.body)?.into_iter().enumerate() {
            match authenticated(n, item, keys.secrets) {
                Ok(_) => return Ok(request.into_verified()),
                Err(refusal) => first_refusal = first_refusal.or(Some(refusal)),
            }
        }
        Err(first_refusal.unwrap_or_else(|| SignatureError::Missing(FIELD.to_owned())))
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        MinLength::CHOSEN.check(secret)?;
        match secret.expose().chars().count() {
            n if n > MAX_CLIENT_STATE => Err(format!(
                "a Graph clientState has at most {MAX_CLIENT_STATE} characters; this one has {n}"
            )),
            _ => Ok(()),
        }
    }

    fn batch(&self) -> Option<&dyn Batched> {
        Some(self)
    }
}

impl Signer for Graph {
    /// Every notification's `clientState` set to `secret` (tests, `inlet send`).
    fn sign_body(&self, body: &[u8], secret: &Secret) -> Option<Result<Vec<u8>, String>> {
        let signed = || -> Result<Vec<u8>, String> {
            let mut document: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
            let list = (document.get_mut("value"))
                .and_then(serde_json::Value::as_array_mut)
                .ok_or("no value array")?;
            for item in list.iter_mut() {
                let fields = item
                    .as_object_mut()
                    .ok_or("a notification that is not an object")?;
                fields.insert(FIELD.to_owned(), secret.expose().into());
            }
            serde_json::to_vec(&document).map_err(|e| e.to_string())
        };
        Some(signed())
    }
}

impl Batched for Graph {
    /// The notifications whose `clientState` is a secret of the source, each stored with it
    /// redacted; why each other is dropped.
    fn items<'r>(
        &self,
        request: &Verified<'r>,
        keys: Keys<'_>,
    ) -> Option<Result<Items<'r>, SignatureError>> {
        let split = || -> Result<Items<'r>, SignatureError> {
            let mut items = Items::default();
            for (n, item) in notifications(request.body())?.into_iter().enumerate() {
                match authenticated(n, item, keys.secrets) {
                    Ok(stored) => {
                        let digest: [u8; 32] = Sha256::digest(&stored).into();
                        let item = request.item(item.get().as_bytes(), digest);
                        items.verified.push((item, Some(stored)));
                    }
                    Err(refusal) => items.refused.push(refusal),
                }
            }
            Ok(items)
        };
        Some(split())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = "graph-client-state-0123456789";

    fn keys(secrets: &[Secret]) -> Keys<'_> {
        Keys {
            secrets,
            tolerance: std::time::Duration::from_secs(300),
            now: chrono::Utc::now(),
        }
    }

    fn split(body: &str, secret: &str) -> Result<(Vec<String>, usize), SignatureError> {
        let headers = http::HeaderMap::new();
        let secrets = [Secret::new(secret)];
        let verified = GRAPH.verify(Unverified::new(&headers, body.as_bytes()), keys(&secrets))?;
        let items = GRAPH.items(&verified, keys(&secrets)).expect("a batch")?;
        let stored = (items.verified.iter())
            .map(|(_, stored)| String::from_utf8(stored.clone().unwrap_or_default()).unwrap())
            .collect();
        Ok((stored, items.refused.len()))
    }

    #[test]
    fn notifications_whose_state_matches_are_kept_redacted_and_others_dropped() {
        let body = format!(
            r#"{{"value":[{{"changeType":"created","clientState":"{STATE}","resource":"a"}},
            {{"changeType":"updated","clientState":"someone else's","resource":"b"}},
            {{"resource":"c"}}]}}"#
        );
        let (stored, refused) = split(&body, STATE).unwrap();
        assert_eq!(
            stored,
            [r#"{"changeType":"created","clientState":"[redacted]","resource":"a"}"#]
        );
        assert_eq!(refused, 2);
        assert!(matches!(
            split(&body, "another state 0123456789"),
            Err(SignatureError::Mismatch(_))
        ));
        // Escapes in the value are read as JSON reads them, and redacted whole.
        let escaped = r#"{"value":[{"clientState":"graph-client-state-\u0030123456789","x":1}]}"#;
        let (stored, _) = split(escaped, STATE).unwrap();
        assert_eq!(stored, [r#"{"clientState":"[redacted]","x":1}"#]);
    }

    #[test]
    fn malformed_requests_are_refused() {
        for body in [
            "",
            "[]",
            r#"{"value":[]}"#,
            r#"{"value":{}}"#,
            r#"{"value":[1]}"#,
            r#"{"value":[{"clientState":7}]}"#,
            r#"{"value":[{"resource":"no state"}]}"#,
            // Only one of two clientStates could be redacted: the other would be stored.
            r#"{"value":[{"clientState":"graph-client-state-0123456789","client\u0053tate":"graph-client-state-0123456789"}]}"#,
        ] {
            assert!(split(body, STATE).is_err(), "{body}");
        }
    }

    #[test]
    fn a_client_state_is_16_to_128_characters() {
        assert!(GRAPH.check_secret(&Secret::new(STATE)).is_ok());
        assert!(GRAPH.check_secret(&Secret::new("short")).is_err());
        assert!(GRAPH.check_secret(&Secret::new("x".repeat(129))).is_err());
    }
}
