//! Amazon SNS end to end, with a local HTTPS host standing in for AWS's certificate host
//! (allowed only by the source's test configuration): a notification is verified with the
//! certificate its SigningCertURL names — fetched once per instance, whatever the number
//! of messages or of concurrent copies — and is one event, its MessageId, delivered once;
//! a subscription confirmation is confirmed by visiting its SubscribeURL and never stored;
//! an unreachable certificate is 503 with nothing stored; every forgery is refused.

use crate::helpers::{
    sns_headers, spawn_app_with, Backend, CertificateHost, SnsMessage, TestApp, TestOptions,
};
use crate::on_both_backends;
use chrono::{DateTime, Duration, Utc};
use std::sync::Arc;

on_both_backends!(
    a_notification_is_verified_with_its_certificate_and_delivered_once,
    forged_and_foreign_messages_are_refused_and_nothing_is_stored,
    a_confirmation_visits_its_url_and_is_never_stored,
    an_unavailable_certificate_is_503_a_missing_one_401_and_nothing_is_stored,
    concurrent_copies_fetch_the_certificate_once_and_are_one_event,
    an_event_id_read_from_an_unsigned_member_makes_no_second_effect,
    a_cached_certificate_that_expired_is_fetched_again,
    a_certificate_url_off_an_sns_region_is_refused_before_any_fetch,
    an_unavailable_certificate_is_asked_again_once_its_retry_after_is_waited,
    a_replayed_confirmation_visits_its_url_once,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const CERTIFICATE: &str = "/signing-cert.pem";

/// The parts of a test: the certificate host, the application, and Inlet with an sns
/// source (its own `settings` keys) taking the host's certificates and delivering to it.
struct Sns {
    host: CertificateHost,
    application: wiremock::MockServer,
    app: TestApp,
}

async fn spawn_with_sns(backend: Backend, settings: &str) -> Sns {
    spawn_with_sns_at(backend, settings, TestOptions::default()).await
}

/// [`spawn_with_sns`] with these options (a test's clock).
async fn spawn_with_sns_at(backend: Backend, settings: &str, options: TestOptions) -> Sns {
    let host = CertificateHost::start();
    let application = crate::helpers::application_answering(200).await;
    let destination = format!(
        "[[sources.destinations]]\nurl = \"{}/events\"\nsecret = \"{APP_SECRET}\"\n",
        application.uri()
    );
    let options = TestOptions {
        extra_sources: host.source_toml("sns", settings, &destination),
        ..options
    };
    let app = spawn_app_with(backend, options).await;
    Sns {
        host,
        application,
        app,
    }
}

async fn post(app: &TestApp, message: &SnsMessage, body: &[u8]) -> crate::helpers::Reply {
    app.post_webhook("sns", body, &sns_headers(message)).await
}

/// `copies` copies of `body` posted at once (released together by a barrier), answered.
async fn post_at_once(
    app: &Arc<TestApp>,
    message: &SnsMessage,
    body: &[u8],
    copies: usize,
) -> Vec<crate::helpers::Reply> {
    let barrier = Arc::new(tokio::sync::Barrier::new(copies));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..copies {
        let (app, barrier, body, message) =
            (app.clone(), barrier.clone(), body.to_vec(), message.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            post(&app, &message, &body).await
        });
    }
    let mut replies = Vec::with_capacity(copies);
    while let Some(reply) = tasks.join_next().await {
        replies.push(reply.expect("the request task"));
    }
    replies
}

async fn a_notification_is_verified_with_its_certificate_and_delivered_once(backend: Backend) {
    let Sns {
        host,
        application,
        app,
    } = spawn_with_sns(backend, "").await;
    let url = host.url(CERTIFICATE);
    let first = SnsMessage::notification(
        "9a3f6c1e-0000-4000-8000-000000000001",
        "{\"order\":1}",
        Utc::now(),
    );
    let body = first.signed("signing-key.pem", 1, &url);
    let accepted = post(&app, &first, &body).await;
    accepted.assert_status(200);
    assert_eq!(
        accepted.json()["outcome"],
        "accepted",
        "{}",
        accepted.text()
    );
    assert_eq!(accepted.json()["event_id"], first.message_id);

    // SNS's retry is the same bytes; a copy re-encoded (compact) is the same signed message.
    let replay = post(&app, &first, &body).await;
    assert!(replay.replayed(), "{}", replay.text());
    assert_eq!(replay.body, accepted.body);
    let compact =
        serde_json::to_vec(&serde_json::from_slice::<serde_json::Value>(&body).expect("JSON"))
            .expect("JSON");
    let recoded = post(&app, &first, &compact).await;
    assert!(recoded.replayed(), "{}", recoded.text());

    // A second message, signed as version 2 (SHA-256), without a Subject.
    let mut second = SnsMessage::notification(
        "9a3f6c1e-0000-4000-8000-000000000002",
        "line one\nline \"two\" é",
        Utc::now(),
    );
    second.subject = None;
    post(&app, &second, &second.signed("signing-key.pem", 2, &url))
        .await
        .assert_status(200);

    assert_eq!(
        host.requests(CERTIFICATE),
        1,
        "the certificate is fetched once"
    );
    crate::helpers::each_delivered_once(&app, &application, 2).await;
    let delivered = application.received_requests().await.expect("recorded");
    assert!(
        delivered.iter().any(|request| request.body == body),
        "stored and delivered as received"
    );
    assert_eq!(app.count_events().await, 2);
}

async fn forged_and_foreign_messages_are_refused_and_nothing_is_stored(backend: Backend) {
    let Sns {
        host,
        application: _,
        app,
    } = spawn_with_sns(backend, "").await;
    let url = host.url(CERTIFICATE);
    let message = SnsMessage::notification(
        "5b1d2e3f-0000-4000-8000-00000000000a",
        "{\"order\":2}",
        Utc::now(),
    );

    let mut tampered = message.clone();
    tampered.message = "{\"order\":3}".to_owned();
    let signature_of = |body: &[u8]| -> String {
        let value: serde_json::Value = serde_json::from_slice(body).expect("JSON");
        value["Signature"].as_str().expect("a signature").to_owned()
    };
    let signature = signature_of(&message.signed("signing-key.pem", 1, &url));
    post(&app, &tampered, &tampered.body_with("1", &signature, &url))
        .await
        .assert_problem(401, "bad_signature");
    // Signed as version 1, labelled version 2.
    post(&app, &message, &message.body_with("2", &signature, &url))
        .await
        .assert_problem(401, "bad_signature");
    post(&app, &message, &message.body_with("3", &signature, &url))
        .await
        .assert_problem(400, "malformed_signature");
    // Signed with another key than the certificate's at the URL it names.
    post(&app, &message, &message.signed("other-key.pem", 1, &url))
        .await
        .assert_problem(401, "bad_signature");
    // A real signature for another topic: AWS signs any account's topic.
    let mut foreign = message.clone();
    foreign.topic = "arn:aws:sns:us-east-1:999999999999:someone-else".to_owned();
    let refused = post(&app, &foreign, &foreign.signed("signing-key.pem", 1, &url)).await;
    refused.assert_problem(401, "bad_signature");
    assert!(refused.text().contains("TopicArn"), "{}", refused.text());
    // Signed two hours ago: past SNS's last retry and the tolerance.
    let old = SnsMessage::notification(
        "5b1d2e3f-0000-4000-8000-00000000000b",
        "{}",
        Utc::now() - Duration::hours(2),
    );
    post(&app, &old, &old.signed("signing-key.pem", 1, &url))
        .await
        .assert_problem(401, "timestamp_out_of_tolerance");
    // Certificate URLs Inlet must never fetch.
    for elsewhere in [
        "https://attacker.example/signing-cert.pem".to_owned(),
        format!("http://127.0.0.1:{}/signing-cert.pem", host.port),
        host.url("/signing-cert.pem?x=.pem"),
        host.url("/signing-cert"),
        format!("https://user@127.0.0.1:{}/signing-cert.pem", host.port),
    ] {
        post(
            &app,
            &message,
            &message.signed("signing-key.pem", 1, &elsewhere),
        )
        .await
        .assert_problem(400, "malformed_signature");
    }
    // Raw message delivery (the message alone, unsigned), a member named twice, no signature.
    post(&app, &message, b"{\"order\":2}")
        .await
        .assert_problem(400, "missing_signature");
    post(&app, &message, b"order 2")
        .await
        .assert_problem(400, "malformed_signature");
    let body = String::from_utf8(message.signed("signing-key.pem", 1, &url)).expect("text");
    let twice = body.replacen("{\n", "{\n  \"MessageId\" : \"another\",\n", 1);
    post(&app, &message, twice.as_bytes())
        .await
        .assert_problem(400, "malformed_signature");
    for spelling in ["message", "Meſſage", "type"] {
        let folded = body.replacen("{\n", &format!("{{\n  \"{spelling}\" : \"evil\",\n"), 1);
        post(&app, &message, folded.as_bytes())
            .await
            .assert_problem(400, "malformed_signature");
    }
    let unsigned = body.replace("\"Signature\" :", "\"Unsigned\" :");
    post(&app, &message, unsigned.as_bytes())
        .await
        .assert_problem(400, "missing_signature");
    // An unsubscribe link elsewhere than SNS's host is not stored for the application.
    let unsubscribe = body.replacen(
        "{\n",
        "{\n  \"UnsubscribeURL\" : \"https://attacker.example/?Action=Unsubscribe\",\n",
        1,
    );
    post(&app, &message, unsubscribe.as_bytes())
        .await
        .assert_problem(400, "malformed_signature");

    assert_eq!(app.count_events().await, 0);
    assert_eq!(host.requests("/signing-cert"), 0);
    assert_eq!(host.requests("/signing-cert.pem?x=.pem"), 0);
    // The genuine message still goes through.
    post(&app, &message, &message.signed("signing-key.pem", 1, &url))
        .await
        .assert_status(200);
    assert_eq!(app.count_events().await, 1);
}

async fn a_confirmation_visits_its_url_and_is_never_stored(backend: Backend) {
    let Sns {
        host,
        application,
        app,
    } = spawn_with_sns(backend, "").await;
    let url = host.url(CERTIFICATE);
    let confirm = "/confirm?Action=ConfirmSubscription&Token=2336412f";
    let confirmation = SnsMessage::confirmation(
        "SubscriptionConfirmation",
        "c0ffee00-0000-4000-8000-000000000001",
        &host.url(confirm),
    );
    let confirmed = post(
        &app,
        &confirmation,
        &confirmation.signed("signing-key.pem", 1, &url),
    )
    .await;
    confirmed.assert_status(200);
    assert_eq!(
        confirmed.json()["subscription"],
        "confirmed",
        "{}",
        confirmed.text()
    );
    assert_eq!(host.requests(confirm), 1);

    // A SubscribeURL that fails: 503, SNS (or the operator) asks again.
    let failing = SnsMessage::confirmation(
        "SubscriptionConfirmation",
        "c0ffee00-0000-4000-8000-000000000002",
        &host.url("/fail?Action=ConfirmSubscription"),
    );
    let unconfirmed = post(&app, &failing, &failing.signed("signing-key.pem", 2, &url)).await;
    unconfirmed.assert_problem(503, "subscription_unconfirmed");
    assert!(unconfirmed.header("Retry-After").is_some());
    // A SubscribeURL elsewhere is never visited.
    let elsewhere = SnsMessage::confirmation(
        "SubscriptionConfirmation",
        "c0ffee00-0000-4000-8000-000000000003",
        "https://attacker.example/confirm",
    );
    post(
        &app,
        &elsewhere,
        &elsewhere.signed("signing-key.pem", 1, &url),
    )
    .await
    .assert_problem(400, "malformed_signature");

    let unsubscribed = SnsMessage::confirmation(
        "UnsubscribeConfirmation",
        "c0ffee00-0000-4000-8000-000000000004",
        &host.url("/confirm?Action=Subscribe"),
    );
    let answer = post(
        &app,
        &unsubscribed,
        &unsubscribed.signed("signing-key.pem", 1, &url),
    )
    .await;
    answer.assert_status(200);
    assert_eq!(answer.json()["subscription"], "unsubscribed");
    assert_eq!(
        host.requests("/confirm?Action=Subscribe"),
        0,
        "nothing visited"
    );

    assert_eq!(app.count_events().await, 0);
    // Deliveries are sent only from their rows, written with the event: none, none sent.
    assert_eq!(app.count_deliveries().await, 0);
    assert!(application
        .received_requests()
        .await
        .expect("recorded")
        .is_empty());
}

async fn an_unavailable_certificate_is_503_a_missing_one_401_and_nothing_is_stored(
    backend: Backend,
) {
    let Sns {
        host,
        application: _,
        app,
    } = spawn_with_sns(backend, "").await;
    let message =
        SnsMessage::notification("d15ea5e0-0000-4000-8000-000000000001", "{}", Utc::now());
    let signed_for = |path: &str| message.signed("signing-key.pem", 1, &host.url(path));
    // The host cannot answer: 503, and within a few seconds it is not asked again.
    let path = "/unavailable-cert.pem";
    for _ in 0..2 {
        let refused = post(&app, &message, &signed_for(path)).await;
        refused.assert_problem(503, "certificate_unavailable");
        assert!(refused.header("Retry-After").is_some());
        // Nothing internal reaches the sender: no URL, no TLS or connection detail.
        assert!(!refused.text().contains("127.0.0.1"), "{}", refused.text());
    }
    assert_eq!(host.requests(path), 1);
    // The host answers that it serves no certificate there (404), serves an expired one, a
    // redirect (never followed) or 20 KiB: no signature can verify, 401, remembered.
    for path in [
        "/missing-cert.pem",
        "/expired-cert.pem",
        "/redirect-cert.pem",
        "/big-cert.pem",
    ] {
        for _ in 0..2 {
            post(&app, &message, &signed_for(path))
                .await
                .assert_problem(401, "bad_signature");
        }
        assert_eq!(host.requests(path), 1, "{path}");
    }
    assert_eq!(
        host.requests(CERTIFICATE),
        0,
        "the redirect was not followed"
    );
    assert_eq!(app.count_events().await, 0);
    // The source still takes a message whose certificate is there.
    let url = host.url(CERTIFICATE);
    post(&app, &message, &message.signed("signing-key.pem", 1, &url))
        .await
        .assert_status(200);
    assert_eq!(app.count_events().await, 1);
}

async fn concurrent_copies_fetch_the_certificate_once_and_are_one_event(backend: Backend) {
    const COPIES: usize = 24;
    let Sns {
        host,
        application,
        app,
    } = spawn_with_sns(backend, "").await;
    let app = Arc::new(app);
    let url = host.url(CERTIFICATE);
    let message = SnsMessage::notification(
        "0dd1ce00-0000-4000-8000-000000000001",
        "{\"order\":24}",
        Utc::now(),
    );
    let body = message.signed("signing-key.pem", 2, &url);
    for reply in post_at_once(&app, &message, &body, COPIES).await {
        reply.assert_status(200);
    }
    assert_eq!(
        host.requests(CERTIFICATE),
        1,
        "one fetch for 24 concurrent requests"
    );
    assert_eq!(app.count_events().await, 1);
    crate::helpers::each_delivered_once(&app, &application, 1).await;
}

/// A source whose event id is read from an unsigned member (a message attribute): a copy
/// re-sent with that member changed is another event id, but what was signed is the same
/// permanent fact, so it has no second effect — one delivery.
async fn an_event_id_read_from_an_unsigned_member_makes_no_second_effect(backend: Backend) {
    let settings = "event_id = \"json:/MessageAttributes/id/Value\"\n";
    let Sns {
        host,
        application,
        app,
    } = spawn_with_sns(backend, settings).await;
    let message =
        SnsMessage::notification("a77a0000-0000-4000-8000-000000000001", "{}", Utc::now());
    let body = String::from_utf8(message.signed("signing-key.pem", 2, &host.url(CERTIFICATE)))
        .expect("text");
    let with_id = |id: &str| {
        let attribute = format!(
            "{{\n  \"MessageAttributes\" : {{\"id\":{{\"Type\":\"String\",\"Value\":\"{id}\"}}}},\n"
        );
        body.replacen("{\n", &attribute, 1).into_bytes()
    };
    let first = post(&app, &message, &with_id("order-1")).await;
    first.assert_status(200);
    assert_eq!(first.json()["event_id"], "order-1");
    let second = post(&app, &message, &with_id("order-2")).await;
    second.assert_status(200);
    assert_ne!(second.json()["outcome"], "accepted", "{}", second.text());
    crate::helpers::each_delivered_once(&app, &application, 1).await;
}

/// `inlet sign` cannot sign for an sns source, and says why rather than that it lacks a
/// secret; `inlet check-config` takes the source and names its horizon.
#[test]
fn inlet_sign_refuses_an_sns_source_and_says_why() {
    let dir = std::env::temp_dir().join(format!("inlet-sns-sign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let config = dir.join("inlet.toml");
    let topic = crate::helpers::SNS_TOPIC;
    std::fs::write(
        &config,
        format!("[[sources]]\nname = \"orders\"\nscheme = \"sns\"\n[sources.sns]\ntopics = [\"{topic}\"]\n"),
    )
    .expect("config");
    let body = dir.join("body.json");
    std::fs::write(&body, "{}").expect("body");
    let inlet = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
            .arg("--config")
            .arg(&config)
            .args(args)
            .env_remove("INLET_SIGNING_KEY")
            .output()
            .expect("run inlet")
    };
    let signed = inlet(&[
        "sign",
        "--source",
        "orders",
        "--body",
        &body.display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&signed.stderr);
    assert!(!signed.status.success());
    assert!(stderr.contains("AWS signs SNS messages"), "{stderr}");
    let checked = inlet(&["check-config"]);
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{stdout}");
    assert!(stdout.contains("source orders (sns)"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A certificate is cached while it is within its validity: once the instance's clock has
/// passed its end, its URL is fetched again (it may serve a successor), and a message
/// signed with the expired one's key is refused.
async fn a_cached_certificate_that_expired_is_fetched_again(backend: Backend) {
    // The fixtures' expired certificate is valid from 2019-01-01 to 2020-01-01.
    let in_2019 = DateTime::from_timestamp(1_560_000_000, 0).expect("June 2019");
    let options = TestOptions {
        clock_at: Some(in_2019),
        clock_stopped: true,
        ..Default::default()
    };
    let Sns {
        host,
        application: _,
        app,
    } = spawn_with_sns_at(backend, "", options).await;
    let path = "/expired-cert.pem";
    let sent = |id: &str, at| {
        let message = SnsMessage::notification(id, "{}", at);
        let body = message.signed("expired-key.pem", 2, &host.url(path));
        (message, body)
    };
    let (message, body) = sent("e0e0e0e0-0000-4000-8000-000000000001", in_2019);
    post(&app, &message, &body).await.assert_status(200);
    let (message, body) = sent("e0e0e0e0-0000-4000-8000-000000000002", in_2019);
    post(&app, &message, &body).await.assert_status(200);
    assert_eq!(host.requests(path), 1, "cached while valid");
    let in_2020 = in_2019 + Duration::days(365);
    app.clock.advance(Duration::days(365));
    let (message, body) = sent("e0e0e0e0-0000-4000-8000-000000000003", in_2020);
    post(&app, &message, &body)
        .await
        .assert_problem(401, "bad_signature");
    assert_eq!(host.requests(path), 2, "fetched again once expired");
    assert_eq!(app.count_events().await, 2);
}

/// With AWS's hosts (no `certificate_hosts`), `SigningCertURL` must be on
/// `sns.<region>.amazonaws.com` (or `.com.cn`) where `<region>` has a region's shape:
/// `sns.s3-us-west-2.amazonaws.com` is the legacy address of an S3 bucket named `sns`,
/// which anyone could own. Refused `400` with the reason, before anything is fetched (no
/// such host is reached: a fetch would be `503`).
async fn a_certificate_url_off_an_sns_region_is_refused_before_any_fetch(backend: Backend) {
    let topic = crate::helpers::SNS_TOPIC;
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"sns\"\nscheme = \"sns\"\n[sources.sns]\ntopics = [\"{topic}\"]\n"
        ),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let message =
        SnsMessage::notification("5e5e5e5e-0000-4000-8000-000000000001", "{}", Utc::now());
    let file = "SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem";
    for host in [
        "sns.s3-us-west-2.amazonaws.com",
        "sns.s3-external-1.amazonaws.com",
        "sns.s3-website-us-east-1.amazonaws.com",
        "sns.my-bucket.amazonaws.com",
        "sns.compute-1.amazonaws.com",
        "sns.US-EAST-1.amazonaws.com",
        "sns.us-east.amazonaws.com.cn",
    ] {
        let url = format!("https://{host}/{file}");
        let refused = post(&app, &message, &message.signed("signing-key.pem", 2, &url)).await;
        refused.assert_problem(400, "malformed_signature");
        assert!(
            refused.text().contains("region"),
            "{host}: {}",
            refused.text()
        );
    }
    let url = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.txt";
    let refused = post(&app, &message, &message.signed("signing-key.pem", 2, url)).await;
    refused.assert_problem(400, "malformed_signature");
    assert!(refused.text().contains(".pem"), "{}", refused.text());
    assert_eq!(app.count_events().await, 0);
}

/// The seconds a refusal's `Retry-After` asks for.
fn retry_after(reply: &crate::helpers::Reply) -> i64 {
    let header = reply.header("Retry-After").unwrap_or_default();
    header
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {header:?}"))
}

/// A certificate host that cannot answer is remembered as such for a few seconds, and the
/// `503`'s `Retry-After` is what is left of them, rounded up: a sender that waits exactly
/// that long (on the instance's clock) has its certificate asked for again.
async fn an_unavailable_certificate_is_asked_again_once_its_retry_after_is_waited(
    backend: Backend,
) {
    let options = TestOptions {
        clock_stopped: true,
        ..Default::default()
    };
    let Sns { host, app, .. } = spawn_with_sns_at(backend, "", options).await;
    let message =
        SnsMessage::notification("7a7a7a7a-0000-4000-8000-000000000001", "{}", Utc::now());
    let path = "/unavailable-cert.pem";
    let body = message.signed("signing-key.pem", 1, &host.url(path));
    let first = post(&app, &message, &body).await;
    first.assert_problem(503, "certificate_unavailable");
    let wait = retry_after(&first);
    assert!(wait >= 1, "{wait}");
    // Part of the wait, and not a whole second: what is left is rounded up.
    app.clock.advance(Duration::milliseconds(1500));
    let meanwhile = post(&app, &message, &body).await;
    meanwhile.assert_problem(503, "certificate_unavailable");
    assert_eq!(retry_after(&meanwhile), (wait * 1000 - 1500 + 999) / 1000);
    assert_eq!(host.requests(path), 1, "remembered");
    app.clock
        .advance(Duration::seconds(retry_after(&meanwhile)));
    post(&app, &message, &body)
        .await
        .assert_problem(503, "certificate_unavailable");
    assert_eq!(host.requests(path), 2, "asked again once the wait was over");
}

/// SNS re-sends a confirmation it was not answered for, and anyone who captured one can
/// replay it: each instance visits a `SubscribeURL` once — concurrent copies wait for that
/// visit — and remembers a confirmed one for the tolerance window (no replay verifies
/// later), a failing one for as long as its `Retry-After` says.
async fn a_replayed_confirmation_visits_its_url_once(backend: Backend) {
    const COPIES: usize = 12;
    let options = TestOptions {
        clock_stopped: true,
        ..Default::default()
    };
    let Sns { host, app, .. } = spawn_with_sns_at(backend, "", options).await;
    let app = Arc::new(app);
    // A signed confirmation naming `path` on the host as its SubscribeURL.
    let confirming = |id: &str, path: &str| {
        let message = SnsMessage::confirmation("SubscriptionConfirmation", id, &host.url(path));
        let body = message.signed("signing-key.pem", 2, &host.url(CERTIFICATE));
        (message, body)
    };
    let confirm = "/confirm?Action=ConfirmSubscription&Token=replayed";
    let (confirmation, body) = confirming("c0ffee00-0000-4000-8000-0000000000a1", confirm);
    for reply in post_at_once(&app, &confirmation, &body, COPIES).await {
        reply.assert_status(200);
        assert_eq!(
            reply.json()["subscription"],
            "confirmed",
            "{}",
            reply.text()
        );
    }
    app.clock.advance(Duration::minutes(60));
    post(&app, &confirmation, &body).await.assert_status(200);
    assert_eq!(host.requests(confirm), 1, "one visit for every copy");

    let failing_path = "/fail?Action=ConfirmSubscription&Token=failing";
    let (failing, failing_body) = confirming("c0ffee00-0000-4000-8000-0000000000a2", failing_path);
    let mut waits = Vec::new();
    for _ in 0..3 {
        let refused = post(&app, &failing, &failing_body).await;
        refused.assert_problem(503, "subscription_unconfirmed");
        waits.push(retry_after(&refused));
    }
    assert_eq!(
        host.requests(failing_path),
        1,
        "a failing visit is remembered"
    );
    app.clock.advance(Duration::seconds(waits[2]));
    post(&app, &failing, &failing_body)
        .await
        .assert_problem(503, "subscription_unconfirmed");
    assert_eq!(
        host.requests(failing_path),
        2,
        "visited again after Retry-After"
    );
    assert_eq!(app.count_events().await, 0);
}
