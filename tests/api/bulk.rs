//! Bulk actions by filter through the operator API: a preview that counts, one action per
//! Idempotency-Key, batches that survive a restart mid-way, each row acted on once.

use crate::helpers::{
    eventually_within, nothing_left_to_send, post_events, refusing_first, requests_per_key,
    spawn_app_with, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use wiremock::MockServer;

on_both_backends!(
    a_bulk_requeue_of_500_dead_letters_previews_runs_once_and_survives_a_restart,
    a_bulk_replay_goes_to_the_one_destination_named,
    a_bulk_request_is_checked_and_a_viewer_only_previews,
    a_bulk_replay_killed_mid_way_resumes_and_delivers_each_fact_once_more,
    a_confirmation_acts_on_at_most_what_its_preview_counted,
    a_confirmation_sent_again_after_the_action_ran_finds_it,
);

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn destination(name: &str, server: &MockServer) -> String {
    format!(
        "url = \"{}/{name}\"\nsecret = \"{SECRET}\"\nname = \"{name}\"\nretry_base = \"20ms\"\nretry_cap = \"100ms\"\n",
        server.uri()
    )
}

async fn deliveries(app: &TestApp, status: &str) -> usize {
    let reply = app
        .admin(
            &format!("/admin/deliveries?status={status}&limit=500"),
            None,
            None,
        )
        .await;
    reply.json()["deliveries"].as_array().map_or(0, Vec::len)
}

async fn dead_letters(app: &TestApp) -> usize {
    deliveries(app, "dead").await
}

async fn bulk_action(app: &TestApp, id: &Value) -> Value {
    let reply = app.admin(&format!("/admin/bulk/{id}"), None, None).await;
    reply.assert_status(200);
    reply.json()
}

async fn a_bulk_requeue_of_500_dead_letters_previews_runs_once_and_survives_a_restart(
    backend: Backend,
) {
    let server = refusing_first(500, "not yet").await;
    let options = TestOptions {
        destination: Some(destination("app", &server)),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options.clone()).await);
    post_events(&app, "evt_outage", 500, &["charge.succeeded"]).await;
    eventually_within("500 dead letters", Duration::from_secs(120), || async {
        dead_letters(&app).await == 500
    })
    .await;

    let request = json!({ "action": "requeue", "filter": { "destination": "app" } });
    let preview =
        json!({ "action": "requeue", "filter": { "destination": "app" }, "dry_run": true });
    let previewed = app.admin("/admin/bulk", Some(&preview), None).await;
    previewed.assert_status(200);
    let previewed = previewed.json();
    assert_eq!(previewed["matched"], 500, "{previewed}");
    assert_eq!(previewed["destinations"], json!({ "app": 500 }));
    assert_eq!(previewed["sample"].as_array().map(Vec::len), Some(10));
    assert_eq!(dead_letters(&app).await, 500, "a preview changes nothing");

    // The runner dies in its third batch (100 rows each): two batches are done, the third
    // rolls back, and the lease stays held as a killed process would leave it.
    app.faults.crash_bulk_batch(3);
    let created = app
        .admin("/admin/bulk", Some(&request), Some("outage-1"))
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    let again = app
        .admin("/admin/bulk", Some(&request), Some("outage-1"))
        .await;
    assert_eq!(again.body, created.body, "the same key, the same action");
    assert_eq!(again.header("Idempotent-Replayed"), Some("true"));
    eventually_within("two batches", Duration::from_secs(30), || async {
        bulk_action(&app, &id).await["processed"] == 200
    })
    .await;
    // Real time must pass: the runner died in its third batch holding the lease, and what
    // is checked is that nothing moves after; nothing marks a batch that does not come.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stalled = bulk_action(&app, &id).await;
    assert_eq!(
        (stalled["status"].as_str(), stalled["processed"].as_i64()),
        (Some("running"), Some(200)),
        "{stalled}"
    );

    // A restart: this instance goes, another takes the lease once it expires.
    let mut app = Arc::into_inner(app).expect("one owner");
    app.stop().await;
    let restarted = app.another_instance(options).await;
    eventually_within("the action done", Duration::from_secs(60), || async {
        bulk_action(&restarted, &id).await["status"] == "done"
    })
    .await;
    let done = bulk_action(&restarted, &id).await;
    assert_eq!(done["processed"], 500, "{done}");
    assert_eq!(done["results"], json!({ "requeued": 500 }), "{done}");
    eventually_within("500 deliveries", Duration::from_secs(120), || async {
        let per_key = requests_per_key(&server).await;
        per_key.values().filter(|n| **n == 2).count() == 500
    })
    .await;
    nothing_left_to_send(&restarted).await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(per_key.len(), 500);
    assert!(
        per_key.values().all(|n| *n == 2),
        "each dead letter delivered exactly once more: {per_key:?}"
    );
    // Sent again after it finished: still the one action.
    let late = restarted
        .admin("/admin/bulk", Some(&request), Some("outage-1"))
        .await;
    assert_eq!(late.body, created.body);
    let listed = restarted.admin("/admin/bulk", None, None).await.json();
    assert_eq!(
        listed["actions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
}

async fn a_bulk_replay_goes_to_the_one_destination_named(backend: Backend) {
    let app_server = refusing_first(0, "").await;
    let audit_server = refusing_first(0, "").await;
    let options = TestOptions {
        destination: Some(format!(
            "{}\n[[sources.destinations]]\n{}",
            destination("app", &app_server),
            destination("audit", &audit_server)
        )),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    let types = ["invoice.paid", "charge.succeeded", "customer.updated"];
    post_events(&app, "evt_mixed", 30, &types).await;
    // Settled, not only received: a replay plans no second delivery beside one in flight.
    eventually_within("60 first deliveries", Duration::from_secs(60), || async {
        let (a, b) = (
            requests_per_key(&app_server).await,
            requests_per_key(&audit_server).await,
        );
        a.len() == 30 && b.len() == 30 && deliveries(&app, "delivered").await == 60
    })
    .await;

    let filter = json!({ "source": "stripe", "type": "invoice.paid", "destination": "app" });
    let preview = app
        .admin(
            "/admin/bulk",
            Some(&json!({ "action": "replay", "filter": filter, "dry_run": true })),
            None,
        )
        .await
        .json();
    assert_eq!(preview["matched"], 10, "{preview}");
    assert_eq!(preview["destinations"], json!({ "app": 10 }), "{preview}");
    assert_eq!(preview["planned"], 10);
    // The CLI previews the same, through the same use case.
    let (code, out, _) = app
        .run_cli(&[
            "bulk",
            "replay",
            "--source",
            "stripe",
            "--type",
            "invoice.paid",
            "--destination",
            "app",
            "--dry-run",
        ])
        .await;
    assert_eq!(code, Some(0), "{out}");
    let printed: Value = serde_json::from_str(&out).expect("the preview as JSON");
    assert_eq!(
        (printed["matched"].clone(), printed["destinations"].clone()),
        (json!(10), json!({ "app": 10 }))
    );
    let created = app
        .admin(
            "/admin/bulk",
            Some(&json!({ "action": "replay", "filter": filter })),
            Some("replay-invoices"),
        )
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    let (code, out, progress) = app
        .run_cli(&["bulk", "status", &id.to_string(), "--wait"])
        .await;
    assert_eq!(code, Some(0), "{out}{progress}");
    let done: Value = serde_json::from_str(&out).expect("the action as JSON");
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["results"], json!({ "requeued": 10 }), "{done}");
    assert_eq!(done["deliveries"], json!({ "app": 10 }), "{done}");
    eventually_within("10 replays at app", Duration::from_secs(30), || async {
        requests_per_key(&app_server)
            .await
            .values()
            .filter(|n| **n == 2)
            .count()
            == 10
    })
    .await;
    nothing_left_to_send(&app).await;
    let audit = requests_per_key(&audit_server).await;
    assert!(
        audit.values().all(|n| *n == 1),
        "audit got nothing again: {audit:?}"
    );
    let at_app = app_server.received_requests().await.unwrap_or_default();
    let replayed: Vec<String> = at_app
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .filter(|body| body.contains("invoice.paid"))
        .collect();
    assert_eq!(
        replayed.len(),
        20,
        "each invoice twice at app, nothing else again"
    );
}

const VIEWER: &str = "viewer-token-vera-0123456789";
const OPERATOR: &str = "operator-token-otto-0123456789";

async fn a_bulk_request_is_checked_and_a_viewer_only_previews(backend: Backend) {
    let options = TestOptions {
        operators: "[[operators]]\nname = \"vera\"\ntoken = \"viewer-token-vera-0123456789\"\nrole = \"viewer\"\n\
                    [[operators]]\nname = \"otto\"\ntoken = \"operator-token-otto-0123456789\"\nrole = \"operator\"\n",
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    for (body, detail) in [
        (
            json!({ "action": "resend", "dry_run": true }),
            "action is replay, requeue or discard",
        ),
        (
            json!({ "action": "requeue", "filter": { "source": "a\u{1}b" }, "dry_run": true }),
            "source is at most",
        ),
        (
            json!({ "action": "requeue", "filters": {}, "dry_run": true }),
            "invalid bulk request",
        ),
    ] {
        let reply = app.admin_as(VIEWER, "/admin/bulk", Some(&body), None).await;
        reply.assert_problem(400, "invalid_request");
        assert!(reply.text().contains(detail), "{}", reply.text());
    }
    // A window that ends before it starts matches nothing.
    let inverted = json!({ "action": "replay", "dry_run": true,
        "filter": { "since": "2026-12-02T00:00:00Z", "until": "2026-12-01T00:00:00Z" } });
    let previewed = app
        .admin_as(VIEWER, "/admin/bulk", Some(&inverted), None)
        .await;
    previewed.assert_status(200);
    assert_eq!(previewed.json()["matched"], 0);
    let preview = json!({ "action": "discard", "dry_run": true });
    let previewed = app
        .admin_as(VIEWER, "/admin/bulk", Some(&preview), None)
        .await;
    previewed.assert_status(200);
    assert_eq!(previewed.json()["matched"], 0);
    let act = json!({ "action": "discard" });
    let refused = app
        .admin_as(VIEWER, "/admin/bulk", Some(&act), Some("k1"))
        .await;
    refused.assert_problem(403, "forbidden");
    let keyless = app
        .admin_as(OPERATOR, "/admin/bulk", Some(&act), None)
        .await;
    keyless.assert_problem(400, "idempotency_key_missing");
    let missing = app
        .admin_as(OPERATOR, "/admin/bulk/987654", None, None)
        .await;
    missing.assert_problem(404, "not_found");
    let started = app
        .admin_as(OPERATOR, "/admin/bulk", Some(&act), Some("k1"))
        .await;
    started.assert_status(202);
    assert_eq!(started.json()["action"]["matched"], 0);
    assert_eq!(started.json()["action"]["operator"], "otto");
}

async fn a_bulk_replay_killed_mid_way_resumes_and_delivers_each_fact_once_more(backend: Backend) {
    let server = refusing_first(0, "").await;
    let options = TestOptions {
        destination: Some(destination("app", &server)),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options.clone()).await);
    post_events(&app, "evt_replayed", 250, &["invoice.paid"]).await;
    eventually_within("250 first deliveries", Duration::from_secs(60), || async {
        requests_per_key(&server).await.len() == 250 && deliveries(&app, "delivered").await == 250
    })
    .await;
    // The runner dies in its second batch: the first 100 replays are committed, the
    // second batch's enqueued deliveries roll back with it.
    app.faults.crash_bulk_batch(2);
    let request = json!({ "action": "replay", "filter": { "source": "stripe" } });
    let created = app
        .admin("/admin/bulk", Some(&request), Some("replay-all"))
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    eventually_within("one batch", Duration::from_secs(30), || async {
        bulk_action(&app, &id).await["processed"] == 100
    })
    .await;
    // Events that arrive after the action was created are not part of it.
    post_events(&app, "evt_later", 20, &["invoice.paid"]).await;
    let mut app = Arc::into_inner(app).expect("one owner");
    app.stop().await;
    let restarted = app.another_instance(options).await;
    eventually_within("the replay done", Duration::from_secs(60), || async {
        bulk_action(&restarted, &id).await["status"] == "done"
    })
    .await;
    let done = bulk_action(&restarted, &id).await;
    assert_eq!(done["results"], json!({ "requeued": 250 }), "{done}");
    assert_eq!(done["deliveries"], json!({ "app": 250 }), "{done}");
    eventually_within("250 replays", Duration::from_secs(60), || async {
        let per_key = requests_per_key(&server).await;
        per_key.values().filter(|n| **n == 2).count() == 250 && per_key.len() == 270
    })
    .await;
    nothing_left_to_send(&restarted).await;
    let per_key = requests_per_key(&server).await;
    let (replayed, later): (Vec<_>, Vec<_>) = per_key
        .iter()
        .partition(|(key, _)| key.contains("evt_replayed"));
    assert!(
        replayed.len() == 250 && replayed.iter().all(|(_, n)| **n == 2),
        "each fact delivered exactly once more: {per_key:?}"
    );
    assert!(
        later.len() == 20 && later.iter().all(|(_, n)| **n == 1),
        "the later events only once: {later:?}"
    );
}

/// A preview counted 3 dead letters; 4 more died before the confirmation: the confirmed
/// action (carrying the preview's count and newest row) requeues the 3, not 7. A
/// confirmation whose count no longer holds up to its row is refused 409 with a fresh
/// preview, and nothing is done.
async fn a_confirmation_acts_on_at_most_what_its_preview_counted(backend: Backend) {
    // Ten refusals: the 3, the 4 later ones, and the 3 again once requeued; the one
    // requeued on its own at the end is delivered.
    let server = refusing_first(10, "not yet").await;
    let options = TestOptions {
        destination: Some(destination("app", &server)),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_events(&app, "evt_first", 3, &["charge.succeeded"]).await;
    eventually_within("3 dead letters", Duration::from_secs(30), || async {
        dead_letters(&app).await == 3
    })
    .await;
    // `expect: null` is no expectation, as the document allows.
    let preview = json!({ "action": "requeue", "filter": { "destination": "app" }, "dry_run": true, "expect": null });
    let previewed = app.admin("/admin/bulk", Some(&preview), None).await.json();
    assert_eq!(previewed["matched"], 3, "{previewed}");
    post_events(&app, "evt_later", 4, &["charge.succeeded"]).await;
    eventually_within("7 dead letters", Duration::from_secs(30), || async {
        dead_letters(&app).await == 7
    })
    .await;

    // Written as JSON Schema integers may be, with a zero fraction (`3.0`).
    let whole = |n: &serde_json::Value| n.as_f64().expect("a number");
    let expect = json!({ "matched": whole(&previewed["matched"]), "upper_id": whole(&previewed["upper_id"]) });
    let confirm =
        json!({ "action": "requeue", "filter": { "destination": "app" }, "expect": expect });
    let created = app
        .admin("/admin/bulk", Some(&confirm), Some("confirm-3"))
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    eventually_within("the action done", Duration::from_secs(30), || async {
        bulk_action(&app, &id).await["status"] == "done"
    })
    .await;
    let done = bulk_action(&app, &id).await;
    assert_eq!(
        (done["matched"].as_i64(), done["processed"].as_i64()),
        (Some(3), Some(3)),
        "{done}"
    );
    assert_eq!(done["results"], json!({ "requeued": 3 }), "{done}");

    // The 4 later ones (and the 3 again, once refused anew), previewed; one of them is
    // requeued on its own before the confirmation.
    eventually_within("7 dead letters again", Duration::from_secs(30), || async {
        dead_letters(&app).await == 7
    })
    .await;
    let previewed = app.admin("/admin/bulk", Some(&preview), None).await.json();
    assert_eq!(previewed["matched"], 7, "{previewed}");
    let dead = app
        .admin("/admin/deliveries?status=dead", None, None)
        .await
        .json();
    let one = dead["deliveries"][0]["id"].clone();
    app.admin(
        "/admin/deliveries/requeue",
        Some(&json!({ "ids": [one] })),
        Some("one"),
    )
    .await
    .assert_status(200);
    let expect = json!({ "matched": previewed["matched"], "upper_id": previewed["upper_id"] });
    let confirm =
        json!({ "action": "requeue", "filter": { "destination": "app" }, "expect": expect });
    let refused = app
        .admin("/admin/bulk", Some(&confirm), Some("confirm-7"))
        .await;
    refused.assert_problem(409, "preview_outdated");
    let fresh = &refused.json()["preview"];
    assert_eq!(fresh["matched"].as_i64(), Some(6), "{fresh}");
    let actions = app.admin("/admin/bulk", None, None).await.json();
    assert_eq!(
        actions["actions"].as_array().map(Vec::len),
        Some(1),
        "nothing was started"
    );
}

/// A confirmation sent again under its Idempotency-Key (a double click, a browser
/// re-submit) once its action has changed what the preview counted: the same action,
/// answered from its stored call — not a refusal for an outdated preview inviting a
/// second action.
async fn a_confirmation_sent_again_after_the_action_ran_finds_it(backend: Backend) {
    let server = refusing_first(3, "not yet").await;
    let options = TestOptions {
        destination: Some(destination("app", &server)),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_events(&app, "evt_again", 3, &["charge.succeeded"]).await;
    eventually_within("3 dead letters", Duration::from_secs(30), || async {
        dead_letters(&app).await == 3
    })
    .await;
    let preview =
        json!({ "action": "requeue", "filter": { "destination": "app" }, "dry_run": true });
    let previewed = app.admin("/admin/bulk", Some(&preview), None).await.json();
    let expect = json!({ "matched": previewed["matched"], "upper_id": previewed["upper_id"] });
    let confirm =
        json!({ "action": "requeue", "filter": { "destination": "app" }, "expect": expect });
    let created = app
        .admin("/admin/bulk", Some(&confirm), Some("confirm-once"))
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    // Requeued and delivered: none of the 3 the preview counted is dead any more.
    eventually_within("the 3 delivered", Duration::from_secs(30), || async {
        bulk_action(&app, &id).await["status"] == "done" && dead_letters(&app).await == 0
    })
    .await;

    let again = app
        .admin("/admin/bulk", Some(&confirm), Some("confirm-once"))
        .await;
    again.assert_status(202);
    assert!(again.replayed(), "answered from the stored call");
    assert_eq!(again.json()["action"]["id"], id);
    let actions = app.admin("/admin/bulk", None, None).await.json();
    assert_eq!(
        actions["actions"].as_array().map(Vec::len),
        Some(1),
        "{actions}"
    );
}
