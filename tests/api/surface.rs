//! The edges an outside attacker probes: how many signatures one request may make Inlet
//! check, credentials that arrive under unexpected header names, caching of operator
//! answers, event ids that cannot be linked to, methods under `/console`, console sessions
//! after signing out, and what malformed requests write to the log.

use crate::helpers::{
    holds_within, spawn_app, spawn_app_with, spawn_database_holder, stripe_event, stripe_signature,
    Backend, Reply, TestApp, TestOptions, OPERATOR_TOKEN, STRIPE_SECRET,
};
use crate::on_both_backends;
use diesel::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

on_both_backends!(
    a_signature_list_over_the_bound_is_refused_before_it_is_checked,
    credentials_under_other_header_names_are_stored_redacted,
    awkward_event_ids_round_trip_and_dot_segments_are_refused,
    a_copied_cookie_is_refused_after_sign_out_on_every_instance,
);

/// Signature entries accepted in one header (Inlet's `MAX_SIGNATURES`).
const BOUND: usize = 8;

fn header_with(headers: &[(String, String)], name: &str, value: String) -> Vec<(String, String)> {
    let mut headers = headers.to_vec();
    for (header, old) in &mut headers {
        if header.eq_ignore_ascii_case(name) {
            *old = value.clone();
        }
    }
    headers
}

/// A genuine signature listed after `wrong` well-formed wrong ones.
async fn standard_with_wrong_entries(app: &TestApp, id: &str, wrong: usize) -> Reply {
    let body = format!(r#"{{"type":"thing.happened","id":"{id}"}}"#);
    let headers = app.sign_for("standard", body.as_bytes(), id, None);
    let genuine = headers
        .iter()
        .find(|(name, _)| name == "webhook-signature")
        .map(|(_, value)| value.clone())
        .expect("a webhook-signature");
    // Well-formed entries of both kinds: 32-byte HMAC tags and 64-byte Ed25519 signatures.
    let mut list: Vec<String> = (0..wrong)
        .map(|i| match i % 2 {
            0 => format!("v1,{}", base64_of(&[i as u8; 32])),
            _ => format!("v1a,{}", base64_of(&[i as u8; 64])),
        })
        .collect();
    list.push(genuine);
    let headers = header_with(&headers, "webhook-signature", list.join(" "));
    app.post_webhook("standard", body.as_bytes(), &headers)
        .await
}

async fn stripe_with_wrong_entries(app: &TestApp, id: &str, wrong: usize) -> Reply {
    let body = crate::helpers::stripe_event(id, "charge.captured", "ch_bound");
    let genuine = stripe_signature(STRIPE_SECRET, &body, app.now().timestamp());
    let wrong: String = (0..wrong)
        .map(|i| format!(",v1={}", hex::encode([i as u8; 32])))
        .collect();
    app.post_webhook(
        "stripe",
        &body,
        &[("Stripe-Signature", format!("{genuine}{wrong}"))],
    )
    .await
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Up to the bound, a genuine signature among wrong ones verifies; one entry more, or the
/// 1,300 of the reported attack, is a 400 naming the bound — nothing is stored.
async fn a_signature_list_over_the_bound_is_refused_before_it_is_checked(backend: Backend) {
    let app = spawn_app(backend).await;
    standard_with_wrong_entries(&app, "msg_bound_ok", BOUND - 1)
        .await
        .assert_status(200);
    stripe_with_wrong_entries(&app, "evt_bound_ok", BOUND - 1)
        .await
        .assert_status(200);
    for wrong in [BOUND, 1_300] {
        let refused = standard_with_wrong_entries(&app, "msg_bound_over", wrong).await;
        refused.assert_problem(400, "malformed_signature");
        let detail = refused.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            detail.contains("webhook-signature") && detail.contains("more than 8 signatures"),
            "{detail}"
        );
        let refused = stripe_with_wrong_entries(&app, "evt_bound_over", wrong).await;
        refused.assert_problem(400, "malformed_signature");
        assert!(refused.text().contains("more than 8 signatures"));
    }
    assert_eq!(app.count_events().await, 2, "only the two within the bound");
}

const FORMS_TOKEN: &str = "forms-token-0123456789abcdef0123456789";
const LEGACY_CREDENTIALS: &str = "hooks:legacy-password-0123456789abcdef";

/// A `header_token` and a `basic` source, besides the usual ones.
fn token_sources() -> TestOptions {
    TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"forms\"\nscheme = \"header_token\"\n\
             token_header = \"X-Webhook-Token\"\nsecrets = [\"{FORMS_TOKEN}\"]\n\
             event_id = \"header:X-Delivery-Id\"\nreplay_horizon = \"1d\"\n\
             \n[[sources]]\nname = \"legacy\"\nscheme = \"basic\"\n\
             secrets = [\"{LEGACY_CREDENTIALS}\"]\nevent_id = \"json:/id\"\nreplay_horizon = \"1d\"\n"
        ),
        ..Default::default()
    }
}

/// The stored headers of an event, as the operator API shows them: name → value.
async fn stored_headers(app: &TestApp, path: &str) -> (String, Vec<(String, String)>) {
    let reply = app.admin(path, None, None).await;
    reply.assert_status(200);
    let headers = reply.json()["headers"]
        .as_array()
        .expect("stored headers")
        .iter()
        .map(|pair| {
            let text = |i: usize| pair[i].as_str().unwrap_or_default().to_owned();
            (text(0), text(1))
        })
        .collect();
    (reply.text(), headers)
}

fn value_of<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_str())
}

/// A credential copied under a header name that says nothing (a proxy's
/// `X-Forwarded-Hook-Key`, a sender's `X-Signature: Bearer …`, a gateway's copy of
/// `Authorization: Basic …`) is stored redacted like the header the scheme reads; other
/// headers are kept as sent.
async fn credentials_under_other_header_names_are_stored_redacted(backend: Backend) {
    let app = spawn_app_with(backend, token_sources()).await;
    let bearer = format!("Bearer {FORMS_TOKEN}");
    app.post_webhook(
        "forms",
        br#"{"form":"contact"}"#,
        &[
            ("X-Webhook-Token", FORMS_TOKEN),
            ("X-Forwarded-Hook-Key", FORMS_TOKEN),
            ("X-Signature", bearer.as_str()),
            ("X-Delivery-Id", "delivery-1"),
            ("X-Note", "kept as sent"),
        ],
    )
    .await
    .assert_status(200);
    let (text, headers) = stored_headers(&app, "/admin/events/forms/delivery-1").await;
    for name in ["x-webhook-token", "x-forwarded-hook-key", "x-signature"] {
        assert_eq!(
            value_of(&headers, name),
            Some("[redacted]"),
            "{name}: {text}"
        );
    }
    assert_eq!(value_of(&headers, "x-note"), Some("kept as sent"), "{text}");
    assert!(!text.contains(FORMS_TOKEN), "{text}");

    let basic = format!("Basic {}", base64_of(LEGACY_CREDENTIALS.as_bytes()));
    app.post_webhook(
        "legacy",
        br#"{"id":"evt_basic_1"}"#,
        &[
            ("Authorization", basic.as_str()),
            ("X-Original-Auth", basic.as_str()),
            ("Content-Type", "application/json"),
        ],
    )
    .await
    .assert_status(200);
    let (text, headers) = stored_headers(&app, "/admin/events/legacy/evt_basic_1").await;
    for name in ["authorization", "x-original-auth"] {
        assert_eq!(
            value_of(&headers, name),
            Some("[redacted]"),
            "{name}: {text}"
        );
    }
    assert_eq!(value_of(&headers, "content-type"), Some("application/json"));
    assert!(
        !text.contains(&basic[6..]) && !text.contains("legacy-password"),
        "{text}"
    );
}

/// A client that shows redirects instead of following them.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

async fn reply_of(response: reqwest::Response) -> Reply {
    Reply {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.bytes().await.expect("a body").to_vec(),
    }
}

/// Signs in to the console of the Inlet at `address` with the operator token: the
/// session cookie, as `name=value`.
async fn sign_in(address: &str) -> String {
    let response = no_redirects()
        .post(format!("{address}/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={OPERATOR_TOKEN}&next=%2Fconsole"))
        .send()
        .await
        .expect("a sign-in answer");
    assert_eq!(response.status().as_u16(), 303);
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a session cookie");
    cookie.split(';').next().unwrap_or_default().to_owned()
}

/// A console request with `cookie` (redirects not followed).
async fn console(address: &str, method: &str, path: &str, cookie: Option<&str>) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = no_redirects().request(method, format!("{address}{path}"));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    reply_of(request.send().await.expect("an answer")).await
}

/// `.` and `..` are refused at ingest (no URL can address them); an id with `/`, `%`,
/// `?`, `#` and a space is stored, opened through the operator API at its encoded path,
/// and linked from the console's listing to its page.
async fn awkward_event_ids_round_trip_and_dot_segments_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    for id in [".", ".."] {
        let refused = app
            .post_stripe(&stripe_event(id, "charge.captured", "ch_dot"))
            .await;
        refused.assert_problem(400, "invalid_event_id");
    }
    assert_eq!(app.count_events().await, 0);

    let id = "evt/1%2F x?#..";
    app.post_stripe(&stripe_event(id, "charge.captured", "ch_awkward"))
        .await
        .assert_status(200);
    let encoded = "evt%2F1%252F%20x%3F%23..";
    let shown = app
        .admin(&format!("/admin/events/stripe/{encoded}"), None, None)
        .await;
    shown.assert_status(200);
    assert_eq!(shown.json()["event"]["event_id"], id);

    let cookie = sign_in(&app.address).await;
    let listing = console(&app.address, "GET", "/console/events", Some(&cookie)).await;
    listing.assert_status(200);
    let href = format!("/console/events/stripe/{encoded}");
    assert!(
        listing.text().contains(&format!("href=\"{href}\"")),
        "{}",
        listing.text()
    );
    let page = console(&app.address, "GET", &href, Some(&cookie)).await;
    page.assert_status(200);
    assert!(page.text().contains(id), "{}", page.text());
}

/// Every answer under `/admin` — data, refusals, unknown paths — says `no-store`, as the
/// console's pages do; a console path asked with another method is `405` with `Allow`,
/// signed in or not, like the API's paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_answers_are_not_cached_and_console_methods_are_405() {
    let app = spawn_app(Backend::Sqlite).await;
    let unauthorized = app.get("/admin/events").await;
    let wrong_method = app.request("DELETE", "/admin/events").await;
    let unknown = app.admin("/admin/nothing-here", None, None).await;
    let missing = app.admin("/admin/events/stripe/evt_none", None, None).await;
    // Percent-encoded, the path still reaches the admin handlers: still not cached.
    let encoded = app.admin("/%61dmin/event%73", None, None).await;
    for (reply, status) in [
        (app.admin("/admin/events", None, None).await, 200),
        (encoded, 200),
        (app.admin("/admin/retention", None, None).await, 200),
        (unauthorized, 401),
        (wrong_method, 405),
        (unknown, 404),
        (missing, 404),
    ] {
        reply.assert_status(status);
        assert_eq!(reply.header("cache-control"), Some("no-store"), "{status}");
    }
    assert_eq!(app.get("/healthz").await.header("cache-control"), None);

    let cookie = sign_in(&app.address).await;
    for session in [None, Some(cookie.as_str())] {
        for (method, path, allow) in [
            ("DELETE", "/console/events", "GET"),
            ("POST", "/console/events/stripe/evt_1", "GET"),
            ("GET", "/console/logout", "POST"),
            ("PUT", "/console/deliveries", "GET, POST"),
            ("PATCH", "/console", "GET"),
        ] {
            let reply = console(&app.address, method, path, session).await;
            assert_eq!(reply.status, 405, "{method} {path}: {}", reply.text());
            assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
            assert_eq!(reply.header("cache-control"), Some("no-store"));
            assert!(
                reply.text().contains(&format!("use {allow}")),
                "{}",
                reply.text()
            );
        }
    }
    let unknown = console(&app.address, "GET", "/console/nothing-here", Some(&cookie)).await;
    unknown.assert_status(404);
    let stranger = console(&app.address, "GET", "/console/nothing-here", None).await;
    assert_eq!(stranger.status, 303, "a stranger is sent to sign in first");
    let page = console(&app.address, "GET", "/console/events", Some(&cookie)).await;
    assert_eq!(page.header("cache-control"), Some("no-store"));
}

/// A console form sent with `cookie`: `fields` URL-encoded.
async fn console_form(address: &str, path: &str, cookie: &str, fields: &str) -> Reply {
    let response = no_redirects()
        .post(format!("{address}{path}"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(fields.to_owned())
        .send()
        .await
        .expect("an answer");
    reply_of(response).await
}

/// The CSRF token of a console page's forms.
fn csrf_of(page: &str) -> String {
    let (_, rest) = page
        .split_once(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("no CSRF field in {page}"));
    rest.split('"').next().unwrap_or_default().to_owned()
}

fn assert_sent_to_sign_in(reply: &Reply, what: &str) {
    assert_eq!(reply.status, 303, "{what}: {}", reply.text());
    let location = reply.header("location").unwrap_or_default();
    assert!(location.starts_with("/console/login"), "{what}: {location}");
}

/// Signing out closes the session in the database: the cookie, copied before, is refused
/// by this instance and by another one on the same database — for pages and for forms —
/// while another session stays open. A session's row is swept once it has expired.
async fn a_copied_cookie_is_refused_after_sign_out_on_every_instance(backend: Backend) {
    let app = spawn_app(backend).await;
    let other = app.another_instance(TestOptions::default()).await;
    let copied = sign_in(&app.address).await;
    let kept = sign_in(&app.address).await;
    let page = console(&other.address, "GET", "/console/events", Some(&copied)).await;
    page.assert_status(200);
    let csrf = csrf_of(&page.text());

    let signed_out = console_form(
        &other.address,
        "/console/logout",
        &copied,
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(signed_out.header("location"), Some("/console/login"));
    assert!(signed_out
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=0")));
    for address in [&app.address, &other.address] {
        let page = console(address, "GET", "/console/events", Some(&copied)).await;
        assert_sent_to_sign_in(&page, "a page");
        let form = console_form(
            address,
            "/console/deliveries",
            &copied,
            &format!("csrf={csrf}&action=requeue&id=1&idempotency_key=copied-1"),
        )
        .await;
        assert_sent_to_sign_in(&form, "a form");
        console(address, "GET", "/console/events", Some(&kept))
            .await
            .assert_status(200);
    }
    let refused =
        crate::helpers::metric(&app, "inlet_console_refused_total{reason=\"signed_out\"}").await;
    assert!(refused >= 1.0, "{refused}");

    // Nine hours on (the sessions lasted eight), the next sign-in sweeps their rows.
    app.clock.advance(chrono::Duration::hours(9));
    let fresh = sign_in(&app.address).await;
    let expired = console(&app.address, "GET", "/console/events", Some(&kept)).await;
    assert_sent_to_sign_in(&expired, "an expired session");
    console(&app.address, "GET", "/console/events", Some(&fresh))
        .await
        .assert_status(200);
    let rows: i64 = app
        .with_conn(|c| {
            inlet::db::schema::console_sessions::table
                .count()
                .get_result(c)
        })
        .await;
    assert_eq!(rows, 1, "only the fresh session's row is left");
}

/// An `inlet serve` process with JSON logs, every line of which is kept.
struct LoggedProcess {
    child: std::process::Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl LoggedProcess {
    fn start(config: &std::path::Path) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(config)
            .env("INLET_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start inlet");
        let stdout = child.stdout.take().expect("stdout");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) {
                    if entry["fields"]["message"] == "inlet is listening" {
                        let _ = port_tx.send(entry["fields"]["port"].as_u64().unwrap_or(0));
                    }
                }
                kept.lock().expect("lines").push(line);
            }
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("inlet logs its port") as u16;
        Self { child, port, lines }
    }

    fn entries(&self) -> Vec<serde_json::Value> {
        let lines = self.lines.lock().expect("lines");
        lines
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for LoggedProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `bytes` on a connection of its own and reads the answer's status line.
async fn send_raw(port: u16, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    // The server may stop reading a head over its limit: a failed write still gets an answer.
    let _ = stream.write_all(bytes).await;
    let mut answer = vec![0; 64];
    let read = stream.read(&mut answer).await.unwrap_or(0);
    String::from_utf8_lossy(&answer[..read])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The number of connections the flood sends, and how many at once.
const MALFORMED: usize = 300;
const AT_ONCE: usize = 20;

/// Malformed requests over raw TCP (an unparsable request line, a broken header, a head
/// over the HTTP library's limit) are answered 400/431 and counted, and the log has no
/// ERROR for them: the whole flood is a WARN line or two, whose counts add up to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_counted_and_logged_as_warnings_at_a_bounded_rate() {
    let holder = spawn_database_holder(Backend::Sqlite).await;
    let dir = std::env::temp_dir().join(crate::helpers::unique_name());
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("inlet.toml");
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\nworkers = 2\n[database]\nurl = \"{}\"\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n",
        holder.database_url()
    );
    std::fs::write(&config, toml).expect("write config");
    let process = tokio::task::spawn_blocking(move || LoggedProcess::start(&config))
        .await
        .expect("start");
    let port = process.port;
    let too_large = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(140_000)
    );
    let semaphore = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..MALFORMED {
        let bytes = match i % 3 {
            0 => b"GARBAGE\r\n\r\n".to_vec(),
            1 => b"GET / HTTP/1.1\r\nHost: x\r\nBroken Header\r\n\r\n".to_vec(),
            _ => too_large.clone().into_bytes(),
        };
        let semaphore = semaphore.clone();
        flood.spawn(async move {
            let _permit = semaphore.acquire().await.expect("permit");
            (i % 3, send_raw(port, &bytes).await)
        });
    }
    while let Some(sent) = flood.join_next().await {
        let (kind, status) = sent.expect("a connection");
        let expected = if kind == 2 { "431" } else { "400" };
        assert!(status.contains(expected), "{kind}: {status}");
    }

    // The first complaint is logged at once, the rest in one line after the interval.
    let reported = |process: &LoggedProcess| -> u64 {
        process
            .entries()
            .iter()
            .filter(|e| e["target"] == "inlet::observability" && e["fields"]["count"].is_u64())
            .map(|e| e["fields"]["count"].as_u64().unwrap_or(0))
            .sum()
    };
    // Up to 30 s for the summary line; the assertion below shows the log if it never comes.
    holds_within(Duration::from_secs(30), || async {
        reported(&process) >= MALFORMED as u64
    })
    .await;
    assert_eq!(
        reported(&process),
        MALFORMED as u64,
        "{:#?}",
        process.entries()
    );
    let entries = process.entries();
    let errors: Vec<_> = entries.iter().filter(|e| e["level"] == "ERROR").collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let summaries: Vec<_> = entries
        .iter()
        .filter(|e| e["fields"]["count"].is_u64())
        .collect();
    assert!(
        (1..=3).contains(&summaries.len()) && summaries.iter().all(|e| e["level"] == "WARN"),
        "{summaries:#?}"
    );
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let counted = |kind: &str| -> f64 {
        let series = format!("inlet_http_protocol_errors_total{{kind=\"{kind}\"}}");
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series.as_str())?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(counted("malformed"), 200.0, "{metrics}");
    assert_eq!(counted("too_large"), 100.0, "{metrics}");
    drop(process);
    let _ = std::fs::remove_dir_all(&dir);
}
