//! The providers added after the first six, end to end over HTTP on both backends: each
//! accepts a signed event, answers its duplicate from the store byte for byte, and refuses
//! a tampered one with the right reason. (The first six are in `schemes.rs`.)

use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use inlet::signature::EventToSign;

on_both_backends!(
    paddle_accepts_replays_and_refuses_tampering,
    paddle_rotation_and_tolerance_in_both_directions,
    paddle_one_transaction_is_one_fact,
    zoom_accepts_replays_and_refuses_tampering,
    zoom_url_validation_is_answered_not_stored,
    token_sources_accept_replay_and_refuse_other_credentials,
    square_accepts_replays_and_refuses_tampering,
);

const PADDLE_SECRET: &str = "pdl_ntfset_01hv8x2fvaqz3b1k9y7w6tq5rm_current";
const PADDLE_OLD_SECRET: &str = "pdl_ntfset_01hv8wz4m3a8c2dfe5gh6jk7np_rotating_out";
const SQUARE_KEY: &str = "square-signature-key-current";
const SQUARE_OLD_KEY: &str = "square-signature-key-rotating-out";
/// The notification URL registered with Square: a proxy's, not the test server's.
const SQUARE_URL: &str = "https://hooks.example.com/square";
const ZOOM_SECRET: &str = "zm_secret_token_current";
const ZOOM_OLD_SECRET: &str = "zm_secret_token_rotating_out";
const BASIC_NEW: &str = "inlet:new-pass-0123456789";
const BASIC_OLD: &str = "inlet:old-pass-0123456789";
const TOKEN_NEW: &str = "tok_new_0123456789abcdef";
const TOKEN_OLD: &str = "tok_old_0123456789abcdef";

/// The test configuration keeps the default 35-day retention, so the source states a
/// horizon inside it (Paddle's own, 90 days, would be refused at startup).
async fn spawn_with_providers(backend: Backend) -> TestApp {
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"paddle\"\nscheme = \"paddle\"\n\
             secrets = [\"{PADDLE_SECRET}\", \"{PADDLE_OLD_SECRET}\"]\nreplay_horizon = \"30d\"\n\
             \n[[sources]]\nname = \"zoom\"\nscheme = \"zoom\"\n\
             secrets = [\"{ZOOM_SECRET}\", \"{ZOOM_OLD_SECRET}\"]\n\
             \n[[sources]]\nname = \"legacy\"\nscheme = \"basic\"\n\
             secrets = [\"{BASIC_NEW}\", \"{BASIC_OLD}\"]\n\
             event_id = \"json:/id\"\nevent_type = \"json:/type\"\nreplay_horizon = \"1d\"\n\
             \n[[sources]]\nname = \"forms\"\nscheme = \"header_token\"\n\
             token_header = \"X-Webhook-Token\"\nsecrets = [\"{TOKEN_NEW}\", \"{TOKEN_OLD}\"]\n\
             event_id = \"json:/id\"\nevent_type = \"json:/type\"\nreplay_horizon = \"1d\"\n\
             \n[[sources]]\nname = \"square\"\nscheme = \"square\"\n\
             secrets = [\"{SQUARE_KEY}\", \"{SQUARE_OLD_KEY}\"]\npublic_url = \"{SQUARE_URL}\"\n"
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

fn paddle_event(event_id: &str, event_type: &str, transaction: &str) -> Vec<u8> {
    serde_json::json!({
        "event_id": event_id,
        "event_type": event_type,
        "occurred_at": "2026-11-30T20:00:00.000000Z",
        "notification_id": format!("ntf_{event_id}"),
        "data": { "id": transaction, "status": "completed" },
    })
    .to_string()
    .into_bytes()
}

/// Paddle's headers signed with `secret` at `offset_secs` from the app's clock.
fn paddle_headers(
    app: &TestApp,
    body: &[u8],
    secret: &str,
    offset_secs: i64,
) -> Vec<(String, String)> {
    headers_for(app, "paddle", body, secret, offset_secs)
}

/// `source`'s provider's headers signed with `secret` at `offset_secs` from the app's
/// clock.
pub fn headers_for(
    app: &TestApp,
    source: &str,
    body: &[u8],
    secret: &str,
    offset_secs: i64,
) -> Vec<(String, String)> {
    let mut source = app.settings.source(source).expect("a source").clone();
    source.secrets = vec![inlet::secret::Secret::new(secret)];
    let event = EventToSign {
        id: String::new(),
        event_type: String::new(),
    };
    let at = app.now() + chrono::Duration::seconds(offset_secs);
    inlet::cli::signed_headers_for(&source, body, at, &event)
}

async fn paddle_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let body = paddle_event("evt_paddle_1", "subscription.updated", "sub_1");
    let headers = paddle_headers(&app, &body, PADDLE_SECRET, 0);

    let first = app.post_webhook("paddle", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(first.json()["event_id"], "evt_paddle_1");
    assert_eq!(first.json()["event_type"], "subscription.updated");

    // Paddle's retry, signed again at its own time: the stored answer, byte for byte.
    let retry = paddle_headers(&app, &body, PADDLE_SECRET, 2);
    let again = app.post_webhook("paddle", &body, &retry).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let mut tampered = body.clone();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    app.post_webhook("paddle", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");

    let removed = paddle_headers(&app, &body, "pdl_ntfset_removed", 0);
    app.post_webhook("paddle", &body, &removed)
        .await
        .assert_problem(401, "bad_signature");

    app.post_webhook("paddle", &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook("paddle", &body, &[("Paddle-Signature", "ts=1;h2=00")])
        .await
        .assert_problem(400, "malformed_signature");

    let no_id = br#"{"event_type":"transaction.updated","data":{"id":"txn_1"}}"#;
    let signed = paddle_headers(&app, no_id, PADDLE_SECRET, 0);
    app.post_webhook("paddle", no_id, &signed)
        .await
        .assert_problem(400, "missing_event_id");

    assert_eq!(app.count_events().await, 1);
}

async fn paddle_rotation_and_tolerance_in_both_directions(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    for (i, secret) in [PADDLE_SECRET, PADDLE_OLD_SECRET].iter().enumerate() {
        let body = paddle_event(&format!("evt_rot_{i}"), "transaction.updated", "txn_r");
        let headers = paddle_headers(&app, &body, secret, 0);
        let reply = app.post_webhook("paddle", &body, &headers).await;
        assert_eq!(reply.json()["outcome"], "accepted", "{secret}");
    }
    for offset in [-310, 310] {
        // Well past the 300 s tolerance: whole seconds, and a second may tick between
        // signing and checking.
        let body = paddle_event(
            &format!("evt_skew_{offset}"),
            "transaction.updated",
            "txn_s",
        );
        let headers = paddle_headers(&app, &body, PADDLE_SECRET, offset);
        app.post_webhook("paddle", &body, &headers)
            .await
            .assert_problem(401, "timestamp_out_of_tolerance");
    }
    for offset in [-300, 300] {
        let body = paddle_event(
            &format!("evt_edge_{offset}"),
            "transaction.updated",
            "txn_e",
        );
        let headers = paddle_headers(&app, &body, PADDLE_SECRET, offset);
        app.post_webhook("paddle", &body, &headers)
            .await
            .assert_status(200);
    }
    assert_eq!(app.count_events().await, 4);
}

/// `transaction.completed` is keyed on the transaction: the same transaction under
/// another event id (a second integration, a regenerated event) has no second effect.
async fn paddle_one_transaction_is_one_fact(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let first = paddle_event("evt_txn_a", "transaction.completed", "txn_once");
    let reply = app
        .post_webhook(
            "paddle",
            &first,
            &paddle_headers(&app, &first, PADDLE_SECRET, 0),
        )
        .await;
    assert_eq!(reply.json()["outcome"], "accepted");
    let second = paddle_event("evt_txn_b", "transaction.completed", "txn_once");
    let reply = app
        .post_webhook(
            "paddle",
            &second,
            &paddle_headers(&app, &second, PADDLE_SECRET, 0),
        )
        .await;
    assert_eq!(reply.json()["outcome"], "duplicate_fact");
    assert_eq!(app.count_facts().await, 1);
}

/// Paddle replays notifications for 90 days: with the default 35-day retention and no
/// horizon of its own, a paddle source is refused at startup, naming the numbers.
#[test]
fn paddle_default_horizon_is_ninety_days_and_checked() {
    let toml = &format!(
        "[[sources]]\nname = \"p\"\nscheme = \"paddle\"\nsecrets = [\"{PADDLE_SECRET}\"]\n"
    );
    let error = inlet::config::Settings::from_toml(toml)
        .expect_err("35 days of retention is shorter than Paddle's 90-day replay")
        .to_string();
    assert!(error.contains("90"), "{error}");
    assert!(error.contains("paddle"), "{error}");
    let longer = format!("{toml}[retention]\nevents = \"91d\"\n");
    assert!(inlet::config::Settings::from_toml(&longer).is_ok());
}

fn zoom_event(meeting: &str, topic: &str) -> Vec<u8> {
    serde_json::json!({
        "event": "meeting.started",
        "event_ts": 1_796_070_000_123_i64,
        "payload": {
            "account_id": "AAAAAABBBB",
            "object": { "id": meeting, "topic": topic },
        },
    })
    .to_string()
    .into_bytes()
}

/// Zoom's body is its identity (it carries no event id): a retry of the same body, signed
/// again minutes later, is answered from the store.
async fn zoom_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let body = zoom_event("85745436761", "Standup");
    let headers = headers_for(&app, "zoom", &body, ZOOM_SECRET, 0);
    let first = app.post_webhook("zoom", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(first.json()["event_type"], "meeting.started");

    let retry = headers_for(&app, "zoom", &body, ZOOM_OLD_SECRET, 4);
    let again = app.post_webhook("zoom", &body, &retry).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let tampered = zoom_event("85745436761", "Standuq");
    app.post_webhook("zoom", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    let removed = headers_for(&app, "zoom", &body, "zm_removed", 0);
    app.post_webhook("zoom", &body, &removed)
        .await
        .assert_problem(401, "bad_signature");
    for offset in [-310, 310] {
        // Well past the 300 s tolerance: whole seconds, and a second may tick between
        // signing and checking.
        let late = headers_for(&app, "zoom", &body, ZOOM_SECRET, offset);
        app.post_webhook("zoom", &body, &late)
            .await
            .assert_problem(401, "timestamp_out_of_tolerance");
    }
    let unsigned_time: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| name != "x-zm-request-timestamp")
        .cloned()
        .collect();
    app.post_webhook("zoom", &body, &unsigned_time)
        .await
        .assert_problem(400, "missing_signature");
    assert_eq!(app.count_events().await, 1);
}

async fn zoom_url_validation_is_answered_not_stored(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let body = br#"{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}"#;
    for secret in [ZOOM_SECRET, ZOOM_OLD_SECRET] {
        let headers = headers_for(&app, "zoom", body, secret, 0);
        let reply = app.post_webhook("zoom", body, &headers).await;
        reply.assert_status(200);
        assert!(!reply.replayed());
        let expected = {
            use hmac::{KeyInit, Mac};
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes())
                .expect("any key length");
            mac.update(b"qgg8vlvZRS6UYooatFL8Aw");
            hex::encode(mac.finalize().into_bytes())
        };
        assert_eq!(
            reply.json(),
            serde_json::json!({
                "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
                "encryptedToken": expected,
            }),
            "{secret}"
        );
    }
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_facts().await, 0);

    // Unsigned or signed by someone else, it is refused like anything else.
    app.post_webhook("zoom", body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    let forged = headers_for(&app, "zoom", body, "zm_removed", 0);
    app.post_webhook("zoom", body, &forged)
        .await
        .assert_problem(401, "bad_signature");
    assert_eq!(app.count_events().await, 0);
}

/// `basic` and `header_token` sources: the right credential (either of a rotating pair) is
/// accepted and its duplicate answered from the store; a removed, altered or missing one
/// is refused and stores nothing.
async fn token_sources_accept_replay_and_refuse_other_credentials(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let cases = [
        (
            "legacy",
            [BASIC_NEW, BASIC_OLD],
            "inlet:removed-pass-0123456789",
        ),
        (
            "forms",
            [TOKEN_NEW, TOKEN_OLD],
            "tok_removed_0123456789abcdef",
        ),
    ];
    for (source, [current, old], removed) in cases {
        let body = serde_json::json!({"id": format!("{source}_1"), "type": "form.submitted"})
            .to_string()
            .into_bytes();
        let first = app
            .post_webhook(source, &body, &headers_for(&app, source, &body, current, 0))
            .await;
        first.assert_status(200);
        assert_eq!(first.json()["outcome"], "accepted", "{source}");
        let again = app
            .post_webhook(source, &body, &headers_for(&app, source, &body, old, 0))
            .await;
        assert!(again.replayed(), "{source}");
        assert_eq!(again.body, first.body, "{source}");
        // The credential is never stored: its header is kept, its value redacted.
        let shown = app
            .admin(&format!("/admin/events/{source}/{source}_1"), None, None)
            .await;
        shown.assert_status(200);
        let header = if source == "legacy" {
            "authorization"
        } else {
            "x-webhook-token"
        };
        let headers = shown.json()["headers"].clone();
        let value = headers
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row[0] == header))
            .map(|row| row[1].clone());
        assert_eq!(value, Some("[redacted]".into()), "{source}: {headers}");
        let secret_user = current.split(':').next_back().unwrap_or(current);
        assert!(
            !shown.text().contains(secret_user),
            "{source}: {}",
            shown.text()
        );

        let other = serde_json::json!({"id": format!("{source}_2"), "type": "form.submitted"})
            .to_string()
            .into_bytes();
        app.post_webhook(
            source,
            &other,
            &headers_for(&app, source, &other, removed, 0),
        )
        .await
        .assert_problem(401, "bad_signature");
        app.post_webhook(source, &other, NO_HEADERS)
            .await
            .assert_problem(400, "missing_signature");
    }
    app.post_webhook(
        "legacy",
        b"{}",
        &[("Authorization", "Bearer tok_new_0123456789abcdef")],
    )
    .await
    .assert_problem(400, "malformed_signature");
    assert_eq!(app.count_events().await, 2);
}

fn square_event(event_id: &str, event_type: &str, payment: &str) -> Vec<u8> {
    serde_json::json!({
        "merchant_id": "MLEFBHHSJGVHD",
        "type": event_type,
        "event_id": event_id,
        "created_at": "2026-11-30T20:00:00Z",
        "data": { "type": "payment", "id": payment, "object": { "payment": { "id": payment } } },
    })
    .to_string()
    .into_bytes()
}

/// Square signs `public_url` + body: accepted with either key, the duplicate answered from
/// the store, a changed body, a removed key or a signature for another URL refused; and a
/// payment created under two event ids is one fact.
async fn square_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_providers(backend).await;
    let body = square_event("sq_evt_1", "payment.updated", "pay_1");
    let headers = headers_for(&app, "square", &body, SQUARE_KEY, 0);
    let first = app.post_webhook("square", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(first.json()["event_id"], "sq_evt_1");
    let again = app
        .post_webhook(
            "square",
            &body,
            &headers_for(&app, "square", &body, SQUARE_OLD_KEY, 0),
        )
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let tampered = square_event("sq_evt_1", "payment.updated", "pay_2");
    app.post_webhook("square", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    app.post_webhook(
        "square",
        &body,
        &headers_for(&app, "square", &body, "square-removed", 0),
    )
    .await
    .assert_problem(401, "bad_signature");
    let other_url = {
        use base64::Engine;
        use hmac::{KeyInit, Mac};
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SQUARE_KEY.as_bytes())
            .expect("any key length");
        mac.update(format!("{}/webhooks/square", app.address).as_bytes());
        mac.update(&body);
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    };
    app.post_webhook(
        "square",
        &body,
        &[("x-square-hmacsha256-signature", other_url.as_str())],
    )
    .await
    .assert_problem(401, "bad_signature");
    app.post_webhook("square", &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook(
        "square",
        &body,
        &[("x-square-hmacsha256-signature", "not base64!")],
    )
    .await
    .assert_problem(400, "malformed_signature");

    let created = square_event("sq_evt_2", "payment.created", "pay_once");
    let reply = app
        .post_webhook(
            "square",
            &created,
            &headers_for(&app, "square", &created, SQUARE_KEY, 0),
        )
        .await;
    assert_eq!(reply.json()["outcome"], "accepted");
    let again_created = square_event("sq_evt_3", "payment.created", "pay_once");
    let reply = app
        .post_webhook(
            "square",
            &again_created,
            &headers_for(&app, "square", &again_created, SQUARE_KEY, 0),
        )
        .await;
    assert_eq!(reply.json()["outcome"], "duplicate_fact");
    assert_eq!(app.count_events().await, 3);
}
