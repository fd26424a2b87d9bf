//! SendGrid's Event Webhook end to end over HTTP on both backends: a JSON array of events
//! signed once as a whole (ECDSA P-256), each element an event of its own — its own id
//! (`sg_event_id`), stored copy and deliveries — claimed in one transaction with its
//! siblings; the request gets an empty 200, the same on every retry; a request whose
//! signature fails stores none of it.

use crate::batches::{delivered, every_batch_answered_and_each_item_delivered_once};
use crate::batches::{listed_types, signed_ago, spawn_batch_source};
use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;
use inlet::signature::SENDGRID;
use std::sync::Arc;

on_both_backends!(
    a_sendgrid_batch_is_one_event_per_item_answered_the_same_on_every_retry,
    a_tampered_sendgrid_batch_stores_nothing,
    concurrent_sendgrid_batches_that_share_events_deliver_each_once,
);

/// Key pairs made with Node's crypto: SendGrid's (PKCS#8) and its verification key
/// (SubjectPublicKeyInfo), the one re-generated before it, and a stranger's private key.
const PRIVATE: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtWjUWtHPcNxl/6OPNFvkHCOv8RXQz90eUeMlX6nq02ShRANCAATE6OCXmEpKa7jSlBApptpM7pizdOs0oG45I4z50BAg6Rpi5K4m+24XhJxG2wJWPdIbNx1z3X+yFBfMztgV60vI";
const PUBLIC: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAExOjgl5hKSmu40pQQKabaTO6Ys3TrNKBuOSOM+dAQIOkaYuSuJvtuF4ScRtsCVj3SGzcdc91/shQXzM7YFetLyA==";
const OLD_PRIVATE: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg31jOBCaKSexhRAswJBOovG0Hi/lffNCGyipy7gK6VaqhRANCAASspFU3Y5aPBIhzEZv1FipVb841CrDt2CZjEHmB6uDaCpoX8Fu7a4ASIwZX4UVB0uvBUZ504+0xUgOI6AoxzHtA";
const OLD_PUBLIC: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErKRVN2OWjwSIcxGb9RYqVW/ONQqw7dgmYxB5gerg2gqaF/Bbu2uAEiMGV+FFQdLrwVGedOPtMVIDiOgKMcx7QA==";
const STRANGER: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgrp648BBJwZQYTuhGXb4ROtHDfhDtU/555vRWNw5R9o+hRANCAAT2OCJqCsoLYKg5e+UU7l06C91nvz3qZjIrTMfjXVlb4m9yEI9c4L55buzPFGpcNuzIuS4rLoyBZJz8d6329BEt";

async fn spawn_sendgrid(backend: Backend, application: &wiremock::MockServer) -> TestApp {
    spawn_batch_source(backend, application, "sendgrid", [PUBLIC, OLD_PUBLIC]).await
}

/// One SendGrid event.
fn event(id: &str, kind: &str) -> serde_json::Value {
    serde_json::json!({
        "email": "someone@example.com", "event": kind, "sg_event_id": id,
        "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
        "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>", "timestamp": 1513299569,
    })
}

/// The body as SendGrid writes it (CRLF after each event).
fn batch(events: &[serde_json::Value]) -> Vec<u8> {
    let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    format!("[{}]\r\n", lines.join(",\r\n")).into_bytes()
}

/// The headers SendGrid sends with `body`, signed with `key` `ago` seconds ago.
fn signed(body: &[u8], key: &str, ago: i64) -> Vec<(String, String)> {
    signed_ago(&SENDGRID, body, key, ago)
}

async fn post(app: &TestApp, body: &[u8], headers: &[(String, String)]) -> crate::helpers::Reply {
    app.post_webhook("sendgrid", body, headers).await
}

async fn a_sendgrid_batch_is_one_event_per_item_answered_the_same_on_every_retry(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_sendgrid(backend, &application).await;
    let events = [
        event("ZGVsaXZlcmVkLTAtMQ", "delivered"),
        event("b3Blbi0wLTI", "open"),
        event("b3Blbi0wLTM", "open"),
    ];
    let body = batch(&events);
    let first = post(&app, &body, &signed(&body, PRIVATE, 0)).await;
    first.assert_status(200);
    assert_eq!(first.text(), "");
    assert!(!first.replayed());
    assert_eq!(app.count_events().await, 3, "two opens are two events");

    // SendGrid's retry of the whole request, signed again (here with the key being
    // replaced): the same answer, nothing new.
    let again = post(&app, &body, &signed(&body, OLD_PRIVATE, 30)).await;
    again.assert_status(200);
    assert_eq!(again.body, first.body);
    assert!(again.replayed());

    // A later batch that repeats one event beside a new one: only the new one is new.
    let later = batch(&[events[1].clone(), event("Ym91bmNlLTAtNA", "bounce")]);
    let reply = post(&app, &later, &signed(&later, PRIVATE, 0)).await;
    reply.assert_status(200);
    assert!(!reply.replayed());
    assert_eq!(app.count_events().await, 4);

    crate::helpers::each_delivered_once(&app, &application, 4).await;
    // Each delivery is its event, as received.
    let mut ids: Vec<String> = (delivered(&application).await.values())
        .map(|body| body["sg_event_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "Ym91bmNlLTAtNA",
            "ZGVsaXZlcmVkLTAtMQ",
            "b3Blbi0wLTI",
            "b3Blbi0wLTM"
        ]
    );
    assert_eq!(
        listed_types(&app, "sendgrid").await,
        ["bounce", "delivered", "open", "open"]
    );
}

async fn a_tampered_sendgrid_batch_stores_nothing(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_sendgrid(backend, &application).await;
    let body = batch(&[
        event("ZGVsaXZlcmVkLTAtNQ", "delivered"),
        event("b3Blbi0wLTY", "open"),
    ]);
    let headers = signed(&body, PRIVATE, 0);
    let text = String::from_utf8(body.clone()).expect("UTF-8");
    // The second event changed after signing.
    let forged = text.replacen("\"open\"", "\"click\"", 1);
    post(&app, forged.as_bytes(), &headers)
        .await
        .assert_problem(401, "bad_signature");
    // Signed with a key the source does not hold.
    post(&app, &body, &signed(&body, STRANGER, 0))
        .await
        .assert_problem(401, "bad_signature");
    // Signed over six minutes ago: over the source's 300 s.
    post(&app, &body, &signed(&body, PRIVATE, 360))
        .await
        .assert_problem(401, "timestamp_out_of_tolerance");
    post(&app, &body, &[])
        .await
        .assert_problem(400, "missing_signature");
    for malformed in [&b"{}"[..], b"[]", b"[1]"] {
        post(&app, malformed, &signed(malformed, PRIVATE, 0))
            .await
            .assert_problem(400, "malformed_signature");
    }
    // Signed, but one event carries no sg_event_id: the whole request is refused.
    let no_id = batch(&[
        event("ZGVsaXZlcmVkLTAtNw", "delivered"),
        serde_json::json!({"event": "open"}),
    ]);
    post(&app, &no_id, &signed(&no_id, PRIVATE, 0))
        .await
        .assert_problem(400, "missing_event_id");
    assert_eq!(
        app.count_events().await,
        0,
        "no event of a refused batch is stored"
    );
    // SendGrid's retry of the genuine request: both events, now.
    let reply = post(&app, &body, &headers).await;
    reply.assert_status(200);
    assert_eq!(app.count_events().await, 2);
}

/// 24 batches at once, batch `k` carrying events `k` and `k + 1` (mod 24), each sent twice:
/// every event is claimed by exactly one of the requests that carry it, and delivered once.
async fn concurrent_sendgrid_batches_that_share_events_deliver_each_once(backend: Backend) {
    const N: usize = 24;
    let application = crate::helpers::application_answering(200).await;
    let app = Arc::new(spawn_sendgrid(backend, &application).await);
    let id = |k: usize| format!("c2hhcmVkLTAt{:05}", k % N);
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * N));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..2 * N {
        let body = batch(&[event(&id(k), "delivered"), event(&id(k + 1), "delivered")]);
        let headers = signed(&body, PRIVATE, 0);
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            post(&app, &body, &headers).await
        });
    }
    every_batch_answered_and_each_item_delivered_once(&app, &application, tasks, "", N).await;
}
