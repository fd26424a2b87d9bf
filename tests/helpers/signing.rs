//! Signing written independently of Inlet's, and the published vectors.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::path::PathBuf;

/// Stripe's algorithm, written independently of Inlet's: `t=…,v1=hex(HMAC(secret, "t.body"))`.
pub fn stripe_signature(secret: &str, body: &[u8], timestamp: i64) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// A Stripe event body.
pub fn stripe_event(id: &str, event_type: &str, object_id: &str) -> Vec<u8> {
    serde_json::json!({
        "id": id,
        "object": "event",
        "type": event_type,
        "created": 1_733_052_301,
        "data": { "object": { "id": object_id, "object": "payment_intent", "amount": 2000 } },
    })
    .to_string()
    .into_bytes()
}

/// The published vectors: `tests/fixtures/signatures.json`, a copy of the team's shared
/// fixtures (`.ci/run` checks that the copy has not drifted).
pub fn signature_vectors(scheme: &str) -> Vec<serde_json::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signatures.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the signature vectors at {}: {e}",
            path.display()
        )
    });
    let all: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    all["vectors"]
        .as_array()
        .expect("a vectors array")
        .iter()
        .filter(|v| v["scheme"] == scheme)
        .cloned()
        .collect()
}

/// Checks a request Inlet sent with Inlet's own `standard` verifier and `secret` (the
/// destination's `whsec_…`).
pub fn verifies_as_standard_webhook(secret: &str, request: &wiremock::Request) -> bool {
    let settings = inlet::config::Settings::from_toml(&format!(
        "[[sources]]\nname = \"app\"\nscheme = \"standard\"\nsecrets = [\"{secret}\"]\n"
    ))
    .expect("valid");
    let source = &settings.sources[0];
    let mut headers = actix_web::http::header::HeaderMap::new();
    for (name, value) in request.headers.iter() {
        if let (Ok(name), Ok(value)) = (
            actix_web::http::header::HeaderName::from_bytes(name.as_str().as_bytes()),
            actix_web::http::header::HeaderValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    let keys = inlet::signature::Keys {
        secrets: &source.secrets,
        tolerance: source.tolerance,
        now: chrono::Utc::now(),
    };
    source
        .provider
        .scheme()
        .verify(
            inlet::signature::Unverified::new(&headers, &request.body),
            keys,
        )
        .is_ok()
}
