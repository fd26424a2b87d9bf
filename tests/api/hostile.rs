//! Hostile and malformed input: every identity value is bounded, a delivery that can never
//! be sent is a dead letter at once, a slow body gives its connection back, outsiders see
//! no internals, and admin filters are checked before any query. Nothing is stored for a
//! refused request, and the server stays healthy after each case.

use crate::helpers::{
    eventually, spawn_app, spawn_app_with, stripe_event, Backend, TestApp, TestOptions,
    STRIPE_SECRET,
};
use crate::on_both_backends;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    an_overlong_or_control_type_is_refused_and_nothing_stored,
    an_overlong_or_control_fact_key_is_refused_and_nothing_stored,
    header_sourced_identity_values_are_bounded_too,
    a_delivery_that_cannot_be_built_is_dead_at_once,
    a_trickled_body_is_408_and_normal_requests_go_on,
    a_failure_inside_inlet_tells_outsiders_only_the_request_id,
    admin_filters_are_checked_before_any_query,
);

/// A Stripe-shaped event with this type and payment id, as raw JSON text.
fn event_with(id: &str, event_type: &str, object_id: &str) -> Vec<u8> {
    serde_json::json!({
        "id": id,
        "type": event_type,
        "data": { "object": { "id": object_id } },
    })
    .to_string()
    .into_bytes()
}

async fn assert_healthy(app: &TestApp) {
    let ok = app
        .post_stripe(&stripe_event(
            &format!("evt_ok_{}", fastrand::u32(..)),
            "charge.refunded",
            "ch_ok",
        ))
        .await;
    assert_eq!(ok.status, 200, "the server still accepts events");
}

async fn an_overlong_or_control_type_is_refused_and_nothing_stored(backend: Backend) {
    let app = spawn_app(backend).await;
    let fits = "t".repeat(255);
    app.post_stripe(&event_with("evt_fits", &fits, "o"))
        .await
        .assert_status(200);
    let before = app.count_events().await;
    for (i, bad) in [
        "t".repeat(256),
        "t".repeat(3_000),
        "nul\u{0}inside".to_owned(),
        "line\nbreak".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let reply = app
            .post_stripe(&event_with(&format!("evt_t{i}"), bad, "o"))
            .await;
        reply.assert_problem(400, "invalid_event_type");
        assert!(reply.json()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("event type")));
    }
    assert_eq!(app.count_events().await, before, "nothing stored");
    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains(r#"outcome="invalid_event_type""#),
        "counted under its own reason"
    );
    assert_healthy(&app).await;
}

async fn an_overlong_or_control_fact_key_is_refused_and_nothing_stored(backend: Backend) {
    let app = spawn_app(backend).await;
    for (i, bad) in ["p".repeat(2_800), "pi_\u{0}".to_owned()]
        .iter()
        .enumerate()
    {
        let body = event_with(&format!("evt_k{i}"), "payment_intent.succeeded", bad);
        app.post_stripe(&body)
            .await
            .assert_problem(400, "invalid_fact_key");
    }
    assert_eq!(app.count_events().await, 0);
    assert_eq!(app.count_facts().await, 0);
    assert_healthy(&app).await;
}

async fn header_sourced_identity_values_are_bounded_too(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    let send = |event_type: Vec<u8>, delivery: String| {
        let mut headers = app.sign_for("github", body, &delivery, None);
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case("x-github-event"));
        let app = &app;
        async move {
            let mut request = app
                .client
                .post(format!("{}/webhooks/github", app.address))
                .body(body.to_vec())
                .header(
                    "X-GitHub-Event",
                    reqwest::header::HeaderValue::from_bytes(&event_type).expect("header"),
                );
            for (name, value) in headers {
                request = request.header(name, value);
            }
            request.send().await.expect("send")
        }
    };
    let long = send(vec![b'e'; 300], "gh-long".to_owned()).await;
    assert_eq!(long.status().as_u16(), 400);
    let not_utf8 = send(vec![b'p', 0xff, 0xfe], "gh-latin".to_owned()).await;
    assert_eq!(not_utf8.status().as_u16(), 400);
    let body: serde_json::Value =
        serde_json::from_slice(&not_utf8.bytes().await.expect("body")).expect("problem");
    assert_eq!(body["reason"], "invalid_event_type");
    let long_id = send(b"ping".to_vec(), "d".repeat(300)).await;
    assert_eq!(long_id.status().as_u16(), 400);
    assert_eq!(app.count_events().await, 0);
    assert_healthy(&app).await;
}

async fn a_delivery_that_cannot_be_built_is_dead_at_once(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let destination = format!(
        "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"",
        server.uri()
    );
    let app = spawn_app_with(
        backend,
        TestOptions {
            destination: Some(destination),
            ..Default::default()
        },
    )
    .await;
    // A row written before types were bounded: a newline no header can carry.
    let mut conn = app.direct_connection();
    tokio::task::spawn_blocking(move || {
        let now = chrono::Utc::now().naive_utc();
        inlet::delivery::NewDelivery {
            source: "stripe",
            event_id: "evt_unsendable",
            event_type: Some("line\nbreak"),
            destination: "app",
            payload: Some(b"{}"),
            content_type: "application/json",
            status: "pending",
            attempt: 0,
            next_attempt_at: now,
            deadline_at: now + chrono::Duration::days(3),
            created_at: now,
            trace_parent: None,
            filter_pending: false,
            last_error: None,
            settled_at: None,
        }
        .enqueue(&mut conn)
        .expect("insert");
    })
    .await
    .expect("insert task");
    let dead = || async {
        app.admin("/admin/deliveries?status=dead", None, None)
            .await
            .json()["deliveries"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    eventually("the dead letter", || async { dead().await.len() == 1 }).await;
    let row = &dead().await[0];
    assert_eq!(row["attempt"], 1, "no retries");
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot be built")),
        "{row}"
    );
    assert!(server
        .received_requests()
        .await
        .unwrap_or_default()
        .is_empty());
}

/// Opens a connection that announces `length` bytes and sends one.
async fn trickle(app: &TestApp, length: usize) -> tokio::net::TcpStream {
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let head = format!(
        "POST /webhooks/stripe HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Stripe-Signature: t=1,v1=00\r\nContent-Length: {length}\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

async fn a_trickled_body_is_408_and_normal_requests_go_on(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut slow = Vec::new();
    for _ in 0..30 {
        slow.push(trickle(&app, 1_000).await);
    }
    // A normal request is served while all 30 bodies still trickle: none of them has
    // been answered yet when it is.
    assert_healthy(&app).await;
    for stream in &slow {
        let mut byte = [0u8; 1];
        assert!(
            matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a slow connection was answered before the normal request"
        );
    }

    // Each slow one gets 408 once body_timeout (1s per MiB, at least once) passes.
    let mut answer = String::new();
    let mut first = slow.remove(0);
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut buffer = [0u8; 1024];
        let n = first.read(&mut buffer).await.expect("read");
        answer.push_str(&String::from_utf8_lossy(&buffer[..n]));
    })
    .await
    .expect("an answer within the deadline");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    let metrics = app.get("/metrics").await.text();
    assert!(metrics.contains(r#"outcome="request_timeout""#));
    assert_eq!(
        app.count_events().await,
        1,
        "only the healthy request's event"
    );
}

async fn a_failure_inside_inlet_tells_outsiders_only_the_request_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let body = stripe_event("evt_boom", "charge.refunded", "ch_boom");
    app.faults.crash_after_fact("evt_boom");
    let signature = crate::helpers::stripe_signature(STRIPE_SECRET, &body, app.now().timestamp());
    let reply = app
        .post_webhook(
            "stripe",
            &body,
            &[
                ("Stripe-Signature", signature.as_str()),
                ("X-Request-Id", "req-boom-1"),
            ],
        )
        .await;
    reply.assert_problem(500, "internal_error");
    assert_eq!(
        reply.json()["detail"],
        "internal error (request id req-boom-1)",
        "no internals, only where to look in the log"
    );
    assert_healthy(&app).await;
}

async fn admin_filters_are_checked_before_any_query(backend: Backend) {
    let app = spawn_app(backend).await;
    for path in [
        "/admin/events?source=%00",
        "/admin/events?type=a%0Ab",
        "/admin/events?since=-262143-01-01T00:00:00Z",
        "/admin/events?until=%2B262142-12-31T23:59:59Z",
        &format!("/admin/events?source={}", "s".repeat(300)),
        "/admin/deliveries?destination=%00",
        "/admin/events/%00/evt",
        "/admin/events?limit=100000",
    ] {
        app.admin(path, None, None)
            .await
            .assert_problem(400, "invalid_request");
    }
    let body = serde_json::json!({ "filter": { "source": "\u{0}" }, "dry_run": true });
    app.admin("/admin/replay", Some(&body), None)
        .await
        .assert_problem(400, "invalid_request");
    let body = serde_json::json!({ "events": [{ "source": "stripe", "event_id": "e\u{0}" }] });
    app.admin("/admin/replay", Some(&body), Some("nul-1"))
        .await
        .assert_problem(400, "invalid_request");
    app.admin("/admin/events?source=stripe", None, None)
        .await
        .assert_status(200);
}
