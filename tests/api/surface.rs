//! The edges an outside attacker probes: how many signatures one request may make Inlet
//! check, credentials that arrive under unexpected header names, caching of operator
//! answers, event ids that cannot be linked to, methods under `/console`, console sessions
//! after signing out, and what malformed requests write to the log.

use crate::helpers::{spawn_app, stripe_signature, Backend, Reply, TestApp, STRIPE_SECRET};
use crate::on_both_backends;

on_both_backends!(a_signature_list_over_the_bound_is_refused_before_it_is_checked,);

/// Signature entries accepted in one header (Inlet's `MAX_SIGNATURES`).
const BOUND: usize = 8;

fn header_with(headers: &[(String, String)], name: &str, value: String) -> Vec<(String, String)> {
    let mut headers = headers.to_vec();
    for (header, old) in &mut headers {
        if header.eq_ignore_ascii_case(name) {
            *old = value.clone();
        }
    }
    headers
}

/// A genuine signature listed after `wrong` well-formed wrong ones.
async fn standard_with_wrong_entries(app: &TestApp, id: &str, wrong: usize) -> Reply {
    let body = format!(r#"{{"type":"thing.happened","id":"{id}"}}"#);
    let headers = app.sign_for("standard", body.as_bytes(), id, None);
    let genuine = headers
        .iter()
        .find(|(name, _)| name == "webhook-signature")
        .map(|(_, value)| value.clone())
        .expect("a webhook-signature");
    // Well-formed entries of both kinds: 32-byte HMAC tags and 64-byte Ed25519 signatures.
    let mut list: Vec<String> = (0..wrong)
        .map(|i| match i % 2 {
            0 => format!("v1,{}", base64_of(&[i as u8; 32])),
            _ => format!("v1a,{}", base64_of(&[i as u8; 64])),
        })
        .collect();
    list.push(genuine);
    let headers = header_with(&headers, "webhook-signature", list.join(" "));
    app.post_webhook("standard", body.as_bytes(), &headers)
        .await
}

async fn stripe_with_wrong_entries(app: &TestApp, id: &str, wrong: usize) -> Reply {
    let body = crate::helpers::stripe_event(id, "charge.captured", "ch_bound");
    let genuine = stripe_signature(STRIPE_SECRET, &body, app.now().timestamp());
    let wrong: String = (0..wrong)
        .map(|i| format!(",v1={}", hex::encode([i as u8; 32])))
        .collect();
    app.post_webhook(
        "stripe",
        &body,
        &[("Stripe-Signature", format!("{genuine}{wrong}"))],
    )
    .await
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Up to the bound, a genuine signature among wrong ones verifies; one entry more, or the
/// 1,300 of the reported attack, is a 400 naming the bound — nothing is stored.
async fn a_signature_list_over_the_bound_is_refused_before_it_is_checked(backend: Backend) {
    let app = spawn_app(backend).await;
    standard_with_wrong_entries(&app, "msg_bound_ok", BOUND - 1)
        .await
        .assert_status(200);
    stripe_with_wrong_entries(&app, "evt_bound_ok", BOUND - 1)
        .await
        .assert_status(200);
    for wrong in [BOUND, 1_300] {
        let refused = standard_with_wrong_entries(&app, "msg_bound_over", wrong).await;
        refused.assert_problem(400, "malformed_signature");
        let detail = refused.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            detail.contains("webhook-signature") && detail.contains("more than 8 signatures"),
            "{detail}"
        );
        let refused = stripe_with_wrong_entries(&app, "evt_bound_over", wrong).await;
        refused.assert_problem(400, "malformed_signature");
        assert!(refused.text().contains("more than 8 signatures"));
    }
    assert_eq!(app.count_events().await, 2, "only the two within the bound");
}
