//! Retention: the audit refuses unsafe windows, the sweeper deletes expired dedupe
//! records in batches and never a fact, and a copy of a swept event has no second effect.

use crate::helpers::{
    spawn_app, spawn_app_with, stripe_event, Backend, SweepLockHolder, TestApp, TestOptions,
};
use crate::on_both_backends;
use diesel::connection::SimpleConnection;
use inlet::retention::Sweeper;
use std::time::{Duration, Instant};

on_both_backends!(
    the_sweeper_deletes_expired_events_and_keeps_every_fact,
    a_copy_of_a_swept_event_has_no_second_effect,
    a_hundred_thousand_expired_events_are_swept_while_webhooks_flow,
);

fn sweeper(app: &TestApp) -> Sweeper {
    Sweeper::new(
        app.pool.clone(),
        app.clock.clone(),
        app.settings.retention.clone(),
    )
}

async fn the_sweeper_deletes_expired_events_and_keeps_every_fact(backend: Backend) {
    let app = spawn_app(backend).await;
    for i in 0..3 {
        app.post_stripe(&stripe_event(
            &format!("evt_old_{i}"),
            "charge.refunded",
            "ch_old",
        ))
        .await
        .assert_status(200);
    }
    app.clock.advance(chrono::Duration::days(20));
    for i in 0..2 {
        app.post_stripe(&stripe_event(
            &format!("evt_new_{i}"),
            "charge.refunded",
            "ch_new",
        ))
        .await
        .assert_status(200);
    }
    // 36 days after the first three: past their 35-day window, not the others'.
    app.clock.advance(chrono::Duration::days(16));

    let dry = app.sweep(true).await;
    assert_eq!((dry.dry_run, dry.events), (true, 3), "{dry:?}");
    assert_eq!(app.count_events().await, 5, "a dry run deletes nothing");

    let done = app.sweep(false).await;
    assert_eq!(done.events, 3, "{done:?}");
    assert_eq!(app.count_events().await, 2);
    assert_eq!(app.count_facts().await, 5, "facts are never swept");
    assert_eq!(app.sweep(false).await.events, 0, "nothing left to sweep");
}

async fn a_copy_of_a_swept_event_has_no_second_effect(backend: Backend) {
    let options = TestOptions {
        destination: Some(
            "url = \"http://127.0.0.1:9/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"".to_owned(),
        ),
        dispatch: false,
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let body = stripe_event("evt_late_copy", "payment_intent.succeeded", "pi_late");
    let first = app.post_stripe(&body).await;
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(app.count_deliveries().await, 1);

    app.clock.advance(chrono::Duration::days(36));
    assert_eq!(app.sweep(false).await.events, 1);
    assert_eq!(app.count_events().await, 0);

    // The provider (or an operator) sends the same event again, past the window.
    let late = app.post_stripe(&body).await;
    late.assert_status(200);
    assert!(
        !late.replayed(),
        "there was no stored answer left to replay"
    );
    assert_eq!(late.json()["outcome"], "duplicate_after_expiry");
    assert_eq!(late.json()["fact"]["first_event_id"], "evt_late_copy");
    assert_eq!(app.count_facts().await, 1, "no second fact");
    assert_eq!(app.count_deliveries().await, 1, "no second delivery");

    // Its answer is stored again like any other.
    let again = app.post_stripe(&body).await;
    assert!(again.replayed());
    assert_eq!(again.body, late.body);
}

/// Inserts `count` events that expired five days ago, in one statement.
async fn insert_expired_events(app: &TestApp, count: u32) {
    let sql = match app.backend {
        Backend::Postgres => format!(
            "INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key, \
             payload, received_at, expires_at) \
             SELECT 'stripe', 'evt_bulk_' || g, 'charge.refunded', 'f', 'processed', 'charge.refunded', \
             'evt_bulk_' || g, '\\x7b7d'::bytea, now() - interval '40 days', now() - interval '5 days' \
             FROM generate_series(1, {count}) g"
        ),
        Backend::Sqlite => format!(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {count}) \
             INSERT INTO events (source, event_id, event_type, fingerprint, status, fact_kind, fact_key, \
             payload, received_at, expires_at) \
             SELECT 'stripe', 'evt_bulk_' || n, 'charge.refunded', 'f', 'processed', 'charge.refunded', \
             'evt_bulk_' || n, X'7b7d', datetime('now', '-40 days'), datetime('now', '-5 days') FROM g"
        ),
    };
    let mut conn = app.direct_connection();
    tokio::task::spawn_blocking(move || conn.batch_execute(&sql).expect("bulk insert"))
        .await
        .expect("insert task");
}

async fn a_hundred_thousand_expired_events_are_swept_while_webhooks_flow(backend: Backend) {
    let app = spawn_app(backend).await;
    insert_expired_events(&app, 100_000).await;
    assert_eq!(app.count_events().await, 100_000);

    let sweeper = sweeper(&app);
    let started = Instant::now();
    let sweeping = tokio::task::spawn_blocking(move || sweeper.sweep(false));
    let mut latencies = Vec::new();
    let mut sent = 0;
    while !sweeping.is_finished() {
        let body = stripe_event(&format!("evt_during_sweep_{sent}"), "charge.refunded", "ch");
        let request_started = Instant::now();
        let reply = app.post_stripe(&body).await;
        latencies.push(request_started.elapsed());
        reply.assert_status(200);
        sent += 1;
    }
    let report = sweeping.await.expect("sweep task").expect("sweep");
    let took = started.elapsed();

    assert_eq!(report.events, 100_000);
    assert!(
        report.batches >= 100,
        "bounded batches of sweep_batch rows: {report:?}"
    );
    assert_eq!(
        app.count_events().await,
        sent,
        "only the webhooks sent meanwhile remain"
    );
    latencies.sort();
    let max = latencies.last().copied().unwrap_or_default();
    let p50 = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or_default();
    // A report, not an assertion: timings belong to the benchmarks.
    eprintln!(
        "[{backend:?}] swept 100000 expired events in {} batches in {:.2?}; {sent} webhooks accepted meanwhile, \
         latency p50 {p50:.2?}, max {max:.2?}",
        report.batches, took
    );
}

/// PostgreSQL: two sweepers started together (on two Inlet instances' pools): no error,
/// no deadlock, each row deleted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_sweepers_at_once_delete_each_row_once() {
    let app = spawn_app(Backend::Postgres).await;
    let other = app.another_instance(TestOptions::default()).await;
    insert_expired_events(&app, 20_000).await;

    let (first, second) = (sweeper(&app), sweeper(&other));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let (b1, b2) = (barrier.clone(), barrier);
    let one = tokio::task::spawn_blocking(move || {
        b1.wait();
        first.sweep(false)
    });
    let two = tokio::task::spawn_blocking(move || {
        b2.wait();
        second.sweep(false)
    });
    let timeout = Duration::from_secs(60);
    let one = tokio::time::timeout(timeout, one)
        .await
        .expect("no deadlock")
        .expect("task")
        .expect("no error");
    let two = tokio::time::timeout(timeout, two)
        .await
        .expect("no deadlock")
        .expect("task")
        .expect("no error");

    assert_eq!(
        one.events + two.events,
        20_000,
        "each row deleted once: {one:?} {two:?}"
    );
    assert_eq!(app.count_events().await, 0);
}

/// PostgreSQL: while another instance's batch holds the sweep lock (a transaction's, so it
/// works through a transaction pooler), a round is skipped and deletes nothing; once that
/// transaction ends, the next round sweeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_round_is_skipped_while_another_transaction_holds_the_sweep_lock() {
    let app = spawn_app(Backend::Postgres).await;
    insert_expired_events(&app, 10).await;
    let holder = SweepLockHolder::take(&app);

    let skipped = app.sweep(false).await;
    assert!(skipped.skipped, "{skipped:?}");
    assert_eq!((skipped.events, skipped.batches), (0, 0));
    assert_eq!(app.count_events().await, 10);

    holder.release();
    let swept = app.sweep(false).await;
    assert!(!swept.skipped, "{swept:?}");
    assert_eq!(swept.events, 10);
    assert_eq!(app.count_events().await, 0);
}
