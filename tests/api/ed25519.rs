//! The Ed25519 schemes end to end over HTTP on both backends: Discord interactions (an
//! interaction accepted, its duplicate answered from the store, tampering refused, the
//! PING answered PONG and never stored) and Standard Webhooks `v1a` (the same, and a
//! source holding a whsec_ secret and a whpk_ key accepting both kinds); and `inlet send`
//! signing with a private key taken from the environment.

use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ed25519_dalek::SigningKey;
use inlet::secret::Secret;
use inlet::signature::EventToSign;

on_both_backends!(
    discord_accepts_replays_and_refuses_tampering,
    discord_ping_is_answered_pong_not_stored,
    discord_interactions_are_answered_deferred_by_type,
    standard_v1a_accepts_replays_and_refuses_tampering,
    standard_source_accepts_v1_and_v1a_side_by_side,
    send_signs_with_the_private_key_from_the_environment,
);

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn key(byte: u8) -> SigningKey {
    SigningKey::from_bytes(&[byte; 32])
}

fn discord_public(key: &SigningKey) -> String {
    hex::encode(key.verifying_key().as_bytes())
}

fn discord_private(key: &SigningKey) -> String {
    hex::encode(key.to_bytes())
}

fn whpk(key: &SigningKey) -> String {
    format!("whpk_{}", BASE64.encode(key.verifying_key().as_bytes()))
}

fn whsk(key: &SigningKey) -> String {
    format!("whsk_{}", BASE64.encode(key.to_bytes()))
}

/// A discord source with a current and an old application key, a standard source with
/// public keys only, and one with a whsec_ secret and a whpk_ key.
async fn spawn_with_ed25519(backend: Backend) -> TestApp {
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"discord\"\nscheme = \"discord\"\n\
             secrets = [\"{}\", \"{}\"]\n\
             \n[[sources]]\nname = \"asym\"\nscheme = \"standard\"\nsecrets = [\"{}\"]\n\
             \n[[sources]]\nname = \"mixed\"\nscheme = \"standard\"\n\
             secrets = [\"{WHSEC}\", \"{}\"]\n",
            discord_public(&key(1)),
            discord_public(&key(2)),
            whpk(&key(3)),
            whpk(&key(4)),
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// `source`'s headers for `body`, signed with `signer` (a private key, or a whsec_
/// secret) `offset_secs` from the app's clock, with `id` where the scheme sends one.
fn signed(
    app: &TestApp,
    source: &str,
    body: &[u8],
    signer: &str,
    id: &str,
    offset_secs: i64,
) -> Vec<(String, String)> {
    let source = app.settings.source(source).expect("a source");
    let event = EventToSign {
        id: id.to_owned(),
        event_type: String::new(),
    };
    let at = app.now() + chrono::Duration::seconds(offset_secs);
    inlet::cli::signed_headers_with(source, &Secret::new(signer), body, at, &event)
}

fn interaction(id: &str, command: &str) -> Vec<u8> {
    serde_json::json!({
        "id": id,
        "application_id": "1300000000000000000",
        "type": 2,
        "token": format!("token-of-{id}"),
        "version": 1,
        "data": { "id": "1300000000000000001", "name": command, "type": 1 },
    })
    .to_string()
    .into_bytes()
}

async fn discord_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let body = interaction("1311111111111111111", "ping");
    let headers = signed(&app, "discord", &body, &discord_private(&key(1)), "", 0);
    let first = app.post_webhook("discord", &body, &headers).await;
    first.assert_status(200);
    assert!(!first.replayed());
    // Discord shows the user this answer: deferred, the application replies later.
    assert_eq!(first.body, br#"{"type":5}"#);
    let shown = app
        .admin("/admin/events/discord/1311111111111111111", None, None)
        .await
        .json();
    assert_eq!(shown["event"]["event_type"], "2");

    // The same interaction again, signed by the rotating-out key: the stored answer.
    let again_headers = signed(&app, "discord", &body, &discord_private(&key(2)), "", 1);
    let again = app.post_webhook("discord", &body, &again_headers).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let tampered = interaction("1311111111111111111", "pinh");
    app.post_webhook("discord", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    let other_app = signed(&app, "discord", &body, &discord_private(&key(9)), "", 0);
    app.post_webhook("discord", &body, &other_app)
        .await
        .assert_problem(401, "bad_signature");
    for offset in [-310, 310] {
        // Well past the 300 s tolerance: whole seconds, and a second may tick between
        // signing and checking.
        let late = signed(
            &app,
            "discord",
            &body,
            &discord_private(&key(1)),
            "",
            offset,
        );
        app.post_webhook("discord", &body, &late)
            .await
            .assert_problem(401, "timestamp_out_of_tolerance");
    }
    app.post_webhook("discord", &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    let timestamp = app.now().timestamp().to_string();
    app.post_webhook(
        "discord",
        &body,
        &[
            ("X-Signature-Ed25519", "00ff"),
            ("X-Signature-Timestamp", timestamp.as_str()),
        ],
    )
    .await
    .assert_problem(401, "bad_signature");
    assert_eq!(app.count_events().await, 1);
}

async fn discord_ping_is_answered_pong_not_stored(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let ping = br#"{"id":"1311111111111111112","application_id":"1300000000000000000","type":1,"version":1}"#;
    for signer in [key(1), key(2)] {
        let headers = signed(&app, "discord", ping, &discord_private(&signer), "", 0);
        let reply = app.post_webhook("discord", ping, &headers).await;
        reply.assert_status(200);
        assert!(!reply.replayed());
        assert_eq!(reply.body, br#"{"type":1}"#);
        assert_eq!(reply.header("content-type"), Some("application/json"));
    }
    // Discord checks that the endpoint refuses a bad signature: so does Inlet.
    let forged = signed(&app, "discord", ping, &discord_private(&key(9)), "", 0);
    app.post_webhook("discord", ping, &forged)
        .await
        .assert_problem(401, "bad_signature");
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_facts().await, 0);
}

/// A command or modal submit is deferred with a visible "thinking…" (type 5), a component
/// without one (type 6); autocomplete cannot be deferred and gets no choices.
async fn discord_interactions_are_answered_deferred_by_type(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let cases: [(u8, &[u8]); 4] = [
        (2, br#"{"type":5}"#),
        (3, br#"{"type":6}"#),
        (4, br#"{"type":8,"data":{"choices":[]}}"#),
        (5, br#"{"type":5}"#),
    ];
    for (kind, expected) in cases {
        let body = serde_json::json!({ "id": format!("13111111111111111{kind:02}"), "type": kind })
            .to_string()
            .into_bytes();
        let headers = signed(&app, "discord", &body, &discord_private(&key(1)), "", 0);
        let reply = app.post_webhook("discord", &body, &headers).await;
        reply.assert_status(200);
        assert_eq!(reply.body, expected, "interaction type {kind}");
        assert_eq!(reply.header("content-type"), Some("application/json"));
    }
    assert_eq!(app.count_events().await, 4);
}

fn standard_event(kind: &str) -> Vec<u8> {
    serde_json::json!({ "type": kind, "data": { "id": "inv_1", "amount": 1200 } })
        .to_string()
        .into_bytes()
}

async fn standard_v1a_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let body = standard_event("invoice.paid");
    let private = whsk(&key(3));
    let headers = signed(&app, "asym", &body, &private, "msg_v1a_1", 0);
    assert!(headers.iter().any(|(_, v)| v.starts_with("v1a,")));
    let first = app.post_webhook("asym", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(first.json()["event_id"], "msg_v1a_1");

    let retry = signed(&app, "asym", &body, &private, "msg_v1a_1", 5);
    let again = app.post_webhook("asym", &body, &retry).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let tampered = standard_event("invoice.pais");
    app.post_webhook("asym", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    // The id is signed: the same signature under another id is refused.
    let renamed: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| match n.as_str() {
            "webhook-id" => (n.clone(), "msg_v1a_2".to_owned()),
            _ => (n.clone(), v.clone()),
        })
        .collect();
    app.post_webhook("asym", &body, &renamed)
        .await
        .assert_problem(401, "bad_signature");
    let other_key = signed(&app, "asym", &body, &whsk(&key(9)), "msg_v1a_1", 0);
    app.post_webhook("asym", &body, &other_key)
        .await
        .assert_problem(401, "bad_signature");
    // A v1 (HMAC) entry means nothing to a source that only holds public keys.
    let v1 = signed(&app, "asym", &body, WHSEC, "msg_v1a_1", 0);
    app.post_webhook("asym", &body, &v1)
        .await
        .assert_problem(401, "bad_signature");
    assert_eq!(app.count_events().await, 1);
}

async fn standard_source_accepts_v1_and_v1a_side_by_side(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let body = standard_event("invoice.created");
    let v1 = signed(&app, "mixed", &body, WHSEC, "msg_mixed_1", 0);
    let reply = app.post_webhook("mixed", &body, &v1).await;
    assert_eq!(reply.json()["outcome"], "accepted");

    let v1a = signed(&app, "mixed", &body, &whsk(&key(4)), "msg_mixed_2", 0);
    let reply = app.post_webhook("mixed", &body, &v1a).await;
    assert_eq!(reply.json()["outcome"], "accepted");

    // A sender moving to v1a sends both entries in one list; the copy is a duplicate.
    let v1_again = signed(&app, "mixed", &body, WHSEC, "msg_mixed_1", 0);
    let v1a_again = signed(&app, "mixed", &body, &whsk(&key(4)), "msg_mixed_1", 0);
    let entry = |headers: &[(String, String)]| {
        headers
            .iter()
            .find(|(n, _)| n == "webhook-signature")
            .map(|(_, v)| v.clone())
            .expect("a signature")
    };
    let both = format!("{} {}", entry(&v1_again), entry(&v1a_again));
    let headers: Vec<(String, String)> = v1_again
        .iter()
        .map(|(n, v)| match n.as_str() {
            "webhook-signature" => (n.clone(), both.clone()),
            _ => (n.clone(), v.clone()),
        })
        .collect();
    let reply = app.post_webhook("mixed", &body, &headers).await;
    assert!(reply.replayed());
    assert_eq!(app.count_events().await, 2);
}

/// `inlet send` signs a discord interaction with the private key in INLET_SIGNING_KEY
/// (never printed), and says what is missing without it.
async fn send_signs_with_the_private_key_from_the_environment(backend: Backend) {
    let app = spawn_with_ed25519(backend).await;
    let tag = format!("{backend:?}");
    let dir = std::env::temp_dir().join(format!("inlet-ed25519-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join(format!("inlet-{tag}.toml"));
    let body_file = dir.join(format!("interaction-{tag}.json"));
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"sqlite://{}\"\n[[sources]]\nname = \"discord\"\n\
             scheme = \"discord\"\nsecrets = [\"{}\"]\n",
            dir.join(format!("unused-{tag}.db")).display(),
            discord_public(&key(1))
        ),
    )
    .expect("config");
    std::fs::write(&body_file, interaction("1311111111111111121", "send")).expect("body");
    let url = format!("{}/webhooks/discord", app.address);
    let private = discord_private(&key(1));
    let run = move |with_key: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"));
        command
            .arg("--config")
            .arg(&config)
            .args(["send", "--source", "discord", "--url", &url, "--body"])
            .arg(&body_file)
            .env_remove("INLET_SIGNING_KEY");
        if with_key {
            command.env("INLET_SIGNING_KEY", &private);
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
    assert!(stdout.starts_with("200\n{\"type\":5}"), "{stdout}");
    assert!(!stdout.contains(&discord_private(&key(1))), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
