//! Verification as Inlet signs: the published vectors, rotation, and every refusal.

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{signed_at, BODY, SECRET};
use inlet_inbox::verify::Headers;
use inlet_inbox::{InvalidSignature, Verifier};
use serde_json::Value;

const OTHER: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(seconds, 0).expect("a time")
}

fn headers<'a>(pairs: &'a [(&str, String)]) -> Headers<'a> {
    Headers::from_fn(|name| {
        pairs
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_bytes())
    })
}

fn refused(pairs: &[(&str, String)], body: &[u8], now: DateTime<Utc>) -> InvalidSignature {
    let verifier = Verifier::new([SECRET]).expect("a secret");
    verifier
        .verify_at(headers(pairs), body, now)
        .expect_err("refused")
}

/// The team's published Standard Webhooks vectors (tests/fixtures/signatures.json).
fn vectors() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/signatures.json"
    );
    let text = std::fs::read_to_string(path).expect("the published vectors");
    let all: Value = serde_json::from_str(&text).expect("JSON");
    all["vectors"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|v| v["scheme"] == "standard")
        .cloned()
        .collect()
}

#[test]
fn the_published_vectors_verify_as_they_say() {
    let vectors = vectors();
    assert!(vectors.len() >= 4, "valid and invalid vectors are present");
    for vector in vectors {
        let secret = vector["secret"].as_str().expect("a secret");
        let time = at(vector["timestamp"].as_i64().expect("a time"));
        let body = vector["body"].as_str().expect("a body").as_bytes();
        let pairs: Vec<(&str, String)> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .into_iter()
            .map(|name| {
                (
                    name,
                    vector["headers"][name].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        let verifier = Verifier::new([secret]).expect("a secret");
        let verdict = verifier.verify_at(headers(&pairs), body, time);
        assert_eq!(
            verdict.is_ok(),
            vector["valid"] == true,
            "{}",
            vector["source"]
        );
        if let Ok(delivery) = verdict {
            assert_eq!(delivery.message_id(), pairs[0].1);
            assert_eq!(delivery.body(), body);
        }
        // sign() reproduces each single published signature.
        if !pairs[2].1.contains(' ') && vector["valid"] == true {
            let ours = inlet_inbox::sign(secret, &pairs[0].1, body, time).expect("signs");
            assert_eq!(ours[2].1, pairs[2].1, "{}", vector["source"]);
        }
    }
}

#[test]
fn any_secret_in_rotation_verifies_and_any_entry_may_match() {
    let now = at(1_700_000_000);
    let mut pairs = signed_at("stripe:evt_1", BODY, now).to_vec();
    let rotating = Verifier::new([OTHER, SECRET]).expect("two secrets");
    let delivery = rotating
        .verify_at(headers(&pairs), BODY, now)
        .expect("verifies");
    assert_eq!(
        (delivery.message_id(), delivery.timestamp(), delivery.body()),
        ("stripe:evt_1", 1_700_000_000, BODY)
    );
    let by_other = inlet_inbox::sign(OTHER, "stripe:evt_1", BODY, now).expect("signs");
    pairs[2].1 = format!("{} {}", by_other[2].1, pairs[2].1);
    let only_ours = Verifier::new([SECRET]).expect("a secret");
    assert!(only_ours.verify_at(headers(&pairs), BODY, now).is_ok());
}

#[test]
fn wrong_missing_old_and_future_signatures_are_refused() {
    let now = at(1_700_000_000);
    let good = signed_at("stripe:evt_1", BODY, now);
    // Another body, another id, another secret.
    refused(
        &good,
        br#"{"type":"invoice.paid","data":{"amount":99}}"#,
        now,
    );
    let mut other_id = good.clone();
    other_id[0].1 = "stripe:evt_2".to_owned();
    refused(&other_id, BODY, now);
    let foreign = inlet_inbox::sign(OTHER, "stripe:evt_1", BODY, now).expect("signs");
    refused(&foreign, BODY, now);
    // Each header missing in turn.
    for missing in 0..3 {
        let mut pairs = good.to_vec();
        pairs.remove(missing);
        let reason = refused(&pairs, BODY, now).to_string();
        assert!(reason.starts_with("no webhook-"), "{reason}");
    }
    // Six minutes old, six minutes ahead; five minutes either way still verifies.
    let verifier = Verifier::new([SECRET]).expect("a secret");
    for skew in [-360, 360] {
        let stale = signed_at("stripe:evt_1", BODY, now + Duration::seconds(skew));
        assert!(refused(&stale, BODY, now).to_string().contains("tolerance"));
    }
    for skew in [-300, 300] {
        let edge = signed_at("stripe:evt_1", BODY, now + Duration::seconds(skew));
        assert!(verifier.verify_at(headers(&edge), BODY, now).is_ok());
    }
}

#[test]
fn an_empty_v1_entry_truncated_tags_and_junk_match_nothing() {
    let now = at(1_700_000_000);
    let good = signed_at("stripe:evt_1", BODY, now);
    let tag = good[2].1.clone();
    for list in [
        "v1,".to_owned(),
        "v1, ".to_owned(),
        format!("v1,{}", &tag[3..40]),
        tag.replace("v1,", "v2,"),
        tag.replace("v1,", "v1a,"),
        format!("{tag}="),
        "v1,!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!".to_owned(),
        String::new(),
    ] {
        let mut pairs = good.clone();
        pairs[2].1 = list.clone();
        refused(&pairs, BODY, now);
        refused(&pairs, b"", now);
    }
    // More than eight entries are refused even when the last one matches.
    let mut pairs = good.clone();
    pairs[2].1 = format!("{} {tag}", ["v1,x"; 8].join(" "));
    assert!(refused(&pairs, BODY, now).to_string().contains("too many"));
}

#[test]
fn malformed_ids_and_timestamps_are_one_error_type() {
    let now = at(1_700_000_000);
    let good = signed_at("stripe:evt_1", BODY, now);
    for (index, value) in [
        (1, "-1700000000".to_owned()),
        (1, "1700000000.0".to_owned()),
        (1, "9".repeat(13)),
        (1, " 1700000000".to_owned()),
        (0, String::new()),
        (0, "x".repeat(1025)),
    ] {
        let mut pairs = good.clone();
        pairs[index].1 = value;
        refused(&pairs, BODY, now);
    }
}

#[test]
fn weak_or_malformed_secrets_are_refused_at_startup_and_never_printed() {
    assert!(Verifier::new(["whsec_"]).is_err());
    assert!(Verifier::new(["whsec_c2hvcnQ="]).is_err(), "5 bytes of key");
    assert!(Verifier::new(["whsec_not base64!"]).is_err());
    assert!(Verifier::new(Vec::<&str>::new()).is_err());
    let verifier = Verifier::new([SECRET]).expect("a secret");
    assert_eq!(
        format!("{verifier:?}"),
        "Verifier { secrets: 1, tolerance: 300s }",
        "the count of secrets, never their keys"
    );
}
