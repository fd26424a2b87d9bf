//! A fact reaches the application once on every operator path: replay (and its preview),
//! requeue and discard of dead letters, and facts of sources whose event ids are unsigned.

use crate::helpers::{
    application_answering, eventually, nothing_left_to_send, requests_per_key, spawn_app_with,
    stripe_event, wait_for, Backend, TestApp, TestOptions, EVENTUALLY,
};
use crate::on_both_backends;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    replaying_a_later_event_of_a_fact_delivers_nothing_and_names_the_first,
    a_replay_preview_changes_nothing_and_counts_deliveries_per_destination,
    the_cli_replay_needs_a_selector_and_previews_with_dry_run,
    a_discarded_dead_letter_stays_visible_until_its_retention_ends,
    dead_letters_are_swept_after_their_retention,
    an_event_shows_its_deliveries_on_a_busy_source,
    a_captured_github_body_under_a_fresh_delivery_id_is_no_new_fact,
    a_fresh_id_and_another_type_do_not_escape_fact_rules_or_keys,
    concurrent_requeues_and_discards_of_one_dead_letter_succeed_once,
    a_replay_names_each_event_once_and_skips_what_is_still_pending,
    admin_timestamps_are_rfc3339_utc_to_the_microsecond,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn app_delivering_to(backend: Backend, server: &MockServer) -> TestApp {
    let destination = format!(
        "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\nretry_base = \"20ms\"\nretry_cap = \"100ms\"",
        server.uri()
    );
    spawn_app_with(
        backend,
        TestOptions {
            destination: Some(destination),
            ..Default::default()
        },
    )
    .await
}

async fn app_with_sources(backend: Backend, extra_sources: String) -> TestApp {
    spawn_app_with(
        backend,
        TestOptions {
            extra_sources,
            ..Default::default()
        },
    )
    .await
}

/// Event A records payment pi_X (delivered once under `stripe:A`); event B is the same
/// payment under another id (`duplicate_fact`, no delivery).
async fn one_payment_under_two_event_ids(app: &TestApp, server: &MockServer) {
    let first = app
        .post_stripe(&stripe_event("evt_A", "payment_intent.succeeded", "pi_X"))
        .await;
    assert_eq!(first.json()["outcome"], "accepted");
    let second = app
        .post_stripe(&stripe_event("evt_B", "payment_intent.succeeded", "pi_X"))
        .await;
    assert_eq!(second.json()["outcome"], "duplicate_fact");
    eventually("the first delivery, recorded", || async {
        requests_per_key(server).await.get("stripe:evt_A") == Some(&1)
            && deliveries_of(app, "delivered").await.len() == 1
    })
    .await;
}

async fn deliveries_of(app: &TestApp, status: &str) -> Vec<serde_json::Value> {
    app.admin(&format!("/admin/deliveries?status={status}"), None, None)
        .await
        .json()["deliveries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn replaying_a_later_event_of_a_fact_delivers_nothing_and_names_the_first(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    one_payment_under_two_event_ids(&app, &server).await;

    let body = json!({ "events": [{ "source": "stripe", "event_id": "evt_B" }] });
    let reply = app
        .admin("/admin/replay", Some(&body), Some("replay-B"))
        .await;
    reply.assert_status(200);
    let result = &reply.json()["results"][0];
    assert_eq!(result["result"], "duplicate_fact");
    assert_eq!(result["first_event_id"], "evt_A");
    assert_eq!(result["deliveries"], 0);

    // The operator's sweep over the whole source: A again under its own key, B nothing.
    let all = json!({ "filter": { "source": "stripe" } });
    let reply = app
        .admin("/admin/replay", Some(&all), Some("replay-all"))
        .await;
    let results = reply.json()["results"].clone();
    assert_eq!(results[0]["event_id"], "evt_A");
    assert_eq!(results[0]["result"], "requeued");
    assert_eq!(results[1]["result"], "duplicate_fact");
    eventually("the replayed delivery", || async {
        requests_per_key(&server).await.get("stripe:evt_A") == Some(&2)
    })
    .await;
    nothing_left_to_send(&app).await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(
        per_key.get("stripe:evt_B"),
        None,
        "never under B's key: {per_key:?}"
    );
    assert_eq!(per_key.values().sum::<usize>(), 2, "{per_key:?}");
    for request in server.received_requests().await.unwrap_or_default() {
        assert_eq!(
            request
                .headers
                .get("webhook-id")
                .and_then(|v| v.to_str().ok()),
            Some("stripe:evt_A"),
            "the Standard Webhooks id is the fact's key too"
        );
    }
}

async fn a_replay_preview_changes_nothing_and_counts_deliveries_per_destination(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    one_payment_under_two_event_ids(&app, &server).await;
    app.post_stripe(&stripe_event("evt_C", "invoice.paid", "in_1"))
        .await
        .assert_status(200);
    // Received and recorded: a delivery still in flight would be `already_pending`.
    eventually("two deliveries, recorded", || async {
        requests_per_key(&server).await.values().sum::<usize>() == 2
            && deliveries_of(&app, "delivered").await.len() == 2
    })
    .await;

    // A preview needs no Idempotency-Key: it changes nothing.
    let preview = json!({ "filter": { "source": "stripe" }, "dry_run": true });
    let reply = app.admin("/admin/replay", Some(&preview), None).await;
    reply.assert_status(200);
    let answer = reply.json();
    assert_eq!(answer["dry_run"], true);
    assert_eq!(answer["summary"]["events"], 3);
    assert_eq!(answer["summary"]["deliveries"], json!({ "app": 2 }));
    assert_eq!(
        answer["summary"]["results"],
        json!({ "requeued": 2, "duplicate_fact": 1 })
    );
    assert_eq!(answer["results"][1]["first_event_id"], "evt_A");
    // Had the preview requeued anything, it would be sent again before this holds.
    nothing_left_to_send(&app).await;
    assert_eq!(requests_per_key(&server).await.values().sum::<usize>(), 2);
    assert_eq!(deliveries_of(&app, "pending").await.len(), 0);
    assert_eq!(deliveries_of(&app, "delivered").await.len(), 2);
}

async fn the_cli_replay_needs_a_selector_and_previews_with_dry_run(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    one_payment_under_two_event_ids(&app, &server).await;

    let (code, stdout, stderr) = app.run_cli(&["replay"]).await;
    assert_ne!(code, Some(0), "{stdout}");
    assert!(stderr.contains("--all"), "names --all: {stderr}");

    let (code, stdout, _) = app.run_cli(&["replay", "--all", "--dry-run"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("\"dry_run\": true"), "{stdout}");
    assert!(stdout.contains("\"app\": 1"), "{stdout}");

    let (code, stdout, _) = app.run_cli(&["replay", "--event", "stripe/evt_B"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("\"result\": \"duplicate_fact\""),
        "{stdout}"
    );
    assert!(stdout.contains("\"first_event_id\": \"evt_A\""), "{stdout}");

    let (code, stdout, _) = app.run_cli(&["replay", "--source", "stripe"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    eventually("the replayed delivery", || async {
        requests_per_key(&server).await.get("stripe:evt_A") == Some(&2)
    })
    .await;
    assert_eq!(requests_per_key(&server).await.get("stripe:evt_B"), None);
}

/// A fact whose only delivery the application refuses for good (422): a dead letter.
async fn one_dead_letter(app: &TestApp, event_id: &str) -> i64 {
    app.post_stripe(&stripe_event(event_id, "charge.succeeded", event_id))
        .await
        .assert_status(200);
    wait_for(&format!("{event_id}'s dead letter"), EVENTUALLY, || async {
        deliveries_of(app, "dead")
            .await
            .iter()
            .find(|d| d["event_id"] == event_id)
            .and_then(|d| d["id"].as_i64())
    })
    .await
}

fn dead_letter_gauge(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("inlet_dead_letters "))
        .and_then(|value| value.trim().parse().ok())
}

async fn a_discarded_dead_letter_stays_visible_until_its_retention_ends(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_delivering_to(backend, &server).await;
    let first = one_dead_letter(&app, "evt_dead_1").await;
    let second = one_dead_letter(&app, "evt_dead_2").await;
    assert_eq!(
        dead_letter_gauge(&app.get("/metrics").await.text()),
        Some(2.0)
    );

    let body = json!({ "ids": [first] });
    app.admin("/admin/deliveries/discard", Some(&body), None)
        .await
        .assert_problem(400, "idempotency_key_missing");
    let reply = app
        .admin("/admin/deliveries/discard", Some(&body), Some("discard-1"))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.json()["results"][0]["result"], "discarded");
    let again = app
        .admin("/admin/deliveries/discard", Some(&body), Some("discard-1"))
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, reply.body);
    let twice = app
        .admin("/admin/deliveries/discard", Some(&body), Some("discard-2"))
        .await;
    assert_eq!(twice.json()["results"][0]["result"], "not_dead");

    let discarded = deliveries_of(&app, "discarded").await;
    assert_eq!(discarded.len(), 1);
    assert_eq!(discarded[0]["id"], first);
    assert!(discarded[0]["settled_at"].is_string());
    assert_eq!(
        dead_letter_gauge(&app.get("/metrics").await.text()),
        Some(1.0)
    );

    // The CLI: a selector is required; then the filter discards the other one.
    let (code, _, stderr) = app.run_cli(&["deadletters", "discard"]).await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("--all"), "{stderr}");
    let (code, stdout, _) = app
        .run_cli(&["deadletters", "discard", "--source", "stripe"])
        .await;
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains(&format!("\"id\": {second}")), "{stdout}");
    assert_eq!(deliveries_of(&app, "dead").await.len(), 0);
    assert_eq!(
        dead_letter_gauge(&app.get("/metrics").await.text()),
        Some(0.0)
    );

    // Kept until retention.dead_letters (30d) has passed since the discard.
    app.clock.advance(chrono::Duration::days(29));
    app.sweep(false).await;
    assert_eq!(deliveries_of(&app, "discarded").await.len(), 2);
    app.clock.advance(chrono::Duration::days(2));
    let report = app.sweep(false).await;
    assert_eq!(report.dead_letters, 2);
    assert_eq!(deliveries_of(&app, "discarded").await.len(), 0);
    assert_eq!(
        server.received_requests().await.unwrap_or_default().len(),
        2
    );
}

async fn dead_letters_are_swept_after_their_retention(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_delivering_to(backend, &server).await;
    one_dead_letter(&app, "evt_dead_old").await;
    app.clock.advance(chrono::Duration::days(29));
    let report = app.sweep(true).await;
    assert_eq!(report.dead_letters, 0, "inside the window: kept");
    app.sweep(false).await;
    assert_eq!(deliveries_of(&app, "dead").await.len(), 1);
    app.clock.advance(chrono::Duration::days(2));
    assert_eq!(app.sweep(true).await.dead_letters, 1);
    app.sweep(false).await;
    assert_eq!(deliveries_of(&app, "dead").await.len(), 0);
    assert_eq!(
        dead_letter_gauge(&app.get("/metrics").await.text()),
        Some(0.0)
    );
}

async fn an_event_shows_its_deliveries_on_a_busy_source(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    // 1,200 older deliveries of other events of the same source, written directly.
    let mut conn = app.direct_connection();
    tokio::task::spawn_blocking(move || {
        use diesel::Connection;
        let now = chrono::Utc::now().naive_utc();
        conn.transaction(|conn| {
            for i in 0..1200 {
                inlet::delivery::NewDelivery {
                    source: "stripe",
                    event_id: &format!("evt_busy_{i}"),
                    event_type: None,
                    destination: "app",
                    payload: Some(b"{}"),
                    content_type: "application/json",
                    status: "delivered",
                    attempt: 1,
                    next_attempt_at: now,
                    deadline_at: now,
                    created_at: now,
                    trace_parent: None,
                    filter_pending: false,
                    last_error: None,
                    settled_at: None,
                }
                .enqueue(conn)?;
            }
            diesel::QueryResult::Ok(())
        })
        .expect("insert deliveries");
    })
    .await
    .expect("insert task");
    app.post_stripe(&stripe_event("evt_late", "invoice.paid", "in_late"))
        .await
        .assert_status(200);
    let shown = app.admin("/admin/events/stripe/evt_late", None, None).await;
    shown.assert_status(200);
    let deliveries = shown.json()["deliveries"].clone();
    assert_eq!(deliveries.as_array().map(Vec::len), Some(1), "{deliveries}");
    assert_eq!(deliveries[0]["event_id"], "evt_late");
    app.admin("/admin/events/stripe/evt_never", None, None)
        .await
        .assert_problem(404, "unknown_event");
    let unknown = app
        .admin("/admin/events/stripe/evt_never", None, None)
        .await;
    assert_eq!(unknown.json()["title"], "No such event");
}

async fn a_captured_github_body_under_a_fresh_delivery_id_is_no_new_fact(backend: Backend) {
    let server = application_answering(200).await;
    let extra = format!(
        "\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"gh-secret-0123456789abcdef\"]\n\
         [[sources.destinations]]\nurl = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\n",
        server.uri()
    );
    let app = app_with_sources(backend, extra).await;
    let body = br#"{"ref":"refs/heads/main","after":"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}"#;
    let mut headers = app.sign_for("gh", body, "delivery-1", None);
    headers.push(("X-GitHub-Event".to_owned(), "push".to_owned()));
    let first = app.post_webhook("gh", body, &headers).await;
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());

    // Someone holding the captured request re-sends it under fresh, unsigned headers.
    for (delivery, event) in [("delivery-2", "push"), ("delivery-3", "issues")] {
        let replayed: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| match name.to_ascii_lowercase().as_str() {
                "x-github-delivery" => (name.clone(), delivery.to_owned()),
                "x-github-event" => (name.clone(), event.to_owned()),
                _ => (name.clone(), value.clone()),
            })
            .collect();
        let copy = app.post_webhook("gh", body, &replayed).await;
        copy.assert_status(200);
        assert_eq!(copy.json()["outcome"], "duplicate_fact", "{}", copy.text());
        assert_eq!(copy.json()["fact"]["first_event_id"], "delivery-1");
    }
    // A different body is a different fact.
    let other = br#"{"ref":"refs/heads/main","after":"1111111111111111111111111111111111111111"}"#;
    let mut headers = app.sign_for("gh", other, "delivery-4", None);
    headers.push(("X-GitHub-Event".to_owned(), "push".to_owned()));
    let reply = app.post_webhook("gh", other, &headers).await;
    assert_eq!(reply.json()["outcome"], "accepted");

    eventually("two deliveries", || async {
        requests_per_key(&server).await.values().sum::<usize>() == 2
    })
    .await;
    nothing_left_to_send(&app).await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(per_key.get("gh:delivery-1"), Some(&1), "{per_key:?}");
    assert_eq!(per_key.get("gh:delivery-4"), Some(&1), "{per_key:?}");
    assert_eq!(per_key.len(), 2, "{per_key:?}");
}

fn is_rfc3339_micros_utc(value: &serde_json::Value) -> bool {
    let Some(text) = value.as_str() else {
        return false;
    };
    let bytes = text.as_bytes();
    bytes.len() == 27
        && text.ends_with('Z')
        && bytes[10] == b'T'
        && bytes[19] == b'.'
        && chrono::DateTime::parse_from_rfc3339(text).is_ok()
}

async fn admin_timestamps_are_rfc3339_utc_to_the_microsecond(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    app.post_stripe(&stripe_event("evt_time", "invoice.paid", "in_time"))
        .await
        .assert_status(200);
    eventually("the delivery", || async {
        !deliveries_of(&app, "delivered").await.is_empty()
    })
    .await;
    let events = app.admin("/admin/events", None, None).await.json();
    for field in ["received_at", "expires_at"] {
        let value = &events["events"][0][field];
        assert!(is_rfc3339_micros_utc(value), "{field}: {value}");
    }
    let delivered = deliveries_of(&app, "delivered").await;
    for field in [
        "next_attempt_at",
        "deadline_at",
        "created_at",
        "delivered_at",
    ] {
        let value = &delivered[0][field];
        assert!(is_rfc3339_micros_utc(value), "{field}: {value}");
    }
    let shown = app
        .admin("/admin/events/stripe/evt_time", None, None)
        .await
        .json();
    assert!(is_rfc3339_micros_utc(&shown["fact"]["created_at"]));
    assert!(is_rfc3339_micros_utc(&shown["event"]["received_at"]));
}

async fn a_fresh_id_and_another_type_do_not_escape_fact_rules_or_keys(backend: Backend) {
    let server = application_answering(200).await;
    let destination = |name: &str| {
        format!(
            "[[sources.destinations]]\nurl = \"{}/{name}\"\nsecret = \"{APP_SECRET}\"\nname = \"{name}\"\n",
            server.uri()
        )
    };
    let extra = format!(
        "\n[[sources]]\nname = \"gh-rules\"\nscheme = \"github\"\nsecrets = [\"gh-secret-0123456789abcdef\"]\n\
         [[sources.facts]]\ntypes = [\"push\"]\nkey = \"/after\"\n{}\
         \n[[sources]]\nname = \"gh-keyed\"\nscheme = \"github\"\nsecrets = [\"gh-secret-0123456789abcdef\"]\n\
         fact_key = \"json:/after\"\n{}",
        destination("rules"),
        destination("keyed")
    );
    let app = app_with_sources(backend, extra).await;
    let body = br#"{"ref":"refs/heads/main","after":"5f4e3d2c1b0a"}"#;
    for source in ["gh-rules", "gh-keyed"] {
        let post = |delivery: &str, event: &str| {
            let mut headers = app.sign_for(source, body, delivery, None);
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case("x-github-event"));
            headers.push(("X-GitHub-Event".to_owned(), event.to_owned()));
            let app = &app;
            async move { app.post_webhook(source, body, &headers).await }
        };
        let first = post("d-1", "push").await;
        assert_eq!(
            first.json()["outcome"],
            "accepted",
            "{source}: {}",
            first.text()
        );
        for (delivery, event) in [("d-2", "issues"), ("d-3", "push"), ("d-4", "ping")] {
            let copy = post(delivery, event).await;
            assert_eq!(
                copy.json()["outcome"],
                "duplicate_fact",
                "{source} {delivery} {event}: {}",
                copy.text()
            );
            assert_eq!(copy.json()["fact"]["first_event_id"], "d-1");
        }
    }
    eventually("one delivery per source", || async {
        server.received_requests().await.unwrap_or_default().len() == 2
    })
    .await;
    nothing_left_to_send(&app).await;
    assert_eq!(
        server.received_requests().await.unwrap_or_default().len(),
        2
    );
}

async fn concurrent_requeues_and_discards_of_one_dead_letter_succeed_once(backend: Backend) {
    let server = application_answering(422).await;
    let app = std::sync::Arc::new(app_delivering_to(backend, &server).await);
    let id = one_dead_letter(&app, "evt_raced").await;
    // A requeued row must not die again during the race (then a later call could rightly
    // succeed too): from now on the application holds every request.
    server.reset().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(30)))
        .mount(&server)
        .await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(24));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..24 {
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            let path = if n % 2 == 0 {
                "/admin/deliveries/requeue"
            } else {
                "/admin/deliveries/discard"
            };
            let body = json!({ "ids": [id] });
            barrier.wait().await;
            app.admin(path, Some(&body), Some(&format!("race-{n}")))
                .await
        });
    }
    let mut results = Vec::new();
    while let Some(reply) = tasks.join_next().await {
        let reply = reply.expect("task");
        reply.assert_status(200);
        results.push(
            reply.json()["results"][0]["result"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
    }
    let succeeded = results
        .iter()
        .filter(|r| *r == "requeued" || *r == "discarded")
        .count();
    assert_eq!(
        succeeded, 1,
        "exactly one call changed the row: {results:?}"
    );
    assert!(results
        .iter()
        .all(|r| r == "requeued" || r == "discarded" || r == "not_dead"));
}

async fn a_replay_names_each_event_once_and_skips_what_is_still_pending(backend: Backend) {
    let server = application_answering(503).await;
    let app = app_delivering_to(backend, &server).await;
    for i in 0..3 {
        app.post_stripe(&stripe_event(
            &format!("evt_p{i}"),
            "invoice.paid",
            &format!("in_{i}"),
        ))
        .await
        .assert_status(200);
    }
    // The application answers 503: every delivery is still pending (retrying).
    let twice = json!({ "events": [
        { "source": "stripe", "event_id": "evt_p0" },
        { "source": "stripe", "event_id": "evt_p0" },
    ], "dry_run": true });
    let reply = app.admin("/admin/replay", Some(&twice), None).await.json();
    assert_eq!(reply["summary"]["events"], 1, "{reply}");
    assert_eq!(reply["results"][0]["result"], "already_pending", "{reply}");

    let limited = json!({ "filter": { "source": "stripe" }, "limit": 2, "dry_run": true });
    let reply = app
        .admin("/admin/replay", Some(&limited), None)
        .await
        .json();
    assert_eq!(reply["truncated"], true, "{reply}");
    assert_eq!(reply["summary"]["events"], 2);
    let all = json!({ "filter": { "source": "stripe" }, "limit": 3, "dry_run": true });
    let reply = app.admin("/admin/replay", Some(&all), None).await.json();
    assert_eq!(reply["truncated"], false, "{reply}");
}
