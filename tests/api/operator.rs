//! The operator API: authentication, reads, replay and requeue — themselves idempotent.

use crate::helpers::{
    eventually, nothing_left_to_send, requests_per_key, spawn_app, spawn_app_with, stripe_event,
    Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    the_events_of_a_fact_are_found_whether_the_fact_is_the_event_or_an_object,
    every_admin_route_refuses_a_missing_or_wrong_token,
    twenty_simultaneous_replays_with_one_key_run_once,
    a_key_reused_for_another_request_is_refused_and_a_missing_key_too,
    replaying_a_swept_event_is_gone,
    a_requeued_dead_letter_is_delivered_when_the_application_recovers,
    pages_hold_every_event_exactly_once_while_new_ones_arrive,
    an_event_shows_its_payload_answer_fact_and_deliveries,
    every_attempt_is_kept_with_its_delivery_and_swept_with_it,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn app_with_destination(backend: Backend, server: &MockServer) -> TestApp {
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\nretry_base = \"20ms\"\nretry_cap = \"100ms\"",
            server.uri()
        )),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

async fn every_admin_route_refuses_a_missing_or_wrong_token(backend: Backend) {
    let app = spawn_app(backend).await;
    let admin_routes: Vec<_> = inlet::routes::ROUTES
        .iter()
        .filter(|(_, path)| path.starts_with("/admin"))
        .collect();
    assert!(admin_routes.len() >= 6);
    for (i, (method, pattern)) in admin_routes.into_iter().enumerate() {
        let path = pattern
            .replace("{source}", "stripe")
            .replace("{event_id}", "evt_1");
        // An address of its own per route: wrong tokens in a row from one address wait
        // (tests/api/operators.rs), and this test counts refusals, not waits.
        let client = reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 1, i as u8 + 1]))
            .build()
            .expect("a client");
        for token in [None, Some("operator-token-that-is-wrong-000")] {
            let mut request = match *method {
                "get" => client.get(format!("{}{path}", app.address)),
                _ => client
                    .post(format!("{}{path}", app.address))
                    .header("Idempotency-Key", "k")
                    .body("{}"),
            };
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.expect("request");
            assert_eq!(
                response.status().as_u16(),
                401,
                "{method} {path} with {token:?}"
            );
            assert_eq!(
                response
                    .headers()
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok()),
                Some("Bearer")
            );
            let body: serde_json::Value =
                serde_json::from_slice(&response.bytes().await.expect("body"))
                    .expect("problem+json");
            assert_eq!(body["reason"], "unauthorized");
        }
    }
}

async fn twenty_simultaneous_replays_with_one_key_run_once(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let app = Arc::new(app_with_destination(backend, &server).await);
    app.post_stripe(&stripe_event(
        "evt_replayed",
        "payment_intent.succeeded",
        "pi_r",
    ))
    .await
    .assert_status(200);
    // Received and recorded: a delivery still in flight is not replayed (already_pending).
    eventually("the first delivery, recorded", || async {
        requests_per_key(&server).await.values().sum::<usize>() == 1
            && app
                .admin("/admin/deliveries?status=delivered", None, None)
                .await
                .json()["deliveries"]
                .as_array()
                .is_some_and(|d| d.len() == 1)
    })
    .await;

    let body = json!({ "events": [{ "source": "stripe", "event_id": "evt_replayed" }] });
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (app, body, barrier) = (app.clone(), body.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            app.admin("/admin/replay", Some(&body), Some("replay-once-1"))
                .await
        });
    }
    let mut answers = Vec::new();
    while let Some(reply) = tasks.join_next().await {
        answers.push(reply.expect("task"));
    }
    let successes: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    assert!(!successes.is_empty());
    for reply in &answers {
        assert!(
            reply.status == 200 || reply.status == 409,
            "{}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
    }
    for reply in &successes {
        assert_eq!(
            reply.body, successes[0].body,
            "every answer is the one stored answer"
        );
    }
    assert_eq!(
        successes.iter().filter(|r| !r.replayed()).count(),
        1,
        "the replay ran once"
    );
    assert_eq!(successes[0].json()["results"][0]["result"], "requeued");

    eventually("the replayed delivery", || async {
        requests_per_key(&server).await.values().sum::<usize>() >= 2
    })
    .await;
    // Had the replay run twice, the second requeue would be sent before this holds.
    nothing_left_to_send(&app).await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(
        per_key.get("stripe:evt_replayed"),
        Some(&2),
        "one extra delivery, with the old key: {per_key:?}"
    );
    assert_eq!(app.count_facts().await, 1, "no second fact");
}

async fn a_key_reused_for_another_request_is_refused_and_a_missing_key_too(backend: Backend) {
    let app = spawn_app(backend).await;
    app.post_stripe(&stripe_event("evt_k1", "charge.refunded", "ch_1"))
        .await
        .assert_status(200);
    let first = json!({ "events": [{ "source": "stripe", "event_id": "evt_k1" }] });
    let reply = app
        .admin("/admin/replay", Some(&first), Some("key-1"))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.json()["results"][0]["result"], "no_destinations");

    let other = json!({ "events": [{ "source": "stripe", "event_id": "evt_other" }] });
    app.admin("/admin/replay", Some(&other), Some("key-1"))
        .await
        .assert_problem(422, "idempotency_key_reused");
    app.admin("/admin/replay", Some(&first), None)
        .await
        .assert_problem(400, "idempotency_key_missing");

    // A refusal before execution is not stored: the corrected retry with the same key works.
    let invalid = json!({ "events": [] });
    app.admin("/admin/replay", Some(&invalid), Some("key-2"))
        .await
        .assert_problem(400, "invalid_request");
    app.admin("/admin/replay", Some(&first), Some("key-2"))
        .await
        .assert_status(200);

    let again = app
        .admin("/admin/replay", Some(&first), Some("key-1"))
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, reply.body, "the stored answer, byte for byte");
}

async fn replaying_a_swept_event_is_gone(backend: Backend) {
    let app = spawn_app(backend).await;
    app.post_stripe(&stripe_event("evt_gone", "charge.refunded", "ch_gone"))
        .await
        .assert_status(200);
    app.clock.advance(chrono::Duration::days(36));
    app.sweep(false).await;

    let body = json!({ "events": [{ "source": "stripe", "event_id": "evt_gone" }] });
    let reply = app
        .admin("/admin/replay", Some(&body), Some("gone-1"))
        .await;
    reply.assert_problem(410, "expired");
    assert!(
        reply.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("35d")),
        "names the retention window"
    );
    app.admin("/admin/events/stripe/evt_gone", None, None)
        .await
        .assert_problem(410, "expired");
    app.admin("/admin/events/stripe/evt_never", None, None)
        .await
        .assert_problem(404, "unknown_event");
}

async fn a_requeued_dead_letter_is_delivered_when_the_application_recovers(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(422))
        .mount(&server)
        .await;
    let app = app_with_destination(backend, &server).await;
    app.post_stripe(&stripe_event("evt_dead", "charge.succeeded", "ch_dead"))
        .await
        .assert_status(200);
    eventually("the dead letter", || {
        let app = &app;
        async move {
            app.admin("/admin/deliveries?status=dead", None, None)
                .await
                .json()["deliveries"]
                .as_array()
                .is_some_and(|d| d.len() == 1)
        }
    })
    .await;
    let dead = app
        .admin("/admin/deliveries?status=dead", None, None)
        .await
        .json()["deliveries"][0]
        .clone();
    assert_eq!(dead["last_status"], 422);

    server.reset().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let body = json!({ "ids": [dead["id"]] });
    let reply = app
        .admin("/admin/deliveries/requeue", Some(&body), Some("requeue-1"))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.json()["results"][0]["result"], "requeued");
    eventually("the requeued delivery", || async {
        app.deliveries_with_status("delivered").await == 1
    })
    .await;
    assert_eq!(
        requests_per_key(&server).await.get("stripe:evt_dead"),
        Some(&1)
    );
    let again = app
        .admin("/admin/deliveries/requeue", Some(&body), Some("requeue-2"))
        .await;
    assert_eq!(again.json()["results"][0]["result"], "not_dead");
}

async fn pages_hold_every_event_exactly_once_while_new_ones_arrive(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    for i in 0..60 {
        app.post_stripe(&stripe_event(
            &format!("evt_page_{i:03}"),
            "charge.refunded",
            "ch",
        ))
        .await
        .assert_status(200);
    }
    let writer = {
        let app = app.clone();
        tokio::spawn(async move {
            for i in 0..40 {
                app.post_stripe(&stripe_event(
                    &format!("evt_new_{i:03}"),
                    "charge.refunded",
                    "ch",
                ))
                .await
                .assert_status(200);
            }
        })
    };
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/admin/events?source=stripe&limit=7&cursor={c}"),
            None => "/admin/events?source=stripe&limit=7".to_owned(),
        };
        let page = app.admin(&path, None, None).await.json();
        for event in page["events"].as_array().expect("events") {
            seen.push(event["event_id"].as_str().expect("id").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        // Real time must pass: not a wait for anything, a pause that lets the writer add
        // events between two pages, which is what paging is tested against.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    writer.await.expect("writer");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "no event appears twice");
    for i in 0..60 {
        assert!(
            seen.contains(&format!("evt_page_{i:03}")),
            "evt_page_{i:03} is on a page"
        );
    }
}

async fn an_event_shows_its_payload_answer_fact_and_deliveries(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let app = app_with_destination(backend, &server).await;
    let body = stripe_event("evt_show", "payment_intent.succeeded", "pi_show");
    let answer = app.post_stripe(&body).await;
    let shown = app.admin("/admin/events/stripe/evt_show", None, None).await;
    shown.assert_status(200);
    let shown = shown.json();
    assert_eq!(shown["event"]["event_id"], "evt_show");
    assert_eq!(
        shown["payload"]["data"].as_str().map(str::as_bytes),
        Some(body.as_slice())
    );
    assert_eq!(shown["response"]["status"], 200);
    assert_eq!(
        shown["response"]["body"]["data"]
            .as_str()
            .map(str::as_bytes),
        Some(answer.body.as_slice())
    );
    assert_eq!(shown["fact"]["first_event_id"], "evt_show");
    assert_eq!(shown["deliveries"][0]["destination"], "app");
    // The headers as received, signature included, by name.
    let headers = shown["headers"].as_array().expect("headers").clone();
    let names: Vec<&str> = headers.iter().filter_map(|h| h[0].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert!(names.contains(&"stripe-signature"), "{names:?}");
    let length = body.len().to_string();
    assert!(
        headers
            .iter()
            .any(|h| h[0] == "content-length" && h[1] == length.as_str()),
        "{headers:?}"
    );
    let retention = app.admin("/admin/retention", None, None).await.json();
    assert_eq!(retention["events"], "35d");
    assert_eq!(retention["passes"], true);
}

/// The committed OpenAPI document lists exactly the routes the server registers, and the
/// server serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_matches_the_routes() {
    let document: serde_json::Value = serde_json::from_str(inlet::routes::OPENAPI).expect("JSON");
    assert_eq!(document["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = Vec::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        for method in operations.as_object().expect("operations").keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    let mut served: Vec<(String, String)> = inlet::routes::ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    documented.sort();
    served.sort();
    assert_eq!(documented, served);

    let app = spawn_app(Backend::Sqlite).await;
    let reply = app.get("/openapi.json").await;
    reply.assert_status(200);
    assert_eq!(reply.json(), document);
}

/// Each attempt is a row of its own — outcome, answer, error, start and duration — shown
/// with its delivery, and swept with it.
async fn every_attempt_is_kept_with_its_delivery_and_swept_with_it(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    let app = app_with_destination(backend, &server).await;
    app.post_stripe(&stripe_event("evt_attempts", "invoice.paid", "in_attempts"))
        .await
        .assert_status(200);
    let shown = || async {
        app.admin("/admin/events/stripe/evt_attempts", None, None)
            .await
            .json()
    };
    eventually("three attempts", || async {
        shown().await["deliveries"][0]["attempts"]
            .as_array()
            .is_some_and(|a| a.len() == 3)
    })
    .await;
    let delivery = shown().await["deliveries"][0].clone();
    assert_eq!(delivery["status"], "delivered");
    let attempts = delivery["attempts"].as_array().expect("attempts").clone();
    let outcomes: Vec<&str> = attempts
        .iter()
        .filter_map(|a| a["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["retry", "retry", "delivered"]);
    let statuses: Vec<i64> = attempts
        .iter()
        .filter_map(|a| a["status"].as_i64())
        .collect();
    assert_eq!(statuses, [503, 503, 204]);
    let numbers: Vec<i64> = attempts
        .iter()
        .filter_map(|a| a["attempt"].as_i64())
        .collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert!(attempts[0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("503")));
    assert!(attempts[2]["error"].is_null());
    assert!(attempts
        .iter()
        .all(|a| a["duration_ms"].as_i64().is_some_and(|d| d >= 0)));
    assert!(attempts[0]["started_at"].as_str() < attempts[2]["started_at"].as_str());

    // Past the event window the delivered delivery is swept, and its attempts with it.
    app.clock.advance(chrono::Duration::days(36));
    assert_eq!(app.sweep(false).await.deliveries, 1);
    assert_eq!(app.count_attempts().await, 0);
}

/// The console's "every stored event that carried it" reads two indexes since the index
/// diet (migration 000190): an event that is its own fact is found by its id, events of an
/// object's fact by the partial fact-key index, which holds only keys other than the id.
async fn the_events_of_a_fact_are_found_whether_the_fact_is_the_event_or_an_object(
    backend: Backend,
) {
    let app = spawn_app(backend).await;
    // One payment under two event ids (a once-per-object type: the fact is pi_fact_1),
    // and an event that is its own fact (no rule for its type).
    for (id, kind, object) in [
        ("evt_fact_A", "payment_intent.succeeded", "pi_fact_1"),
        ("evt_fact_B", "payment_intent.succeeded", "pi_fact_1"),
        ("evt_fact_C", "customer.updated", "cus_fact_1"),
        ("evt_fact_D", "payment_intent.succeeded", "pi_fact_2"),
    ] {
        let answer = app.post_stripe(&stripe_event(id, kind, object)).await;
        assert_eq!(answer.status, 200, "{id}");
    }
    let of_fact = |kind: &'static str, key: &'static str| {
        app.with_conn(move |c| inlet::operator::views::events_of_fact(c, "stripe", kind, key, 100))
    };
    let ids = |events: Vec<inlet::operator::actions::EventSummary>| {
        events.into_iter().map(|e| e.event_id).collect::<Vec<_>>()
    };
    let payment = of_fact("payment_intent.succeeded", "pi_fact_1").await;
    assert_eq!(ids(payment), ["evt_fact_A", "evt_fact_B"], "oldest first");
    let own = of_fact("customer.updated", "evt_fact_C").await;
    assert_eq!(ids(own), ["evt_fact_C"]);
    assert!(
        of_fact("customer.updated", "pi_fact_1").await.is_empty(),
        "the kind counts"
    );
    assert!(of_fact("payment_intent.succeeded", "evt_fact_A")
        .await
        .is_empty());
    let limited = app
        .with_conn(|c| {
            inlet::operator::views::events_of_fact(
                c,
                "stripe",
                "payment_intent.succeeded",
                "pi_fact_1",
                1,
            )
        })
        .await;
    assert_eq!(ids(limited), ["evt_fact_A"], "at most the limit");
}
