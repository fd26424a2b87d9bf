//! Hostile expressions and payloads: no evaluation can end, stall or starve the process
//! that receives webhooks. An operator's terabyte expression is answered with the bound
//! it hit; a signed payload meeting an unlucky filter is stored and acknowledged, and its
//! delivery recorded failed with the reason, then delivered once the filter is fixed and
//! it is requeued; operators filling their own evaluators take nothing from live
//! deliveries; a full live lane leaves deliveries pending, never skipped.

use crate::helpers::{
    application_answering, eventually, eventually_within, metric, spawn_app_with, Backend, TestApp,
    TestOptions,
};
use crate::on_both_backends;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use wiremock::MockServer;

on_both_backends!(
    an_operators_terabyte_expression_is_answered_with_its_bound_while_webhooks_flow,
    a_signed_payload_meeting_an_unlucky_filter_is_acknowledged_and_its_delivery_failed_until_fixed,
    operators_filling_their_evaluators_take_nothing_from_live_deliveries,
    a_full_live_lane_leaves_deliveries_pending_never_skipped,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const VIEWER: &str = "viewer-token-vera-0123456789";
const OPERATOR: &str = "operator-token-otto-0123456789";

/// `[[operators]]`: a viewer, and `count` operators `otto-<tag>-<backend>`, `otto1-…`, …
/// (tokens `OPERATOR`, `OPERATOR1`, …). Evaluations are counted per operator name in the
/// process, which every test shares: each test has names of its own.
fn operators(tag: &str, backend: Backend, count: usize, jq: &str) -> &'static str {
    let mut toml =
        format!("{jq}\n[[operators]]\nname = \"vera\"\nrole = \"viewer\"\ntoken = \"{VIEWER}\"\n");
    let backend = format!("{backend:?}").to_lowercase();
    for i in 0..count {
        let suffix = if i == 0 { String::new() } else { i.to_string() };
        toml.push_str(&format!(
            "[[operators]]\nname = \"otto{suffix}-{tag}-{backend}\"\nrole = \"operator\"\ntoken = \"{OPERATOR}{suffix}\"\n"
        ));
    }
    Box::leak(toml.into_boxed_str())
}

/// A stripe source whose one destination, `name`, has `filter`. Metrics are one registry
/// per test process: each test's destination has a name of its own.
async fn app_filtering(
    backend: Backend,
    (name, application): (&str, &MockServer),
    filter: &str,
    operators: &'static str,
) -> TestApp {
    let name = format!("{name}-{}", format!("{backend:?}").to_lowercase());
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/app\"\nsecret = \"{APP_SECRET}\"\nname = \"{name}\"\nretry_base = \"20ms\"\n\
             retry_cap = \"100ms\"\nfilter = '{filter}'",
            application.uri()
        )),
        operators,
        config_file: true,
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// A Stripe event whose object has a `rating`.
fn rated(id: &str, rating: u64) -> Vec<u8> {
    json!({
        "id": id,
        "object": "event",
        "type": "review.opened",
        "created": 1_733_052_301,
        "data": { "object": { "id": format!("rev_{id}"), "rating": rating } },
    })
    .to_string()
    .into_bytes()
}

/// The Idempotency-Keys an application received, each once.
async fn keys(server: &MockServer) -> BTreeSet<String> {
    let requests = server.received_requests().await.unwrap_or_default();
    (requests.iter())
        .filter_map(|r| {
            r.headers
                .get("idempotency-key")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .collect()
}

async fn accepted(app: &TestApp, body: &[u8]) {
    let reply = app.post_stripe(body).await;
    reply.assert_status(200);
    assert_eq!(reply.json()["outcome"], "accepted", "{}", reply.text());
}

/// Twenty webhooks at once, each answered 200 and accepted.
async fn twenty_accepted(app: &Arc<TestApp>, prefix: &str) {
    let mut posting = tokio::task::JoinSet::new();
    for i in 0..20 {
        let app = app.clone();
        let body = rated(&format!("{prefix}_{i}"), 5);
        posting.spawn(async move { accepted(&app, &body).await });
    }
    while let Some(done) = posting.join_next().await {
        done.expect("answered");
    }
}

/// `POST /admin/evaluate` of `filter` on `event_id` with `token`.
async fn evaluate(app: &TestApp, token: &str, event_id: &str, filter: &str) -> (u16, Value) {
    let body = json!({ "source": "stripe", "event_id": event_id, "filter": filter });
    let reply = app
        .admin_as(token, "/admin/evaluate", Some(&body), None)
        .await;
    (reply.status, reply.json())
}

/// The dead deliveries' `last_error`s.
async fn dead_errors(app: &TestApp) -> Vec<String> {
    let dead = app
        .admin("/admin/deliveries?status=dead", None, None)
        .await
        .json();
    (dead["deliveries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter())
    .map(|d| d["last_error"].as_str().unwrap_or_default().to_owned())
    .collect()
}

async fn an_operators_terabyte_expression_is_answered_with_its_bound_while_webhooks_flow(
    backend: Backend,
) {
    let application = application_answering(200).await;
    let jq = "[jq]\ntime_limit = \"5s\"\nmax_steps = 1000000000000\n";
    let app = app_filtering(
        backend,
        ("tried", &application),
        "(.data.object.rating // 0) >= 4",
        operators("tried", backend, 1, jq),
    )
    .await;
    let app = Arc::new(app);
    accepted(&app, &rated("evt_tried", 5)).await;
    let terabyte = r#"("x" * 1000000000000) | length > 0"#;
    // A viewer reads; an expression of its own runs on the server only for a role that
    // may change what is delivered.
    let (status, refused) = evaluate(&app, VIEWER, "evt_tried", terabyte).await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (403, Some("forbidden")),
        "{refused}"
    );
    let trying = {
        let app = app.clone();
        tokio::spawn(async move { evaluate(&app, OPERATOR, "evt_tried", terabyte).await })
    };
    twenty_accepted(&app, "evt_meanwhile").await;
    let (status, answer) = trying.await.expect("answered");
    assert_eq!(status, 200, "{answer}");
    let filter = &answer["destinations"][0]["filter"];
    assert_eq!(filter["decision"], "error", "{answer}");
    assert_eq!(filter["bound"], "memory", "{answer}");
    assert_eq!(filter["error"], "memory bound 64 MiB reached", "{answer}");
    eventually("every webhook delivered", || async {
        keys(&application).await.len() == 21
    })
    .await;
    assert!(
        metric(
            &app,
            "inlet_jq_worker_exits_total{lane=\"tools\",reason=\"memory\"}"
        )
        .await
            >= 1.0
    );

    // One evaluation at a time per operator: a second while the first runs is refused.
    let slow = "last(range(1e12)) > 0";
    let first = {
        let app = app.clone();
        tokio::spawn(async move { evaluate(&app, OPERATOR, "evt_tried", slow).await })
    };
    let running = format!(
        "inlet_operator_evaluations_running{{operator=\"otto-tried-{}\"}}",
        format!("{backend:?}").to_lowercase()
    );
    eventually("the first evaluation running", || async {
        metric(&app, &running).await == 1.0
    })
    .await;
    let (status, refused) = evaluate(&app, OPERATOR, "evt_tried", ".").await;
    assert_eq!(status, 429, "{refused}");
    assert!(!first.is_finished(), "refused while the first one runs");
    assert_eq!(refused["reason"], "too_many_evaluations", "{refused}");
    let (status, answer) = first.await.expect("answered");
    assert_eq!(
        (
            status,
            answer["destinations"][0]["filter"]["bound"].as_str()
        ),
        (200, Some("time")),
        "{answer}"
    );
}

async fn a_signed_payload_meeting_an_unlucky_filter_is_acknowledged_and_its_delivery_failed_until_fixed(
    backend: Backend,
) {
    let application = application_answering(200).await;
    let unlucky = r#"("*" * (.data.object.rating // 0)) | length >= 4"#;
    let app = app_filtering(backend, ("unlucky", &application), unlucky, "").await;
    let huge = rated("evt_huge", 1_000_000_000_000);
    accepted(&app, &huge).await;
    // The provider's retry of it gets the stored answer; nothing runs again.
    let retried = app.post_stripe(&huge).await;
    retried.assert_status(200);
    assert!(retried.replayed(), "{}", retried.text());
    accepted(&app, &rated("evt_small", 5)).await;
    eventually("the ordinary event delivered", || async {
        keys(&application).await.contains("stripe:evt_small")
    })
    .await;
    // Visible, with the reason (at once, or once the dispatcher evaluated it, when every
    // live evaluator was busy at ingest).
    eventually("the failed delivery, with the reason", || async {
        dead_errors(&app).await == ["filter failed: memory bound 64 MiB reached"]
    })
    .await;
    let errors = format!(
        "inlet_filter_errors_total{{source=\"stripe\",destination=\"unlucky-{}\",reason=\"bound\"}}",
        format!("{backend:?}").to_lowercase()
    );
    // Once at least (a provider's retry is filtered again before its claim finds the
    // stored answer).
    assert!(metric(&app, &errors).await >= 1.0);
    assert!(
        metric(
            &app,
            "inlet_jq_worker_exits_total{lane=\"live\",reason=\"memory\"}"
        )
        .await
            >= 1.0
    );
    assert!(!keys(&application).await.contains("stripe:evt_huge"));

    // The filter fixed and reloaded, the failed delivery requeued: its filter decides now.
    let fix = (unlucky, "(.data.object.rating // 0) >= 4");
    assert_eq!(app.fix_and_requeue(fix, "requeue-huge").await, 1);
    eventually("the requeued delivery", || async {
        keys(&application).await.contains("stripe:evt_huge")
    })
    .await;
    assert_eq!(app.deliveries_with_status("delivered").await, 2);
}

async fn operators_filling_their_evaluators_take_nothing_from_live_deliveries(backend: Backend) {
    let application = application_answering(200).await;
    let app = app_filtering(
        backend,
        ("filled", &application),
        "(.data.object.rating // 0) >= 4",
        operators("filled", backend, 6, ""),
    )
    .await;
    let app = Arc::new(app);
    accepted(&app, &rated("evt_target", 5)).await;
    // Six operators, each evaluating a 300 MB string in a loop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut loops = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (app, stop) = (app.clone(), stop.clone());
        let token = if i == 0 {
            OPERATOR.to_owned()
        } else {
            format!("{OPERATOR}{i}")
        };
        loops.spawn(async move {
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _) = evaluate(
                    &app,
                    &token,
                    "evt_target",
                    r#"("x" * 300000000) | length > 0"#,
                )
                .await;
                assert!([200, 429].contains(&status), "{status}");
                answered += 1;
            }
            answered
        });
    }
    twenty_accepted(&app, "evt_live").await;
    eventually("every live webhook delivered", || async {
        keys(&application).await.len() == 21
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(done) = loops.join_next().await {
        assert!(done.expect("a loop") >= 1);
    }
    let live_errors = format!(
        "inlet_filter_errors_total{{source=\"stripe\",destination=\"filled-{}\"",
        format!("{backend:?}").to_lowercase()
    );
    let text = app.get("/metrics").await.text();
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&live_errors))
        .collect();
    assert!(failed.is_empty(), "no live filter failed: {failed:?}");
    assert_eq!(app.deliveries_with_status("delivered").await, 21);
}

async fn a_full_live_lane_leaves_deliveries_pending_never_skipped(backend: Backend) {
    let application = application_answering(200).await;
    // One live evaluator; events whose rating is 0 keep it busy for a whole time bound.
    let jq = "[jq]\nworkers = 1\ntime_limit = \"1500ms\"\nmax_steps = 1000000000000\n";
    let filter = "if (.data.object.rating // 0) == 0 then last(range(1e12)) > 0 else true end";
    let app = Arc::new(
        app_filtering(
            backend,
            ("lane", &application),
            filter,
            operators("lane", backend, 0, jq),
        )
        .await,
    );
    let mut posting = tokio::task::JoinSet::new();
    for i in 0..24 {
        let app = app.clone();
        // Four slow ones among twenty ordinary ones, all at once.
        let body = rated(&format!("evt_lane_{i}"), if i % 6 == 0 { 0 } else { 5 });
        posting.spawn(async move { accepted(&app, &body).await });
    }
    while let Some(done) = posting.join_next().await {
        done.expect("answered");
    }
    eventually_within(
        "the ordinary events delivered",
        Duration::from_secs(60),
        || async { keys(&application).await.len() == 20 },
    )
    .await;
    eventually(
        "the slow events' deliveries failed, with the bound",
        || async {
            let errors = dead_errors(&app).await;
            errors.len() == 4
                && errors
                    .iter()
                    .all(|e| e == "filter failed: time bound 1500 ms reached")
        },
    )
    .await;
    // Every event has its delivery: none was skipped, whatever waited for the evaluator.
    assert_eq!(app.count_deliveries().await, 24);
    let saturated = metric(&app, "inlet_jq_saturated_total{lane=\"live\"}").await;
    println!("live evaluations that found the lane full: {saturated}");
}
