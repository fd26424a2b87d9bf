//! Operators are people: named tokens with roles enforced alike by the API, the CLI and
//! the console; an audit trail written in the same transaction as each action; the
//! operator surface on a listener of its own; wrong tokens slowing only their address;
//! sessions keyed by a server secret, ended per operator.

use crate::helpers::{
    application_answering, eventually, spawn_app_with, stripe_event, wait_for, Backend, TestApp,
    TestOptions, EVENTUALLY,
};
use serde_json::{json, Value};
use std::sync::Arc;

const VIEWER: &str = "viewer-token-vera-0123456789";
const OPERATOR: &str = "operator-token-otto-0123456789";
const ADMIN: &str = "admin-token-ada-0123456789abc";

const OPERATORS: &str = r#"
[[operators]]
name = "vera"
role = "viewer"
token = "viewer-token-vera-0123456789"

[[operators]]
name = "otto"
role = "operator"
token = "operator-token-otto-0123456789"

[[operators]]
name = "ada"
role = "admin"
token = "admin-token-ada-0123456789abc"
"#;

/// An Inlet with the three operators whose stripe source delivers to `server`, once.
async fn app_with_operators(backend: Backend, server: &wiremock::MockServer) -> TestApp {
    let options = TestOptions {
        operators: OPERATORS,
        config_file: true,
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\nmax_attempts = 1",
            server.uri()
        )),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// A stripe event whose only delivery the application refuses for good: its dead
/// letter's id.
async fn dead_letter(app: &TestApp, event_id: &str) -> i64 {
    app.post_stripe(&stripe_event(event_id, "charge.succeeded", event_id))
        .await
        .assert_status(200);
    wait_for(&format!("{event_id}'s dead letter"), EVENTUALLY, || async {
        let dead = app
            .admin_as(ADMIN, "/admin/deliveries?status=dead", None, None)
            .await
            .json();
        dead["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["event_id"] == event_id)
            .and_then(|d| d["id"].as_i64())
    })
    .await
}

/// The audit trail's rows matching `query` (newest first).
async fn audit(app: &TestApp, query: &str) -> Vec<Value> {
    let reply = app
        .admin_as(ADMIN, &format!("/admin/audit?{query}"), None, None)
        .await;
    reply.assert_status(200);
    reply.json()["audit"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn status_of(app: &TestApp, id: i64) -> String {
    let reply = app
        .admin_as(VIEWER, "/admin/deliveries?limit=500", None, None)
        .await;
    reply.json()["deliveries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["id"] == id)
        .and_then(|d| d["status"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A console session over plain HTTP: its cookie, and the CSRF token of its pages.
struct Console {
    client: reqwest::Client,
    base: String,
    cookie: String,
}

impl Console {
    /// Signs in with `token`.
    async fn sign_in(app: &TestApp, token: &str) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let base = app.admin_address.clone().unwrap_or(app.address.clone());
        let response = client
            .post(format!("{base}/console/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=%2Fconsole"))
            .send()
            .await
            .expect("a sign-in answer");
        assert_eq!(response.status().as_u16(), 303, "signed in");
        let cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .expect("a session cookie")
            .to_owned();
        Self {
            client,
            base,
            cookie,
        }
    }

    /// `GET path`: the status and the page.
    async fn get(&self, path: &str) -> (u16, String) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .expect("a page");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// `POST path` with `fields` and this session's CSRF token (read from `page`).
    async fn post(&self, path: &str, page: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let csrf = page
            .split("name=\"csrf\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("a CSRF token on the page");
        let mut body = form_urlencoded::Serializer::new(String::new());
        body.append_pair("csrf", csrf);
        for (name, value) in fields {
            body.append_pair(name, value);
        }
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.finish())
            .send()
            .await
            .expect("an answer");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }
}

async fn a_viewer_reads_but_every_change_is_refused_and_recorded(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_with_operators(backend, &server).await;
    let id = dead_letter(&app, "evt_viewer").await;
    // Reading: every listing, one event, a replay's preview.
    for path in [
        "/admin/events",
        "/admin/events/stripe/evt_viewer",
        "/admin/deliveries",
        "/admin/destinations",
        "/admin/retention",
        "/admin/audit",
    ] {
        app.admin_as(VIEWER, path, None, None)
            .await
            .assert_status(200);
    }
    let one = json!({"events": [{"source": "stripe", "event_id": "evt_viewer"}]});
    // A time both databases cannot store is read as the earliest stored, before any query
    // runs: the same rows as no bound.
    let far = audit(&app, "since=0000-01-01T00:00:00Z").await;
    assert_eq!(far, audit(&app, "").await);
    let preview = json!({"events": one["events"], "dry_run": true});
    app.admin_as(VIEWER, "/admin/replay", Some(&preview), None)
        .await
        .assert_status(200);
    // Changing: refused, whatever the key.
    let ids = json!({"ids": [id]});
    for (path, body) in [
        ("/admin/replay", &one),
        ("/admin/deliveries/requeue", &ids),
        ("/admin/deliveries/discard", &ids),
        ("/admin/reload", &json!({})),
    ] {
        let reply = app
            .admin_as(VIEWER, path, Some(body), Some("k-viewer"))
            .await;
        reply.assert_problem(403, "forbidden");
        assert!(reply.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("vera"));
    }
    // The CLI calls the API: the same refusal.
    let event = "stripe/evt_viewer";
    let (code, out, err) = app
        .run_cli_with_token(&["replay", "--event", event], VIEWER)
        .await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("forbidden") && err.contains("403"),
        "{out}{err}"
    );
    // The console shows a viewer no action, and refuses a forged one.
    let console = Console::sign_in(&app, VIEWER).await;
    let (status, page) = console.get("/console/deliveries").await;
    assert_eq!(status, 200);
    assert!(page.contains("vera · viewer"), "the operator is shown");
    assert!(!page.contains("Requeue selected") && !page.contains("name=\"id\""));
    let (_, event_page) = console.get("/console/events/stripe/evt_viewer").await;
    assert!(!event_page.contains("Replay…"), "no replay button");
    let id_text = id.to_string();
    let forged = [
        ("action", "requeue"),
        ("id", id_text.as_str()),
        ("idempotency_key", "k-forged"),
    ];
    let (status, answer) = console.post("/console/deliveries", &page, &forged).await;
    assert_eq!(status, 403, "{answer}");
    let replay = [
        ("source", "stripe"),
        ("event_id", "evt_viewer"),
        ("idempotency_key", "k-f2"),
    ];
    let (status, _) = console.post("/console/replay", &page, &replay).await;
    assert_eq!(status, 403);
    // A bulk action: the viewer may preview it, not start it.
    let (_, bulk_page) = console.get("/console/bulk").await;
    let bulk = [("action", "requeue"), ("destination", "app")];
    let (status, preview) = console
        .post("/console/bulk/preview", &bulk_page, &bulk)
        .await;
    assert_eq!(status, 200, "{preview}");
    assert!(
        preview.contains("1</strong> dead letters match"),
        "{preview}"
    );
    assert!(preview.contains("needs the operator role") && !preview.contains("Confirm"));
    let started = [
        ("action", "requeue"),
        ("destination", "app"),
        ("idempotency_key", "k-f3"),
    ];
    let (status, _) = console.post("/console/bulk", &bulk_page, &started).await;
    assert_eq!(status, 403);
    // Nothing changed; each refusal is in the trail, under the viewer's name.
    assert_eq!(status_of(&app, id).await, "dead");
    let refused = audit(&app, "outcome=refused&operator=vera").await;
    let mut actions: Vec<(&str, &str)> = refused
        .iter()
        .map(|row| {
            (
                row["action"].as_str().unwrap_or(""),
                row["surface"].as_str().unwrap_or(""),
            )
        })
        .collect();
    actions.sort_unstable();
    assert_eq!(
        actions,
        [
            ("bulk_requeue", "console"),
            ("discard", "api"),
            ("reload", "api"),
            ("replay", "api"),
            ("replay", "api"),
            ("replay", "console"),
            ("requeue", "api"),
            ("requeue", "console"),
        ]
    );
    assert!(refused.iter().all(|row| row["role"] == "viewer"
        && row["result"] == "needs the operator role"
        || row["action"] == "reload"));
    assert!(refused.iter().all(|row| row["client"] == "127.0.0.1"));
}

async fn each_action_leaves_one_record_however_often_its_key_is_sent(backend: Backend) {
    let server = application_answering(422).await;
    let app = Arc::new(app_with_operators(backend, &server).await);
    let first = dead_letter(&app, "evt_once_a").await;
    let second = dead_letter(&app, "evt_once_b").await;
    let replay = json!({"events": [{"source": "stripe", "event_id": "evt_once_a"}]});
    let calls = [
        (
            "/admin/deliveries/requeue",
            json!({"ids": [first]}),
            "key-requeue",
            "requeue",
        ),
        (
            "/admin/deliveries/discard",
            json!({"ids": [second]}),
            "key-discard",
            "discard",
        ),
        ("/admin/replay", replay, "key-replay", "replay"),
    ];
    for (path, body, key, action) in calls {
        let sent: Vec<_> = (0..20)
            .map(|_| {
                let (app, body) = (app.clone(), body.clone());
                tokio::spawn(
                    async move { app.admin_as(OPERATOR, path, Some(&body), Some(key)).await },
                )
            })
            .collect();
        let mut first_answers = 0;
        for reply in sent {
            let reply = reply.await.expect("a call");
            // A concurrent retry may be told the first is still running (409); every
            // other answer is the one stored.
            assert!([200, 409].contains(&reply.status), "{}", reply.text());
            first_answers += usize::from(reply.status == 200 && !reply.replayed());
        }
        assert_eq!(first_answers, 1, "{action} ran once");
        let rows = audit(&app, &format!("action={action}&operator=otto")).await;
        assert_eq!(rows.len(), 1, "{action}: {rows:?}");
        let row = &rows[0];
        assert_eq!(row["idempotency_key"], key);
        assert_eq!(
            (row["role"].as_str(), row["outcome"].as_str()),
            (Some("operator"), Some("done"))
        );
        assert!(
            row["result"].as_str().unwrap_or("").starts_with("200: "),
            "{row}"
        );
        assert!(
            row["parameters"]
                .as_str()
                .unwrap_or("")
                .contains("evt_once_a")
                || action != "replay"
        );
        assert!(row["request_id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    assert_eq!(status_of(&app, second).await, "discarded");
    // `inlet audit` reads the same trail through the API.
    let (code, out, err) = app
        .run_cli_with_token(&["audit", "--operator", "otto", "--limit", "2"], VIEWER)
        .await;
    assert_eq!(code, Some(0), "{err}");
    let printed: Value = serde_json::from_str(&out).expect("JSON");
    let actions: Vec<&str> = printed["audit"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["action"].as_str())
        .collect();
    assert_eq!(actions, ["replay", "discard"], "newest first, two per page");
    assert!(printed["next_cursor"].is_string());
}

async fn an_action_whose_audit_row_cannot_be_written_changes_nothing(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_with_operators(backend, &server).await;
    let id = dead_letter(&app, "evt_unwritten").await;
    let deliveries = app.count_deliveries().await;
    app.faults.fail_audit_writes(true);
    let ids = json!({"ids": [id]});
    let reply = app
        .admin_as(
            OPERATOR,
            "/admin/deliveries/requeue",
            Some(&ids),
            Some("k-fail"),
        )
        .await;
    assert!(reply.status >= 500, "{}", reply.text());
    let replay = json!({"events": [{"source": "stripe", "event_id": "evt_unwritten"}]});
    let reply = app
        .admin_as(
            OPERATOR,
            "/admin/replay",
            Some(&replay),
            Some("k-fail-replay"),
        )
        .await;
    assert!(reply.status >= 500, "{}", reply.text());
    // A reload whose row cannot be written is not applied.
    let text = app.config_text();
    app.write_config(&text.replace(VIEWER, "viewer-token-vera-rotated-0123"));
    let reply = app
        .admin_as(ADMIN, "/admin/reload", Some(&json!({})), None)
        .await;
    reply.assert_problem(503, "database_unavailable");
    assert!(reply.header("retry-after").is_some());
    app.admin_as(VIEWER, "/admin/events", None, None)
        .await
        .assert_status(200);
    // So is a sign-in.
    let signed_in = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
        .post(format!("{}/console/login", app.address))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={OPERATOR}"))
        .send()
        .await
        .expect("an answer");
    assert!(signed_in.status().as_u16() >= 500);
    assert!(signed_in.headers().get("set-cookie").is_none());
    assert_eq!(status_of(&app, id).await, "dead");
    assert_eq!(
        app.count_deliveries().await,
        deliveries,
        "no replayed delivery"
    );
    app.faults.fail_audit_writes(false);
    assert!(audit(&app, "").await.is_empty(), "nothing was recorded");
    // The same key works once the trail can be written: nothing was stored under it.
    app.admin_as(
        OPERATOR,
        "/admin/deliveries/requeue",
        Some(&ids),
        Some("k-fail"),
    )
    .await
    .assert_status(200);
    assert_eq!(audit(&app, "action=requeue").await.len(), 1);
}

async fn rotating_one_operators_token_ends_only_their_sessions(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_with_operators(backend, &server).await;
    let (vera, otto) = (
        Console::sign_in(&app, VIEWER).await,
        Console::sign_in(&app, OPERATOR).await,
    );
    assert_eq!(vera.get("/console").await.0, 200);
    assert_eq!(otto.get("/console").await.0, 200);
    // Sessions are keyed by the server secret in the database: another instance (or
    // a restart) accepts them.
    let other = app
        .another_instance(TestOptions {
            operators: OPERATORS,
            ..Default::default()
        })
        .await;
    let on_other = Console {
        client: otto.client.clone(),
        base: other.address.clone(),
        cookie: otto.cookie.clone(),
    };
    assert_eq!(
        on_other.get("/console").await.0,
        200,
        "another instance shares sessions"
    );
    let text = app.config_text();
    app.write_config(&text.replace(VIEWER, "viewer-token-vera-rotated-0123"));
    let reply = app
        .admin_as(ADMIN, "/admin/reload", Some(&json!({})), None)
        .await;
    reply.assert_status(200);
    assert_eq!(
        reply.json()["changes"]["operators"]["changed"],
        json!(["vera"])
    );
    let (status, _) = vera.get("/console").await;
    assert_eq!(status, 303, "vera's session ended with her token");
    assert_eq!(otto.get("/console").await.0, 200, "otto's did not");
    app.admin_as(VIEWER, "/admin/events", None, None)
        .await
        .assert_status(401);
    let reloads = audit(&app, "action=reload").await;
    assert_eq!(reloads.len(), 1);
    assert!(reloads[0]["result"]
        .as_str()
        .unwrap_or("")
        .contains("operators changed: vera"));
    let sign_ins = audit(&app, "action=sign_in").await;
    assert_eq!(sign_ins.len(), 2, "{sign_ins:?}");
}

crate::on_both_backends!(
    a_viewer_reads_but_every_change_is_refused_and_recorded,
    each_action_leaves_one_record_however_often_its_key_is_sent,
    an_action_whose_audit_row_cannot_be_written_changes_nothing,
    rotating_one_operators_token_ends_only_their_sessions,
    the_audit_trail_is_swept_after_its_retention,
    removed_operators_sessions_expired_sessions_and_old_bulk_actions_are_swept,
);

/// With `admin.bind`, the webhook listener serves webhooks and health only; the operator
/// surface (API, console, metrics, the OpenAPI document) is on its own listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_admin_bind_the_webhook_port_serves_only_webhooks_and_health() {
    let options = TestOptions {
        operators: "[admin]\nbind = \"127.0.0.1:0\"\n",
        ..Default::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    let admin = app.admin_address.clone().expect("an operator listener");
    for path in [
        "/admin/events",
        "/console",
        "/console/login",
        "/metrics",
        "/openapi.json",
    ] {
        let reply = app.get(path).await;
        reply.assert_problem(404, "not_found");
        let there = reqwest::Client::new()
            .get(format!("{admin}{path}"))
            .bearer_auth(crate::helpers::OPERATOR_TOKEN)
            .send()
            .await
            .expect("an answer");
        assert_eq!(
            there.status().as_u16(),
            200,
            "{path} on the operator listener"
        );
    }
    app.get("/healthz").await.assert_status(200);
    app.post_stripe(&stripe_event("evt_public", "charge.succeeded", "ch_1"))
        .await
        .assert_status(200);
    let webhook = reqwest::Client::new()
        .post(format!("{admin}/webhooks/stripe"))
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(
        webhook.status().as_u16(),
        404,
        "no webhooks on the operator listener"
    );
    let both = "[admin]\nbind = \"127.0.0.1:0\"\n[console]\nbind = \"127.0.0.1:0\"\n";
    let text = format!(
        "[operator]\ntoken = \"{}\"\n{both}",
        crate::helpers::OPERATOR_TOKEN
    );
    let error =
        inlet::config::Settings::from_toml(&text).expect_err("two listeners for the console");
    assert!(error.to_string().contains("console.bind"), "{error}");
}

/// A client whose requests come from 127.0.0.`last` (the limiter counts by address),
/// following no redirect.
fn from_address(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, last]))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

/// With `operator.lockout_after = 5`, five wrong tokens in a row are free at the API, the
/// sixth makes the address wait and the next is refused for it; a console sign-in with no token is `401` and never
/// counts, so after many of them a right token still signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockout_after_sets_the_free_wrong_tokens_and_no_token_never_counts() {
    let options = TestOptions {
        lockout_after: Some(5),
        ..TestOptions::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    let (guesser, signer) = (from_address(3), from_address(4));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let response = guesser
            .get(format!("{}/admin/events", app.address))
            .bearer_auth("a-wrong-guess-of-the-token-000")
            .send()
            .await
            .expect("an answer");
        statuses.push(response.status().as_u16());
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 401, 401, 429, 429],
        "{statuses:?}"
    );
    let sign_in = |token: &'static str| {
        signer
            .post(format!("{}/console/login", app.address))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=%2Fconsole"))
            .send()
    };
    for _ in 0..10 {
        let refused = sign_in("").await.expect("an answer");
        assert_eq!(refused.status().as_u16(), 401);
        let page = refused.text().await.unwrap_or_default();
        assert!(page.contains("Enter an operator"), "{page}");
    }
    let signed_in = sign_in(crate::helpers::OPERATOR_TOKEN)
        .await
        .expect("an answer");
    assert_eq!(signed_in.status().as_u16(), 303, "no token never counted");
}

/// `operator.lockout_after` sets how many wrong tokens in a row are free: 1 to 1000.
#[test]
fn lockout_after_is_one_to_a_thousand() {
    let with = |n: &str| {
        format!(
            "[operator]\ntoken = \"{}\"\nlockout_after = {n}\n",
            crate::helpers::OPERATOR_TOKEN
        )
    };
    for wrong in ["0", "1001"] {
        let error = inlet::config::Settings::from_toml(&with(wrong)).expect_err(wrong);
        assert!(
            error.to_string().contains("operator.lockout_after"),
            "{error}"
        );
    }
    let settings = inlet::config::Settings::from_toml(&with("50")).expect("50");
    assert_eq!(settings.operator.lockout_after, 50);
    let unset = with("3").replace("lockout_after = 3\n", "");
    let default = inlet::config::Settings::from_toml(&unset).expect("no lockout_after");
    assert_eq!(default.operator.lockout_after, 3);
}

/// Ten wrong bearer tokens from one address make it wait (429, Retry-After, counted);
/// the right token from another address goes through at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_slow_their_address_and_no_other() {
    let app = spawn_app_with(Backend::Sqlite, TestOptions::default()).await;
    let (guesser, operator) = (from_address(1), from_address(2));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let response = guesser
            .get(format!("{}/admin/events", app.address))
            .bearer_auth("a-wrong-guess-of-the-token-000")
            .send()
            .await
            .expect("an answer");
        let status = response.status().as_u16();
        if status == 429 {
            let wait: u64 = response.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=30).contains(&wait));
            let body: Value =
                serde_json::from_str(&response.text().await.unwrap_or_default()).expect("JSON");
            assert_eq!(body["reason"], "too_many_attempts");
        }
        statuses.push(status);
    }
    // Three free failures, the fourth starts a wait (1 s, doubling) that the next ones
    // meet.
    assert_eq!(&statuses[..4], [401; 4], "{statuses:?}");
    assert_eq!(statuses[4], 429, "{statuses:?}");
    let right = crate::helpers::OPERATOR_TOKEN;
    let served = operator
        .get(format!("{}/admin/events", app.address))
        .bearer_auth(right)
        .send()
        .await
        .unwrap();
    assert_eq!(served.status().as_u16(), 200);
    // A request without a token guesses nothing: 401, even from the waiting address.
    let tokenless = guesser
        .get(format!("{}/admin/events", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(tokenless.status().as_u16(), 401);
    let refused = crate::helpers::metric(
        &app,
        "inlet_operator_auth_refused_total{surface=\"api\",reason=\"waiting\"}",
    )
    .await;
    assert!(refused >= 1.0, "{refused}");
}

/// A client that waits exactly the `Retry-After` it was told is served: what is left of
/// an address's wait is rounded up, never down (1.5 s left is `2`, not `1`, which would
/// be refused again). At the API and at the console's sign-in alike, on the instance's
/// clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_the_advertised_retry_after_is_enough() {
    let options = TestOptions {
        lockout_after: Some(1),
        clock_stopped: true,
        ..TestOptions::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    let client = from_address(5);
    let ask = |token: &'static str| {
        client
            .get(format!("{}/admin/events", app.address))
            .bearer_auth(token)
            .send()
    };
    let sign_in = || {
        client
            .post(format!("{}/console/login", app.address))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!(
                "token={}&next=%2Fconsole",
                crate::helpers::OPERATOR_TOKEN
            ))
            .send()
    };
    let wrong = "a-wrong-guess-of-the-token-000";
    let status = |response: reqwest::Response| response.status().as_u16();
    // One free failure; the second starts a 1 s wait, the third (once it is over) 2 s.
    assert_eq!(status(ask(wrong).await.expect("an answer")), 401);
    assert_eq!(status(ask(wrong).await.expect("an answer")), 401);
    app.clock.advance(chrono::Duration::seconds(1));
    assert_eq!(status(ask(wrong).await.expect("an answer")), 401);
    app.clock.advance(chrono::Duration::milliseconds(500));
    let retry_after = |response: &reqwest::Response| -> i64 {
        let header = response.headers().get("retry-after");
        let header = header.and_then(|v| v.to_str().ok()).unwrap_or_default();
        header
            .parse()
            .unwrap_or_else(|_| panic!("Retry-After {header:?}"))
    };
    let refused = ask(crate::helpers::OPERATOR_TOKEN)
        .await
        .expect("an answer");
    assert_eq!(refused.status().as_u16(), 429);
    let wait = retry_after(&refused);
    assert_eq!(wait, 2, "1.5 s left, rounded up");
    let page = sign_in().await.expect("an answer");
    assert_eq!(page.status().as_u16(), 429);
    assert_eq!(retry_after(&page), 2);
    assert!(page
        .text()
        .await
        .unwrap_or_default()
        .contains("Try again in 2 s"));
    app.clock.advance(chrono::Duration::seconds(wait));
    assert_eq!(
        status(
            ask(crate::helpers::OPERATOR_TOKEN)
                .await
                .expect("an answer")
        ),
        200
    );
    assert_eq!(status(sign_in().await.expect("an answer")), 303);
}

/// Audit rows outlive events but not `retention.audit`: the sweeper deletes them after it.
/// The operators who opened each console session row.
async fn session_rows(app: &TestApp) -> Vec<Option<String>> {
    use diesel::prelude::*;
    use inlet::db::schema::console_sessions;
    let mut conn = app.direct_connection();
    tokio::task::spawn_blocking(move || {
        console_sessions::table
            .order(console_sessions::operator)
            .select(console_sessions::operator)
            .load::<Option<String>>(&mut conn)
            .expect("the session rows")
    })
    .await
    .expect("read")
}

/// A reload that removes an operator deletes their session rows at once (their cookies
/// were refused already); the sweeper deletes expired session rows — nobody need sign in
/// or out for it — and bulk actions finished before `retention.audit`.
async fn removed_operators_sessions_expired_sessions_and_old_bulk_actions_are_swept(
    backend: Backend,
) {
    let server = application_answering(200).await;
    let app = app_with_operators(backend, &server).await;
    let vera = Console::sign_in(&app, VIEWER).await;
    Console::sign_in(&app, OPERATOR).await;
    assert_eq!(
        session_rows(&app).await,
        [Some("otto".to_owned()), Some("vera".to_owned())]
    );
    let without_vera = app.config_text().replace(
        "[[operators]]\nname = \"vera\"\nrole = \"viewer\"\ntoken = \"viewer-token-vera-0123456789\"\n",
        "",
    );
    app.write_config(&without_vera);
    app.admin_as(ADMIN, "/admin/reload", Some(&json!({})), None)
        .await
        .assert_status(200);
    assert_eq!(session_rows(&app).await, [Some("otto".to_owned())]);
    assert_eq!(vera.get("/console").await.0, 303, "her cookie is refused");

    let bulk = json!({ "action": "requeue", "filter": { "destination": "app" } });
    let created = app
        .admin_as(OPERATOR, "/admin/bulk", Some(&bulk), Some("b"))
        .await;
    created.assert_status(202);
    let id = created.json()["action"]["id"].clone();
    eventually("the bulk action done", || async {
        let action = app
            .admin_as(ADMIN, &format!("/admin/bulk/{id}"), None, None)
            .await;
        action.json()["status"] == "done"
    })
    .await;
    // A day later the session has expired; 401 days later the action is past the trail's.
    app.clock.advance(chrono::Duration::days(1));
    let swept = app.sweep(false).await;
    assert_eq!((swept.sessions, swept.bulk_actions), (1, 0), "{swept:?}");
    assert!(session_rows(&app).await.is_empty());
    app.clock.advance(chrono::Duration::days(400));
    assert_eq!(app.sweep(true).await.bulk_actions, 1);
    assert_eq!(app.sweep(false).await.bulk_actions, 1);
    let listed = app.admin_as(ADMIN, "/admin/bulk", None, None).await.json();
    assert_eq!(listed["actions"], json!([]), "{listed}");
}

async fn the_audit_trail_is_swept_after_its_retention(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_with_operators(backend, &server).await;
    let id = dead_letter(&app, "evt_swept").await;
    app.admin_as(
        OPERATOR,
        "/admin/deliveries/requeue",
        Some(&json!({"ids": [id]})),
        Some("k"),
    )
    .await
    .assert_status(200);
    app.clock.advance(chrono::Duration::days(399));
    assert_eq!(app.sweep(false).await.audit, 0);
    assert_eq!(audit(&app, "").await.len(), 1);
    app.clock.advance(chrono::Duration::days(2));
    assert_eq!(app.sweep(false).await.audit, 1);
    eventually("the trail is empty", || async {
        audit(&app, "").await.is_empty()
    })
    .await;
}
