//! Ed25519 schemes as pure functions: Discord interactions and Standard Webhooks `v1a`.
//! Vectors made offline by discord-interactions / tweetnacl / standardwebhooks
//! (`tests/fixtures/official-ed25519.json`), Inlet's own signer against them, rotation,
//! the tolerance in both directions, keys refused at startup, the PING handshake, and
//! property tests: any change to the body, the timestamp or the id is refused.
//!
//! `PROPTEST_CASES` sets how many cases each property runs (CI raises it).

#[path = "support/headers.rs"]
mod headers;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use ed25519_dalek::SigningKey;
use headers::header_map;
use inlet::config::Settings;
use inlet::provider::SourceSettings;
use inlet::secret::Secret;
use inlet::signature::{EventToSign, Keys, SignatureError, Unverified};
use proptest::prelude::*;
use std::path::PathBuf;

/// A source of `scheme` with these secrets, as an operator would configure it.
fn source(scheme: &str, secrets: &[&str]) -> SourceSettings {
    try_source(scheme, secrets).unwrap_or_else(|e| panic!("{scheme}: {e}"))
}

fn try_source(scheme: &str, secrets: &[&str]) -> Result<SourceSettings, String> {
    let secrets: Vec<String> = secrets.iter().map(|s| format!("{s:?}")).collect();
    let toml = format!(
        "[[sources]]\nname = \"s\"\nscheme = \"{scheme}\"\nsecrets = [{}]\n",
        secrets.join(", ")
    );
    Settings::from_toml(&toml)
        .map(|mut settings| settings.sources.remove(0))
        .map_err(|e| e.to_string())
}

fn verify(
    source: &SourceSettings,
    headers: &[(String, String)],
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<(), SignatureError> {
    let keys = Keys {
        secrets: &source.secrets,
        tolerance: source.tolerance,
        now,
    };
    let map = header_map(headers);
    source
        .provider
        .scheme()
        .verify(Unverified::new(&map, body), keys)
        .map(drop)
}

fn at(timestamp: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(timestamp, 0).expect("a valid time")
}

fn vectors() -> Vec<serde_json::Value> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/official-ed25519.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    doc["vectors"].as_array().expect("vectors").clone()
}

fn text<'v>(vector: &'v serde_json::Value, field: &str) -> &'v str {
    vector[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {vector}"))
}

/// The source a vector is verified by: Discord's public key, or the Standard secret.
fn vector_source(vector: &serde_json::Value) -> SourceSettings {
    let scheme = text(vector, "scheme");
    let secret = match scheme {
        "discord" => text(vector, "public_key"),
        _ => text(vector, "secret"),
    };
    source(scheme, &[secret])
}

fn vector_headers(vector: &serde_json::Value) -> Vec<(String, String)> {
    vector["headers"]
        .as_object()
        .expect("headers")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("a value").to_owned()))
        .collect()
}

fn check_vector(vector: &serde_json::Value, offset: i64) -> Result<(), SignatureError> {
    let now = at(vector["timestamp"].as_i64().expect("timestamp") + offset);
    let body = text(vector, "body").as_bytes();
    verify(&vector_source(vector), &vector_headers(vector), body, now)
}

#[test]
fn vectors_verify_exactly_when_their_library_accepts_them() {
    let vectors = vectors();
    let count = |scheme: &str| vectors.iter().filter(|v| v["scheme"] == scheme).count();
    assert!(
        count("discord") >= 5 && count("standard") >= 8,
        "vectors missing"
    );
    for vector in &vectors {
        let valid = vector["valid"].as_bool().expect("valid");
        let result = check_vector(vector, 0);
        assert_eq!(result.is_ok(), valid, "{}: {result:?}", vector["case"]);
        if !valid {
            assert!(
                matches!(result, Err(SignatureError::Mismatch(_))),
                "{}: {result:?}",
                vector["case"]
            );
        }
    }
}

#[test]
fn valid_vectors_fail_outside_the_tolerance_in_both_directions() {
    for vector in vectors().iter().filter(|v| v["valid"] == true) {
        for offset in [-300, 300] {
            assert!(check_vector(vector, offset).is_ok(), "{}", vector["case"]);
        }
        for offset in [-301, 301] {
            assert!(
                matches!(
                    check_vector(vector, offset),
                    Err(SignatureError::OutOfTolerance { .. })
                ),
                "{} at {offset}",
                vector["case"]
            );
        }
    }
}

fn sample_event(id: &str) -> EventToSign {
    EventToSign {
        id: id.to_owned(),
        event_type: String::new(),
    }
}

/// Inlet signs with the private key exactly what the library signed: Ed25519 is
/// deterministic, so the signature header is byte for byte the vector's.
#[test]
fn our_signer_produces_the_libraries_signatures() {
    let cases = ["application command", "PING", "v1a"];
    for vector in vectors()
        .iter()
        .filter(|v| cases.contains(&text(v, "case")))
    {
        let source = vector_source(vector);
        let key = Secret::new(text(vector, "private_key"));
        let signer = inlet::cli::signing_secret(&source, Some(&key)).expect("a private key");
        let headers = vector_headers(vector);
        let id = headers
            .iter()
            .find(|(name, _)| name == "webhook-id")
            .map_or("", |(_, value)| value.as_str());
        let now = at(vector["timestamp"].as_i64().expect("timestamp"));
        let ours = inlet::cli::signed_headers_with(
            &source,
            signer,
            text(vector, "body").as_bytes(),
            now,
            &sample_event(id),
        );
        for (name, value) in &headers {
            let mine = ours.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            assert_eq!(mine, Some(value), "{}: {name}", vector["case"]);
        }
    }
}

fn seed(byte: u8) -> SigningKey {
    SigningKey::from_bytes(&[byte; 32])
}

fn discord_public(key: &SigningKey) -> String {
    hex::encode(key.verifying_key().as_bytes())
}

fn discord_private(key: &SigningKey) -> Secret {
    Secret::new(hex::encode(key.to_bytes()))
}

fn whpk(key: &SigningKey) -> String {
    format!("whpk_{}", BASE64.encode(key.verifying_key().as_bytes()))
}

fn whsk(key: &SigningKey) -> Secret {
    Secret::new(format!("whsk_{}", BASE64.encode(key.to_bytes())))
}

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn signed_by(
    source: &SourceSettings,
    signer: &Secret,
    body: &[u8],
    now: DateTime<Utc>,
    id: &str,
) -> Vec<(String, String)> {
    inlet::cli::signed_headers_with(source, signer, body, now, &sample_event(id))
}

#[test]
fn every_configured_public_key_verifies_and_no_other() {
    let (current, old, removed) = (seed(1), seed(2), seed(3));
    let now = Utc::now();
    let body = br#"{"id":"1","type":2}"#;
    let discord = source(
        "discord",
        &[&discord_public(&current), &discord_public(&old)],
    );
    let standard = source("standard", &[&whpk(&current), &whpk(&old)]);
    for (source, sign) in [
        (&discord, discord_private as fn(&SigningKey) -> Secret),
        (&standard, whsk),
    ] {
        for key in [&current, &old] {
            let headers = signed_by(source, &sign(key), body, now, "msg_1");
            assert!(verify(source, &headers, body, now).is_ok());
        }
        let headers = signed_by(source, &sign(&removed), body, now, "msg_1");
        assert!(matches!(
            verify(source, &headers, body, now),
            Err(SignatureError::Mismatch(_))
        ));
    }
}

/// A source holding a whsec_ secret and a whpk_ key accepts v1 and v1a; each entry is
/// checked against the secrets of its own kind only.
#[test]
fn standard_mixes_shared_secrets_and_public_keys() {
    let key = seed(5);
    let now = Utc::now();
    let body = br#"{"type":"invoice.paid"}"#;
    let both = source("standard", &[WHSEC, &whpk(&key)]);
    let v1 = signed_by(&both, &Secret::new(WHSEC), body, now, "msg_v1");
    let v1a = signed_by(&both, &whsk(&key), body, now, "msg_v1a");
    assert!(v1.iter().any(|(_, v)| v.starts_with("v1,")));
    assert!(v1a.iter().any(|(_, v)| v.starts_with("v1a,")));
    assert!(verify(&both, &v1, body, now).is_ok());
    assert!(verify(&both, &v1a, body, now).is_ok());

    let hmac_only = source("standard", &[WHSEC]);
    assert!(matches!(
        verify(&hmac_only, &v1a, body, now),
        Err(SignatureError::Mismatch(_))
    ));
    let key_only = source("standard", &[&whpk(&key)]);
    assert!(matches!(
        verify(&key_only, &v1, body, now),
        Err(SignatureError::Mismatch(_))
    ));
    // A v1a signature relabelled v1 (or the reverse) is of the wrong length: no entry.
    let relabelled: Vec<(String, String)> = v1a
        .iter()
        .map(|(n, v)| (n.clone(), v.replacen("v1a,", "v1,", 1)))
        .collect();
    assert!(matches!(
        verify(&both, &relabelled, body, now),
        Err(SignatureError::Malformed { .. })
    ));
}

#[test]
fn keys_that_cannot_verify_are_refused_at_startup() {
    let key = seed(9);
    let mut small_order = [0u8; 32];
    small_order[0] = 1;
    let refused = [
        ("discord", "not hex at all".to_owned(), "64 hex"),
        ("discord", discord_public(&key)[..62].to_owned(), "32 bytes"),
        ("discord", hex::encode(small_order), "small order"),
        (
            "standard",
            format!("whpk_{}", BASE64.encode([1u8; 31])),
            "32 bytes",
        ),
        ("standard", "whpk_***".to_owned(), "base64"),
        ("standard", whsk(&key).expose().to_owned(), "whpk_"),
    ];
    for (scheme, secret, says) in refused {
        let error = try_source(scheme, &[&secret]).expect_err(&secret);
        assert!(error.contains(says), "{scheme} {secret}: {error}");
        assert!(error.contains("secrets[0]"), "{error}");
    }
    assert!(try_source("discord", &[&discord_public(&key).to_uppercase()]).is_ok());
}

#[test]
fn signing_needs_the_private_key_and_refuses_a_wrong_one() {
    let key = seed(4);
    let discord = source("discord", &[&discord_public(&key)]);
    let error = inlet::cli::signing_secret(&discord, None).unwrap_err();
    assert!(error.to_string().contains("--private-key"), "{error}");
    let short = Secret::new("abcd");
    assert!(inlet::cli::signing_secret(&discord, Some(&short)).is_err());
    // tweetnacl's 64-byte secretKey (seed and public key) signs too.
    let pair = Secret::new(hex::encode(key.to_keypair_bytes()));
    assert!(inlet::cli::signing_secret(&discord, Some(&pair)).is_ok());

    let mixed = source("standard", &[WHSEC, &whpk(&key)]);
    let first = inlet::cli::signing_secret(&mixed, None).expect("whsec_ signs");
    assert_eq!(first.expose(), WHSEC);
    let public_first = source("standard", &[&whpk(&key), WHSEC]);
    assert!(inlet::cli::signing_secret(&public_first, None).is_err());
    assert!(inlet::cli::signing_secret(&public_first, Some(&Secret::new(WHSEC))).is_err());
    let github = source("github", &["gh-secret-0123456789abcdef"]);
    assert!(inlet::cli::signing_secret(&github, Some(&whsk(&key))).is_err());
}

/// The PING is answered PONG (and so never reaches the ingest transaction); any other
/// interaction is an event.
#[test]
fn discord_ping_is_a_handshake_answered_pong() {
    let key = seed(6);
    let discord = source("discord", &[&discord_public(&key)]);
    let now = Utc::now();
    let answer = |body: &[u8]| {
        let headers = header_map(&signed_by(&discord, &discord_private(&key), body, now, ""));
        let keys = Keys {
            secrets: &discord.secrets,
            tolerance: discord.tolerance,
            now,
        };
        let verified = discord
            .provider
            .scheme()
            .verify(Unverified::new(&headers, body), keys)
            .expect("signed");
        discord.provider.handshake(&verified, &discord.secrets)
    };
    let pong = answer(br#"{"id":"1","type":1,"version":1}"#).expect("PONG");
    assert_eq!(pong.status, 200);
    assert_eq!(pong.body, br#"{"type":1}"#);
    assert!(answer(br#"{"id":"2","type":2}"#).is_none());
    assert!(answer(br#"{"id":"3","type":"1"}"#).is_none());
}

#[test]
fn missing_and_malformed_headers_are_told_apart() {
    let key = seed(7);
    let discord = source("discord", &[&discord_public(&key)]);
    let now = Utc::now();
    let body = b"{}";
    let good = signed_by(&discord, &discord_private(&key), body, now, "");
    let without = |name: &str| -> Vec<(String, String)> {
        good.iter().filter(|(n, _)| n != name).cloned().collect()
    };
    for name in ["X-Signature-Ed25519", "X-Signature-Timestamp"] {
        assert!(matches!(
            verify(&discord, &without(name), body, now),
            Err(SignatureError::Missing(_))
        ));
    }
    // Discord wants 401 for any signature that fails validation, a short one included.
    let mut short = without("X-Signature-Ed25519");
    short.push(("X-Signature-Ed25519".to_owned(), "abcd".to_owned()));
    assert!(matches!(
        verify(&discord, &short, body, now),
        Err(SignatureError::Mismatch(_))
    ));
    let mut timestamp = without("X-Signature-Timestamp");
    timestamp.push(("X-Signature-Timestamp".to_owned(), "soon".to_owned()));
    assert!(matches!(
        verify(&discord, &timestamp, body, now),
        Err(SignatureError::Malformed { .. })
    ));
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// A Discord or a Standard v1a source and the headers its sender signs `body` with.
fn signed(
    discord: bool,
    body: &[u8],
    now: DateTime<Utc>,
    id: &str,
) -> (SourceSettings, Vec<(String, String)>) {
    let key = seed(8);
    let (source, signer) = if discord {
        (
            source("discord", &[&discord_public(&key)]),
            discord_private(&key),
        )
    } else {
        (source("standard", &[WHSEC, &whpk(&key)]), whsk(&key))
    };
    let headers = signed_by(&source, &signer, body, now, id);
    (source, headers)
}

fn replaced(headers: &[(String, String)], name: &str, value: String) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.clone(), if n == name { value.clone() } else { v.clone() }))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn any_change_to_the_body_is_refused(
        discord in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 1..512),
        index in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let now = Utc::now();
        let (source, headers) = signed(discord, &body, now, "msg_p");
        prop_assert!(verify(&source, &headers, &body, now).is_ok());
        let mut changed = body.clone();
        changed[index.index(body.len())] ^= flip;
        prop_assert!(matches!(verify(&source, &headers, &changed, now), Err(SignatureError::Mismatch(_))));
    }

    #[test]
    fn any_change_to_the_timestamp_or_id_is_refused(
        discord in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
        shift in prop_oneof![-120i64..=-1, 1i64..=120],
        id in "[a-zA-Z0-9_]{1,32}",
    ) {
        let now = Utc::now();
        let (source, headers) = signed(discord, &body, now, "msg_p");
        let timestamp = if discord { "X-Signature-Timestamp" } else { "webhook-timestamp" };
        let moved = replaced(&headers, timestamp, (now.timestamp() + shift).to_string());
        prop_assert!(matches!(verify(&source, &moved, &body, now), Err(SignatureError::Mismatch(_))));
        if !discord && id != "msg_p" {
            let renamed = replaced(&headers, "webhook-id", id);
            prop_assert!(matches!(verify(&source, &renamed, &body, now), Err(SignatureError::Mismatch(_))));
        }
    }

    #[test]
    fn any_change_to_the_signature_is_refused(
        discord in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..128),
        byte in 0usize..64,
        bit in 0u8..8,
    ) {
        let now = Utc::now();
        let (source, headers) = signed(discord, &body, now, "msg_p");
        let name = if discord { "X-Signature-Ed25519" } else { "webhook-signature" };
        let value = &headers.iter().find(|(n, _)| n == name).expect("signed").1;
        let mut raw = if discord {
            hex::decode(value).expect("hex")
        } else {
            BASE64.decode(value.trim_start_matches("v1a,")).expect("base64")
        };
        raw[byte] ^= 1 << bit;
        let forged = if discord { hex::encode(&raw) } else { format!("v1a,{}", BASE64.encode(&raw)) };
        let forged = replaced(&headers, name, forged);
        prop_assert!(matches!(verify(&source, &forged, &body, now), Err(SignatureError::Mismatch(_))));
    }

    #[test]
    fn arbitrary_header_values_never_panic_and_never_verify(
        discord in any::<bool>(),
        values in prop::collection::vec(prop::collection::vec(32u8..=126, 0..160), 3),
        body in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        let (source, _) = signed(discord, &body, Utc::now(), "msg_p");
        let names = if discord {
            ["X-Signature-Ed25519", "X-Signature-Timestamp", "X-Signature-Timestamp"]
        } else {
            ["webhook-id", "webhook-timestamp", "webhook-signature"]
        };
        let mut headers = Vec::new();
        for (name, value) in names.iter().zip(&values) {
            if let Ok(value) = String::from_utf8(value.clone()) {
                headers.push(((*name).to_owned(), value));
            }
        }
        prop_assert!(verify(&source, &headers, &body, Utc::now()).is_err());
    }
}
