//! A COMMIT whose answer never came: the connection failed while it was in flight, so the
//! transaction may have committed or not. Such a webhook is answered 503 — never 200 —
//! and the provider's retry finds out: the stored answer when the commit had landed, a
//! fresh acceptance when it had not. Every member of a group whose COMMIT is in doubt is
//! answered alike. The loss is a fault point (`Faults::lose_commit`) in the group's
//! transaction, on either side of the COMMIT.

use crate::helpers::{
    metric, post_as_one_group, spawn_app_with, stripe_event, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use inlet::faults::LostCommit;
use std::sync::Arc;

on_both_backends!(
    a_commit_lost_after_it_landed_is_answered_503_and_the_retry_gets_the_stored_answer,
    a_commit_lost_before_it_landed_is_answered_503_and_the_retry_is_accepted,
    every_member_of_a_group_whose_commit_is_in_doubt_is_answered_503,
);

async fn app(backend: Backend) -> Arc<TestApp> {
    let options = TestOptions {
        dispatch: false,
        ..Default::default()
    };
    Arc::new(spawn_app_with(backend, options).await)
}

async fn a_commit_lost_after_it_landed_is_answered_503_and_the_retry_gets_the_stored_answer(
    backend: Backend,
) {
    let app = app(backend).await;
    let body = stripe_event("evt_doubt_landed", "charge.succeeded", "ch_doubt_1");
    app.faults
        .lose_commit("evt_doubt_landed", LostCommit::AfterCommit);
    let first = app.post_stripe(&body).await;
    first.assert_problem(503, "database_unavailable");
    assert!(
        first.header("retry-after").is_some(),
        "the provider is told to retry"
    );
    assert_eq!(app.count_events().await, 1, "the commit had landed");
    let retry = app.post_stripe(&body).await;
    retry.assert_status(200);
    assert!(retry.replayed(), "the retry gets the stored answer");
    assert_eq!(retry.json()["outcome"], "accepted");
    assert_eq!(app.count_facts().await, 1, "one fact, one effect");
}

async fn a_commit_lost_before_it_landed_is_answered_503_and_the_retry_is_accepted(
    backend: Backend,
) {
    let app = app(backend).await;
    let body = stripe_event("evt_doubt_lost", "charge.succeeded", "ch_doubt_2");
    app.faults
        .lose_commit("evt_doubt_lost", LostCommit::BeforeCommit);
    app.post_stripe(&body)
        .await
        .assert_problem(503, "database_unavailable");
    assert_eq!(app.count_events().await, 0, "nothing was committed");
    let retry = app.post_stripe(&body).await;
    retry.assert_status(200);
    assert!(!retry.replayed(), "the retry is the first time it lands");
    assert_eq!(retry.json()["outcome"], "accepted");
    assert_eq!(app.count_facts().await, 1);
}

async fn every_member_of_a_group_whose_commit_is_in_doubt_is_answered_503(backend: Backend) {
    let app = app(backend).await;
    let bodies: Vec<Vec<u8>> = (0..5)
        .map(|n| {
            stripe_event(
                &format!("evt_doubt_group_{n}"),
                "charge.succeeded",
                &format!("ch_dg_{n}"),
            )
        })
        .collect();
    app.faults
        .lose_commit("evt_doubt_group_2", LostCommit::AfterCommit);
    let before = metric(&app, "inlet_db_commits_in_doubt_total").await;
    for reply in post_as_one_group(&app, &bodies).await {
        reply.assert_problem(503, "database_unavailable");
    }
    assert_eq!(app.count_events().await, 5, "the group's commit had landed");
    for body in &bodies {
        let retry = app.post_stripe(body).await;
        retry.assert_status(200);
        assert!(retry.replayed());
    }
    assert_eq!(app.count_facts().await, 5);
    // One lost COMMIT, however many members: counted once (at least: the recorder is the
    // test process's, and other tests' losses may count too).
    let after = metric(&app, "inlet_db_commits_in_doubt_total").await;
    assert!(after >= before + 1.0, "{before} -> {after}");
}

/// PostgreSQL, no fault point: the server really drops the connection during COMMIT (a
/// deferred constraint trigger terminates its own backend while the commit runs it). The
/// webhook is answered 503 and counted as in doubt; nothing had landed, so once the
/// trigger is gone the retry is accepted — once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_connection_dropped_during_commit_is_answered_503_and_counted() {
    let app = app(Backend::Postgres).await;
    let body = stripe_event("evt_dies_at_commit", "charge.succeeded", "ch_dies");
    let run = |sql: &'static str| {
        let app = app.clone();
        async move {
            app.with_conn(move |conn| {
                diesel::connection::SimpleConnection::batch_execute(conn, sql)
            })
            .await
        }
    };
    run(
        "CREATE FUNCTION inlet_test_die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.event_id = 'evt_dies_at_commit' THEN \
         PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER inlet_test_die_at_commit AFTER INSERT ON events \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW \
         EXECUTE FUNCTION inlet_test_die_at_commit();",
    )
    .await;

    // The recorder is the test process's: other tests' losses may count too.
    let before = metric(&app, "inlet_db_commits_in_doubt_total").await;
    let first = app.post_stripe(&body).await;
    first.assert_problem(503, "database_unavailable");
    assert!(first.header("retry-after").is_some());
    let after = metric(&app, "inlet_db_commits_in_doubt_total").await;
    assert!(
        after >= before + 1.0,
        "counted as in doubt, not as refused: {before} -> {after}"
    );
    assert_eq!(
        app.count_events().await,
        0,
        "the backend died before the commit"
    );

    run("DROP TRIGGER inlet_test_die_at_commit ON events").await;
    let retry = app.post_stripe(&body).await;
    retry.assert_status(200);
    assert!(!retry.replayed(), "the retry is the first time it lands");
    assert_eq!(app.count_facts().await, 1);
}
