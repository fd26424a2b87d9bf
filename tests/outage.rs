//! A database that goes away while Inlet runs. A test binary of its own: the SQLite
//! outage holds the write lock past busy_timeout, and Inlet's SQLite writer gate is one
//! per process (an Inlet process has one database), so in the shared API test process it
//! would stall the other tests' SQLite writes.

mod helpers;

use helpers::{first_within, spawn_app_with, stripe_event, Backend, TestApp, TestOptions};
use std::time::Duration;

on_both_backends!(an_unavailable_database_means_503_and_recovery_without_restart);

async fn an_unavailable_database_means_503_and_recovery_without_restart(backend: Backend) {
    let app = spawn_app_with(
        backend,
        TestOptions {
            proxy: true,
            ..Default::default()
        },
    )
    .await;
    let before = app
        .post_stripe(&stripe_event("evt_before", "charge.succeeded", "ch_0"))
        .await;
    assert_eq!(before.status, 200);

    // PostgreSQL: every connection cut and new ones refused. SQLite: another process holds
    // the write lock past busy_timeout.
    let outage = Outage::begin(&app);

    let body = stripe_event("evt_during", "charge.succeeded", "ch_1");
    let during = app.post_stripe(&body).await;
    during.assert_problem(503, "database_unavailable");
    let retry_after: u64 = during
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(retry_after > 0);
    // Outsiders learn that the database is unavailable, never where it is.
    let detail = during.json()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(detail.starts_with("database unavailable"), "{detail}");
    assert!(detail.contains("request id"), "{detail}");
    let target = app.settings.database.target.to_string();
    for internal in ["127.0.0.1", "localhost", "5432", target.as_str()] {
        assert!(!detail.contains(internal), "{detail} names {internal}");
    }
    let ready = app.get("/readyz").await;
    ready.assert_problem(503, "database_unavailable");
    assert_eq!(ready.json()["detail"], "database: unavailable");

    outage.end(&app);

    let after = wait_for_status(&app, &body, 200).await;
    assert_eq!(
        after.json()["outcome"],
        "accepted",
        "the provider's retry is processed"
    );
    assert_eq!(app.get("/readyz").await.status, 200);
    assert_eq!(app.count_events().await, 2);
}

enum Outage {
    Proxy,
    SqliteLock(diesel::SqliteConnection),
}

impl Outage {
    fn begin(app: &TestApp) -> Self {
        match app.backend {
            Backend::Postgres => {
                app.proxy.as_ref().expect("a proxy").down();
                Self::Proxy
            }
            Backend::Sqlite => Self::SqliteLock(app.lock_sqlite_database()),
        }
    }

    fn end(self, app: &TestApp) {
        match self {
            Self::Proxy => app.proxy.as_ref().expect("a proxy").up(),
            Self::SqliteLock(conn) => drop(conn),
        }
    }
}

/// Posts until the status matches (the pool reconnects on demand), for at most 10 s.
async fn wait_for_status(app: &TestApp, body: &[u8], status: u16) -> crate::helpers::Reply {
    let last = std::sync::Mutex::new(None);
    let matched = first_within(Duration::from_secs(10), || async {
        let reply = app.post_stripe(body).await;
        if reply.status == status {
            return Some(reply);
        }
        *last.lock().expect("the last answer") = Some(reply);
        None
    })
    .await;
    if let Some(reply) = matched {
        return reply;
    }
    let last = last.lock().expect("the last answer");
    let last = last.as_ref().expect("an answer");
    panic!(
        "still {} after the database came back: {}",
        last.status,
        String::from_utf8_lossy(&last.body)
    );
}
