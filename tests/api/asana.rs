//! Asana, end to end on both backends and across two instances on one database: the
//! webhook's creation handshake (`X-Hook-Secret`, echoed) stores the secret once — of
//! concurrent handshakes exactly one — a later handshake is refused `409` without changing
//! it, every later request is verified with it (`X-Hook-Signature`, hex HMAC-SHA256 of the
//! body) on every instance, a retry gets the stored answer, each event reaches the
//! application once, and an operator's clear (admin API, Idempotency-Key, audited) makes
//! room for a new webhook's handshake. The secret is never shown.

use crate::helpers::{spawn_app_with, Backend, Reply, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use crate::providers::headers_for;
use std::sync::Arc;

on_both_backends!(
    the_handshake_stores_the_secret_that_verifies_every_later_request,
    of_concurrent_handshakes_on_two_instances_exactly_one_is_stored,
    the_command_line_sends_with_the_stored_secret_lists_and_clears_it,
);

/// The application's Standard Webhooks secret.
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The secret of Asana's documented example handshake.
const FIRST: &str = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
/// Another webhook's (or an intruder's) secret.
const SECOND: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

fn options(application: Option<&str>) -> TestOptions {
    let destination = application.map_or_else(String::new, |url| {
        format!("[[sources.destinations]]\nurl = \"{url}\"\nsecret = \"{APP_SECRET}\"\n")
    });
    TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"asana\"\nscheme = \"asana\"\n{destination}"
        ),
        ..Default::default()
    }
}

/// Asana's handshake: an empty POST with the secret in `X-Hook-Secret`.
async fn handshake(app: &TestApp, secret: &str) -> Reply {
    app.post_webhook("asana", b"", &[("X-Hook-Secret", secret)])
        .await
}

/// An Asana body: one task change, `n` telling bodies apart.
fn events(n: u32) -> Vec<u8> {
    serde_json::json!({"events": [{
        "user": {"gid": "1123", "resource_type": "user"},
        "created_at": format!("2026-12-04T10:00:0{n}.000Z"),
        "action": "changed",
        "resource": {"gid": "1201", "resource_type": "task"},
        "parent": null,
        "change": {"field": "completed", "action": "changed"},
    }]})
    .to_string()
    .into_bytes()
}

/// `body` as Asana signs it with `secret`: `X-Hook-Signature`.
fn signed(app: &TestApp, body: &[u8], secret: &str) -> Vec<(String, String)> {
    headers_for(app, "asana", body, secret, 0)
}

async fn post_signed(app: &TestApp, body: &[u8], secret: &str) -> Reply {
    app.post_webhook("asana", body, &signed(app, body, secret))
        .await
}

/// The source's secret is `secret`: a request signed with it is accepted (or answered)
/// and one signed with `other` refused, on this instance.
async fn verifies_with(app: &TestApp, n: u32, secret: &str, other: &str) {
    let body = events(n);
    post_signed(app, &body, other)
        .await
        .assert_problem(401, "bad_signature");
    post_signed(app, &body, secret).await.assert_status(200);
}

async fn clear(app: &TestApp, key: &str) -> Reply {
    app.admin(
        "/admin/hook-secrets/clear",
        Some(&serde_json::json!({"source": "asana"})),
        Some(key),
    )
    .await
}

async fn the_handshake_stores_the_secret_that_verifies_every_later_request(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let url = format!("{}/events", application.uri());
    let first = spawn_app_with(backend, options(Some(&url))).await;
    let second = first.another_instance(options(Some(&url))).await;
    let body = events(1);

    // Before any handshake there is no secret to verify with.
    post_signed(&second, &body, FIRST)
        .await
        .assert_problem(401, "bad_signature");

    let taken = handshake(&first, FIRST).await;
    taken.assert_status(200);
    assert_eq!(taken.header("x-hook-secret"), Some(FIRST));
    assert_eq!(taken.json()["outcome"], "handshake");
    // Sent again (its answer lost): the same secret, echoed; nothing changes.
    let again = handshake(&second, FIRST).await;
    again.assert_status(200);
    assert_eq!(again.header("x-hook-secret"), Some(FIRST));
    // Another secret, unsigned, on the other instance: refused, nothing echoed or stored.
    let refused = handshake(&second, SECOND).await;
    refused.assert_problem(409, "hook_secret_held");
    assert_eq!(refused.header("x-hook-secret"), None);
    handshake(&first, "short")
        .await
        .assert_problem(400, "malformed_signature");

    // The other instance verifies with the secret the first stored.
    let accepted = post_signed(&second, &body, FIRST).await;
    accepted.assert_status(200);
    assert_eq!(
        accepted.json()["outcome"],
        "accepted",
        "{}",
        accepted.text()
    );
    let event_id = accepted.json()["event_id"]
        .as_str()
        .expect("an event id")
        .to_owned();
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    assert_eq!(event_id, digest, "the event is the body's digest");
    // Asana's retry, on the first instance: the stored answer, byte for byte.
    let retried = post_signed(&first, &body, FIRST).await;
    assert!(retried.replayed());
    assert_eq!(retried.body, accepted.body);
    verifies_with(&first, 2, FIRST, SECOND).await;
    refusals(&first, &body).await;
    // A heartbeat: no events.
    post_signed(&first, br#"{"events":[]}"#, FIRST)
        .await
        .assert_status(200);

    nothing_shows_the_secret(&first, &event_id).await;
    cleared_then_a_new_handshake_is_taken(&first, &second).await;

    // The events signed with FIRST (1, 2, the heartbeat, 7) and with SECOND (3), each
    // delivered once.
    let per_key = crate::helpers::each_delivered_once(&first, &application, 5).await;
    assert!(
        per_key.contains_key(&format!("asana:{event_id}")),
        "{per_key:?}"
    );
}

/// A tampered body, a missing or malformed signature: refused.
async fn refusals(app: &TestApp, body: &[u8]) {
    let headers = signed(app, body, FIRST);
    let mut tampered = body.to_vec();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    app.post_webhook("asana", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    app.post_webhook("asana", body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook("asana", body, &[("X-Hook-Signature", "zz")])
        .await
        .assert_problem(400, "malformed_signature");
}

/// The admin API lists when the secret was established, never the secret; the stored
/// headers of an event redact a copy of it.
async fn nothing_shows_the_secret(app: &TestApp, event_id: &str) {
    let body = events(7);
    let mut headers = signed(app, &body, FIRST);
    headers.push(("X-Forwarded-Hook".to_owned(), FIRST.to_owned()));
    let copied = app.post_webhook("asana", &body, &headers).await;
    copied.assert_status(200);
    let copied_id = copied.json()["event_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let listed = app.admin("/admin/hook-secrets", None, None).await;
    listed.assert_status(200);
    let rows = listed.json()["hook_secrets"].clone();
    assert_eq!(rows[0]["source"], "asana", "{rows}");
    assert!(rows[0]["established_at"].is_string(), "{rows}");
    for path in [
        "/admin/hook-secrets".to_owned(),
        format!("/admin/events/asana/{event_id}"),
        format!("/admin/events/asana/{copied_id}"),
    ] {
        let shown = app.admin(&path, None, None).await;
        shown.assert_status(200);
        assert!(!shown.text().contains(FIRST), "{path}: {}", shown.text());
    }
}

/// An operator clears the secret (once per key, audited); the source refuses what the
/// old secret signs, and a new webhook's handshake is taken on either instance.
async fn cleared_then_a_new_handshake_is_taken(first: &TestApp, second: &TestApp) {
    app_refuses_a_clear_without_its_key(first).await;
    let cleared = clear(first, "clear-1").await;
    cleared.assert_status(200);
    assert_eq!(cleared.json()["cleared"], true, "{}", cleared.text());
    assert!(!cleared.text().contains(FIRST));
    let again = clear(second, "clear-1").await;
    assert!(again.replayed());
    assert_eq!(again.body, cleared.body);
    let none_left = clear(second, "clear-2").await;
    assert_eq!(none_left.json()["cleared"], false);

    post_signed(second, &events(3), FIRST)
        .await
        .assert_problem(401, "bad_signature");
    let taken = handshake(second, SECOND).await;
    taken.assert_status(200);
    assert_eq!(taken.header("x-hook-secret"), Some(SECOND));
    verifies_with(first, 3, SECOND, FIRST).await;

    let audit = first
        .admin("/admin/audit?action=clear_hook_secret", None, None)
        .await;
    let rows = audit.json()["audit"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rows.len(), 2, "{}", audit.text());
}

async fn app_refuses_a_clear_without_its_key(app: &TestApp) {
    app.admin(
        "/admin/hook-secrets/clear",
        Some(&serde_json::json!({"source": "asana"})),
        None,
    )
    .await
    .assert_problem(400, "idempotency_key_missing");
    app.admin(
        "/admin/hook-secrets/clear",
        Some(&serde_json::json!({"source": "stripe"})),
        Some("clear-stripe"),
    )
    .await
    .assert_problem(400, "invalid_request");
}

/// 24 handshakes with different secrets, half on each instance, all at once: exactly one
/// is stored and echoed, the others refused; every later request, on either instance, is
/// verified against the one stored.
async fn of_concurrent_handshakes_on_two_instances_exactly_one_is_stored(backend: Backend) {
    let first = Arc::new(spawn_app_with(backend, options(None)).await);
    let second = Arc::new(first.another_instance(options(None)).await);
    let secrets: Vec<String> = (0..24)
        .map(|i| format!("{:064x}", 0xa5a5_0000_u64 + i))
        .collect();
    let mut racing = Vec::new();
    for (i, secret) in secrets.iter().enumerate() {
        let app = if i % 2 == 0 { &first } else { &second }.clone();
        let secret = secret.clone();
        racing.push(tokio::spawn(async move {
            let reply = handshake(&app, &secret).await;
            (secret, reply)
        }));
    }
    let mut stored = Vec::new();
    for race in racing {
        let (secret, reply) = race.await.expect("a handshake");
        match reply.status {
            200 => {
                assert_eq!(reply.header("x-hook-secret"), Some(secret.as_str()));
                stored.push(secret);
            }
            _ => reply.assert_problem(409, "hook_secret_held"),
        }
    }
    assert_eq!(stored.len(), 1, "exactly one handshake is taken");
    let winner = &stored[0];
    for (n, app) in [&first, &second].into_iter().enumerate() {
        for secret in &secrets {
            let body = events(n as u32);
            let reply = post_signed(app, &body, secret).await;
            match secret == winner {
                true => reply.assert_status(200),
                false => reply.assert_problem(401, "bad_signature"),
            }
        }
    }
}

/// `inlet send` signs for an asana source without configured secrets with the secret
/// given in INLET_SIGNING_KEY (and says so without it); `inlet hook-secrets list` shows
/// when the secret was established, never the secret; `inlet hook-secrets clear` clears it.
async fn the_command_line_sends_with_the_stored_secret_lists_and_clears_it(backend: Backend) {
    let app = spawn_app_with(backend, options(None)).await;
    handshake(&app, FIRST).await.assert_status(200);
    let tag = format!("{backend:?}");
    let dir = std::env::temp_dir().join(format!("inlet-asana-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("inlet.toml");
    let body_file = dir.join("events.json");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite://{}\"\n[[sources]]\nname = \"asana\"\nscheme = \"asana\"\n",
            dir.join("unused.db").display()
        ),
    )
    .expect("config");
    std::fs::write(&body_file, events(4)).expect("body");
    let url = format!("{}/webhooks/asana", app.address);
    let run = move |with_key: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"));
        command
            .arg("--config")
            .arg(&config)
            .args(["send", "--source", "asana", "--url", &url, "--body"])
            .arg(&body_file)
            .env_remove("INLET_SIGNING_KEY");
        if with_key {
            command.env("INLET_SIGNING_KEY", FIRST);
        }
        command.output().expect("run inlet")
    };
    let (without, with) = tokio::task::spawn_blocking(move || (run(false), run(true)))
        .await
        .expect("task");
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(!without.status.success());
    assert!(stderr.contains("--private-key"), "{stderr}");
    let stdout = String::from_utf8_lossy(&with.stdout);
    assert!(
        with.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert!(stdout.contains("\"outcome\":\"accepted\""), "{stdout}");
    assert!(!stdout.contains(FIRST), "{stdout}");

    let (code, listed, _) = app.run_cli(&["hook-secrets", "list"]).await;
    assert_eq!(code, Some(0), "{listed}");
    assert!(listed.contains("\"established_at\": \"20"), "{listed}");
    assert!(!listed.contains(FIRST), "{listed}");
    let (code, cleared, _) = app
        .run_cli(&["hook-secrets", "clear", "--source", "asana"])
        .await;
    assert_eq!(code, Some(0), "{cleared}");
    assert!(cleared.contains("\"cleared\": true"), "{cleared}");
    handshake(&app, SECOND).await.assert_status(200);
    let _ = std::fs::remove_dir_all(&dir);
}
