//! Routing by event type: each destination receives the types its `events` filter names,
//! from webhooks, from operator replays and from requeued dead letters — once each — and
//! the outbox holds exactly those rows.

use crate::helpers::{
    application_answering, eventually, metric, spawn_app_with, stripe_event, Backend, TestApp,
    TestOptions,
};
use crate::on_both_backends;
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use wiremock::MockServer;

on_both_backends!(
    concurrent_webhooks_of_mixed_types_reach_exactly_their_destinations,
    an_event_no_filter_takes_is_recorded_and_delivered_nowhere,
    untyped_events_go_only_to_destinations_without_a_filter,
    a_replay_goes_only_to_the_destinations_that_take_its_type,
    a_dead_letter_its_destination_no_longer_takes_is_not_requeued,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One destination of the stripe source: its name, application and `events` (TOML array
/// contents; `None` for no filter).
struct Route<'a>(&'a str, &'a MockServer, Option<&'a str>);

/// An Inlet whose stripe source delivers to each of `routes`, in order.
async fn app_routing_to(backend: Backend, routes: &[Route<'_>]) -> TestApp {
    let tables: Vec<String> = routes
        .iter()
        .map(|Route(name, server, events)| {
            let mut lines = format!(
                "url = \"{}/{name}\"\nsecret = \"{APP_SECRET}\"\nname = \"{name}\"\n\
                 retry_base = \"20ms\"\nretry_cap = \"100ms\"",
                server.uri()
            );
            if let Some(events) = events {
                lines.push_str(&format!("\nevents = [{events}]"));
            }
            lines
        })
        .collect();
    let options = TestOptions {
        destination: Some(tables.join("\n[[sources.destinations]]\n")),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// What an application received: Idempotency-Key → (how many times, `Inlet-Event-Type`).
async fn received(server: &MockServer) -> BTreeMap<String, (usize, String)> {
    let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for request in server.received_requests().await.unwrap_or_default() {
        let header = |name: &str| {
            request
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let entry = seen.entry(header("idempotency-key")).or_default();
        entry.0 += 1;
        entry.1 = header("inlet-event-type");
    }
    seen
}

/// How many requests `server` received in all.
async fn requests(server: &MockServer) -> usize {
    received(server).await.values().map(|(n, _)| n).sum()
}

/// The outbox rows per destination, read from the database.
async fn rows_per_destination(app: &TestApp) -> BTreeMap<String, usize> {
    let names: Vec<String> = app
        .with_conn(|c| {
            deliveries::table
                .select(deliveries::destination)
                .load::<String>(c)
        })
        .await;
    let mut counts = BTreeMap::new();
    for name in names {
        *counts.entry(name).or_default() += 1;
    }
    counts
}

/// Whether every outbox row is delivered.
async fn all_delivered(app: &TestApp) -> bool {
    let statuses: Vec<String> = app
        .with_conn(|c| deliveries::table.select(deliveries::status).load(c))
        .await;
    statuses.iter().all(|s| s == "delivered")
}

/// Two applications behind one source: `filtered` receives `events` (TOML array
/// contents), `everything` has no filter.
async fn filtered_and_unfiltered(
    backend: Backend,
    events: &str,
) -> (MockServer, MockServer, TestApp) {
    let filtered = application_answering(200).await;
    let everything = application_answering(200).await;
    let app = app_routing_to(
        backend,
        &[
            Route("filtered", &filtered, Some(events)),
            Route("everything", &everything, None),
        ],
    )
    .await;
    (filtered, everything, app)
}

/// Waits until every outbox row is delivered and `server` has received `count` requests.
async fn await_deliveries(app: &TestApp, server: &MockServer, count: usize) {
    eventually(&format!("{count} deliveries"), || async {
        all_delivered(app).await && requests(server).await == count
    })
    .await;
}

/// Posts a Stripe event and expects it accepted as a new fact.
async fn accepted(app: &TestApp, body: &[u8]) {
    let reply = app.post_stripe(body).await;
    reply.assert_status(200);
    assert_eq!(reply.json()["outcome"], "accepted", "{}", reply.text());
}

/// `counts` as a map from destination name.
fn per_destination(counts: &[(&str, usize)]) -> BTreeMap<String, usize> {
    counts.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

const MIXED_TYPES: [&str; 6] = [
    "payment_intent.succeeded",
    "payment_intent.created",
    "invoice.paid",
    "customer.created",
    "charge.refunded",
    "invoice.finalized",
];

async fn concurrent_webhooks_of_mixed_types_reach_exactly_their_destinations(backend: Backend) {
    let payments = application_answering(200).await;
    let billing = application_answering(200).await;
    let everything = application_answering(200).await;
    let app = Arc::new(
        app_routing_to(
            backend,
            &[
                Route("payments", &payments, Some("\"payment_intent.*\"")),
                Route(
                    "billing",
                    &billing,
                    Some("\"invoice.paid\", \"customer.created\""),
                ),
                Route("everything", &everything, None),
            ],
        )
        .await,
    );
    let events: Vec<(String, &str)> = (0..24)
        .map(|i| (format!("evt_mix_{i}"), MIXED_TYPES[i % MIXED_TYPES.len()]))
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(events.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (id, kind)) in events.iter().enumerate() {
        let body = stripe_event(id, kind, &format!("obj_mix_{i}"));
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            accepted(&app, &body).await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("every webhook is accepted");
    }

    let wanted = |prefix: &[&str], exact: &[&str]| -> BTreeMap<String, (usize, String)> {
        events
            .iter()
            .filter(|(_, kind)| prefix.iter().any(|p| kind.starts_with(p)) || exact.contains(kind))
            .map(|(id, kind)| (format!("stripe:{id}"), (1, (*kind).to_owned())))
            .collect()
    };
    let to_payments = wanted(&["payment_intent."], &[]);
    let to_billing = wanted(&[], &["invoice.paid", "customer.created"]);
    let to_everything = wanted(&[""], &[]);
    assert_eq!(
        (to_payments.len(), to_billing.len(), to_everything.len()),
        (8, 8, 24)
    );
    eventually("every routed delivery", || async {
        all_delivered(&app).await
            && requests(&payments).await >= 8
            && requests(&billing).await >= 8
            && requests(&everything).await >= 24
    })
    .await;
    assert_eq!(
        rows_per_destination(&app).await,
        per_destination(&[("payments", 8), ("billing", 8), ("everything", 24)])
    );
    assert_eq!(received(&payments).await, to_payments);
    assert_eq!(received(&billing).await, to_billing);
    assert_eq!(received(&everything).await, to_everything);
}

async fn an_event_no_filter_takes_is_recorded_and_delivered_nowhere(backend: Backend) {
    let payments = application_answering(200).await;
    let billing = application_answering(200).await;
    let app = app_routing_to(
        backend,
        &[
            Route("payments", &payments, Some("\"payment_intent.*\"")),
            Route("billing", &billing, Some("\"invoice.*\"")),
        ],
    )
    .await;
    let unrouted = "inlet_unrouted_facts_total{source=\"stripe\"}";
    let before = metric(&app, unrouted).await;
    accepted(
        &app,
        &stripe_event("evt_nobody", "charge.refunded", "ch_nobody"),
    )
    .await;
    assert!(metric(&app, unrouted).await > before, "counted as unrouted");
    assert_eq!(app.count_facts().await, 1, "the fact is recorded");
    assert_eq!(app.count_deliveries().await, 0, "and goes nowhere");

    // A replay of it reports that no destination takes it.
    let body = json!({ "events": [{ "source": "stripe", "event_id": "evt_nobody" }] });
    let reply = app
        .admin("/admin/replay", Some(&body), Some("replay-nobody"))
        .await;
    reply.assert_status(200);
    let result = &reply.json()["results"][0];
    assert_eq!(result["result"], "no_destinations", "{result}");
    assert_eq!(result["deliveries"], 0);

    // A later routed event is the only thing either application ever sees.
    accepted(
        &app,
        &stripe_event("evt_paid", "payment_intent.succeeded", "pi_paid"),
    )
    .await;
    await_deliveries(&app, &payments, 1).await;
    assert_eq!(
        received(&payments).await.into_keys().collect::<Vec<_>>(),
        ["stripe:evt_paid"]
    );
    assert_eq!(requests(&billing).await, 0);
    assert_eq!(
        rows_per_destination(&app).await,
        per_destination(&[("payments", 1)])
    );
}

async fn untyped_events_go_only_to_destinations_without_a_filter(backend: Backend) {
    let (typed, everything, app) = filtered_and_unfiltered(backend, "\"*\"").await;
    let untyped = json!({ "id": "evt_untyped", "object": "event", "data": {} }).to_string();
    let reply = app.post_stripe(untyped.as_bytes()).await;
    assert_eq!(reply.json()["event_type"], serde_json::Value::Null);
    assert_eq!(reply.json()["outcome"], "accepted");
    accepted(
        &app,
        &stripe_event("evt_typed", "customer.created", "cus_1"),
    )
    .await;
    await_deliveries(&app, &everything, 2).await;
    let keys = |seen: BTreeMap<String, (usize, String)>| seen.into_keys().collect::<Vec<_>>();
    assert_eq!(keys(received(&typed).await), ["stripe:evt_typed"]);
    assert_eq!(
        keys(received(&everything).await),
        ["stripe:evt_typed", "stripe:evt_untyped"]
    );
    assert_eq!(
        rows_per_destination(&app).await,
        per_destination(&[("filtered", 1), ("everything", 2)])
    );
}

async fn a_replay_goes_only_to_the_destinations_that_take_its_type(backend: Backend) {
    let (payments, everything, app) =
        filtered_and_unfiltered(backend, "\"payment_intent.*\"").await;
    accepted(
        &app,
        &stripe_event("evt_r_pay", "payment_intent.succeeded", "pi_r"),
    )
    .await;
    accepted(&app, &stripe_event("evt_r_inv", "invoice.paid", "in_r")).await;
    await_deliveries(&app, &everything, 2).await;

    let body = json!({ "events": [
        { "source": "stripe", "event_id": "evt_r_pay" },
        { "source": "stripe", "event_id": "evt_r_inv" },
    ] });
    let mut preview = body.clone();
    preview["dry_run"] = json!(true);
    for (request, key) in [(&preview, None), (&body, Some("replay-routed"))] {
        let reply = app.admin("/admin/replay", Some(request), key).await;
        reply.assert_status(200);
        let answer = reply.json();
        let routed: Vec<_> = answer["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| (r["result"].clone(), r["destinations"].clone()))
            .collect();
        assert_eq!(
            routed,
            [
                (json!("requeued"), json!(["filtered", "everything"])),
                (json!("requeued"), json!(["everything"])),
            ],
            "{answer}"
        );
        assert_eq!(
            answer["summary"]["deliveries"],
            json!({ "everything": 2, "filtered": 1 })
        );
    }

    await_deliveries(&app, &everything, 4).await;
    let twice = |kind: &str| (2, kind.to_owned());
    assert_eq!(
        received(&payments).await,
        BTreeMap::from([(
            "stripe:evt_r_pay".to_owned(),
            twice("payment_intent.succeeded")
        )])
    );
    assert_eq!(
        received(&everything).await,
        BTreeMap::from([
            ("stripe:evt_r_inv".to_owned(), twice("invoice.paid")),
            (
                "stripe:evt_r_pay".to_owned(),
                twice("payment_intent.succeeded")
            ),
        ])
    );
    assert_eq!(
        rows_per_destination(&app).await,
        per_destination(&[("filtered", 2), ("everything", 4)])
    );
}

async fn a_dead_letter_its_destination_no_longer_takes_is_not_requeued(backend: Backend) {
    let refusing = application_answering(400).await;
    let app = app_routing_to(backend, &[Route("app", &refusing, None)]).await;
    accepted(&app, &stripe_event("evt_dead", "invoice.paid", "in_dead")).await;
    eventually("the dead letter", || async {
        app.deliveries_with_status("dead").await == 1
    })
    .await;

    // The same database, now configured to send `app` payments only.
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/app\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\nevents = [\"payment_intent.*\"]",
            refusing.uri()
        )),
        ..Default::default()
    };
    let restarted = app.another_instance(options).await;
    let body = json!({ "filter": { "source": "stripe", "status": "dead" } });
    let reply = restarted
        .admin("/admin/deliveries/requeue", Some(&body), Some("requeue-1"))
        .await;
    reply.assert_status(200);
    assert_eq!(
        reply.json()["results"][0]["result"],
        "not_routed",
        "{}",
        reply.text()
    );
    assert_eq!(restarted.deliveries_with_status("dead").await, 1);
    assert_eq!(requests(&refusing).await, 1, "sent once, before the change");
}
