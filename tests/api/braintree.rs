//! Braintree end to end: a form of `bt_signature` and `bt_payload` (base64 XML) signed with
//! a key pair is one event — the payload's digest its id, the XML's `<kind>` its type —
//! delivered once as received; a retry is answered from the store, concurrent copies are
//! one event and one delivery, a tampered payload is 401, missing fields 400.

use crate::batches::listed_types;
use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions};
use crate::on_both_backends;
use inlet::secret::Secret;
use inlet::signature::{Signer, BRAINTREE};
use sha2::{Digest, Sha256};
use std::sync::Arc;

on_both_backends!(
    a_notification_is_one_event_of_its_kind_delivered_once,
    concurrent_copies_are_one_event_and_one_delivery
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const PAIRS: [&str; 2] = [
    "dgq6r8pwk3s7xv2m:4f0c2b7e9a1d83c56e0b9f7a2d4c8e15",
    "z9hn4tqc2bx8m5wa:b83e1f04a6c92d7e5f1a0c3b8d6e2f49",
];
const FORM: [(&str, &str); 1] = [("Content-Type", "application/x-www-form-urlencoded")];

async fn spawn_with_braintree(backend: Backend, application: &str) -> TestApp {
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"braintree\"\nscheme = \"braintree\"\n\
             secrets = [\"{}\", \"{}\"]\n[[sources.destinations]]\nurl = \"{application}\"\n\
             secret = \"{APP_SECRET}\"\n",
            PAIRS[0], PAIRS[1]
        ),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// A notification of `kind` about `subject`, as the form Braintree posts, signed with `pair`.
fn notification(kind: &str, subject: &str, pair: &str) -> Vec<u8> {
    let xml = format!(
        "<notification><timestamp type=\"datetime\">2026-12-04T18:00:00Z</timestamp>\
         <kind>{kind}</kind><subject><subscription><id>{subject}</id></subscription>\
         </subject></notification>"
    );
    BRAINTREE
        .sign_body(xml.as_bytes(), &Secret::new(pair))
        .expect("Braintree signs in the body")
        .expect("a key pair")
}

/// The `bt_payload` of a form, decoded.
fn payload(form: &[u8]) -> String {
    form_urlencoded::parse(form)
        .find(|(name, _)| name == "bt_payload")
        .map(|(_, value)| value.into_owned())
        .expect("bt_payload")
}

async fn a_notification_is_one_event_of_its_kind_delivered_once(backend: Backend) {
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_with_braintree(backend, &format!("{}/events", application.uri())).await;
    let form = notification("subscription_went_past_due", "sub_8k2m", PAIRS[0]);
    let first = app.post_webhook("braintree", &form, &FORM).await;
    first.assert_status(200);
    assert_eq!(first.json()["outcome"], "accepted", "{}", first.text());
    let digest = hex::encode(Sha256::digest(payload(&form).as_bytes()));
    assert_eq!(first.json()["event_id"], digest);

    // The same notification, signed with the other pair of the rotation: a retry.
    let again = notification("subscription_went_past_due", "sub_8k2m", PAIRS[1]);
    let replay = app.post_webhook("braintree", &again, &FORM).await;
    assert!(replay.replayed(), "{}", replay.text());
    assert_eq!(replay.body, first.body);

    let text = String::from_utf8(form.clone()).expect("ASCII");
    let at = text.find("bt_payload=").expect("payload") + 20;
    let swapped = if &text[at..=at] == "A" { "B" } else { "A" };
    let tampered = format!("{}{swapped}{}", &text[..at], &text[at + 1..]);
    app.post_webhook("braintree", tampered.as_bytes(), &FORM)
        .await
        .assert_problem(401, "bad_signature");
    let removed = notification(
        "check",
        "x",
        "q1w2e3r4t5y6u7i8:0000000000000000ffff0000ffff0000",
    );
    app.post_webhook("braintree", &removed, &FORM)
        .await
        .assert_problem(401, "bad_signature");
    let only_payload = format!("bt_payload={}", &text[at - 9..]);
    app.post_webhook("braintree", only_payload.as_bytes(), &FORM)
        .await
        .assert_problem(400, "missing_signature");
    let only_signature = text.split('&').next().expect("bt_signature");
    app.post_webhook("braintree", only_signature.as_bytes(), &FORM)
        .await
        .assert_problem(400, "missing_signature");

    let other = notification("dispute_opened", "dsp_7w1c", PAIRS[0]);
    app.post_webhook("braintree", &other, &FORM)
        .await
        .assert_status(200);
    crate::helpers::each_delivered_once(&app, &application, 2).await;
    let delivered = application.received_requests().await.expect("recorded");
    assert!(delivered.iter().any(|request| request.body == form));
    assert_eq!(app.count_events().await, 2);
    assert_eq!(
        listed_types(&app, "braintree").await,
        ["dispute_opened", "subscription_went_past_due"]
    );
}

async fn concurrent_copies_are_one_event_and_one_delivery(backend: Backend) {
    const COPIES: usize = 24;
    let application = crate::helpers::application_answering(200).await;
    let app = spawn_with_braintree(backend, &format!("{}/events", application.uri())).await;
    let app = Arc::new(app);
    let form = notification("transaction_settled", "txn_4q9z", PAIRS[0]);
    let barrier = Arc::new(tokio::sync::Barrier::new(COPIES));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..COPIES {
        let (app, barrier, form) = (app.clone(), barrier.clone(), form.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            app.post_webhook("braintree", &form, &FORM).await
        });
    }
    while let Some(reply) = tasks.join_next().await {
        reply.expect("the request task").assert_status(200);
    }
    assert_eq!(app.count_events().await, 1);
    crate::helpers::each_delivered_once(&app, &application, 1).await;
    assert_eq!(
        listed_types(&app, "braintree").await,
        ["transaction_settled"]
    );
}
