//! The plain HMAC variants (WorkOS, Mux, PagerDuty, Linear, Zendesk …), end to end over HTTP on both backends, one table
//! row each: a signed event is accepted and delivered to the application exactly once, its
//! duplicate gets the stored answer byte for byte, and a tampered body, a removed secret
//! or a stale timestamp gets a 401 problem.

use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use crate::providers::headers_for;
use chrono::{DateTime, Utc};

on_both_backends!(every_plain_variant_is_accepted_once_and_refused_when_altered);

/// The application's Standard Webhooks secret.
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One provider as the test drives it.
struct Variant {
    scheme: &'static str,
    /// The current secret and the one rotating out.
    secrets: [&'static str; 2],
    /// An event's body with this event id, sent at this time (`None`: the body's digest
    /// is the event id).
    body: fn(&str, DateTime<Utc>) -> Vec<u8>,
    /// The event id the answer names for the body made from `"e1"`.
    event_id: Option<&'static str>,
    event_type: &'static str,
    /// The header the signature is in, for a malformed one.
    signature_header: &'static str,
    /// Whether a time is signed in a header (and a stale one refused).
    signs_time: bool,
    /// The header carrying the event id, and its value, where the id is a header.
    id_header: Option<(&'static str, &'static str)>,
}

fn workos_event(id: &str, _at: DateTime<Utc>) -> Vec<u8> {
    serde_json::json!({
        "object": "event",
        "id": format!("event_01{id}"),
        "event": "dsync.user.created",
        "data": {"object": "directory_user", "id": "directory_user_01E1JG7J09H96KYP8HM9B0G5SJ"},
        "created_at": "2026-11-30T20:00:00.000Z",
    })
    .to_string()
    .into_bytes()
}

fn pagerduty_event(id: &str, _at: DateTime<Utc>) -> Vec<u8> {
    serde_json::json!({"event": {
        "id": format!("01DEN1HNLBC1VITFBTI3PZTD{id}"),
        "event_type": "incident.triggered",
        "resource_type": "incident",
        "occurred_at": "2026-11-30T20:00:00.000Z",
        "data": {"id": "PGR0VU2", "type": "incident", "status": "triggered"},
    }})
    .to_string()
    .into_bytes()
}

fn mux_event(id: &str, _at: DateTime<Utc>) -> Vec<u8> {
    serde_json::json!({
        "type": "video.asset.ready",
        "object": {"type": "asset", "id": "Fz01bJzYVlJ6LK00aPX02dZJvEpHmbyPZtj"},
        "id": format!("3a56ac3d-33da-4366-855b-{id}"),
        "data": {"id": "Fz01bJzYVlJ6LK00aPX02dZJvEpHmbyPZtj", "status": "ready"},
        "attempts": [],
    })
    .to_string()
    .into_bytes()
}

/// Linear's time is in the signed body: `webhookTimestamp`, Unix milliseconds.
fn linear_event(id: &str, at: DateTime<Utc>) -> Vec<u8> {
    serde_json::json!({
        "action": "create",
        "type": "Issue",
        "createdAt": "2026-11-30T20:00:00.000Z",
        "data": {"id": format!("2174add1-f7c8-44e3-bbf3-2d60b5ea8b{id}"), "title": "A bump"},
        "url": "https://linear.app/inlet/issue/ENG-1",
        "organizationId": "1e0c1ec8-8f9c-4bd7-9a5b-5d4b6d1e2a3c",
        "webhookId": "0d5a4f3e-8b3c-4d2a-9c1b-2a3b4c5d6e7f",
        "webhookTimestamp": at.timestamp_millis(),
    })
    .to_string()
    .into_bytes()
}

/// A Zendesk event subscription's request (a trigger's payload is the account's own).
fn zendesk_event(id: &str, _at: DateTime<Utc>) -> Vec<u8> {
    serde_json::json!({
        "type": "zen:event-type:user.created",
        "account_id": 123_456,
        "id": format!("b2c3d4e5-0000-4000-8000-00000000{id}"),
        "time": "2026-11-30T20:00:00Z",
        "zendesk_event_version": "2022-11-06",
        "subject": "zen:user:16512345678901",
        "detail": {"id": "16512345678901", "role": "end-user"},
        "event": {},
    })
    .to_string()
    .into_bytes()
}

const VARIANTS: [Variant; 5] = [
    Variant {
        scheme: "workos",
        secrets: [
            "workos_webhook_secret_current_0123",
            "workos_webhook_secret_rotating_out",
        ],
        body: workos_event,
        event_id: Some("event_01e1"),
        event_type: "dsync.user.created",
        signature_header: "WorkOS-Signature",
        signs_time: true,
        id_header: None,
    },
    Variant {
        scheme: "mux",
        secrets: [
            "mux_signing_secret_current_01234",
            "mux_signing_secret_rotating_out_0",
        ],
        body: mux_event,
        // The event is the body's digest; its `id` is the fact.
        event_id: None,
        event_type: "video.asset.ready",
        signature_header: "Mux-Signature",
        signs_time: true,
        id_header: None,
    },
    Variant {
        scheme: "pagerduty",
        secrets: [
            "pagerduty_subscription_secret_current",
            "pagerduty_subscription_secret_old_one",
        ],
        body: pagerduty_event,
        event_id: Some("01DEN1HNLBC1VITFBTI3PZTDe1"),
        event_type: "incident.triggered",
        signature_header: "X-PagerDuty-Signature",
        signs_time: false,
        id_header: None,
    },
    Variant {
        scheme: "linear",
        secrets: [
            "linear_signing_secret_current_0123",
            "linear_signing_secret_rotating_out",
        ],
        body: linear_event,
        // The event is the body's digest; `Linear-Delivery` is the fact.
        event_id: None,
        event_type: "Issue",
        signature_header: "Linear-Signature",
        // Its time is in the body: see linear_retries_are_one_fact_and_stale_bodies_refused.
        signs_time: false,
        id_header: None,
    },
    Variant {
        scheme: "zendesk",
        secrets: [
            "HRkRd4BeOAoUkfZr-mhauJT64rvBASlJRoIyPsd3zeA=",
            "zendesk_signing_secret_rotating_out",
        ],
        body: zendesk_event,
        event_id: Some("8350205582"),
        event_type: "zen:event-type:user.created",
        signature_header: "X-Zendesk-Webhook-Signature",
        signs_time: true,
        id_header: Some(("X-Zendesk-Webhook-Invocation-Id", "8350205582")),
    },
];

/// One source per variant, each with the application as its destination.
async fn spawn_with_variants(backend: Backend, application: &str) -> TestApp {
    let mut sources = String::new();
    for variant in &VARIANTS {
        let [current, old] = variant.secrets;
        sources.push_str(&format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"{name}\"\n\
             secrets = [\"{current}\", \"{old}\"]\n\
             [[sources.destinations]]\nurl = \"{application}\"\nsecret = \"{APP_SECRET}\"\n",
            name = variant.scheme
        ));
    }
    let options = TestOptions {
        extra_sources: sources,
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// Mux's retry lists the failed attempt in the body: another signed body, the same `id`.
/// It is another event (its digest) of the same fact: answered, never delivered again.
async fn a_mux_retry_with_its_attempts_listed_is_the_same_fact(app: &TestApp) {
    let body = mux_event("e1", app.now());
    let retried = String::from_utf8(body.clone())
        .expect("UTF-8")
        .replace(
            "\"attempts\":[]",
            "\"attempts\":[{\"response_status_code\":500,\"max_attempts\":30}]",
        )
        .into_bytes();
    assert_ne!(retried, body);
    let headers = headers_for(app, "mux", &retried, VARIANTS[1].secrets[0], 0);
    answered_as_the_same_fact(app, "mux", &retried, &headers).await;
}

/// A retry in another signed body: answered `200 duplicate_fact`.
async fn answered_as_the_same_fact(
    app: &TestApp,
    source: &str,
    body: &[u8],
    headers: &[(String, String)],
) {
    let reply = app.post_webhook(source, body, headers).await;
    reply.assert_status(200);
    assert_eq!(
        reply.json()["outcome"],
        "duplicate_fact",
        "{}",
        reply.text()
    );
}

/// Linear's headers for `body` with its delivery id.
fn linear_headers(app: &TestApp, body: &[u8], delivery: &str) -> Vec<(String, String)> {
    let mut headers = headers_for(app, "linear", body, VARIANTS[3].secrets[0], 0);
    for (name, value) in &mut headers {
        if name == "Linear-Delivery" {
            delivery.clone_into(value);
        }
    }
    headers
}

/// Linear re-sends a failed delivery with a fresh `webhookTimestamp`: another signed body
/// under the same `Linear-Delivery`, so another event of the same fact — answered, never
/// delivered again. A body signed more than the tolerance ago, or ahead, is refused for
/// its time, whatever its headers say.
async fn linear_retries_are_one_fact_and_stale_bodies_refused(app: &TestApp) {
    let delivery = "5a7f0a43-9d1e-4c35-8b61-2f6a3c0e9d10";
    let body = linear_event("e2", app.now());
    let first = app
        .post_webhook("linear", &body, &linear_headers(app, &body, delivery))
        .await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());
    let retried = linear_event("e2", app.now() + chrono::Duration::milliseconds(61_000));
    assert_ne!(retried, body);
    let headers = linear_headers(app, &retried, delivery);
    answered_as_the_same_fact(app, "linear", &retried, &headers).await;
    for offset in [-310, 310] {
        let stale = linear_event("e3", app.now() + chrono::Duration::seconds(offset));
        app.post_webhook("linear", &stale, &linear_headers(app, &stale, "d-stale"))
            .await
            .assert_problem(401, "timestamp_out_of_tolerance");
    }
    let untimed = br#"{"type":"Issue","action":"create","data":{"id":"x"}}"#;
    app.post_webhook(
        "linear",
        untimed,
        &linear_headers(app, untimed, "d-untimed"),
    )
    .await
    .assert_problem(400, "malformed_signature");
}

async fn every_plain_variant_is_accepted_once_and_refused_when_altered(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_with_variants(backend, &format!("{}/events", application.uri())).await;
    for variant in &VARIANTS {
        accepted_once_and_refused_when_altered(&app, variant).await;
    }
    a_mux_retry_with_its_attempts_listed_is_the_same_fact(&app).await;
    linear_retries_are_one_fact_and_stale_bodies_refused(&app).await;
    // Each variant's event, and Linear's second delivery.
    let delivered = VARIANTS.len() + 1;
    let per_key = crate::helpers::each_delivered_once(&app, &application, delivered).await;
    for variant in &VARIANTS {
        assert!(
            per_key
                .keys()
                .any(|key| key.starts_with(&format!("{}:", variant.scheme))),
            "{per_key:?}"
        );
    }
    // Each variant's event, Linear's second delivery, and the retries of Mux and Linear
    // (events of their own, of the same facts).
    assert_eq!(app.count_events().await, VARIANTS.len() as i64 + 3);
    assert_eq!(app.count_facts().await, VARIANTS.len() as i64 + 1);
}

/// The variant's headers for `body`, signed with `secret` `offset_secs` from now, with its
/// event id where that is a header.
fn signed(
    app: &TestApp,
    variant: &Variant,
    body: &[u8],
    secret: &str,
    offset_secs: i64,
) -> Vec<(String, String)> {
    let mut headers = headers_for(app, variant.scheme, body, secret, offset_secs);
    if let Some((name, id)) = variant.id_header {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.to_owned(), id.to_owned()));
    }
    headers
}

async fn accepted_once_and_refused_when_altered(app: &TestApp, variant: &Variant) {
    let source = variant.scheme;
    let [current, old] = variant.secrets;
    let body = (variant.body)("e1", app.now());
    let first = app
        .post_webhook(source, &body, &signed(app, variant, &body, current, 0))
        .await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted", "{source}");
    assert_eq!(first.json()["event_type"], variant.event_type, "{source}");
    if let Some(id) = variant.event_id {
        assert_eq!(first.json()["event_id"], id, "{source}");
    }

    // The provider's retry, signed again later with the secret rotating out.
    let again = app
        .post_webhook(source, &body, &signed(app, variant, &body, old, 4))
        .await;
    assert!(again.replayed(), "{source}");
    assert_eq!(again.body, first.body, "{source}");

    let headers = signed(app, variant, &body, current, 0);
    let mut tampered = body.clone();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    app.post_webhook(source, &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    let removed = signed(app, variant, &body, "removed_secret_0123456789", 0);
    app.post_webhook(source, &body, &removed)
        .await
        .assert_problem(401, "bad_signature");
    for offset in [-310, 310].into_iter().filter(|_| variant.signs_time) {
        let stale = signed(app, variant, &body, current, offset);
        app.post_webhook(source, &body, &stale)
            .await
            .assert_problem(401, "timestamp_out_of_tolerance");
    }
    app.post_webhook(source, &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook(source, &body, &[(variant.signature_header, "v1=00")])
        .await
        .assert_problem(400, "malformed_signature");
}
