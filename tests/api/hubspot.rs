//! HubSpot's webhooks end to end over HTTP on both backends: a JSON array of events
//! signed once (v3: method, the URL HubSpot calls, body and a millisecond timestamp), each
//! element an event of its own, claimed in one transaction with its siblings; a retried
//! event comes back with its `attemptNumber` raised, in another request, and is the same
//! event; the request gets an empty 200, the same on every retry.

use crate::batches::{delivered, every_batch_answered_and_each_item_delivered_once};
use crate::batches::{listed_types, signed_ago, spawn_batch_source_with};
use crate::helpers::{Backend, TestApp};
use crate::on_both_backends;
use inlet::signature::{HubSpot, PublicUrl};
use std::sync::Arc;

on_both_backends!(
    a_hubspot_batch_is_one_event_per_item_and_a_later_attempt_the_same_event,
    a_tampered_or_stale_hubspot_batch_stores_nothing,
    concurrent_hubspot_attempts_that_share_events_deliver_each_once,
    a_hubspot_event_is_itself_however_written_and_twice_in_a_batch_is_once,
    a_hubspot_batch_with_an_item_missing_its_fields_is_refused_whole,
);

/// The app's client secret, and the one it replaces.
const SECRET: &str = "8d2f4a6b-1c3e-4f5a-9b7d-0e1f2a3b4c5d";
const OLD_SECRET: &str = "3e5f7a9b-2d4c-4b6a-8c0e-1f2a3b4c5d6e";
/// The target URL registered with HubSpot (a proxy in front of Inlet), as it is signed.
const TARGET: &str = "https://hooks.example.com/webhooks/hubspot";

async fn spawn_hubspot(backend: Backend, application: &wiremock::MockServer) -> TestApp {
    let settings = format!("public_url = \"{TARGET}\"\n");
    spawn_batch_source_with(
        backend,
        application,
        "hubspot",
        [SECRET, OLD_SECRET],
        &settings,
    )
    .await
}

/// One HubSpot event: its (not necessarily unique) id, type, object and attempt.
fn event(id: u64, kind: &str, attempt: u32) -> serde_json::Value {
    serde_json::json!({
        "eventId": id, "subscriptionId": 2801237, "portalId": 62515, "appId": 54321,
        "occurredAt": 1764850000000u64 + id, "subscriptionType": kind,
        "attemptNumber": attempt, "objectId": 1200 + id, "changeSource": "CRM",
    })
}

fn batch(events: &[serde_json::Value]) -> Vec<u8> {
    serde_json::Value::from(events.to_vec())
        .to_string()
        .into_bytes()
}

/// The headers HubSpot sends with `body` for `url`, signed with `secret` `ago` seconds ago.
fn signed_for(url: &str, body: &[u8], secret: &str, ago: i64) -> Vec<(String, String)> {
    let scheme = HubSpot::new(PublicUrl::parse(url.to_owned()).expect("a URL"));
    signed_ago(&scheme, body, secret, ago)
}

fn signed(body: &[u8], secret: &str, ago: i64) -> Vec<(String, String)> {
    signed_for(TARGET, body, secret, ago)
}

async fn post(app: &TestApp, body: &[u8], headers: &[(String, String)]) -> crate::helpers::Reply {
    app.post_webhook("hubspot", body, headers).await
}

async fn a_hubspot_batch_is_one_event_per_item_and_a_later_attempt_the_same_event(
    backend: Backend,
) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_hubspot(backend, &application).await;
    let events = [
        event(1, "contact.creation", 0),
        event(2, "contact.propertyChange", 0),
        event(3, "deal.creation", 0),
    ];
    let body = batch(&events);
    let first = post(&app, &body, &signed(&body, SECRET, 0)).await;
    first.assert_status(200);
    assert_eq!(first.text(), "");
    assert!(!first.replayed());
    assert_eq!(app.count_events().await, 3);

    // The same request again, signed with the secret being replaced: the stored answer.
    let again = post(&app, &body, &signed(&body, OLD_SECRET, 20)).await;
    again.assert_status(200);
    assert!(again.replayed());

    // HubSpot's retry of the first event (attempt 2) beside a new one: only that one is new.
    let later = batch(&[
        event(1, "contact.creation", 2),
        event(4, "deal.deletion", 0),
    ]);
    let reply = post(&app, &later, &signed(&later, SECRET, 0)).await;
    reply.assert_status(200);
    assert!(!reply.replayed());
    assert_eq!(
        app.count_events().await,
        4,
        "a later attempt is the same event"
    );

    crate::helpers::each_delivered_once(&app, &application, 4).await;
    // Each delivery is its event as first received.
    let mut seen: Vec<(u64, u64)> = (delivered(&application).await.values())
        .map(|e| {
            (
                e["eventId"].as_u64().unwrap_or(0),
                e["attemptNumber"].as_u64().unwrap_or(9),
            )
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [(1, 0), (2, 0), (3, 0), (4, 0)]);
    assert_eq!(
        listed_types(&app, "hubspot").await,
        [
            "contact.creation",
            "contact.propertyChange",
            "deal.creation",
            "deal.deletion"
        ]
    );
}

async fn a_tampered_or_stale_hubspot_batch_stores_nothing(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_hubspot(backend, &application).await;
    let body = batch(&[
        event(11, "contact.creation", 0),
        event(12, "deal.creation", 0),
    ]);
    let headers = signed(&body, SECRET, 0);
    let text = String::from_utf8(body.clone()).expect("UTF-8");
    let forged = text.replacen("\"deal.creation\"", "\"deal.deletion\"", 1);
    post(&app, forged.as_bytes(), &headers)
        .await
        .assert_problem(401, "bad_signature");
    for wrong in [
        signed(&body, "9c1d3e5f-7a9b-4c2d-8e0f-1a2b3c4d5e6f", 0),
        signed_for(&format!("{TARGET}/"), &body, SECRET, 0),
        signed_for(
            "http://hooks.example.com/webhooks/hubspot",
            &body,
            SECRET,
            0,
        ),
    ] {
        post(&app, &body, &wrong)
            .await
            .assert_problem(401, "bad_signature");
    }
    post(&app, &body, &signed(&body, SECRET, 360))
        .await
        .assert_problem(401, "timestamp_out_of_tolerance");
    post(&app, &body, &[])
        .await
        .assert_problem(400, "missing_signature");
    for malformed in [&b"{}"[..], b"[]", b"[1]", b"[{},"] {
        post(&app, malformed, &signed(malformed, SECRET, 0))
            .await
            .assert_problem(400, "malformed_signature");
    }
    assert_eq!(app.count_events().await, 0, "nothing of a refused batch");
    post(&app, &body, &headers).await.assert_status(200);
    assert_eq!(app.count_events().await, 2);
}

/// 48 requests at once, request `k` carrying events `k` and `k + 1` (mod 24) at attempt
/// `k` — every event arrives in two or more requests, each a different attempt: each is
/// claimed once and delivered once.
async fn concurrent_hubspot_attempts_that_share_events_deliver_each_once(backend: Backend) {
    const N: usize = 24;
    let application = crate::helpers::application_answering(200).await;
    let app = Arc::new(spawn_hubspot(backend, &application).await);
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * N));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..2 * N {
        let attempt = k as u32;
        let body = batch(&[
            event((k % N) as u64 + 100, "contact.creation", attempt),
            event(((k + 1) % N) as u64 + 100, "contact.creation", attempt),
        ]);
        let headers = signed(&body, SECRET, 0);
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            post(&app, &body, &headers).await
        });
    }
    every_batch_answered_and_each_item_delivered_once(&app, &application, tasks, "", N).await;
}

/// HubSpot sends an event again in a later batch with its `attemptNumber` raised, and the
/// sender's JSON may order members and space them otherwise: the same event. The same
/// event twice in one batch is one event. Two events alike but for `occurredAt`, or for a
/// `propertyValue`, are two.
async fn a_hubspot_event_is_itself_however_written_and_twice_in_a_batch_is_once(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_hubspot(backend, &application).await;
    let mut first = event(7, "contact.propertyChange", 0);
    first["propertyName"] = serde_json::json!("tier");
    first["propertyValue"] = serde_json::json!("silver");
    let twice = batch(&[first.clone(), first.clone()]);
    let answer = post(&app, &twice, &signed(&twice, SECRET, 0)).await;
    answer.assert_status(200);
    assert_eq!(
        app.count_events().await,
        1,
        "the same event twice in one batch"
    );

    // A later attempt, its members in another order and spaced: the same event.
    let mut members: Vec<(String, serde_json::Value)> = first
        .as_object()
        .expect("an object")
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    members.reverse();
    let written: Vec<String> = members
        .iter()
        .map(|(name, value)| match name.as_str() {
            "attemptNumber" => format!("\"{name}\" :  3"),
            _ => format!("\"{name}\" :  {value}"),
        })
        .collect();
    let retry = format!("[ {{ {} }} ]", written.join(" ,\n "));
    let replay = post(&app, retry.as_bytes(), &signed(retry.as_bytes(), SECRET, 0)).await;
    replay.assert_status(200);
    assert_eq!(app.count_events().await, 1, "{retry}");

    // Alike but for the time it happened, or the value it set: other events.
    let mut later = first.clone();
    later["occurredAt"] = serde_json::json!(1764850000999u64);
    let mut valued = first.clone();
    valued["propertyValue"] = serde_json::json!("gold");
    let others = batch(&[later, valued]);
    post(&app, &others, &signed(&others, SECRET, 0))
        .await
        .assert_status(200);
    assert_eq!(app.count_events().await, 3);
    crate::helpers::each_delivered_once(&app, &application, 3).await;
}

/// An element without what every HubSpot event carries — `eventId`, `subscriptionId`,
/// `portalId` and `occurredAt` as numbers, `subscriptionType` as a string — refuses the
/// whole request, properly signed or not (`400 malformed_signature` naming the element and
/// the field, as the batches page says): nothing stored, nothing delivered, so no event
/// without a type reaches an application.
async fn a_hubspot_batch_with_an_item_missing_its_fields_is_refused_whole(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_hubspot(backend, &application).await;
    let good = event(1, "contact.creation", 0);
    let mut typed_object = event(2, "contact.creation", 0);
    typed_object["subscriptionType"] = serde_json::json!({"name": "contact.creation"});
    let mut no_portal = event(3, "contact.creation", 0);
    no_portal.as_object_mut().map(|e| e.remove("portalId"));
    let mut textual_id = event(4, "contact.creation", 0);
    textual_id["eventId"] = serde_json::json!("4");
    for (items, named) in [
        (vec![serde_json::json!({})], "event 0"),
        (
            vec![good.clone(), serde_json::json!({"eventId": 1})],
            "event 1",
        ),
        (vec![good.clone(), typed_object], "subscriptionType"),
        (vec![no_portal, good.clone()], "portalId"),
        (vec![textual_id], "eventId"),
    ] {
        let body = batch(&items);
        let refused = post(&app, &body, &signed(&body, SECRET, 0)).await;
        refused.assert_problem(400, "malformed_signature");
        let detail = refused.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(detail.contains(named), "{named}: {detail}");
    }
    assert_eq!(app.count_events().await, 0);
    // The good event alone is taken.
    let body = batch(&[good]);
    post(&app, &body, &signed(&body, SECRET, 0))
        .await
        .assert_status(200);
    crate::helpers::each_delivered_once(&app, &application, 1).await;
}
