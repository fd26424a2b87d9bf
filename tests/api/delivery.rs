//! Facts to the user's application through the outbox. A wiremock server stands in for
//! the application.

use crate::helpers::{
    eventually, requests_per_key, serve_application, spawn_app_with, stripe_event,
    verifies_as_standard_webhook, wait_for, Backend, Seen, TestApp, TestOptions,
};
use crate::on_both_backends;
use chrono::{DateTime, NaiveDateTime, SubsecRound, Utc};
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use inlet::delivery::{client_for, lease_due, settle_all, Dispatcher, Settled, Settlement};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    a_new_fact_is_delivered_once_signed_and_duplicates_add_nothing,
    transient_failures_are_retried_until_delivered,
    a_conflict_means_in_flight_and_is_retried,
    a_permanent_failure_is_dead_after_one_attempt,
    retry_after_is_honoured,
    a_timeout_is_retried,
    past_the_deadline_it_is_dead,
    a_crashed_dispatcher_is_taken_over_and_fenced,
    deliver_once_sends_what_is_due,
    a_shutdown_with_deliveries_in_flight_loses_nothing,
    a_group_settlement_refuses_only_the_row_whose_lease_was_taken_over,
    many_deliveries_in_flight_at_once_each_arrive_once,
    a_refused_connection_says_it_was_refused_and_where,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The `[[sources.destinations]]` lines for the mock application; `extra` lines
/// (`key = value`) override the fast test defaults.
fn destination(server: &MockServer, extra: &str) -> String {
    let overridden = |key: &str| {
        extra
            .lines()
            .any(|line| line.trim_start().starts_with(&format!("{key} ")))
    };
    let mut lines = vec![
        format!("url = \"{}/events\"", server.uri()),
        format!("secret = \"{APP_SECRET}\""),
        "name = \"app\"".to_owned(),
    ];
    for (key, value) in [("retry_base", "\"20ms\""), ("retry_cap", "\"100ms\"")] {
        if !overridden(key) {
            lines.push(format!("{key} = {value}"));
        }
    }
    lines.extend(extra.lines().map(str::to_owned));
    lines.join("\n")
}

async fn app_delivering_to(backend: Backend, server: &MockServer, extra: &str) -> TestApp {
    let options = TestOptions {
        destination: Some(destination(server, extra)),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// An application that accepts everything, and an Inlet that enqueues but does not
/// dispatch (the test drives delivery itself).
async fn accepting_app_without_dispatcher(backend: Backend) -> (MockServer, TestApp) {
    let server = MockServer::start().await;
    answer(&server, 200, None, 1).await;
    let options = TestOptions {
        destination: Some(destination(&server, "")),
        dispatch: false,
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    (server, app)
}

async fn answer(server: &MockServer, status: u16, times: Option<u64>, priority: u8) {
    let mock = Mock::given(method("POST"))
        .and(path("/events"))
        .respond_with(ResponseTemplate::new(status))
        .with_priority(priority);
    match times {
        Some(n) => mock.up_to_n_times(n).mount(server).await,
        None => mock.mount(server).await,
    }
}

async fn requests(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}

async fn all_delivered(app: &TestApp) -> bool {
    rows(app).await.iter().all(|r| r.status == "delivered")
}

#[derive(Debug, Clone, Queryable)]
struct Row {
    status: String,
    attempt: i32,
    next_attempt_at: NaiveDateTime,
    delivered_at: Option<NaiveDateTime>,
    last_status: Option<i32>,
    last_error: Option<String>,
}

async fn rows(app: &TestApp) -> Vec<Row> {
    let pool = app.pool.clone();
    tokio::task::spawn_blocking(move || {
        let mut conn = pool.get().expect("a connection");
        deliveries::table
            .order(deliveries::id)
            .select((
                deliveries::status,
                deliveries::attempt,
                deliveries::next_attempt_at,
                deliveries::delivered_at,
                deliveries::last_status,
                deliveries::last_error,
            ))
            .load::<Row>(&mut conn)
            .expect("rows")
    })
    .await
    .expect("query task")
}

async fn wait_for_status(app: &TestApp, status: &str) -> Row {
    wait_for(
        &format!("the delivery to become {status}"),
        Duration::from_secs(15),
        || async {
            rows(app)
                .await
                .into_iter()
                .next()
                .filter(|row| row.status == status)
        },
    )
    .await
}

async fn a_new_fact_is_delivered_once_signed_and_duplicates_add_nothing(backend: Backend) {
    let server = MockServer::start().await;
    answer(&server, 200, None, 1).await;
    let app = app_delivering_to(backend, &server, "").await;
    let body = stripe_event("evt_deliver", "payment_intent.succeeded", "pi_deliver");
    app.post_stripe(&body).await.assert_status(200);

    let row = wait_for_status(&app, "delivered").await;
    assert_eq!((row.attempt, row.last_status), (1, Some(200)));
    let received = requests(&server).await;
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.body, body, "the original payload bytes");
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header("idempotency-key").as_deref(),
        Some("stripe:evt_deliver")
    );
    assert_eq!(header("inlet-source").as_deref(), Some("stripe"));
    assert_eq!(
        header("inlet-event-type").as_deref(),
        Some("payment_intent.succeeded")
    );
    assert_eq!(header("webhook-id").as_deref(), Some("stripe:evt_deliver"));
    assert!(
        verifies_as_standard_webhook(APP_SECRET, request),
        "Inlet's signature verifies with the app's secret"
    );

    // A duplicate of the event, and the same fact under another event id: no delivery.
    app.post_stripe(&body).await.assert_status(200);
    let other = stripe_event("evt_deliver_2", "payment_intent.succeeded", "pi_deliver");
    assert_eq!(
        app.post_stripe(&other).await.json()["outcome"],
        "duplicate_fact"
    );
    // Enqueued in the request's transaction: no row now means none later.
    assert_eq!(rows(&app).await.len(), 1);
    // A later fact delivered: the dispatcher has had its rounds since, and sent the first
    // fact no second time.
    app.post_stripe(&stripe_event(
        "evt_deliver_3",
        "payment_intent.succeeded",
        "pi_deliver_3",
    ))
    .await
    .assert_status(200);
    eventually("the later fact delivered", || async {
        requests_per_key(&server)
            .await
            .contains_key("stripe:evt_deliver_3")
    })
    .await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(per_key.get("stripe:evt_deliver"), Some(&1), "{per_key:?}");
    assert_eq!(per_key.len(), 2, "{per_key:?}");
}

/// The application answers `status` `failures` times, then accepts: the delivery is
/// retried under the same Idempotency-Key and delivered on the attempt after.
async fn retried_until_delivered(backend: Backend, status: u16, failures: u64) {
    let server = MockServer::start().await;
    answer(&server, status, Some(failures), 1).await;
    answer(&server, 200, None, 2).await;
    let app = app_delivering_to(backend, &server, "").await;
    let event_id = format!("evt_{status}");
    app.post_stripe(&stripe_event(
        &event_id,
        "charge.succeeded",
        &format!("ch_{status}"),
    ))
    .await
    .assert_status(200);

    let row = wait_for_status(&app, "delivered").await;
    assert_eq!(i64::from(row.attempt), failures as i64 + 1);
    let per_key = requests_per_key(&server).await;
    assert_eq!(
        per_key.get(&format!("stripe:{event_id}")).copied(),
        Some(failures as usize + 1),
        "every attempt carried the same Idempotency-Key: {per_key:?}"
    );
}

async fn transient_failures_are_retried_until_delivered(backend: Backend) {
    retried_until_delivered(backend, 503, 2).await;
}

/// An application honouring Idempotency-Key answers 409 while an earlier attempt runs.
async fn a_conflict_means_in_flight_and_is_retried(backend: Backend) {
    retried_until_delivered(backend, 409, 1).await;
}

async fn a_permanent_failure_is_dead_after_one_attempt(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_string("amount must be positive"))
        .mount(&server)
        .await;
    let app = app_delivering_to(backend, &server, "").await;
    app.post_stripe(&stripe_event("evt_400", "charge.succeeded", "ch_400"))
        .await
        .assert_status(200);

    let row = wait_for_status(&app, "dead").await;
    assert_eq!((row.attempt, row.last_status), (1, Some(400)));
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("amount must be positive")),
        "{row:?}"
    );
    // A later event, dead too: the dispatcher has had its rounds since, and sent the
    // first one no second time.
    app.post_stripe(&stripe_event(
        "evt_400_later",
        "charge.succeeded",
        "ch_400_later",
    ))
    .await
    .assert_status(200);
    eventually("the later event's delivery dead", || async {
        rows(&app)
            .await
            .iter()
            .filter(|r| r.status == "dead")
            .count()
            == 2
    })
    .await;
    let per_key = requests_per_key(&server).await;
    assert_eq!(
        per_key.get("stripe:evt_400"),
        Some(&1),
        "never retried: {per_key:?}"
    );
}

async fn retry_after_is_honoured(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("Retry-After", "2"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    answer(&server, 200, None, 2).await;
    let app = app_delivering_to(backend, &server, "retry_cap = \"10s\"").await;
    let before = app.now();
    app.post_stripe(&stripe_event("evt_429", "charge.succeeded", "ch_429"))
        .await
        .assert_status(200);

    let first_answered = wait_for("the 429 recorded", Duration::from_secs(15), || async {
        rows(&app)
            .await
            .into_iter()
            .find(|r| r.last_status == Some(429))
    })
    .await;
    let scheduled = first_answered.next_attempt_at.and_utc();
    assert!(
        scheduled >= before + chrono::Duration::seconds(2),
        "next attempt {scheduled} is 2 s after {before}"
    );

    let row = wait_for_status(&app, "delivered").await;
    let delivered = row.delivered_at.expect("delivered_at").and_utc();
    assert!(
        delivered >= before + chrono::Duration::seconds(2),
        "not before Retry-After"
    );
    assert_eq!(requests(&server).await.len(), 2);
}

async fn a_timeout_is_retried(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(3)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    answer(&server, 200, None, 2).await;
    let app = app_delivering_to(backend, &server, "timeout = \"300ms\"").await;
    app.post_stripe(&stripe_event("evt_slow", "charge.succeeded", "ch_slow"))
        .await
        .assert_status(200);

    let row = wait_for_status(&app, "delivered").await;
    assert_eq!(row.attempt, 2, "the timed-out attempt was retried");
    let first = first_attempt_error(&app, "evt_slow").await;
    let address = server.address().to_string();
    assert!(
        first.starts_with(&format!("timed out after 300ms ({address}):")),
        "{first}"
    );
}

/// The error the first attempt at the event's delivery recorded, as the API shows it.
async fn first_attempt_error(app: &TestApp, event_id: &str) -> String {
    let shown = app
        .admin(&format!("/admin/events/stripe/{event_id}"), None, None)
        .await
        .json();
    shown["deliveries"][0]["attempts"][0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error on the first attempt: {shown}"))
        .to_owned()
}

async fn a_refused_connection_says_it_was_refused_and_where(backend: Backend) {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let options = TestOptions {
        destination: Some(format!(
            "url = \"http://127.0.0.1:{port}/events?token=s3cret\"\nsecret = \"{APP_SECRET}\"\n\
             name = \"app\"\nretry_base = \"1s\"\nretry_cap = \"2s\""
        )),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    app.post_stripe(&stripe_event(
        "evt_refused",
        "charge.succeeded",
        "ch_refused",
    ))
    .await
    .assert_status(200);
    eventually("the first attempt", || async {
        let shown = app
            .admin("/admin/events/stripe/evt_refused", None, None)
            .await
            .json();
        shown["deliveries"][0]["attempts"][0]["error"].is_string()
    })
    .await;
    let error = first_attempt_error(&app, "evt_refused").await;
    // What happened, where, and the cause underneath — never the URL's path or query.
    assert!(
        error.starts_with(&format!("connection refused (127.0.0.1:{port}): ")),
        "{error}"
    );
    assert!(error.contains("Connection refused"), "{error}");
    assert!(
        !error.contains("s3cret") && !error.contains("/events"),
        "{error}"
    );
}

async fn past_the_deadline_it_is_dead(backend: Backend) {
    let server = MockServer::start().await;
    answer(&server, 503, None, 1).await;
    let extra =
        "deadline = \"400ms\"\nretry_base = \"100ms\"\nretry_cap = \"200ms\"\nmax_attempts = 1000";
    let app = app_delivering_to(backend, &server, extra).await;
    app.post_stripe(&stripe_event("evt_late", "charge.succeeded", "ch_late"))
        .await
        .assert_status(200);

    let row = wait_for_status(&app, "dead").await;
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("gave up")),
        "{row:?}"
    );
    assert_eq!(row.last_status, Some(503));
    assert!(row.attempt >= 1);
}

async fn a_crashed_dispatcher_is_taken_over_and_fenced(backend: Backend) {
    let (server, app) = accepting_app_without_dispatcher(backend).await;
    app.post_stripe(&stripe_event("evt_fence", "charge.succeeded", "ch_fence"))
        .await
        .assert_status(200);
    let destination = &app.settings.destinations.of("stripe")[0];
    let client = client_for(destination).expect("client");
    let lease = Duration::from_secs(30);

    // Dispatcher A leases the row and the application accepts it; then A "dies" before
    // recording the outcome.
    let holder_a = lease_rows(&app, app.now(), lease).await;
    assert_eq!(holder_a.len(), 1);
    let sent = inlet::delivery::attempt(&client, destination, &holder_a[0], app.now(), None).await;
    assert_eq!(sent.status, Some(200));
    assert!(
        lease_rows(&app, app.now(), lease).await.is_empty(),
        "the lease holds until it expires"
    );

    // After the lease expires, dispatcher B takes the row over and sends it again.
    app.clock.advance(chrono::Duration::seconds(31));
    let holder_b = lease_rows(&app, app.now(), lease).await;
    assert_eq!(holder_b.len(), 1);
    assert_eq!(
        holder_b[0].attempt,
        holder_a[0].attempt + 1,
        "the fencing token moved on"
    );
    let sent = inlet::delivery::attempt(&client, destination, &holder_b[0], app.now(), None).await;
    assert_eq!(sent.status, Some(200));
    assert!(
        settle(&app, &holder_b[0]).await,
        "the current holder records the delivery"
    );

    // A's late completion is refused by the fence.
    assert!(
        !settle(&app, &holder_a[0]).await,
        "the stale holder's write is refused"
    );

    let keys: Vec<_> = requests(&server)
        .await
        .iter()
        .map(|r| r.headers.get("idempotency-key").cloned())
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(
        keys[0], keys[1],
        "the re-send carries the same Idempotency-Key"
    );
    let row = wait_for_status(&app, "delivered").await;
    assert_eq!(row.attempt, 2);
}

/// Posts `count` distinct charge events, `evt_{name}_{i}`: each a new fact to deliver.
async fn post_charges(app: &TestApp, name: &str, count: usize) {
    for i in 0..count {
        app.post_stripe(&stripe_event(
            &format!("evt_{name}_{i}"),
            "charge.succeeded",
            &format!("ch_{name}_{i}"),
        ))
        .await
        .assert_status(200);
    }
}

async fn lease_rows(
    app: &TestApp,
    now: DateTime<Utc>,
    lease: Duration,
) -> Vec<inlet::delivery::Leased> {
    lease_rows_up_to(app, now, lease, 10).await
}

async fn settle(app: &TestApp, row: &inlet::delivery::Leased) -> bool {
    let pool = app.pool.clone();
    let row = row.clone();
    let settlement = Settlement::Delivered {
        at: app.now(),
        status: 200,
    };
    tokio::task::spawn_blocking(move || {
        row.settle(&mut pool.get().expect("conn"), &settlement)
            .expect("settle")
    })
    .await
    .expect("settle task")
}

async fn deliver_once_sends_what_is_due(backend: Backend) {
    let (server, app) = accepting_app_without_dispatcher(backend).await;
    post_charges(&app, "once", 5).await;
    assert_eq!(
        requests(&server).await.len(),
        0,
        "nothing is sent without a dispatcher"
    );

    // What `inlet deliver --once` runs.
    let dispatcher = Arc::new(
        Dispatcher::new(
            &app.settings.destinations,
            &app.settings.delivery,
            app.settings.server.shutdown_grace,
            app.pool.clone(),
            app.clock.clone(),
        )
        .expect("dispatcher"),
    );
    let report = dispatcher.run_once().await.expect("a round");
    assert_eq!(report.count(Settled::Delivered), 5);
    assert_eq!(requests(&server).await.len(), 5);
    assert!(all_delivered(&app).await);
}

async fn a_shutdown_with_deliveries_in_flight_loses_nothing(backend: Backend) {
    let slow = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(4)))
        .mount(&slow)
        .await;
    let options = TestOptions {
        destination: Some(destination(&slow, "")),
        shutdown_grace: "300ms",
        ..Default::default()
    };
    let mut app = spawn_app_with(backend, options.clone()).await;
    post_charges(&app, "stop", 8).await;
    eventually("deliveries in flight", || async {
        !requests(&slow).await.is_empty()
    })
    .await;

    app.stop().await;
    let after_stop = rows(&app).await;
    assert_eq!(after_stop.len(), 8);
    assert!(
        after_stop.iter().all(|r| r.status == "pending"),
        "unfinished deliveries were given back, none left in_progress: {after_stop:?}"
    );

    // The application recovers; a restarted Inlet delivers everything.
    slow.reset().await;
    answer(&slow, 200, None, 1).await;
    let restarted = app.another_instance(options).await;
    eventually("every delivery to complete after the restart", || {
        all_delivered(&restarted)
    })
    .await;
    let per_key = requests_per_key(&slow).await;
    assert_eq!(per_key.len(), 8, "every event reached the application");
}

/// PostgreSQL: two Inlet instances dispatch 1,000 deliveries to one destination; every
/// delivery arrives, and no key arrives twice (no lease expires in this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_instances_deliver_a_thousand_once_each() {
    let server = MockServer::start().await;
    answer(&server, 200, None, 1).await;
    let loading = TestOptions {
        destination: Some(destination(&server, "")),
        dispatch: false,
        ..Default::default()
    };
    let loader = Arc::new(spawn_app_with(Backend::Postgres, loading.clone()).await);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..20 {
        let loader = loader.clone();
        tasks.spawn(async move {
            for i in 0..50 {
                let body = stripe_event(
                    &format!("evt_pair_{chunk}_{i}"),
                    "charge.succeeded",
                    &format!("ch_pair_{chunk}_{i}"),
                );
                loader.post_stripe(&body).await.assert_status(200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("loader task");
    }
    assert_eq!(rows(&loader).await.len(), 1000);

    let dispatching = TestOptions {
        dispatch: true,
        ..loading
    };
    let first = loader.another_instance(dispatching.clone()).await;
    let second = loader.another_instance(dispatching).await;
    eventually("all 1,000 deliveries", || all_delivered(&first)).await;

    let per_key = requests_per_key(&server).await;
    assert_eq!(per_key.len(), 1000, "every delivery arrived");
    let twice: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no key arrived twice: {twice:?}");
    assert!(
        rows(&second).await.iter().all(|r| r.attempt == 1),
        "one lease each, no takeover"
    );
}

/// A dispatcher settles finished deliveries together, in one statement. Dispatcher A
/// leased four rows and stalled past its lease; B took one of them over. A's group
/// records the three rows it still holds — delivered, retried, dead, each as its own
/// outcome says — and refuses only the one B holds, which B then records.
async fn a_group_settlement_refuses_only_the_row_whose_lease_was_taken_over(backend: Backend) {
    let (_server, app) = accepting_app_without_dispatcher(backend).await;
    post_charges(&app, "group", 4).await;
    let lease = Duration::from_secs(30);
    let holder_a = lease_rows(&app, app.now(), lease).await;
    assert_eq!(holder_a.len(), 4);
    app.clock.advance(chrono::Duration::seconds(31));
    let holder_b = lease_rows_up_to(&app, app.now(), lease, 1).await;
    assert_eq!(holder_b.len(), 1);
    assert_eq!(holder_b[0].id, holder_a[0].id, "B took over the oldest row");

    let now = app.now();
    // Whole seconds: PostgreSQL keeps microseconds.
    let retry_at = (now + chrono::Duration::seconds(5)).trunc_subsecs(0);
    let outcomes = [
        Settlement::Delivered {
            at: now,
            status: 200,
        },
        Settlement::Delivered {
            at: now,
            status: 202,
        },
        Settlement::Retry {
            at: retry_at,
            status: Some(503),
            error: "unavailable".to_owned(),
        },
        Settlement::Dead {
            at: now,
            status: Some(422),
            error: "rejected".to_owned(),
        },
    ];
    let group: Vec<_> = holder_a
        .iter()
        .zip(outcomes)
        .map(|(row, settlement)| (row.fence(), settlement))
        .collect();
    assert_eq!(
        settle_group(&app, group).await,
        vec![false, true, true, true],
        "only the row B holds is refused"
    );
    let after = rows(&app).await;
    assert_eq!(
        (after[0].status.as_str(), after[0].attempt),
        ("in_progress", 2),
        "the stale holder's write did not touch B's row: {after:?}"
    );
    assert_eq!(
        (after[1].status.as_str(), after[1].last_status),
        ("delivered", Some(202))
    );
    assert_eq!(
        (
            after[2].status.as_str(),
            after[2].next_attempt_at,
            after[2].last_error.as_deref()
        ),
        ("pending", retry_at.naive_utc(), Some("unavailable"))
    );
    assert_eq!(
        (after[3].status.as_str(), after[3].last_status),
        ("dead", Some(422))
    );

    assert!(settle(&app, &holder_b[0]).await, "B records its delivery");
    assert_eq!(rows(&app).await[0].status, "delivered");
}

async fn lease_rows_up_to(
    app: &TestApp,
    now: DateTime<Utc>,
    lease: Duration,
    limit: i64,
) -> Vec<inlet::delivery::Leased> {
    let pool = app.pool.clone();
    tokio::task::spawn_blocking(move || {
        lease_due(&mut pool.get().expect("conn"), now, lease, limit).expect("lease")
    })
    .await
    .expect("lease task")
}

async fn settle_group(
    app: &TestApp,
    group: Vec<(inlet::delivery::Fence, Settlement)>,
) -> Vec<bool> {
    let pool = app.pool.clone();
    tokio::task::spawn_blocking(move || {
        settle_all(&mut pool.get().expect("conn"), &group, &[]).expect("settle the group")
    })
    .await
    .expect("settle task")
}

/// How many deliveries the crowded application holds before it answers any.
const CROWD: usize = 20;

/// With the default `delivery.concurrency`, one Inlet has at least [`CROWD`] deliveries
/// in flight at once, and each of them reaches the application exactly once.
async fn many_deliveries_in_flight_at_once_each_arrive_once(backend: Backend) {
    let crowd = CrowdedApp::start().await;
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"",
            crowd.url
        )),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let events = 2 * CROWD;
    post_charges(&app, "crowd", events).await;
    eventually("every delivery to complete", || all_delivered(&app)).await;

    let seen = crowd.seen();
    assert!(
        seen.most_in_flight >= CROWD,
        "{CROWD} deliveries were never in flight at once (at most {})",
        seen.most_in_flight
    );
    assert_eq!(seen.per_key.len(), events, "every delivery arrived");
    let twice: Vec<_> = seen.per_key.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "each key arrived exactly once: {twice:?}");
    let after = rows(&app).await;
    assert!(after.iter().all(|r| r.attempt == 1), "{after:?}");
}

/// An application that holds every delivery until [`CROWD`] are waiting at once, then
/// answers them all, and everything after at once. (If that many never arrive it gives up
/// holding after a few seconds, and the test reports how many did.)
struct CrowdedApp {
    url: String,
    seen: Arc<Mutex<Seen>>,
    _server: actix_web::dev::ServerHandle,
}

struct Crowd {
    seen: Arc<Mutex<Seen>>,
    full: tokio::sync::watch::Sender<bool>,
}

impl CrowdedApp {
    async fn start() -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let crowd = actix_web::web::Data::new(Crowd {
            seen: seen.clone(),
            full: tokio::sync::watch::channel(false).0,
        });
        let (url, handle) = serve_application(crowd, hold_until_crowded);
        Self {
            url,
            seen,
            _server: handle,
        }
    }

    fn seen(&self) -> Seen {
        self.seen.lock().expect("seen").clone()
    }
}

async fn hold_until_crowded(
    request: actix_web::HttpRequest,
    crowd: actix_web::web::Data<Crowd>,
) -> actix_web::HttpResponse {
    {
        let mut seen = crowd.seen.lock().expect("seen");
        if seen.arrive(&request) >= CROWD {
            crowd.full.send_replace(true);
        }
    }
    let mut full = crowd.full.subscribe();
    let _ = tokio::time::timeout(Duration::from_secs(5), full.wait_for(|full| *full)).await;
    crowd.seen.lock().expect("seen").in_flight -= 1;
    actix_web::HttpResponse::Ok().finish()
}

/// The real binary, its application down: one WARN line when the destination starts
/// failing (with the cause) however many attempts fail, and one when it answers again —
/// not silence, and not a line per attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_destination_is_logged_once_when_it_fails_and_once_when_it_recovers() {
    let holder = crate::helpers::spawn_database_holder(crate::helpers::Backend::Sqlite).await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = free.local_addr().expect("its address").port();
    drop(free);
    let dir = std::env::temp_dir().join(format!("inlet-failing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("inlet.toml");
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\n[database]\nurl = \"{}\"\n[retention]\nsweeper = false\n\
         [delivery]\npoll_interval = \"50ms\"\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{}\"]\n\
         [[sources.destinations]]\nname = \"app\"\nurl = \"http://127.0.0.1:{port}/events\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nretry_base = \"20ms\"\nretry_cap = \"50ms\"\n\
         max_attempts = 1000\nbreaker = {{ failures = 0 }}\n",
        holder.database_url(),
        crate::helpers::STRIPE_SECRET
    );
    std::fs::write(&config, toml).expect("config");
    let (mut child, lines) = crate::helpers::serve_logging_json(&config);
    let logged: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let collected = logged.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str(&line) {
                collected.lock().expect("log").push(entry);
            }
        }
    });
    let said = |message: &'static str| {
        let logged = logged.clone();
        move || {
            let logged = logged.lock().expect("log");
            let lines = logged.iter().filter(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            });
            lines.cloned().collect::<Vec<_>>()
        }
    };
    let port_of = || {
        let logged = logged.lock().expect("log");
        logged.iter().find_map(|l| l["fields"]["port"].as_u64())
    };
    eventually("inlet listening", || async { port_of().is_some() }).await;
    let inlet = format!("http://127.0.0.1:{}", port_of().unwrap_or_default());
    let client = reqwest::Client::new();
    for id in ["evt_down_1", "evt_down_2", "evt_down_3"] {
        let body = crate::helpers::stripe_event(id, "charge.succeeded", id);
        let signature = crate::helpers::stripe_signature(
            crate::helpers::STRIPE_SECRET,
            &body,
            Utc::now().timestamp(),
        );
        let status = client
            .post(format!("{inlet}/webhooks/stripe"))
            .header("Stripe-Signature", signature)
            .body(body)
            .send()
            .await
            .expect("inlet answers")
            .status();
        assert_eq!(status, 200);
    }
    let metrics = || async {
        let text = client
            .get(format!("{inlet}/metrics"))
            .send()
            .await
            .map(|r| r.text());
        match text {
            Ok(text) => text.await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    // Many failed attempts (every 20-50 ms, three deliveries).
    eventually("thirty failed attempts", || async {
        let text = metrics().await;
        text.lines()
            .find_map(|l| {
                l.strip_prefix("inlet_deliveries_total{destination=\"app\",outcome=\"retrying\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|n| n >= 30.0)
    })
    .await;
    let failing = said("destination failing")();
    assert_eq!(failing.len(), 1, "{failing:?}");
    assert_eq!(failing[0]["level"], "WARN");
    assert_eq!(failing[0]["fields"]["destination"], "app");
    assert!(
        failing[0]["fields"]["cause"]
            .as_str()
            .is_some_and(|c| c.contains("connection refused")),
        "{failing:?}"
    );
    assert!(said("destination recovered")().is_empty());

    let listener =
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the application's port");
    let application = MockServer::builder().listener(listener).start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&application)
        .await;
    eventually("the three delivered", || async {
        application.received_requests().await.map_or(0, |r| r.len()) >= 3
    })
    .await;
    eventually("the recovery logged", || async {
        !said("destination recovered")().is_empty()
    })
    .await;
    let recovered = said("destination recovered")();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(
        recovered[0]["fields"]["failures"]
            .as_u64()
            .is_some_and(|n| n >= 30),
        "{recovered:?}"
    );
    assert_eq!(said("destination failing")().len(), 1, "still one");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
