//! Batches: one request that carries several events (Adyen's `notificationItems`), end to
//! end over HTTP on both backends. Each item is an event of its own — its own id, fact,
//! stored copy and deliveries — claimed in one transaction with its siblings; the request
//! gets the provider's fixed answer, the same on every retry; one item that does not
//! verify refuses the whole request and stores none of it.

use crate::helpers::{
    eventually, idempotency_key, requests_per_key, spawn_app_with, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use inlet::secret::Secret;
use std::collections::HashMap;
use std::sync::Arc;

on_both_backends!(
    an_adyen_batch_is_one_event_per_item_and_answered_accepted,
    a_batch_with_one_forged_item_stores_nothing,
    concurrent_batches_that_share_items_deliver_each_fact_once,
    graph_notifications_are_kept_per_client_state_and_stored_redacted,
);

/// The application's Standard Webhooks secret.
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Adyen HMAC keys (hex): the current one and the one rotating out.
const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const OLD_KEY: &str = "3F0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C4B5A69788796A5B4C3D2E1";

async fn spawn_adyen(backend: Backend, application: &wiremock::MockServer) -> TestApp {
    spawn_batch_source(backend, application, "adyen", [KEY, OLD_KEY]).await
}

/// Inlet with a source of `scheme` (named after it) holding `secrets`, delivering to the
/// fake application.
pub(crate) async fn spawn_batch_source(
    backend: Backend,
    application: &wiremock::MockServer,
    scheme: &str,
    secrets: [&str; 2],
) -> TestApp {
    spawn_batch_source_with(backend, application, scheme, secrets, "").await
}

/// The headers `scheme` signs `body` with under `key`, `ago` seconds ago (a batch
/// scheme's: no event id or type is signed).
pub(crate) fn signed_ago(
    scheme: &dyn inlet::signature::Scheme,
    body: &[u8],
    key: &str,
    ago: i64,
) -> Vec<(String, String)> {
    let at = chrono::Utc::now() - chrono::Duration::seconds(ago);
    let event = inlet::signature::EventToSign {
        id: String::new(),
        event_type: String::new(),
    };
    scheme.sign(inlet::signature::ToSign::new(
        body,
        &inlet::secret::Secret::new(key),
        at,
        &event,
    ))
}

/// [`spawn_batch_source`], with `settings` (TOML lines) added to the source's table.
pub(crate) async fn spawn_batch_source_with(
    backend: Backend,
    application: &wiremock::MockServer,
    scheme: &str,
    [current, old]: [&str; 2],
    settings: &str,
) -> TestApp {
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"{scheme}\"\nscheme = \"{scheme}\"\n\
             secrets = [\"{current}\", \"{old}\"]\n{settings}\
             [[sources.destinations]]\nurl = \"{}/{scheme}\"\nsecret = \"{APP_SECRET}\"\n",
            application.uri()
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// One `NotificationRequestItem`, unsigned.
fn item(psp: &str, event_code: &str, reason: &str) -> serde_json::Value {
    serde_json::json!({"NotificationRequestItem": {
        "pspReference": psp,
        "merchantAccountCode": "InletTestMerchant",
        "merchantReference": format!("order:{psp}"),
        "amount": {"value": 1130, "currency": "EUR"},
        "eventCode": event_code,
        "eventDate": "2026-12-04T10:00:00+01:00",
        "success": "true",
        "reason": reason,
        "additionalData": {},
    }})
}

/// The batch as Adyen sends it, every item signed with `key`.
fn batch(items: &[serde_json::Value], key: &str) -> Vec<u8> {
    let body = serde_json::json!({"live": "false", "notificationItems": items});
    inlet::signature::ADYEN
        .sign_items(body.to_string().as_bytes(), &Secret::new(key))
        .expect("a signable batch")
}

async fn post(app: &TestApp, body: &[u8]) -> crate::helpers::Reply {
    app.post_webhook("adyen", body, &[("Content-Type", "application/json")])
        .await
}

/// The bodies the application received, by idempotency key.
pub(crate) async fn delivered(
    application: &wiremock::MockServer,
) -> HashMap<String, serde_json::Value> {
    let mut bodies = HashMap::new();
    for request in application.received_requests().await.unwrap_or_default() {
        let body = serde_json::from_slice(&request.body).expect("a JSON item");
        bodies.insert(idempotency_key(&request), body);
    }
    bodies
}

async fn an_adyen_batch_is_one_event_per_item_and_answered_accepted(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_adyen(backend, &application).await;
    let items = [
        item("8816178914079738", "AUTHORISATION", ""),
        item("8816178914079739", "CAPTURE", ""),
        item("8816178914079738", "CHARGEBACK", "fraud"),
    ];
    let body = batch(&items, KEY);
    let first = post(&app, &body).await;
    first.assert_status(200);
    assert_eq!(first.text(), "[accepted]");
    assert_eq!(first.header("content-type"), Some("text/plain"));
    assert!(!first.replayed());
    assert_eq!(app.count_events().await, 3);
    assert_eq!(
        app.count_facts().await,
        3 * 2,
        "each item's fact and its signed reading"
    );

    // Adyen's retry of the whole request, signed with the key rotating out: the same
    // answer, nothing new.
    let again = post(&app, &batch(&items, OLD_KEY)).await;
    again.assert_status(200);
    assert_eq!(again.body, first.body);
    assert!(again.replayed());
    // A copy whose unsigned fields differ is the same signed items: the stored answer.
    let mut altered = items.clone();
    altered[2]["NotificationRequestItem"]["reason"] = "another reason".into();
    assert!(post(&app, &batch(&altered, KEY)).await.replayed());

    // A later batch that repeats one item beside a new one: only the new one is new.
    let later = [items[1].clone(), item("8816178914079740", "REFUND", "")];
    let reply = post(&app, &batch(&later, KEY)).await;
    reply.assert_status(200);
    assert_eq!(reply.text(), "[accepted]");
    assert!(!reply.replayed());
    assert_eq!(app.count_events().await, 4);

    crate::helpers::each_delivered_once(&app, &application, 4).await;
    // Each delivery is its item, as received: the wrapper and its signed fields.
    let mut codes: Vec<String> = (delivered(&application).await.values())
        .map(|body| body["NotificationRequestItem"]["eventCode"].to_string())
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            "\"AUTHORISATION\"",
            "\"CAPTURE\"",
            "\"CHARGEBACK\"",
            "\"REFUND\""
        ]
    );
    assert_eq!(
        listed_types(&app, "adyen").await,
        ["AUTHORISATION", "CAPTURE", "CHARGEBACK", "REFUND"]
    );
}

/// The type of each event of `source` the operator API lists, sorted.
pub(crate) async fn listed_types(app: &TestApp, source: &str) -> Vec<String> {
    let path = format!("/admin/events?source={source}");
    let listed = app.admin(&path, None, None).await.json();
    let mut types: Vec<String> = (listed["events"].as_array().expect("events").iter())
        .map(|event| event["event_type"].as_str().unwrap_or_default().to_owned())
        .collect();
    types.sort();
    types
}

async fn a_batch_with_one_forged_item_stores_nothing(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_adyen(backend, &application).await;
    let items = [
        item("9916178914079701", "AUTHORISATION", ""),
        item("9916178914079702", "AUTHORISATION", ""),
    ];
    let body = String::from_utf8(batch(&items, KEY)).expect("UTF-8");
    // A signed field of the second item changed after signing.
    let forged = body.replacen("\"9916178914079702\"", "\"9916178914079703\"", 1);
    post(&app, forged.as_bytes())
        .await
        .assert_problem(401, "bad_signature");
    // Signed with a key the source does not hold.
    let stranger = batch(&items, &"ab".repeat(32));
    post(&app, &stranger)
        .await
        .assert_problem(401, "bad_signature");
    let unsigned = serde_json::json!({"live": "false", "notificationItems": items}).to_string();
    post(&app, unsigned.as_bytes())
        .await
        .assert_problem(400, "missing_signature");
    for malformed in [&b"[accepted]"[..], br#"{"notificationItems":[]}"#] {
        post(&app, malformed)
            .await
            .assert_problem(400, "malformed_signature");
    }
    assert_eq!(
        app.count_events().await,
        0,
        "no item of a refused batch is stored"
    );
    // Adyen's retry of the genuine request: both items, now.
    let reply = post(&app, body.as_bytes()).await;
    reply.assert_status(200);
    assert_eq!(reply.text(), "[accepted]");
    assert_eq!(app.count_events().await, 2);
}

/// 24 batches at once, batch `k` carrying items `k` and `k + 1` (mod 24), and each sent
/// twice: every item is claimed by exactly one of the requests that carry it, and
/// delivered once.
async fn concurrent_batches_that_share_items_deliver_each_fact_once(backend: Backend) {
    const N: usize = 24;
    let application = crate::helpers::application_answering(200).await;
    let app = Arc::new(spawn_adyen(backend, &application).await);
    let psp = |k: usize| format!("77161789140{:05}", k % N);
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * N));
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..2 * N {
        let items = [
            item(&psp(k), "AUTHORISATION", ""),
            item(&psp(k + 1), "AUTHORISATION", ""),
        ];
        let body = batch(&items, KEY);
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            post(&app, &body).await
        });
    }
    every_batch_answered_and_each_item_delivered_once(&app, &application, tasks, "[accepted]", N)
        .await;
}

/// Every concurrent batch request answered 200 with `answer`, `n` events stored, and each
/// delivered once.
pub(crate) async fn every_batch_answered_and_each_item_delivered_once(
    app: &TestApp,
    application: &wiremock::MockServer,
    mut tasks: tokio::task::JoinSet<crate::helpers::Reply>,
    answer: &str,
    n: usize,
) {
    while let Some(reply) = tasks.join_next().await {
        let reply = reply.expect("the request task");
        reply.assert_status(200);
        assert_eq!(reply.text(), answer);
    }
    assert_eq!(app.count_events().await, n as i64);
    crate::helpers::each_delivered_once(app, application, n).await;
}

/// The clientStates of two Graph subscriptions that notify one URL.
const MAIL_STATE: &str = "mail-subscription-state-0123456789";
const FILES_STATE: &str = "files-subscription-state-0123456789";

async fn spawn_graph(backend: Backend, application: &wiremock::MockServer) -> TestApp {
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"graph\"\nscheme = \"graph\"\n\
             secrets = [\"{MAIL_STATE}\", \"{FILES_STATE}\"]\n\
             [[sources.destinations]]\nurl = \"{}/graph\"\nsecret = \"{APP_SECRET}\"\n",
            application.uri()
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

fn notification(state: &str, change: &str, resource: &str) -> serde_json::Value {
    serde_json::json!({
        "subscriptionId": "7f105c7d-2dc5-4530-97cd-4e7ae6534c07",
        "subscriptionExpirationDateTime": "2026-12-05T18:23:45.9356913Z",
        "changeType": change,
        "resource": resource,
        "resourceData": {"@odata.type": "#Microsoft.Graph.Message", "id": resource},
        "clientState": state,
        "tenantId": "84bd8158-6d4d-4958-8b9f-9d6445542f95",
    })
}

fn graph_body(notifications: &[serde_json::Value]) -> Vec<u8> {
    serde_json::json!({ "value": notifications })
        .to_string()
        .into_bytes()
}

async fn post_graph(app: &TestApp, body: &[u8]) -> crate::helpers::Reply {
    app.post_webhook("graph", body, &[("Content-Type", "application/json")])
        .await
}

/// A Graph request may carry notifications of several subscriptions: each is kept when
/// its clientState is a secret of the source, dropped otherwise (Microsoft's rule), and
/// stored and delivered with the credential redacted. A request none of whose
/// notifications authenticate is refused and stores nothing.
async fn graph_notifications_are_kept_per_client_state_and_stored_redacted(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_graph(backend, &application).await;
    subscription_validation_is_echoed_and_stores_nothing(&app).await;
    let notifications = [
        notification(MAIL_STATE, "created", "Users/u1/Messages/m1"),
        notification(FILES_STATE, "updated", "Drives/d1/Items/i1"),
        notification(
            "a-rogue-actors-state-0123456789",
            "deleted",
            "Users/u1/Messages/m2",
        ),
    ];
    let body = graph_body(&notifications);
    let first = post_graph(&app, &body).await;
    first.assert_status(202);
    assert!(first.body.is_empty());
    assert_eq!(
        app.count_events().await,
        2,
        "the rogue notification is dropped"
    );
    let again = post_graph(&app, &body).await;
    again.assert_status(202);
    assert!(again.replayed());
    assert_eq!(app.count_events().await, 2);

    let rogue = graph_body(&notifications[2..]);
    post_graph(&app, &rogue)
        .await
        .assert_problem(401, "bad_signature");
    let unsigned = graph_body(&[serde_json::json!({"changeType": "created", "resource": "x"})]);
    post_graph(&app, &unsigned)
        .await
        .assert_problem(400, "missing_signature");
    assert_eq!(app.count_events().await, 2);

    eventually("two notifications delivered", || async {
        requests_per_key(&application).await.len() == 2
    })
    .await;
    let delivered = delivered(&application).await;
    for body in delivered.values() {
        assert_eq!(body["clientState"], "[redacted]", "{body}");
    }
    let text = app
        .admin("/admin/events?source=graph", None, None)
        .await
        .text();
    for state in [MAIL_STATE, FILES_STATE] {
        assert!(!text.contains(state), "a clientState shown: {text}");
    }
    let mut changes: Vec<String> = (delivered.values())
        .map(|body| body["changeType"].to_string())
        .collect();
    changes.sort();
    assert_eq!(changes, ["\"created\"", "\"updated\""]);
}

/// Graph's validation of a new subscription's URL: `POST ?validationToken=…` with no
/// notification, answered with the token decoded, as text that is never sniffed; a token
/// that could harm is refused; nothing is stored.
async fn subscription_validation_is_echoed_and_stores_nothing(app: &TestApp) {
    let url = |query: &str| format!("{}/webhooks/graph?{query}", app.address);
    let token =
        "Validation: Testing client application reachability for subscription Request-Id: 25b3d7b3";
    let encoded: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
    let reply = reqwest::Client::new()
        .post(url(&format!("validationToken={encoded}")))
        .header("Content-Type", "text/plain; charset=utf-8")
        .send()
        .await
        .expect("Inlet answers");
    assert_eq!(reply.status(), 200);
    let header = |name: &str| {
        reply
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(header("content-type").as_deref(), Some("text/plain"));
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
    assert_eq!(reply.text().await.expect("a body"), token);
    for query in [
        "validationToken=",
        "validationToken=%3Cb%3E%0A",
        "validationToken=a&validationToken=b",
    ] {
        let refused = reqwest::Client::new()
            .post(url(query))
            .send()
            .await
            .expect("Inlet answers");
        assert_eq!(refused.status(), 400, "{query}");
        let body = refused.bytes().await.expect("a body");
        let problem: serde_json::Value = serde_json::from_slice(&body).expect("a problem");
        assert_eq!(problem["reason"], "invalid_challenge", "{query}");
    }
    assert_eq!(app.count_events().await, 0);
}
