//! Group commit: webhooks committed together in one transaction keep every invariant a
//! transaction of their own keeps. Each test holds the next group until all its requests
//! are queued (`Faults::gather_next_group`), then checks that they were one group.

use crate::helpers::{
    eventually, post_as_one_group, spawn_app_with, stripe_event, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use std::collections::HashMap;
use std::sync::Arc;

on_both_backends!(
    many_copies_of_one_event_in_one_group_make_one_row_and_one_first_answer,
    two_events_of_one_fact_in_one_group_are_accepted_once,
    a_poisoned_member_fails_alone_and_the_rest_of_its_group_commits,
    a_crashing_member_fails_alone_and_its_group_leaves_nothing_behind,
    a_group_with_many_destinations_stays_inside_the_parameter_limits,
);

/// Delivers to an address nobody answers; the dispatcher is off, so rows stay pending.
async fn app_with_outbox(backend: Backend) -> Arc<TestApp> {
    let options = TestOptions {
        destination: Some(format!(
            "url = \"http://127.0.0.1:9/events\"\nsecret = \"{}\"\nname = \"app\"",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        )),
        dispatch: false,
        ..Default::default()
    };
    Arc::new(spawn_app_with(backend, options).await)
}

async fn count_deliveries(app: &TestApp) -> Vec<String> {
    app.with_conn(|c| {
        deliveries::table
            .order(deliveries::event_id)
            .select(deliveries::event_id)
            .load(c)
    })
    .await
}

async fn many_copies_of_one_event_in_one_group_make_one_row_and_one_first_answer(backend: Backend) {
    let app = app_with_outbox(backend).await;
    let body = stripe_event("evt_copies", "charge.refunded", "ch_copies");
    let other_body = stripe_event("evt_copies", "charge.refunded", "ch_other");
    let mut bodies = vec![body.clone(); 29];
    bodies.insert(13, other_body.clone());

    let replies = post_as_one_group(&app, &bodies).await;

    // Whichever body was queued first claimed the id; every copy of it gets one answer,
    // every copy of the other body 422.
    let winner = bodies
        .iter()
        .zip(&replies)
        .find(|(_, reply)| reply.status == 200)
        .map(|(body, _)| body.clone())
        .expect("one body was accepted");
    let mut answers = Vec::new();
    for (sent, reply) in bodies.iter().zip(&replies) {
        if *sent == winner {
            reply.assert_status(200);
            answers.push(reply);
        } else {
            reply.assert_problem(422, "fingerprint_mismatch");
        }
    }
    assert!(answers.iter().all(|reply| reply.body == answers[0].body));
    assert_eq!(
        answers.iter().filter(|reply| !reply.replayed()).count(),
        1,
        "exactly one copy's answer is the first, the rest are stored answers"
    );
    assert_eq!(answers[0].json()["outcome"], "accepted");
    assert_eq!(app.count_events().await, 1);
    assert_eq!(app.count_facts().await, 1);
    assert_eq!(count_deliveries(&app).await, vec!["evt_copies".to_owned()]);
}

async fn two_events_of_one_fact_in_one_group_are_accepted_once(backend: Backend) {
    let app = app_with_outbox(backend).await;
    // Twelve payments, each under two event ids (a regenerated key), all in one group.
    let bodies: Vec<Vec<u8>> = (0..24)
        .map(|n| {
            let id = format!("evt_pair_{n}");
            stripe_event(&id, "payment_intent.succeeded", &format!("pi_{}", n % 12))
        })
        .collect();

    let replies = post_as_one_group(&app, &bodies).await;

    let mut per_payment: HashMap<String, Vec<serde_json::Value>> = HashMap::new();
    for reply in &replies {
        reply.assert_status(200);
        assert!(!reply.replayed(), "each event id is new");
        let receipt = reply.json();
        let payment = receipt["fact"]["key"]
            .as_str()
            .expect("a fact key")
            .to_owned();
        per_payment.entry(payment).or_default().push(receipt);
    }
    assert_eq!(per_payment.len(), 12);
    let mut accepted = Vec::new();
    for receipts in per_payment.values() {
        let first = receipts
            .iter()
            .find(|r| r["outcome"] == "accepted")
            .expect("one event of the fact is accepted");
        let duplicate = receipts
            .iter()
            .find(|r| r["outcome"] == "duplicate_fact")
            .expect("the other is a duplicate fact");
        assert_eq!(duplicate["fact"]["first_event_id"], first["event_id"]);
        assert_eq!(first["fact"]["first_event_id"], first["event_id"]);
        accepted.push(first["event_id"].as_str().expect("an id").to_owned());
    }
    accepted.sort();
    assert_eq!(app.count_events().await, 24);
    assert_eq!(app.count_facts().await, 12);
    assert_eq!(
        count_deliveries(&app).await,
        accepted,
        "one outbox row per fact, for the accepted event"
    );
    // A copy arriving later gets the answer stored in the group.
    let duplicate = app.post_stripe(&bodies[0]).await;
    assert!(duplicate.replayed());
    assert_eq!(duplicate.body, replies[0].body);
}

/// A trigger that makes the database refuse one event's row, as a constraint would.
fn poison(app: &TestApp, event_id: &str) {
    let sql = match app.backend {
        Backend::Sqlite => format!(
            "CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.event_id = '{event_id}' \
             BEGIN SELECT RAISE(ABORT, 'poisoned row'); END;"
        ),
        Backend::Postgres => format!(
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.event_id = '{event_id}' THEN RAISE EXCEPTION 'poisoned row'; END IF; \
             RETURN NEW; END $$; \
             CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION poison();"
        ),
    };
    app.direct_connection()
        .batch_execute(&sql)
        .expect("install the trigger");
}

fn cure(app: &TestApp) {
    app.direct_connection()
        .batch_execute("DROP TRIGGER poison ON events")
        .or_else(|_| app.direct_connection().batch_execute("DROP TRIGGER poison"))
        .expect("drop the trigger");
}

async fn a_poisoned_member_fails_alone_and_the_rest_of_its_group_commits(backend: Backend) {
    let app = app_with_outbox(backend).await;
    poison(&app, "evt_member_7");
    let bodies: Vec<Vec<u8>> = (0..21)
        .map(|n| {
            stripe_event(
                &format!("evt_member_{n}"),
                "charge.refunded",
                &format!("ch_{n}"),
            )
        })
        .collect();

    let replies = post_as_one_group(&app, &bodies).await;

    for (n, reply) in replies.iter().enumerate() {
        if n == 7 {
            reply.assert_problem(500, "internal_error");
        } else {
            reply.assert_status(200);
            assert_eq!(reply.json()["outcome"], "accepted");
        }
    }
    assert_eq!(app.count_events().await, 20);
    assert_eq!(app.count_facts().await, 20);
    assert_eq!(count_deliveries(&app).await.len(), 20);

    cure(&app);
    let retry = app.post_stripe(&bodies[7]).await;
    retry.assert_status(200);
    assert_eq!(retry.json()["outcome"], "accepted");
    assert!(!retry.replayed());
    assert_eq!(app.count_events().await, 21);
}

/// Two members crash after the facts insert: one once, one every time. The first crash
/// takes the whole group's transaction down: nothing of it may survive, so every member
/// committed again is `accepted`, not a stored answer. The group is committed again in
/// halves, split until the member that keeps crashing is alone: it alone fails, and once
/// it stops crashing its retry succeeds (so does the other's, when its one crash found it
/// alone).
async fn a_crashing_member_fails_alone_and_its_group_leaves_nothing_behind(backend: Backend) {
    let app = app_with_outbox(backend).await;
    let bodies: Vec<Vec<u8>> = (0..20)
        .map(|n| {
            let id = format!("evt_crash_{n}");
            stripe_event(&id, "payment_intent.succeeded", &format!("pi_crash_{n}"))
        })
        .collect();
    app.faults.crash_after_fact("evt_crash_4");
    app.faults
        .crash_after_fact_times("evt_crash_15", usize::MAX);

    let mut replies = post_as_one_group(&app, &bodies).await;

    replies[15].assert_problem(500, "internal_error");
    // The group's members arrive in any order, and each transaction meets its crashing
    // members in that order: member 4's one crash may find it already alone (split from
    // the others beside 15), and then it alone fails, like 15 — its retry is accepted.
    if replies[4].status == 500 {
        replies[4].assert_problem(500, "internal_error");
        replies[4] = app.post_stripe(&bodies[4]).await;
    }
    for (n, reply) in replies.iter().enumerate().filter(|(n, _)| *n != 15) {
        let answer = reply.text();
        assert_eq!(reply.json()["outcome"], "accepted", "member {n}: {answer}");
        assert!(
            !reply.replayed(),
            "member {n}: nothing of the crashed group survived"
        );
    }
    assert_eq!(app.count_events().await, 19);
    assert_eq!(app.count_facts().await, 19);
    assert_eq!(count_deliveries(&app).await.len(), 19);

    app.faults.crash_after_fact_times("evt_crash_15", 0);
    let retry = app.post_stripe(&bodies[15]).await;
    retry.assert_status(200);
    assert_eq!(retry.json()["outcome"], "accepted");
    assert_eq!(count_deliveries(&app).await.len(), 20);
}

/// 200 webhooks, each delivered to 30 destinations, in one group: 6,000 outbox rows of 11
/// bound parameters each, past both databases' limit for one statement (SQLite 32,766,
/// PostgreSQL 65,535). The group still commits as one transaction.
async fn a_group_with_many_destinations_stays_inside_the_parameter_limits(backend: Backend) {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let destinations = (0..30)
        .map(|n| {
            format!(
                "url = \"http://127.0.0.1:9/events{n}\"\nsecret = \"{secret}\"\nname = \"app{n}\""
            )
        })
        .collect::<Vec<_>>()
        .join("\n[[sources.destinations]]\n");
    let options = TestOptions {
        destination: Some(destinations),
        dispatch: false,
        max_group: Some(200),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    let bodies: Vec<Vec<u8>> = (0..200)
        .map(|n| {
            stripe_event(
                &format!("evt_wide_{n}"),
                "charge.refunded",
                &format!("ch_{n}"),
            )
        })
        .collect();

    let replies = post_as_one_group(&app, &bodies).await;

    for reply in &replies {
        reply.assert_status(200);
        assert_eq!(reply.json()["outcome"], "accepted");
    }
    assert_eq!(app.count_events().await, 200);
    assert_eq!(count_deliveries(&app).await.len(), 6_000);
}

/// PostgreSQL: a transaction outside Inlet holds the claim of one event.
/// PostgreSQL only: sessions of the test's database waiting for a lock.
async fn waiting_on_locks(app: &TestApp) -> i64 {
    app.with_conn(|c| {
        diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "(SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock')",
        ))
        .get_result(c)
    })
    .await
}

fn hold_claims(app: &TestApp, ids: &[&str]) -> inlet::db::DbConnection {
    let rows = ids
        .iter()
        .map(|id| {
            format!(
                "('stripe', '{id}', 'x', 'processed', 'k', '{id}', ''::bytea, now(), \
                 now() + interval '1 day')"
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut holder = app.direct_connection();
    holder
        .batch_execute(&format!(
            "BEGIN; INSERT INTO events (source, event_id, fingerprint, status, fact_kind, \
             fact_key, payload, received_at, expires_at) VALUES {rows}"
        ))
        .expect("hold the claims");
    holder
}

/// PostgreSQL only: one member of a group waits on a claim held elsewhere. Only that
/// member waits out `lock_timeout` (409, as alone); the rest of its group is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_held_key_delays_only_its_own_member() {
    let options = TestOptions {
        lock_timeout: Some("1s"),
        dispatch: false,
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(Backend::Postgres, options).await);
    let mut holder = hold_claims(&app, &["evt_hot"]);
    let mut bodies = vec![stripe_event("evt_hot", "charge.refunded", "ch_hot")];
    for n in 0..20 {
        let id = format!("evt_cold_{n}");
        bodies.push(stripe_event(
            &id,
            "charge.refunded",
            &format!("ch_cold_{n}"),
        ));
    }

    let replies = post_as_one_group(&app, &bodies).await;
    holder.batch_execute("ROLLBACK").expect("release");

    replies[0].assert_problem(409, "claim_in_progress");
    for reply in &replies[1..] {
        reply.assert_status(200);
        assert_eq!(reply.json()["outcome"], "accepted");
    }
    let retry = app.post_stripe(&bodies[0]).await;
    assert_eq!(retry.json()["outcome"], "accepted");
}

/// PostgreSQL only: keys held elsewhere (an instance cut off mid-transaction keeps its
/// locks until PostgreSQL notices) must not occupy the writers. While two webhooks wait
/// on held keys, an unrelated one is answered — before either of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_held_keys_do_not_stall_other_webhooks() {
    let options = TestOptions {
        lock_timeout: Some("5s"),
        dispatch: false,
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(Backend::Postgres, options).await);
    let mut holder = hold_claims(&app, &["evt_stuck_a", "evt_stuck_b"]);
    let stuck: Vec<_> = ["evt_stuck_a", "evt_stuck_b"]
        .into_iter()
        .map(|id| {
            let app = app.clone();
            let body = stripe_event(id, "charge.refunded", id);
            tokio::spawn(async move { app.post_stripe(&body).await })
        })
        .collect();
    // Both are queued and waiting on their keys (they wait 5 s for them at least).
    eventually("both webhooks to wait on their held keys", || async {
        waiting_on_locks(&app).await >= 2
    })
    .await;

    let unrelated = app
        .post_stripe(&stripe_event(
            "evt_unrelated",
            "charge.refunded",
            "ch_unrelated",
        ))
        .await;

    unrelated.assert_status(200);
    assert!(
        stuck.iter().all(|task| !task.is_finished()),
        "the unrelated webhook was answered while both held keys were still waited on"
    );
    holder.batch_execute("ROLLBACK").expect("release");
    for task in stuck {
        let reply = task.await.expect("stuck request");
        assert_eq!(reply.json()["outcome"], "accepted", "its key was released");
    }
}
