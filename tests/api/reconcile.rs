//! Reconciliation, end to end on both backends against local stand-ins of the providers'
//! APIs (tests/helpers/provider_apis.rs, written from their documentation): events a
//! provider sent while Inlet was down are found missing in its own record and recovered —
//! Stripe's claimed as its API serves them (marked recovered), GitHub's and Paddle's
//! asked for again and arriving signed — each delivered once downstream; a late copy
//! racing a recovery is the same event; a report run changes nothing; a run left
//! unfinished resumes from its cursor; a refused credential fails the run visibly without
//! showing it; a Paddle replay under the same event_id gets the stored answer.

use crate::helpers::{
    each_delivered_once, eventually, metric, nothing_left_to_send, requests_per_key,
    spawn_app_with, stripe_signature, wait_for, Backend, ProviderApi, Reply, TestApp, TestOptions,
    PADDLE_NOTIFICATION_SETTING_ID,
};
use crate::on_both_backends;
use chrono::{DateTime, Duration, Utc};
use inlet::clock::Clock;
use serde_json::{json, Value};
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    stripe_events_missed_while_down_are_recovered_and_delivered_once,
    a_report_run_lists_what_is_missing_and_changes_nothing,
    github_deliveries_that_failed_are_redelivered_signed,
    a_github_app_hook_is_read_as_the_app,
    asking_for_a_run_needs_a_role_that_may_replay_a_key_and_a_reconciled_source,
    paddle_notifications_that_failed_are_replayed_and_a_replay_gets_the_stored_answer,
    a_refused_credential_fails_the_run_visibly_and_is_never_shown,
    a_run_left_unfinished_resumes_from_its_cursor,
    the_command_line_reports_then_recovers_and_a_run_killed_half_way_resumes,
    an_event_younger_than_settle_is_not_missing_yet,
);

const STRIPE_SECRET: &str = "whsec_reconcile_test_secret_0123456789";
const STRIPE_KEY: &str = "sk_test_reconcile_key_0123456789abcdef";
const GITHUB_SECRET: &str = "github-reconcile-secret-0123456789";
const GITHUB_TOKEN: &str = "ghp_reconcileToken0123456789abcdef";
const GITHUB_HOOK: &str = "repos/acme/shop/hooks/4242";
const PADDLE_SECRET: &str = "pdl_ntfset_01reconcile_0123456789abcdefghij";
const PADDLE_KEY: &str = "pdl_apikey_reconcile_0123456789abcdef";
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A source `name` of `scheme` with `secret`, reconciled through `api` (its
/// `[sources.reconcile]` lines), delivering to `application`.
fn source(name: &str, scheme: &str, secret: &str, reconcile: &str, application: &str) -> String {
    // Paddle's default horizon (90 days of replays) is over the tests' retention.
    format!(
        "\n[[sources]]\nname = \"{name}\"\nscheme = \"{scheme}\"\nsecrets = [\"{secret}\"]\nreplay_horizon = \"3d\"\n\
         [sources.reconcile]\n{reconcile}\n\
         [[sources.destinations]]\nurl = \"{application}\"\nsecret = \"{APP_SECRET}\"\n"
    )
}

/// A stripe source `name` reconciled through `api`. (The metrics are the process's, shared
/// by the tests running beside: a test that counts has a source of its own.)
fn stripe_source(name: &str, api: &ProviderApi, application: &str) -> String {
    let reconcile = format!(
        "api = \"stripe\"\napi_url = \"{}\"\ncredential = \"{STRIPE_KEY}\"\ninterval = \"1h\"\n\
         lookback = \"1d\"\nsettle = \"5m\"\ntypes = [\"payment_intent.succeeded\"]",
        api.url
    );
    source(name, "stripe", STRIPE_SECRET, &reconcile, application)
}

/// A Stripe API stand-in, the application, and Inlet with stripe source `name`.
async fn stripe_app(backend: Backend, name: &str) -> (ProviderApi, MockServer, TestApp) {
    let api = ProviderApi::stripe(STRIPE_KEY).await;
    let application = application().await;
    let app = spawn(backend, stripe_source(name, &api, &application.uri()), name).await;
    (api, application, app)
}

async fn application() -> MockServer {
    let application = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&application)
        .await;
    application
}

/// Inlet with `sources`, once `source`'s first run (made at startup, to catch up after
/// time down) has ended: the provider's record is filled after it, and each run asked
/// for names how far back it looks (`since`).
async fn spawn(backend: Backend, sources: String, source: &str) -> TestApp {
    let options = TestOptions {
        extra_sources: sources,
        ..Default::default()
    };
    spawn_with(backend, options, source).await
}

async fn spawn_with(backend: Backend, options: TestOptions, source: &str) -> TestApp {
    let app = spawn_app_with(backend, options).await;
    eventually("the run made at startup ended", || async {
        let runs = runs(&app, source).await;
        runs.iter()
            .any(|run| run["status"] == "ok" || run["status"] == "failed")
    })
    .await;
    app
}

/// A Stripe event `n`, created `age` before `now`.
fn stripe_event(n: usize, now: DateTime<Utc>, age: Duration) -> Value {
    json!({
        "id": format!("evt_rec_{n:04}"),
        "type": "payment_intent.succeeded",
        "created": (now - age).timestamp(),
        "data": {"object": {"id": format!("pi_rec_{n:04}"), "object": "payment_intent", "amount": 100 + n}},
    })
}

/// Asks for a run of `source` and waits until it has ended: its row.
async fn run_now(app: &TestApp, source: &str, body: Value) -> Value {
    let key = format!("reconcile-{}", fastrand::u64(..));
    let mut body = body;
    body["source"] = json!(source);
    body["since"] = json!("1d");
    let asked = app.admin("/admin/reconcile", Some(&body), Some(&key)).await;
    asked.assert_status(202);
    let id = asked.json()["run"]["id"].as_i64().expect("a run id");
    assert_eq!(asked.json()["run"]["status"], "requested");
    wait_for(
        &format!("run {id} ended"),
        std::time::Duration::from_secs(60),
        || async move {
            let runs = runs(app, source).await;
            let run = runs.into_iter().find(|run| run["id"] == id)?;
            (run["status"] == "ok" || run["status"] == "failed").then_some(run)
        },
    )
    .await
}

/// `run` ended `status`, having found `missing` events missing and recovered `recovered`.
fn assert_run(run: &Value, status: &str, missing: i64, recovered: i64) {
    let counts = (run["missing"].as_i64(), run["recovered"].as_i64());
    assert_eq!(run["status"], status, "{run}");
    assert_eq!(counts, (Some(missing), Some(recovered)), "{run}");
}

async fn runs(app: &TestApp, source: &str) -> Vec<Value> {
    let reply = app
        .admin(
            &format!("/admin/reconcile/runs?source={source}"),
            None,
            None,
        )
        .await;
    reply.assert_status(200);
    reply.json()["runs"].as_array().cloned().unwrap_or_default()
}

async fn event(app: &TestApp, source: &str, id: &str) -> Reply {
    app.admin(&format!("/admin/events/{source}/{id}"), None, None)
        .await
}

/// Stripe: 150 events over two pages, 20 of which reached Inlet before it went down; a
/// 429 on the way. The run recovers the 130 others — each claimed once, marked
/// recovered, delivered once — and a late Stripe retry of one (pretty-printed, signed)
/// gets the stored answer; the next run finds nothing missing.
async fn stripe_events_missed_while_down_are_recovered_and_delivered_once(backend: Backend) {
    let source = format!("rec-shop-{backend:?}").to_lowercase();
    let (api, application, app) = stripe_app(backend, &source).await;
    let now = app.clock.now();
    for n in 0..150 {
        let event = stripe_event(n, now, Duration::hours(2) + Duration::seconds(n as i64));
        api.add_stripe_event(event, n < 20);
    }
    for n in 0..20 {
        let body = api.webhook_body(&format!("evt_rec_{n:04}"));
        let signature = stripe_signature(STRIPE_SECRET, &body, now.timestamp());
        app.post_webhook(&source, &body, &[("Stripe-Signature", signature)])
            .await
            .assert_status(200);
    }
    api.fail_next(1, 429, Some(1));
    let recovered_before = metric(
        &app,
        &format!("inlet_reconcile_recovered_total{{source=\"{source}\"}}"),
    )
    .await;
    let run = run_now(&app, &source, json!({})).await;
    assert_eq!(run["status"], "ok", "{run}");
    // Stripe lists only what it has not delivered everywhere (delivery_success=false).
    assert_eq!(
        (
            run["listed"].as_i64(),
            run["missing"].as_i64(),
            run["recovered"].as_i64()
        ),
        (Some(130), Some(130), Some(130)),
        "{run}"
    );
    let seen = api.requests();
    assert!(
        seen.iter()
            .all(|r| r.authorization.as_deref() == Some(&format!("Bearer {STRIPE_KEY}")[..])),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|r| r.path.contains("starting_after=")),
        "pages followed: {seen:?}"
    );
    let recovered = metric(
        &app,
        &format!("inlet_reconcile_recovered_total{{source=\"{source}\"}}"),
    )
    .await;
    assert_eq!(recovered - recovered_before, 130.0);
    let shown = event(&app, &source, "evt_rec_0100").await.json();
    assert_eq!(shown["event"]["arrival"], "recovered", "{shown}");
    assert_eq!(
        event(&app, &source, "evt_rec_0001").await.json()["event"]["arrival"],
        "webhook"
    );
    // A late retry of a recovered event, as Stripe's webhook writes it: the same event.
    let late = api.webhook_body("evt_rec_0100");
    let signature = stripe_signature(STRIPE_SECRET, &late, now.timestamp());
    let reply = app
        .post_webhook(&source, &late, &[("Stripe-Signature", signature)])
        .await;
    reply.assert_status(200);
    assert!(reply.replayed(), "{}", reply.text());
    each_delivered_once(&app, &application, 150).await;
    let again = run_now(&app, &source, json!({})).await;
    assert_eq!(
        (again["status"].as_str(), again["missing"].as_i64()),
        (Some("ok"), Some(0)),
        "{again}"
    );
}

/// A report run (`dry_run`) lists the missing ids and changes nothing: no event, no
/// delivery; the source's own mode is recover.
async fn a_report_run_lists_what_is_missing_and_changes_nothing(backend: Backend) {
    let (api, application, app) = stripe_app(backend, "rec-shop").await;
    let now = app.clock.now();
    for n in 0..3 {
        api.add_stripe_event(stripe_event(n, now, Duration::hours(1)), false);
    }
    let events_before = app.count_events().await;
    let run = run_now(&app, "rec-shop", json!({"dry_run": true})).await;
    assert_eq!(
        (run["mode"].as_str(), run["status"].as_str()),
        (Some("report"), Some("ok")),
        "{run}"
    );
    assert_eq!(
        (run["missing"].as_i64(), run["recovered"].as_i64()),
        (Some(3), Some(0)),
        "{run}"
    );
    let mut ids: Vec<&str> = run["missing_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["evt_rec_0000", "evt_rec_0001", "evt_rec_0002"]);
    assert_eq!(app.count_events().await, events_before);
    nothing_left_to_send(&app).await;
    assert!(requests_per_key(&application).await.is_empty());
    // The request is in the audit trail, under the operator who asked.
    let audit = app.admin("/admin/audit", None, None).await.json();
    assert!(audit.to_string().contains("reconcile"), "{audit}");
}

/// GitHub: deliveries that failed (GitHub never retries) are redelivered on request under
/// the same guid, arrive signed and are claimed once; one Inlet already has is left alone.
async fn github_deliveries_that_failed_are_redelivered_signed(backend: Backend) {
    let api = ProviderApi::github(
        GITHUB_TOKEN,
        GITHUB_HOOK,
        "http://127.0.0.1:9/unset",
        GITHUB_SECRET,
    )
    .await;
    let application = application().await;
    let reconcile = format!(
        "api = \"github\"\napi_url = \"{}\"\ncredential = \"{GITHUB_TOKEN}\"\nhook = \"{GITHUB_HOOK}\"\n\
         interval = \"1h\"\nlookback = \"2d\"\nsettle = \"5m\"",
        api.url
    );
    let app = spawn(
        backend,
        source(
            "rec-github",
            "github",
            GITHUB_SECRET,
            &reconcile,
            &application.uri(),
        ),
        "rec-github",
    )
    .await;
    api.deliver_to(&format!("{}/webhooks/rec-github", app.address));
    let now = app.clock.now();
    for n in 0..5 {
        let payload =
            json!({"action": "opened", "number": n, "repository": {"full_name": "acme/shop"}});
        let status = if n == 0 { 200 } else { 0 };
        api.add_github_delivery(
            &format!("guid-{n}"),
            "pull_request",
            payload,
            now - Duration::hours(1),
            status,
        );
    }
    // The one GitHub delivered reached Inlet.
    let body = api.webhook_body("guid-0");
    let signature = format!(
        "sha256={}",
        hex::encode(inlet::secret::hmac_sha256(
            GITHUB_SECRET.as_bytes(),
            &[&body]
        ))
    );
    let headers = [
        ("X-Hub-Signature-256", signature.as_str()),
        ("X-GitHub-Delivery", "guid-0"),
        ("X-GitHub-Event", "pull_request"),
    ];
    app.post_webhook("rec-github", &body, &headers)
        .await
        .assert_status(200);
    let run = run_now(&app, "rec-github", json!({})).await;
    assert_run(&run, "ok", 4, 4);
    api.settled().await;
    assert_eq!(api.resends().len(), 4, "{:?}", api.resends());
    for n in 0..5 {
        let shown = event(&app, "rec-github", &format!("guid-{n}")).await;
        shown.assert_status(200);
        assert_eq!(
            shown.json()["event"]["arrival"],
            "webhook",
            "redelivered, signed"
        );
    }
    each_delivered_once(&app, &application, 5).await;
    let again = run_now(&app, "rec-github", json!({})).await;
    assert_eq!(again["missing"], 0, "{again}");
    assert_eq!(api.resends().len(), 4);
}

/// A GitHub App's own hook (`hook = "app"`): read and redelivered as the App, with a JWT
/// each run signs with its private key (`credential`, a `file:`), never with a token.
async fn a_github_app_hook_is_read_as_the_app(backend: Backend) {
    let api = ProviderApi::github_app("4711", "http://127.0.0.1:9/unset", GITHUB_SECRET).await;
    let application = application().await;
    let key = std::env::temp_dir().join(format!("inlet-app-key-{}.pem", fastrand::u64(..)));
    std::fs::write(&key, crate::helpers::rsa_private_key_pem()).expect("write the App's key");
    let reconcile = format!(
        "api = \"github\"\napi_url = \"{}\"\ncredential = \"file:{}\"\nhook = \"app\"\n\
         app_id = \"4711\"\ninterval = \"1h\"\nlookback = \"2d\"\nsettle = \"5m\"",
        api.url,
        key.display()
    );
    let sources = source(
        "rec-app",
        "github",
        GITHUB_SECRET,
        &reconcile,
        &application.uri(),
    );
    let app = spawn(backend, sources, "rec-app").await;
    api.deliver_to(&format!("{}/webhooks/rec-app", app.address));
    let payload = json!({"action": "created", "installation": {"id": 1}});
    api.add_github_delivery(
        "app-guid-1",
        "installation",
        payload,
        app.clock.now() - Duration::hours(1),
        0,
    );
    let run = run_now(&app, "rec-app", json!({})).await;
    assert_run(&run, "ok", 1, 1);
    api.settled().await;
    event(&app, "rec-app", "app-guid-1")
        .await
        .assert_status(200);
    let seen = api.requests();
    let jwt_like = |auth: &Option<String>| {
        auth.as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .is_some_and(|token| token.split('.').count() == 3)
    };
    assert!(seen.iter().all(|r| jwt_like(&r.authorization)), "{seen:?}");
    assert!(
        seen.iter()
            .any(|r| r.path.starts_with("/app/hook/deliveries")),
        "{seen:?}"
    );
    each_delivered_once(&app, &application, 1).await;
    let _ = std::fs::remove_file(key);
}

/// Paddle: failed notifications are replayed — a new notification id under the same
/// event_id — and claimed once; a replay of an event Inlet has (another notification_id
/// in the body) gets the stored answer, not 422; one still being retried by Paddle is
/// left to Paddle.
async fn paddle_notifications_that_failed_are_replayed_and_a_replay_gets_the_stored_answer(
    backend: Backend,
) {
    let api = ProviderApi::paddle(PADDLE_KEY, "http://127.0.0.1:9/unset", PADDLE_SECRET).await;
    let application = application().await;
    let reconcile = format!(
        "api = \"paddle\"\napi_url = \"{}\"\ncredential = \"{PADDLE_KEY}\"\n\
         notification_setting = \"{PADDLE_NOTIFICATION_SETTING_ID}\"\ninterval = \"1h\"\nlookback = \"3d\"\nsettle = \"5m\"",
        api.url
    );
    let app = spawn(
        backend,
        source(
            "rec-paddle",
            "paddle",
            PADDLE_SECRET,
            &reconcile,
            &application.uri(),
        ),
        "rec-paddle",
    )
    .await;
    api.deliver_to(&format!("{}/webhooks/rec-paddle", app.address));
    let now = app.clock.now();
    let mut first = String::new();
    for n in 0..4 {
        let status = ["delivered", "failed", "failed", "needs_retry"][n];
        let data = json!({"id": format!("txn_{n}"), "status": "completed"});
        let id = api.add_paddle_notification(
            &format!("evt_pdl_{n}"),
            "transaction.completed",
            data,
            now - Duration::hours(3),
            status,
        );
        if n == 0 {
            first = id;
        }
    }
    // The delivered one reached Inlet.
    let body = api.webhook_body(&first);
    let headers = crate::providers::headers_for(&app, "rec-paddle", &body, PADDLE_SECRET, 0);
    app.post_webhook("rec-paddle", &body, &headers)
        .await
        .assert_status(200);
    let run = run_now(&app, "rec-paddle", json!({})).await;
    assert_run(&run, "ok", 3, 2);
    api.settled().await;
    for n in 1..3 {
        event(&app, "rec-paddle", &format!("evt_pdl_{n}"))
            .await
            .assert_status(200);
    }
    // A replay of the first event: a new notification_id, the same event: stored answer.
    let mut replay: Value = serde_json::from_slice(&body).expect("JSON");
    replay["notification_id"] = json!("ntf_01replayedcopy");
    let replay = serde_json::to_vec(&replay).expect("JSON");
    let headers = crate::providers::headers_for(&app, "rec-paddle", &replay, PADDLE_SECRET, 0);
    let reply = app.post_webhook("rec-paddle", &replay, &headers).await;
    reply.assert_status(200);
    assert!(reply.replayed());
    // Another body under the same event_id is still refused.
    let mut altered: Value = serde_json::from_slice(&body).expect("JSON");
    altered["data"]["status"] = json!("refunded");
    let altered = serde_json::to_vec(&altered).expect("JSON");
    let headers = crate::providers::headers_for(&app, "rec-paddle", &altered, PADDLE_SECRET, 0);
    app.post_webhook("rec-paddle", &altered, &headers)
        .await
        .assert_problem(422, "fingerprint_mismatch");
    each_delivered_once(&app, &application, 3).await;
}

/// A key the API refuses: the run fails with a reason naming the credential, counted as
/// failed; the key appears nowhere an operator or a scraper can read.
async fn a_refused_credential_fails_the_run_visibly_and_is_never_shown(backend: Backend) {
    let source = format!("rec-refused-{backend:?}").to_lowercase();
    let api = ProviderApi::stripe("sk_test_the_right_key_0123456789").await;
    let application = application().await;
    let app = spawn(
        backend,
        stripe_source(&source, &api, &application.uri()),
        &source,
    )
    .await;
    api.add_stripe_event(stripe_event(1, app.clock.now(), Duration::hours(1)), false);
    let failed_before = metric(
        &app,
        &format!("inlet_reconcile_runs_total{{source=\"{source}\",outcome=\"failed\"}}"),
    )
    .await;
    let run = run_now(&app, &source, json!({})).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or_default()
            .contains("credential"),
        "{run}"
    );
    let failed = metric(
        &app,
        &format!("inlet_reconcile_runs_total{{source=\"{source}\",outcome=\"failed\"}}"),
    )
    .await;
    assert_eq!(failed - failed_before, 1.0);
    for page in [
        &format!("/admin/reconcile/runs?source={source}"),
        "/admin/audit",
        "/metrics",
    ] {
        let text = app.admin(page, None, None).await.text();
        assert!(!text.contains(STRIPE_KEY), "{page} shows the credential");
    }
}

/// A run whose instance died after its first page (its row `running`, its cursor kept,
/// its lease expired) is continued by the next run from that cursor, not from the start.
async fn a_run_left_unfinished_resumes_from_its_cursor(backend: Backend) {
    use diesel::prelude::*;
    use inlet::db::schema::{reconcile_runs, reconcile_sources};
    let (api, application, app) = stripe_app(backend, "rec-shop").await;
    let now = app.clock.now();
    for n in 0..120 {
        api.add_stripe_event(
            stripe_event(n, now, Duration::hours(1) + Duration::seconds(n as i64)),
            false,
        );
    }
    // Newest first: the first page held events 0..=99; the cursor is the last of them.
    let startup_calls = api.requests().len();
    let (from, to) = (
        (now - Duration::days(1)).naive_utc(),
        (now - Duration::minutes(5)).naive_utc(),
    );
    app.with_conn(move |conn| {
        diesel::update(reconcile_sources::table.find("rec-shop"))
            .set((
                reconcile_sources::lease_holder.eq("gone"),
                reconcile_sources::locked_until.eq(Some(from)),
            ))
            .execute(conn)?;
        diesel::insert_into(reconcile_runs::table)
            .values((
                reconcile_runs::source.eq("rec-shop"),
                reconcile_runs::trigger.eq("schedule"),
                reconcile_runs::mode.eq("recover"),
                reconcile_runs::status.eq("running"),
                reconcile_runs::window_from.eq(from),
                reconcile_runs::window_to.eq(to),
                reconcile_runs::cursor.eq(Some("evt_rec_0099")),
                reconcile_runs::listed.eq(100_i64),
                reconcile_runs::started_at.eq(from),
            ))
            .execute(conn)
    })
    .await;
    let run = run_now(&app, "rec-shop", json!({})).await;
    let runs = runs(&app, "rec-shop").await;
    let resumed = runs
        .iter()
        .find(|r| r["trigger"] == "schedule" && r["listed"] != 0)
        .cloned()
        .expect("the unfinished run");
    assert_eq!(
        (
            resumed["status"].as_str(),
            resumed["listed"].as_i64(),
            resumed["recovered"].as_i64()
        ),
        (Some("ok"), Some(120), Some(20)),
        "{resumed}"
    );
    // (The startup run listed an empty record before the events were added.)
    let first = api
        .requests()
        .into_iter()
        .skip(startup_calls)
        .find(|r| r.path.starts_with("/v1/events"))
        .expect("a list call");
    assert!(
        first.path.contains("starting_after=evt_rec_0099"),
        "resumed from its cursor: {first:?}"
    );
    // The asked-for run came after it and found the first page's 100 still missing.
    assert_eq!(run["recovered"], 100, "{run}");
    each_delivered_once(&app, &application, 120).await;
}

/// An event younger than `settle` is not missing yet: the window ends before it.
async fn an_event_younger_than_settle_is_not_missing_yet(backend: Backend) {
    let (api, application, app) = stripe_app(backend, "rec-shop").await;
    let now = app.clock.now();
    api.add_stripe_event(stripe_event(1, now, Duration::minutes(1)), false);
    api.add_stripe_event(stripe_event(2, now, Duration::minutes(30)), false);
    let run = run_now(&app, "rec-shop", json!({})).await;
    assert_eq!(run["missing_ids"], json!(["evt_rec_0002"]), "{run}");
    event(&app, "rec-shop", "evt_rec_0001")
        .await
        .assert_status(404);
    // Only the settled one was recovered, and delivered.
    each_delivered_once(&app, &application, 1).await;
}

/// `inlet reconcile` with the test's configuration file.
fn reconcile_command(app: &TestApp, args: &[&str]) -> std::process::Command {
    let config = app.config_path.as_ref().expect("started with config_file");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"));
    command
        .arg("--config")
        .arg(config)
        .arg("reconcile")
        .args(args);
    command
}

async fn run_reconcile(app: &TestApp, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = reconcile_command(app, args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run inlet"))
        .await
        .expect("the inlet process");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// `inlet reconcile --dry-run` prints what is missing and changes nothing; without it the
/// same command recovers it. A run of the command killed (SIGKILL) after its first page,
/// while the provider's API is failing, is continued by the next run from its cursor
/// once its lease has run out: every event once, each delivered once.
async fn the_command_line_reports_then_recovers_and_a_run_killed_half_way_resumes(
    backend: Backend,
) {
    use diesel::prelude::*;
    use inlet::db::schema::{reconcile_runs, reconcile_sources};
    let api = ProviderApi::stripe(STRIPE_KEY).await;
    let application = application().await;
    let options = TestOptions {
        extra_sources: stripe_source("rec-shop", &api, &application.uri()),
        config_file: true,
        ..Default::default()
    };
    let app = spawn_with(backend, options, "rec-shop").await;
    let now = app.clock.now();
    for n in 0..2 {
        api.add_stripe_event(stripe_event(n, now, Duration::hours(1)), false);
    }
    let (code, out, err) = run_reconcile(
        &app,
        &["--source", "rec-shop", "--since", "1d", "--dry-run"],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("report")
            && out.contains("missing: evt_rec_0000")
            && out.contains("missing: evt_rec_0001"),
        "{out}"
    );
    assert!(out.contains("listed 2, missing 2, recovered 0"), "{out}");
    event(&app, "rec-shop", "evt_rec_0000")
        .await
        .assert_status(404);
    let (code, out, err) = run_reconcile(&app, &["--source", "rec-shop", "--since", "1d"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("listed 2, missing 2, recovered 2, errors 0: ok"),
        "{out}"
    );
    assert_eq!(
        event(&app, "rec-shop", "evt_rec_0001").await.json()["event"]["arrival"],
        "recovered"
    );

    // 120 more, listed newest first (with the 2 above, which Stripe still counts as
    // undelivered): the first page is 100 of them.
    for n in 10..130 {
        api.add_stripe_event(
            stripe_event(n, now, Duration::hours(2) + Duration::seconds(n as i64)),
            false,
        );
    }
    // Its first page answered, the API fails until the process is killed: the second
    // page waits (Retry-After: 30 s), tries again, waits.
    api.fail_after(1, 1_000, 503, Some(30));
    let mut child = reconcile_command(&app, &["--source", "rec-shop", "--since", "1d"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start inlet reconcile");
    eventually("the first page's progress committed", || async {
        let listed: Vec<i64> = app
            .with_conn(|conn| {
                reconcile_runs::table
                    .filter(reconcile_runs::status.eq("running"))
                    .select(reconcile_runs::listed)
                    .load(conn)
            })
            .await;
        listed.first().copied() == Some(100)
    })
    .await;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    api.fail_next(0, 503, None);
    // Its lease would run out after 90 s: the test ends it now.
    let expired = (now - Duration::days(1)).naive_utc();
    app.with_conn(move |conn| {
        diesel::update(reconcile_sources::table.find("rec-shop"))
            .set(reconcile_sources::locked_until.eq(Some(expired)))
            .execute(conn)
    })
    .await;
    let resumed_from = api.requests().len();
    run_now(&app, "rec-shop", json!({})).await;
    let all = runs(&app, "rec-shop").await;
    let killed = (all.iter())
        .find(|r| r["trigger"] == "cli" && r["listed"] == 122)
        .unwrap_or_else(|| panic!("the killed run, continued: {all:?}"));
    assert_eq!(
        (killed["status"].as_str(), killed["recovered"].as_i64()),
        (Some("ok"), Some(120)),
        "{killed}"
    );
    let continued = api
        .requests()
        .into_iter()
        .skip(resumed_from)
        .find(|r| r.path.starts_with("/v1/events"))
        .expect("a list call");
    assert!(
        continued.path.contains("starting_after="),
        "continued from its cursor: {continued:?}"
    );
    each_delivered_once(&app, &application, 122).await;
}

/// `POST /admin/reconcile`: a viewer is refused (403) and the refusal audited; a call
/// without an Idempotency-Key is 400; a source without `[sources.reconcile]` is 404; the
/// same key again answers the stored run (one run asked for).
async fn asking_for_a_run_needs_a_role_that_may_replay_a_key_and_a_reconciled_source(
    backend: Backend,
) {
    const VIEWER: &str = "viewer-token-vera-0123456789";
    let api = ProviderApi::stripe(STRIPE_KEY).await;
    let application = application().await;
    let options = TestOptions {
        extra_sources: stripe_source("rec-shop", &api, &application.uri()),
        operators: "[[operators]]\nname = \"vera\"\nrole = \"viewer\"\ntoken = \"viewer-token-vera-0123456789\"\n",
        ..Default::default()
    };
    let app = spawn_with(backend, options, "rec-shop").await;
    let body = json!({"source": "rec-shop"});
    let refused = app
        .admin_as(VIEWER, "/admin/reconcile", Some(&body), Some("k-viewer"))
        .await;
    refused.assert_problem(403, "forbidden");
    app.admin("/admin/reconcile", Some(&body), None)
        .await
        .assert_problem(400, "idempotency_key_missing");
    let plain = json!({"source": "stripe"});
    app.admin("/admin/reconcile", Some(&plain), Some("k-plain"))
        .await
        .assert_problem(404, "not_found");
    let first = app
        .admin("/admin/reconcile", Some(&body), Some("k-once"))
        .await;
    first.assert_status(202);
    let again = app
        .admin("/admin/reconcile", Some(&body), Some("k-once"))
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    let asked = runs(&app, "rec-shop")
        .await
        .into_iter()
        .filter(|run| run["trigger"] == "api")
        .count();
    assert_eq!(asked, 1);
    let audit = app.admin("/admin/audit", None, None).await.json();
    assert!(
        audit.to_string().contains("vera"),
        "the refusal is audited: {audit}"
    );
}
