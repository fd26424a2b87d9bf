//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`, HMAC-SHA256 over
//! `"{t}.{body}"` keyed with the whole `whsec_…` string. Every `v1` is tried (Stripe sends
//! several while a secret rolls); other schemes such as `v0` are ignored; a header of more
//! than [`super::MAX_SIGNATURES`] signatures is refused. Event id and type come from the
//! JSON body (`id`, `type`).

use super::timestamped::SignatureList;
use crate::secret::MinLength;

pub static STRIPE: SignatureList = SignatureList {
    // Stripe issues `whsec_` and 32 characters (its CLI: 64 hex); the HMAC key is the
    // whole string, so a secret without the prefix can never verify.
    secret: Some(MinLength {
        prefix: "whsec_",
        prefix_required: true,
        min: 32,
        rule: "a Stripe signing secret is whsec_ followed by at least 32 characters, \
               as Stripe issues them",
    }),
    ..SignatureList::stripe_like("Stripe-Signature")
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use crate::signature::{EventToSign, Keys, Scheme, SignatureError, Unverified};
    use crate::signature::{Signer, ToSign};
    use chrono::DateTime;
    use http::{HeaderMap, HeaderName, HeaderValue};
    use std::time::Duration;

    fn headers(value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            HeaderName::from_static("stripe-signature"),
            HeaderValue::from_str(value).unwrap(),
        );
        map
    }

    #[test]
    fn headers_without_a_timestamp_or_a_signature_are_refused() {
        assert!(STRIPE.parse_header(b"v1=00").is_err());
        assert!(STRIPE.parse_header(b"t=12").is_err());
        assert!(STRIPE.parse_header(b"t=x,v1=00").is_err());
        assert!(STRIPE.parse_header(b"t=1,t=2,v1=00").is_err());
        assert!(STRIPE.parse_header(b"").is_err());
    }

    #[test]
    fn more_signatures_than_the_bound_are_refused_before_any_is_checked() {
        let v1 = format!("v1={}", "aa".repeat(32));
        let at_bound = [v1.as_str(); crate::signature::MAX_SIGNATURES].join(",");
        let parsed = STRIPE
            .parse_header(format!("t=12,{at_bound}").as_bytes())
            .unwrap();
        assert_eq!(parsed.signatures.len(), crate::signature::MAX_SIGNATURES);
        for extra in [v1.as_str(), "v0=00", "junk"] {
            let refused = STRIPE
                .parse_header(format!("t=12,{at_bound},{extra}").as_bytes())
                .unwrap_err();
            assert!(
                refused.to_string().contains("more than 8 signatures"),
                "{refused}"
            );
        }
    }

    #[test]
    fn signs_what_it_verifies_with_any_rotated_secret() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let old = Secret::new("whsec_old");
        let new = Secret::new("whsec_new");
        let body = br#"{"id":"evt_1"}"#;
        let event = EventToSign {
            id: "evt_1".into(),
            event_type: "x".into(),
        };
        let signed = STRIPE.sign(ToSign::new(body, &old, now, &event));
        let map = headers(&signed[0].1);
        let secrets = [new.clone(), old];
        let keys = Keys {
            secrets: &secrets,
            tolerance: Duration::from_secs(300),
            now,
        };
        assert!(STRIPE.verify(Unverified::new(&map, body), keys).is_ok());
        let only_new = [new];
        let keys = Keys {
            secrets: &only_new,
            tolerance: Duration::from_secs(300),
            now,
        };
        assert_eq!(
            STRIPE
                .verify(Unverified::new(&map, body), keys)
                .unwrap_err(),
            SignatureError::Mismatch(STRIPE.header.to_owned())
        );
    }
}
