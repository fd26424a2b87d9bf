//! Dropbox end to end over HTTP on both backends: the endpoint's unsigned `GET
//! ?challenge=` verification is echoed as `text/plain` with `nosniff` (and a harmful
//! challenge refused, counted and logged), only for dropbox sources; a notification —
//! the body's digest its event and its fact — is accepted and delivered once, its retry
//! gets the stored answer byte for byte, and tampering is refused.

use crate::helpers::{spawn_app_with, webhooks_counted, Backend, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use crate::providers::headers_for;
use sha2::{Digest, Sha256};

on_both_backends!(
    the_challenge_is_echoed_for_dropbox_sources_only,
    a_notification_is_one_event_delivered_once
);

/// The application's Standard Webhooks secret.
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Dropbox app secrets are 15 characters: the current one and the one rotating out.
const SECRETS: [&str; 2] = ["q8n2kz0v7m4xw1c", "a3f9j6t0p2h8r5e"];

async fn spawn_with_dropbox(backend: Backend, application: Option<&str>) -> TestApp {
    let destination = application
        .map(|url| {
            format!("[[sources.destinations]]\nurl = \"{url}\"\nsecret = \"{APP_SECRET}\"\n")
        })
        .unwrap_or_default();
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"dropbox\"\nscheme = \"dropbox\"\n\
             secrets = [\"{}\", \"{}\"]\n{destination}",
            SECRETS[0], SECRETS[1]
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

async fn the_challenge_is_echoed_for_dropbox_sources_only(backend: Backend) {
    let app = spawn_with_dropbox(backend, None).await;
    let handshakes = webhooks_counted(&app, "dropbox", "handshake").await;
    let refused = webhooks_counted(&app, "dropbox", "invalid_challenge").await;
    let reply = app.get("/webhooks/dropbox?challenge=abc123").await;
    reply.assert_status(200);
    assert_eq!(reply.body, b"abc123");
    assert_eq!(reply.header("content-type"), Some("text/plain"));
    assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    // Percent-encoded as sent, echoed decoded.
    let reply = app.get("/webhooks/dropbox?challenge=a%2Bb%3D&x=1").await;
    reply.assert_status(200);
    assert_eq!(reply.body, b"a+b=");
    assert!(webhooks_counted(&app, "dropbox", "handshake").await >= handshakes + 2.0);

    let too_long = format!("challenge={}", "c".repeat(257));
    for query in [
        "",
        "?challenge=",
        "?challenge=a&challenge=b",
        &format!("?{too_long}"),
        "?challenge=%3Cp%3E%0A",
        "?challenge=a%00b",
        "?challenge=caf%C3%A9",
        "?challenge=two+words",
    ] {
        app.get(&format!("/webhooks/dropbox{query}"))
            .await
            .assert_problem(400, "invalid_challenge");
    }
    assert!(webhooks_counted(&app, "dropbox", "invalid_challenge").await >= refused + 8.0);

    // Every other source answers GET as before: 405, Allow: POST, counted as refused; a
    // source that is not configured is 404, whatever the method.
    let reply = app.get("/webhooks/stripe?challenge=abc").await;
    reply.assert_problem(405, "method_not_allowed");
    assert_eq!(reply.header("allow"), Some("POST"));
    app.get("/webhooks/nowhere?challenge=abc")
        .await
        .assert_problem(404, "unknown_source");
    assert!(webhooks_counted(&app, "stripe", "method_not_allowed").await >= 1.0);
    // A dropbox source serves both.
    let reply = app.request("PUT", "/webhooks/dropbox").await;
    reply.assert_problem(405, "method_not_allowed");
    assert_eq!(reply.header("allow"), Some("POST, GET"));
    assert_eq!(app.count_events().await, 0);
}

fn notification(account: &str) -> Vec<u8> {
    serde_json::json!({
        "list_folder": {"accounts": [format!("dbid:{account}")]},
        "delta": {"users": [12345678]},
    })
    .to_string()
    .into_bytes()
}

async fn a_notification_is_one_event_delivered_once(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let url = format!("{}/events", application.uri());
    let app = spawn_with_dropbox(backend, Some(&url)).await;
    let body = notification("AAH4f99T0taONIb-OurWxbNQ6ywGRopQngc");
    let first = app
        .post_webhook(
            "dropbox",
            &body,
            &headers_for(&app, "dropbox", &body, SECRETS[0], 0),
        )
        .await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());
    // The event is the body's digest.
    assert_eq!(first.json()["event_id"], hex::encode(Sha256::digest(&body)));

    // Dropbox's retry (the same bytes), signed with the secret rotating out.
    let again = app
        .post_webhook(
            "dropbox",
            &body,
            &headers_for(&app, "dropbox", &body, SECRETS[1], 5),
        )
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let headers = headers_for(&app, "dropbox", &body, SECRETS[0], 0);
    let mut tampered = body.clone();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    app.post_webhook("dropbox", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    let removed = headers_for(&app, "dropbox", &body, "zz9removed0000x", 0);
    app.post_webhook("dropbox", &body, &removed)
        .await
        .assert_problem(401, "bad_signature");
    app.post_webhook("dropbox", &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook("dropbox", &body, &[("X-Dropbox-Signature", "not hex")])
        .await
        .assert_problem(400, "malformed_signature");

    // Another account's change is another notification.
    let other = notification("AACIOUa5ZHsM2VRaDHOJX-Omgf3A7tkHmLg");
    app.post_webhook(
        "dropbox",
        &other,
        &headers_for(&app, "dropbox", &other, SECRETS[0], 0),
    )
    .await
    .assert_status(200);
    crate::helpers::each_delivered_once(&app, &application, 2).await;
    assert_eq!(app.count_events().await, 2);
    assert_eq!(app.count_facts().await, 2);
}
