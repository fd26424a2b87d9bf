//! PostgreSQL through PgBouncer in transaction pooling (a private one per test, from
//! `scripts/pgbouncer`): an instance not configured for it refuses to start and says which
//! setting to change; configured (`database.pooler = "transaction"`), instances migrate a
//! new database at once, claim, replay and sweep through it as they do directly. (`.ci/run`
//! also runs the whole PostgreSQL half of the suite through one.)

use crate::helpers::{
    spawn_app_with, spawn_apps_at_once, stripe_event, Backend, PrivatePgBouncer, Reply,
    SweepLockHolder, TestApp, TestOptions,
};
use inlet::config::Settings;
use inlet::retention::Sweeper;
use inlet::startup::Application;
use std::sync::Arc;

fn through(bouncer: &PrivatePgBouncer) -> TestOptions {
    TestOptions {
        through_pooler: Some(bouncer.url.clone()),
        ..TestOptions::default()
    }
}

/// Settings pointing at PostgreSQL through the pooler, with no `database.pooler`, and
/// nothing else (no session setting, no statement cache) told about it: refused at
/// startup, naming the key and its value; the same database reached directly starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_instance_not_told_of_a_transaction_pooler_refuses_to_start() {
    let bouncer = PrivatePgBouncer::start();
    let holder = spawn_app_with(Backend::Postgres, TestOptions::default()).await;
    let name = holder.database_url().rsplit('/').next().map(str::to_owned);
    let pooled = format!("{}/{}", bouncer.url, name.expect("a database name"));
    let toml = |url: &str| {
        format!(
            "[server]\nbind = \"127.0.0.1:0\"\n[database]\nurl = \"{url}\"\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\n\
             secrets = [\"whsec_pooler_0123456789abcdefghijklmnop\"]\n"
        )
    };

    let refused = Application::build(Settings::from_toml(&toml(&pooled)).expect("valid"))
        .await
        .err()
        .expect("refused to start through a transaction pooler");
    let message = format!("{refused:#}");
    assert!(
        message.contains("database.pooler = \"transaction\"") && message.contains("PgBouncer"),
        "names the setting: {message}"
    );

    let direct =
        Application::build(Settings::from_toml(&toml(&holder.database_url())).expect("valid"))
            .await;
    assert!(
        direct.is_ok(),
        "the same database directly: {:?}",
        direct.err()
    );
}

/// Two instances started at once on a new database through the pooler both migrate it
/// (one at a time, under a transaction's advisory lock); then 50 events sent four times
/// each, 20 at a time, half to each instance: 50 events and 50 facts, one first answer
/// per event and the same bytes for every copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_instances_migrate_and_claim_through_a_transaction_pooler() {
    let bouncer = PrivatePgBouncer::start();
    let apps = spawn_apps_at_once(Backend::Postgres, through(&bouncer), 2).await;
    let apps: Vec<Arc<TestApp>> = apps.into_iter().map(Arc::new).collect();

    let replies = post_copies(&apps, 50, 4).await;

    for (event, copies) in replies.chunks(4).enumerate() {
        for reply in copies {
            reply.assert_status(200);
            assert_eq!(
                reply.body, copies[0].body,
                "event {event}: one stored answer"
            );
        }
    }
    assert_eq!(replies.iter().filter(|r| !r.replayed()).count(), 50);
    assert_eq!(apps[0].count_events().await, 50);
    assert_eq!(apps[0].count_facts().await, 50);
    apps[1].get("/readyz").await.assert_status(200);
}

/// `per_event` copies of each of `events` events, 20 requests in flight, alternating
/// between the instances; the replies in event order.
async fn post_copies(apps: &[Arc<TestApp>], events: usize, per_event: usize) -> Vec<Reply> {
    let gate = Arc::new(tokio::sync::Semaphore::new(20));
    let tasks: Vec<_> = (0..events * per_event)
        .map(|i| {
            let app = apps[i % apps.len()].clone();
            let gate = gate.clone();
            let event = i / per_event;
            tokio::spawn(async move {
                let _turn = gate.acquire().await.expect("a turn");
                let body = stripe_event(
                    &format!("evt_pool_{event}"),
                    "charge.captured",
                    &format!("ch_pool_{event}"),
                );
                app.post_stripe(&body).await
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.expect("request task"));
    }
    replies
}

/// Through the pooler: a replay with an Idempotency-Key answers its retry with the same
/// report, and two sweepers on the pooler at once delete each expired row once and never
/// a fact (each batch under the sweep lock of its own transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replays_and_sweeps_hold_through_a_transaction_pooler() {
    let bouncer = PrivatePgBouncer::start();
    let app = Arc::new(spawn_app_with(Backend::Postgres, through(&bouncer)).await);
    let other = Arc::new(app.another_instance(through(&bouncer)).await);
    post_copies(&[app.clone(), other.clone()], 40, 2).await;

    let replay = serde_json::json!({ "events": [
        { "source": "stripe", "event_id": "evt_pool_1" },
        { "source": "stripe", "event_id": "evt_pool_2" },
    ] });
    let first = app
        .admin("/admin/replay", Some(&replay), Some("pooled-replay"))
        .await;
    first.assert_status(200);
    let again = other
        .admin("/admin/replay", Some(&replay), Some("pooled-replay"))
        .await;
    assert_eq!(again.body, first.body, "the retry gets the stored report");

    let retention = app.settings.retention.clone();
    let window = chrono::Duration::from_std(retention.events.0).expect("a window");
    app.clock.advance(window * 2);
    let pooled = |instance: &TestApp| {
        let settings = instance.settings.database.clone();
        let clock = app.clock.clone();
        let retention = retention.clone();
        tokio::task::spawn_blocking(move || {
            let pool = inlet::db::build_pool(&settings).expect("a pool through the pooler");
            Sweeper::new(pool, clock, retention).sweep(false)
        })
    };
    // The sweep lock, held by a transaction of the test's own, stops a pooled sweep.
    let holder = SweepLockHolder::take(&app);
    let held = pooled(&app).await.expect("task").expect("a sweep");
    assert!(held.skipped && held.events == 0, "{held:?}");
    holder.release();

    let (one, two) = (pooled(&app), pooled(&other));
    let one = one.await.expect("task").expect("a sweep");
    let two = two.await.expect("task").expect("a sweep");
    assert_eq!(
        one.events + two.events,
        40,
        "each expired row once: {one:?} {two:?}"
    );
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_facts().await, 40, "no fact is swept");
}
