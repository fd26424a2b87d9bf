//! Metrics, request ids and readiness as an operator sees them.

use crate::helpers::{
    eventually, spawn_app, spawn_app_with, start_process, stripe_event, stripe_signature, wait_for,
    Backend, Reply, TestApp, TestOptions, EVENTUALLY, MAX_BODY_BYTES, SOURCES, STRIPE_SECRET,
};
use crate::on_both_backends;

on_both_backends!(
    every_webhook_outcome_moves_its_counter_by_exactly_one,
    metrics_parse_and_show_no_secret_or_event_id,
    request_ids_are_honoured_or_made,
    readiness_reports_a_stalled_sweeper_and_recovers,
    a_fresh_server_exports_the_alerted_counters_at_zero,
);

/// A stripe source only this test posts to, so its counters move only with this test.
fn metered(backend: Backend) -> (String, TestOptions) {
    let name = format!("metered-{backend:?}").to_lowercase();
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n"
        ),
        ..Default::default()
    };
    (name, options)
}

async fn scrape(app: &TestApp) -> prometheus_parse::Scrape {
    scrape_url(&format!("{}/metrics", app.address)).await
}

async fn scrape_url(url: &str) -> prometheus_parse::Scrape {
    let response = reqwest::get(url).await.expect("the scrape reaches Inlet");
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("UTF-8 metrics");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("Prometheus text format")
}

fn value(sample: &prometheus_parse::Sample) -> f64 {
    match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    }
}

/// `inlet_webhooks_total` for `source`, by outcome.
async fn webhook_counters(app: &TestApp, source: &str) -> std::collections::HashMap<String, f64> {
    scrape(app)
        .await
        .samples
        .iter()
        .filter(|s| s.metric == "inlet_webhooks_total" && s.labels.get("source") == Some(source))
        .map(|s| {
            (
                s.labels.get("outcome").unwrap_or_default().to_owned(),
                value(s),
            )
        })
        .collect()
}

async fn post(app: &TestApp, source: &str, body: &[u8]) -> Reply {
    let signature = stripe_signature(STRIPE_SECRET, body, app.now().timestamp());
    app.post_webhook(source, body, &[("Stripe-Signature", signature)])
        .await
}

/// What the test sends, and the outcome each must be counted as.
#[derive(Debug, Clone, Copy)]
enum Send {
    Payment,
    SamePaymentOtherId,
    SameIdOtherBody,
    WrongSecret,
    Unsigned,
    NotJson,
    NoId,
    Oversized,
    Get,
}

const SENDS: [(Send, &str); 10] = [
    (Send::Payment, "accepted"),
    (Send::Payment, "replayed"),
    (Send::SamePaymentOtherId, "duplicate_fact"),
    (Send::SameIdOtherBody, "fingerprint_mismatch"),
    (Send::WrongSecret, "bad_signature"),
    (Send::Unsigned, "missing_signature"),
    (Send::NotJson, "invalid_body"),
    (Send::NoId, "missing_event_id"),
    (Send::Oversized, "payload_too_large"),
    (Send::Get, "method_not_allowed"),
];

async fn perform(app: &TestApp, source: &str, send: Send) -> Reply {
    let payment = stripe_event("evt_m_1", "payment_intent.succeeded", "pi_m");
    match send {
        Send::Payment => post(app, source, &payment).await,
        Send::SamePaymentOtherId => {
            post(
                app,
                source,
                &stripe_event("evt_m_2", "payment_intent.succeeded", "pi_m"),
            )
            .await
        }
        Send::SameIdOtherBody => {
            post(
                app,
                source,
                &stripe_event("evt_m_1", "payment_intent.succeeded", "pi_other"),
            )
            .await
        }
        Send::WrongSecret => {
            let signature = stripe_signature("whsec_wrong", &payment, app.now().timestamp());
            app.post_webhook(source, &payment, &[("Stripe-Signature", signature)])
                .await
        }
        Send::Unsigned => {
            app.post_webhook(source, &payment, crate::helpers::NO_HEADERS)
                .await
        }
        Send::NotJson => post(app, source, b"not json").await,
        Send::NoId => post(app, source, br#"{"type":"x"}"#).await,
        Send::Oversized => {
            let body = format!(
                r#"{{"id":"evt_big","pad":"{}"}}"#,
                "x".repeat(MAX_BODY_BYTES)
            );
            post(app, source, body.as_bytes()).await
        }
        Send::Get => app.request("GET", &format!("/webhooks/{source}")).await,
    }
}

async fn every_webhook_outcome_moves_its_counter_by_exactly_one(backend: Backend) {
    let (source, options) = metered(backend);
    let app = spawn_app_with(backend, options).await;
    let payment = stripe_event("evt_m_1", "payment_intent.succeeded", "pi_m");
    let total = |m: &std::collections::HashMap<String, f64>| m.values().sum::<f64>();
    for (send, outcome) in SENDS {
        let before = webhook_counters(&app, &source).await;
        perform(&app, &source, send).await;
        let after = webhook_counters(&app, &source).await;
        let moved = after.get(outcome).copied().unwrap_or(0.0)
            - before.get(outcome).copied().unwrap_or(0.0);
        assert_eq!(moved, 1.0, "{send:?} → {outcome}: {before:?} → {after:?}");
        assert_eq!(
            total(&after) - total(&before),
            1.0,
            "only {outcome} moved: {before:?} → {after:?}"
        );
    }

    // And a copy after the event's record was swept.
    app.clock.advance(chrono::Duration::days(36));
    app.sweep(false).await;
    let before = webhook_counters(&app, &source).await;
    assert_eq!(
        post(&app, &source, &payment).await.json()["outcome"],
        "duplicate_after_expiry"
    );
    let after = webhook_counters(&app, &source).await;
    let moved =
        |o: &str| after.get(o).copied().unwrap_or(0.0) - before.get(o).copied().unwrap_or(0.0);
    assert_eq!(
        moved("duplicate_after_expiry"),
        1.0,
        "{before:?} → {after:?}"
    );
}

async fn metrics_parse_and_show_no_secret_or_event_id(backend: Backend) {
    let app = spawn_app(backend).await;
    app.post_stripe(&stripe_event(
        "evt_secretive_42",
        "charge.succeeded",
        "ch_secretive",
    ))
    .await
    .assert_status(200);
    let reply = app.get("/metrics").await;
    assert!(reply
        .header("content-type")
        .is_some_and(|ct| ct.starts_with("text/plain")));
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    for (_, secrets) in SOURCES {
        for secret in secrets {
            assert!(!text.contains(secret), "a secret appears in /metrics");
        }
    }
    assert!(
        !text.contains("evt_secretive_42") && !text.contains("ch_secretive"),
        "an event id appears in /metrics"
    );

    let scrape = scrape(&app).await;
    let names: std::collections::HashSet<&str> =
        scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for expected in [
        "inlet_http_requests_total",
        "inlet_http_request_duration_seconds",
        "inlet_webhooks_total",
        "inlet_ingest_duration_seconds",
        "inlet_outbox_pending",
        "inlet_dead_letters",
        "inlet_db_pool_connections",
        "inlet_build_info",
    ] {
        assert!(names.contains(expected), "{expected} missing from /metrics");
    }
    let build = scrape
        .samples
        .iter()
        .find(|s| s.metric == "inlet_build_info");
    let labels = build.map(|s| (s.labels.get("version"), s.labels.get("commit")));
    assert!(
        matches!(labels, Some((Some(v), Some(c))) if v == env!("CARGO_PKG_VERSION") && !c.is_empty()),
        "inlet_build_info names its version and commit: {labels:?}"
    );
    for histogram in [
        "inlet_http_request_duration_seconds",
        "inlet_ingest_duration_seconds",
    ] {
        let buckets = scrape
            .samples
            .iter()
            .find_map(|s| match (&s.value, s.metric == histogram) {
                (prometheus_parse::Value::Histogram(buckets), true) => Some(buckets.len()),
                _ => None,
            });
        assert!(
            buckets.is_some_and(|n| n >= 10),
            "{histogram} is a histogram with real buckets: {buckets:?}"
        );
    }
    let route = scrape.samples.iter().find(|s| {
        s.metric == "inlet_http_requests_total"
            && s.labels.get("route") == Some("/webhooks/:source")
    });
    let routes: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "inlet_http_requests_total")
        .map(|s| s.labels.get("route"))
        .collect();
    assert!(
        route.is_some(),
        "routes are labelled by pattern, not by path: {routes:?}"
    );
}

async fn request_ids_are_honoured_or_made(backend: Backend) {
    let app = spawn_app(backend).await;
    let sent = app
        .client
        .get(format!("{}/healthz", app.address))
        .header("X-Request-Id", "req-7f3a")
        .send()
        .await
        .expect("request");
    assert_eq!(
        sent.headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("req-7f3a")
    );
    let made = app.get("/healthz").await;
    let id = made
        .header("x-request-id")
        .expect("a request id")
        .to_owned();
    assert_eq!(id.len(), 32);
    let odd = app
        .client
        .get(format!("{}/healthz", app.address))
        .header("X-Request-Id", "x".repeat(300))
        .send()
        .await
        .expect("request");
    let replaced = odd
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(replaced.len(), 32, "an unreasonable id is replaced");
}

async fn readiness_reports_a_stalled_sweeper_and_recovers(backend: Backend) {
    let options = TestOptions {
        sweep_interval: Some("1s"),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    app.get("/readyz").await.assert_status(200);
    // Pretend an hour passed without another round. Should the first round finish only
    // after the clock moved, it counts from there: move the clock again.
    let stalled = wait_for(
        "readiness to report the stalled sweeper",
        EVENTUALLY,
        || async {
            app.clock.advance(chrono::Duration::hours(1));
            let reply = app.get("/readyz").await;
            (reply.status == 503).then_some(reply)
        },
    )
    .await;
    stalled.assert_problem(503, "database_unavailable");
    assert!(
        stalled.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("sweeper")),
        "the body says which check failed"
    );

    // The next round succeeds, and readiness comes back by itself.
    eventually("readiness back after the next round", || async {
        app.get("/readyz").await.status == 200
    })
    .await;
}

/// The samples of `metric` whose labels include all of `labels`.
fn samples<'a>(
    scrape: &'a prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

/// The alert rules use `increase()`, which sees no first event on a counter that first
/// appears at 1: a fresh process exports the counters they watch at 0. A process of its
/// own, because the metrics recorder is global to a process and this one's is shared by
/// every test.
async fn a_fresh_server_exports_the_alerted_counters_at_zero(backend: Backend) {
    let holder = spawn_app(backend).await;
    let dir = std::env::temp_dir().join(format!(
        "inlet-fresh-metrics-{}-{backend:?}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("inlet.toml");
    let pool_size = match backend {
        Backend::Postgres => "pool_size = 4",
        Backend::Sqlite => "",
    };
    let sources = ["stripe", "github"];
    std::fs::write(
        &config,
        format!(
            "[server]\nbind = \"127.0.0.1:0\"\nworkers = 1\n\
             [database]\nurl = \"{}\"\n{pool_size}\n\
             [delivery]\nenabled = false\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
             [[sources]]\nname = \"github\"\nscheme = \"github\"\nsecrets = [\"gh-secret-0123456789abcdef\"]\n",
            holder.database_url()
        ),
    )
    .expect("write config");
    let process = tokio::task::spawn_blocking(move || start_process(&config))
        .await
        .expect("start");
    let base = format!("http://127.0.0.1:{}", process.port);

    let fresh = scrape_url(&format!("{base}/metrics")).await;
    for source in sources {
        for outcome in ["fingerprint_mismatch", "duplicate_after_expiry", "accepted"] {
            let found = samples(
                &fresh,
                "inlet_webhooks_total",
                &[("source", source), ("outcome", outcome)],
            );
            assert_eq!(found.len(), 1, "{source} {outcome}: {found:?}");
            assert_eq!(value(found[0]), 0.0, "{source} {outcome}");
        }
    }
    let timeouts = samples(&fresh, "inlet_db_pool_timeouts_total", &[]);
    assert_eq!(timeouts.len(), 1, "{timeouts:?}");
    assert_eq!(value(timeouts[0]), 0.0);
    let sweeper = samples(&fresh, "inlet_sweeper_enabled", &[]);
    assert_eq!(sweeper.iter().map(|s| value(s)).collect::<Vec<_>>(), [1.0]);

    // The first mismatch moves that very series from 0 to 1 (no second series appears).
    let client = reqwest::Client::new();
    for body in [
        stripe_event("evt_fresh_1", "charge.succeeded", "ch_a"),
        stripe_event("evt_fresh_1", "charge.succeeded", "ch_b"),
    ] {
        let signature = stripe_signature(STRIPE_SECRET, &body, chrono::Utc::now().timestamp());
        client
            .post(format!("{base}/webhooks/stripe"))
            .header("Stripe-Signature", signature)
            .body(body)
            .send()
            .await
            .expect("the request reaches Inlet");
    }
    let after = scrape_url(&format!("{base}/metrics")).await;
    let counted = |source: &str, outcome: &str| {
        samples(
            &after,
            "inlet_webhooks_total",
            &[("source", source), ("outcome", outcome)],
        )
        .iter()
        .map(|s| value(s))
        .collect::<Vec<_>>()
    };
    assert_eq!(counted("stripe", "accepted"), [1.0]);
    assert_eq!(counted("stripe", "fingerprint_mismatch"), [1.0]);
    assert_eq!(counted("github", "fingerprint_mismatch"), [0.0]);

    drop(process); // killed: its shutdown is lifecycle.rs's subject
    let _ = std::fs::remove_dir_all(&dir);
}
