//! One copy of each payload: an outbox row refers to its event's bytes instead of copying
//! them, and the sweeper copies them into every delivery that may still be sent before it
//! deletes the event — so no delivery ever loses its body, whatever outlives what.

use crate::helpers::{eventually, spawn_app_with, stripe_event, Backend, TestApp, TestOptions};
use crate::on_both_backends;
use diesel::prelude::*;
use inlet::db::schema::{deliveries, events};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    an_accepted_webhook_stores_its_payload_once_and_delivers_it,
    a_dead_letter_outliving_its_event_is_requeued_with_its_body,
    a_pending_delivery_outliving_its_event_is_sent_with_its_body,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn destination(url: &str) -> String {
    format!(
        "url = \"{url}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\n\
         retry_base = \"20ms\"\nretry_cap = \"100ms\""
    )
}

async fn app_for(backend: Backend, url: &str, dispatch: bool) -> TestApp {
    let options = TestOptions {
        destination: Some(destination(url)),
        dispatch,
        // Dead letters kept longer than events (35 days): a letter can outlive its event.
        retention: "dead_letters = \"90d\"",
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// Each delivery row's own payload (`None`: it refers to its event's), by event id.
async fn outbox_payloads(app: &TestApp) -> Vec<(String, String, Option<Vec<u8>>)> {
    app.with_conn(|c| {
        deliveries::table
            .order(deliveries::id)
            .select((
                deliveries::event_id,
                deliveries::status,
                deliveries::payload,
            ))
            .load(c)
    })
    .await
}

async fn stored_payload(app: &TestApp, event_id: &'static str) -> Option<Vec<u8>> {
    app.with_conn(move |c| {
        events::table
            .filter(events::event_id.eq(event_id))
            .select(events::payload)
            .first(c)
            .optional()
    })
    .await
}

/// The bodies the application received, in order.
async fn received_bodies(server: &MockServer) -> Vec<Vec<u8>> {
    let requests = server.received_requests().await.unwrap_or_default();
    requests.into_iter().map(|r| r.body).collect()
}

async fn an_accepted_webhook_stores_its_payload_once_and_delivers_it(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let app = app_for(backend, &server.uri(), true).await;
    let body = stripe_event("evt_once", "payment_intent.succeeded", "pi_once");
    app.post_stripe(&body).await.assert_status(200);

    assert_eq!(
        stored_payload(&app, "evt_once").await.as_deref(),
        Some(body.as_slice())
    );
    let outbox = outbox_payloads(&app).await;
    assert_eq!(outbox.len(), 1, "{outbox:?}");
    assert_eq!(outbox[0].2, None, "the outbox row holds no second copy");
    eventually("the delivery", || async {
        app.deliveries_with_status("delivered").await == 1
    })
    .await;
    assert_eq!(received_bodies(&server).await, vec![body]);
}

async fn a_dead_letter_outliving_its_event_is_requeued_with_its_body(backend: Backend) {
    // Refused for good once (a dead letter), accepted after the requeue.
    let server = crate::helpers::refusing_first(1, "").await;
    let app = app_for(backend, &server.uri(), true).await;
    let body = stripe_event("evt_outlived", "charge.succeeded", "ch_outlived");
    app.post_stripe(&body).await.assert_status(200);
    eventually("the dead letter", || async {
        app.deliveries_with_status("dead").await == 1
    })
    .await;

    // Past the event window, inside the dead-letter window: the event goes, the letter stays.
    app.clock.advance(chrono::Duration::days(36));
    assert_eq!(app.sweep(false).await.events, 1);
    assert_eq!(stored_payload(&app, "evt_outlived").await, None);
    let outbox = outbox_payloads(&app).await;
    assert_eq!(
        outbox,
        vec![(
            "evt_outlived".to_owned(),
            "dead".to_owned(),
            Some(body.clone())
        )],
        "the sweeper copied the bytes into the dead letter first"
    );

    let id = app.with_conn(|c| deliveries::table.select(deliveries::id).first::<i64>(c));
    let requeue = json!({ "ids": [id.await] });
    let reply = app
        .admin(
            "/admin/deliveries/requeue",
            Some(&requeue),
            Some("requeue-outlived"),
        )
        .await;
    assert_eq!(
        reply.json()["results"][0]["result"],
        "requeued",
        "{}",
        reply.text()
    );
    eventually("the requeued delivery", || async {
        app.deliveries_with_status("delivered").await == 1
    })
    .await;
    let bodies = received_bodies(&server).await;
    assert_eq!(bodies.len(), 2);
    assert!(bodies.iter().all(|b| *b == body), "the same bytes, twice");
}

async fn a_pending_delivery_outliving_its_event_is_sent_with_its_body(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    // No dispatcher here: the delivery waits while its event expires and is swept.
    let app = app_for(backend, &server.uri(), false).await;
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|i| {
            stripe_event(
                &format!("evt_waiting_{i}"),
                "charge.succeeded",
                &format!("ch_w{i}"),
            )
        })
        .collect();
    for body in &bodies {
        app.post_stripe(body).await.assert_status(200);
    }
    app.clock.advance(chrono::Duration::days(36));
    assert_eq!(app.sweep(false).await.events, 3);
    assert!(
        outbox_payloads(&app)
            .await
            .iter()
            .all(|(_, status, payload)| { status == "pending" && payload.is_some() }),
        "every pending row got its copy"
    );

    // Another instance, on the real clock, sends them.
    let _sender = app
        .another_instance(TestOptions {
            destination: Some(destination(&server.uri())),
            ..Default::default()
        })
        .await;
    eventually("the three deliveries", || async {
        app.deliveries_with_status("delivered").await == 3
    })
    .await;
    let mut received = received_bodies(&server).await;
    let mut sent = bodies;
    received.sort();
    sent.sort();
    assert_eq!(received, sent);
}

/// Twenty-four replays of events the sweeper deletes at the same moment: each replay
/// either enqueued its delivery before the sweep copied the payloads (it locked the event
/// first) or found the event gone; no pending row refers to an event that is not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replays_racing_the_sweep_never_lose_a_body() {
    let app = app_for(Backend::Postgres, "http://127.0.0.1:9", false).await;
    let ids: Vec<String> = (0..24).map(|i| format!("evt_race_{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let body = stripe_event(id, "charge.succeeded", &format!("ch_race_{i}"));
        app.post_stripe(&body).await.assert_status(200);
    }
    // Delivered already, so that a replay enqueues a new row.
    app.with_conn(|c| {
        diesel::update(deliveries::table)
            .set(deliveries::status.eq("delivered"))
            .execute(c)
    })
    .await;
    app.clock.advance(chrono::Duration::days(36));

    let app = std::sync::Arc::new(app);
    let mut replays = tokio::task::JoinSet::new();
    for id in ids {
        let app = app.clone();
        replays.spawn(async move {
            let body = json!({ "events": [{ "source": "stripe", "event_id": id }] });
            let reply = app
                .admin("/admin/replay", Some(&body), Some(&format!("race-{id}")))
                .await;
            reply.json()["results"][0]["result"].clone()
        });
    }
    let swept = app.sweep(false).await;
    assert_eq!(swept.events, 24, "{swept:?}");
    let results = replays.join_all().await;
    let requeued = results.iter().filter(|r| *r == "requeued").count();

    let outbox = outbox_payloads(&app).await;
    let pending: Vec<_> = outbox.iter().filter(|(_, s, _)| s == "pending").collect();
    assert_eq!(pending.len(), requeued, "{results:?}");
    assert!(
        pending.iter().all(|(_, _, payload)| payload.is_some()),
        "every replayed row kept its body once its event was swept: {pending:?}"
    );
}
