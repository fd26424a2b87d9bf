//! Twilio end to end over HTTP on both backends: a status callback signed over the
//! registered URL and its sorted form parameters is accepted, its duplicate answered from
//! the store, a tampered one or one signed for another URL refused; each status of a
//! message is one fact; a JSON body is signed through its hash in the URL.

use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions, NO_HEADERS};
use crate::on_both_backends;
use inlet::provider::{Provider, SchemeParams};
use inlet::signature::PublicUrl;
use sha2::{Digest, Sha256};

on_both_backends!(
    twilio_accepts_replays_and_refuses_tampering,
    twilio_each_status_of_a_message_is_one_fact,
    twilio_json_bodies_are_signed_through_their_hash,
    twilio_every_body_that_reads_as_the_signed_parameters_is_one_event,
    twilio_a_copy_whose_status_absorbs_its_neighbours_has_no_effect_even_after_expiry,
    twilio_a_copy_whose_status_absorbs_a_control_character_is_refused_and_adds_nothing,
    twilio_an_incoming_message_is_taken_by_default_as_kind_received,
);

const AUTH_TOKEN: &str = "twilio-auth-token-current-0123456789";
const OLD_AUTH_TOKEN: &str = "twilio-auth-token-rotating-out-0123456789";
/// The URL registered with Twilio: a proxy's, not the test server's.
const TWILIO_URL: &str = "https://hooks.example.com/twilio/status?tenant=acme";

async fn spawn_with_twilio(backend: Backend) -> TestApp {
    spawn_app_with(backend, twilio_options()).await
}

fn twilio_options() -> TestOptions {
    TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"twilio\"\nscheme = \"twilio\"\n\
             secrets = [\"{AUTH_TOKEN}\", \"{OLD_AUTH_TOKEN}\"]\npublic_url = \"{TWILIO_URL}\"\n"
        ),
        ..Default::default()
    }
}

/// A message status callback as Twilio posts it (its own parameter order).
fn status_callback(message_sid: &str, status: &str) -> Vec<u8> {
    form(&[
        ("SmsSid", message_sid),
        ("SmsStatus", status),
        ("MessageStatus", status),
        ("To", "+15558675310"),
        ("MessageSid", message_sid),
        ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
        ("From", "+15017122661"),
        ("ApiVersion", "2010-04-01"),
    ])
}

/// An incoming message as Twilio posts it to a phone number's webhook: no
/// `MessageStatus`, its `SmsStatus` is `received`.
fn incoming_message(message_sid: &str, text: &str) -> Vec<u8> {
    form(&[
        ("ToCountry", "US"),
        ("SmsMessageSid", message_sid),
        ("NumMedia", "0"),
        ("SmsSid", message_sid),
        ("SmsStatus", "received"),
        ("Body", text),
        ("To", "+15017122661"),
        ("NumSegments", "1"),
        ("MessageSid", message_sid),
        ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
        ("From", "+15558675310"),
        ("ApiVersion", "2010-04-01"),
    ])
}

/// The event id the book promises for a form (docs/src/providers/twilio.md): the sha256
/// of Twilio's signed string — each parameter's name followed by its value, sorted by name (no repeats here).
fn canonical_id(body: &[u8]) -> String {
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    pairs.sort();
    let signed: String = pairs.into_iter().map(|(n, v)| n + &v).collect();
    hex::encode(Sha256::digest(signed.as_bytes()))
}

fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut serializer = form_urlencoded::Serializer::new(String::new());
    serializer.extend_pairs(pairs);
    serializer.finish().into_bytes()
}

fn sign(app: &TestApp, body: &[u8], token: &str) -> Vec<(String, String)> {
    app.sign_for("twilio", body, "", Some(token))
}

/// Signed as Twilio would for a webhook registered at `url` instead.
fn sign_for_url(app: &TestApp, body: &[u8], url: &str) -> Vec<(String, String)> {
    let mut source = app.settings.source("twilio").expect("a source").clone();
    let url = PublicUrl::parse(url.to_owned()).expect("a URL");
    let params = SchemeParams {
        public_url: Some(url),
        ..SchemeParams::default()
    };
    source.provider = Provider::named("twilio", params).expect("twilio");
    let event = inlet::signature::EventToSign {
        id: String::new(),
        event_type: String::new(),
    };
    inlet::cli::signed_headers_for(&source, body, app.now(), &event)
}

async fn twilio_accepts_replays_and_refuses_tampering(backend: Backend) {
    let app = spawn_with_twilio(backend).await;
    let body = status_callback("SM0001", "sent");
    let headers = sign(&app, &body, AUTH_TOKEN);
    let first = app.post_webhook("twilio", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted");
    assert_eq!(
        first.json()["event_id"],
        canonical_id(&body),
        "Twilio sends no event id: the event is what it signed, the sorted parameters"
    );
    let again = app
        .post_webhook("twilio", &body, &sign(&app, &body, OLD_AUTH_TOKEN))
        .await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);

    let tampered = status_callback("SM0001", "delivered");
    app.post_webhook("twilio", &tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
    let removed = sign(&app, &body, "twilio-auth-token-removed-0123456789");
    app.post_webhook("twilio", &body, &removed)
        .await
        .assert_problem(401, "bad_signature");
    let own_url = format!("{}/webhooks/twilio", app.address);
    app.post_webhook("twilio", &body, &sign_for_url(&app, &body, &own_url))
        .await
        .assert_problem(401, "bad_signature");
    app.post_webhook("twilio", &body, NO_HEADERS)
        .await
        .assert_problem(400, "missing_signature");
    app.post_webhook("twilio", &body, &[("X-Twilio-Signature", "not base64!")])
        .await
        .assert_problem(400, "malformed_signature");
    assert_eq!(app.count_events().await, 1);
}

/// queued, sent and delivered of one message are three facts; the same status in other
/// signed content (a second callback, with a parameter more) has no second effect.
async fn twilio_each_status_of_a_message_is_one_fact(backend: Backend) {
    let app = spawn_with_twilio(backend).await;
    for status in ["queued", "sent", "delivered"] {
        let body = status_callback("SM0002", status);
        let reply = app
            .post_webhook("twilio", &body, &sign(&app, &body, AUTH_TOKEN))
            .await;
        assert_eq!(reply.json()["outcome"], "accepted", "{status}");
    }
    let delivered = status_callback("SM0002", "delivered");
    let mut second = delivered.clone();
    second.extend_from_slice(b"&RawDlrDoneDate=2412010930");
    let reply = app
        .post_webhook("twilio", &second, &sign(&app, &second, AUTH_TOKEN))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.json()["outcome"], "duplicate_fact");
    assert_eq!(
        app.facts_of("delivered").await,
        [("SM0002".to_owned(), canonical_id(&delivered))]
    );
    assert_eq!(status_facts(&app).await, 3);
}

/// One captured callback, re-encoded every way its signature allows (Twilio signs the
/// sorted parameters run together, and no time): reordered, a trailing `&`, `%41` for
/// `A` — one event, answered from the store; and `MessageStatu=sdelivered` for
/// `MessageStatus=delivered`, which verifies too but lacks what the fact is keyed on:
/// refused, before and after the original, never a fact of its own.
async fn twilio_every_body_that_reads_as_the_signed_parameters_is_one_event(backend: Backend) {
    let app = spawn_with_twilio(backend).await;
    let body = status_callback("SM0005", "delivered");
    let headers = sign(&app, &body, AUTH_TOKEN);
    let text = String::from_utf8(body.clone()).expect("a form");
    let resplit = text.replace("MessageStatus=delivered", "MessageStatu=sdelivered");
    assert_ne!(resplit, text);
    app.post_webhook("twilio", resplit.as_bytes(), &headers)
        .await
        .assert_problem(400, "missing_fact_key");
    assert_eq!(app.count_events().await, 0);

    let first = app.post_webhook("twilio", &body, &headers).await;
    assert_eq!(first.json()["outcome"], "accepted");
    let mut reordered: Vec<&str> = text.split('&').collect();
    reordered.reverse();
    let variants = [
        reordered.join("&"),
        format!("{text}&"),
        text.replace("AccountSid=AC", "AccountSid=%41C"),
    ];
    for variant in &variants {
        let reply = app
            .post_webhook("twilio", variant.as_bytes(), &headers)
            .await;
        reply.assert_status(200);
        assert!(reply.replayed(), "{variant}: {}", reply.text());
        assert_eq!(reply.body, first.body, "{variant}");
    }
    app.post_webhook("twilio", resplit.as_bytes(), &headers)
        .await
        .assert_problem(400, "missing_fact_key");
    assert_eq!(app.count_events().await, 1);
    assert_eq!(status_facts(&app).await, 1);
}

async fn twilio_json_bodies_are_signed_through_their_hash(backend: Backend) {
    let app = spawn_with_twilio(backend).await;
    let body = br#"{"type":"com.twilio.messaging.message.delivered","data":{"messageSid":"SM3"}}"#;
    let headers = sign(&app, body, AUTH_TOKEN);
    assert!(headers
        .iter()
        .any(|(n, v)| n == "Content-Type" && v == "application/json"));
    let first = app.post_webhook("twilio", body, &headers).await;
    assert_eq!(first.json()["outcome"], "accepted");
    let again = app.post_webhook("twilio", body, &headers).await;
    assert!(again.replayed());
    let tampered =
        br#"{"type":"com.twilio.messaging.message.delivered","data":{"messageSid":"SM4"}}"#;
    app.post_webhook("twilio", tampered, &headers)
        .await
        .assert_problem(401, "bad_signature");
}

/// Facts other than the signed content's own (kind `body`, recorded beside every Twilio
/// event).
async fn status_facts(app: &TestApp) -> i64 {
    let body = app.facts_of("body").await.len();
    app.count_facts().await - i64::try_from(body).expect("a count")
}

/// `MessageStatus=deliveredSmsSidSM0006` reads as `MessageStatus=delivered` then
/// `SmsSid=SM0006`: the same signed parameters, with both fact fields present — but a
/// fact of its own kind. While the event is stored it gets the stored answer; once the
/// event has expired and been swept, the permanent fact of what was signed still makes it
/// `duplicate_after_expiry`: no second delivery, however long after.
async fn twilio_a_copy_whose_status_absorbs_its_neighbours_has_no_effect_even_after_expiry(
    backend: Backend,
) {
    let mut options = TestOptions {
        dispatch: false,
        ..twilio_options()
    };
    options.extra_sources += "[[sources.destinations]]\nurl = \"http://127.0.0.1:9/events\"\n\
                              secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
    let app = spawn_app_with(backend, options).await;
    let body = status_callback("SM0006", "delivered");
    let headers = sign(&app, &body, AUTH_TOKEN);
    let first = app.post_webhook("twilio", &body, &headers).await;
    assert_eq!(first.json()["outcome"], "accepted");
    let deliveries = app.count_deliveries().await;
    assert_eq!(deliveries, 1, "the first copy is delivered");
    let absorbing = String::from_utf8(body.clone())
        .expect("a form")
        .replace("SmsSid=SM0006&", "")
        .replace(
            "MessageStatus=delivered",
            "MessageStatus=deliveredSmsSidSM0006",
        );
    assert_eq!(canonical_id(absorbing.as_bytes()), canonical_id(&body));
    let copy = app
        .post_webhook("twilio", absorbing.as_bytes(), &headers)
        .await;
    assert!(copy.replayed(), "{}", copy.text());

    let retention = app.settings.retention.events.0;
    app.clock.advance(
        chrono::Duration::from_std(retention).expect("a duration") + chrono::Duration::days(1),
    );
    app.sweep(false).await;
    assert_eq!(
        app.count_events().await,
        0,
        "the event expired and was swept"
    );
    let swept = app.count_deliveries().await;
    let later = app
        .post_webhook("twilio", absorbing.as_bytes(), &headers)
        .await;
    later.assert_status(200);
    assert_eq!(
        later.json()["outcome"],
        "duplicate_after_expiry",
        "{}",
        later.text()
    );
    let again = app.post_webhook("twilio", &body, &headers).await;
    assert_eq!(
        again.json()["outcome"],
        "duplicate_after_expiry",
        "{}",
        again.text()
    );
    assert!(
        again.replayed(),
        "the late copy's answer is stored like any other"
    );
    assert_eq!(
        app.count_deliveries().await,
        swept,
        "no second delivery, however the copy is split"
    );
}

/// The chaos fuzzer's find: when the parameter a copy's `MessageStatus` absorbs ends in a
/// newline, the copy's status is no storable event type. It reads as the signed
/// parameters, so its signature verifies, but its own reading is refused (`400
/// invalid_event_type`) and it adds no event, fact or delivery.
async fn twilio_a_copy_whose_status_absorbs_a_control_character_is_refused_and_adds_nothing(
    backend: Backend,
) {
    let app = spawn_with_twilio(backend).await;
    let body = form(&[
        ("SmsSid", "SM0007\n"),
        ("MessageStatus", "queued"),
        ("MessageSid", "SM0007"),
        ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
    ]);
    let headers = sign(&app, &body, AUTH_TOKEN);
    let first = app.post_webhook("twilio", &body, &headers).await;
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());
    let facts = app.count_facts().await;
    let absorbing = "AccountSid=AC0123456789abcdef0123456789abcdef&MessageSid=SM0007\
                     &MessageStatus=queuedSmsSidSM0007%0A";
    assert_eq!(canonical_id(absorbing.as_bytes()), canonical_id(&body));
    let copy = app
        .post_webhook("twilio", absorbing.as_bytes(), &headers)
        .await;
    copy.assert_status(400);
    assert_eq!(
        copy.json()["reason"],
        "invalid_event_type",
        "{}",
        copy.text()
    );
    assert_eq!(
        app.count_events().await,
        1,
        "the copy is no event of its own"
    );
    assert_eq!(app.count_facts().await, facts, "nor a fact");
    let again = app.post_webhook("twilio", &body, &headers).await;
    assert!(
        again.replayed(),
        "the original is still answered from the store"
    );
}

/// The default `twilio` source takes both of Twilio's shapes: a status callback keyed on
/// `MessageStatus`, and an incoming message (no `MessageStatus`, `SmsStatus=received`) as
/// kind `received` keyed on its `MessageSid` — one fact per message, a copy answered from
/// the store. A form with neither shape is still refused: `SmsStatus` is read only as
/// an incoming message's `received`.
async fn twilio_an_incoming_message_is_taken_by_default_as_kind_received(backend: Backend) {
    let app = spawn_with_twilio(backend).await;
    let body = incoming_message("SM0100", "Hello *there*");
    let headers = sign(&app, &body, AUTH_TOKEN);
    let first = app.post_webhook("twilio", &body, &headers).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());
    assert!(app.post_webhook("twilio", &body, &headers).await.replayed());
    assert_eq!(
        app.facts_of("received").await,
        [("SM0100".to_owned(), canonical_id(&body))]
    );
    let event = app
        .admin(
            &format!("/admin/events/twilio/{}", canonical_id(&body)),
            None,
            None,
        )
        .await;
    assert_eq!(
        event.json()["event"]["event_type"],
        "received",
        "{}",
        event.text()
    );

    // A status callback still keys on MessageStatus.
    let callback = status_callback("SM0100", "delivered");
    let reply = app
        .post_webhook("twilio", &callback, &sign(&app, &callback, AUTH_TOKEN))
        .await;
    assert_eq!(reply.json()["outcome"], "accepted", "{}", reply.text());
    assert_eq!(app.facts_of("delivered").await.len(), 1);

    // Neither shape: no MessageStatus, and an SmsStatus that is not an incoming message's.
    let text = String::from_utf8(incoming_message("SM0101", "hi")).expect("a form");
    let other = text.replace("SmsStatus=received", "SmsStatus=delivered");
    app.post_webhook(
        "twilio",
        other.as_bytes(),
        &sign(&app, other.as_bytes(), AUTH_TOKEN),
    )
    .await
    .assert_problem(400, "missing_fact_key");
    assert_eq!(status_facts(&app).await, 2);
}
