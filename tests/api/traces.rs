//! OpenTelemetry traces over OTLP/HTTP, received by a stand-in collector that decodes the
//! protobuf export ([`OtlpReceiver`]): one webhook and its delivery are one trace, the
//! application receives a `traceparent` of that trace, a sender's `traceparent` is
//! continued, and nothing is exported (or sent on) when tracing is off.

use crate::helpers::{
    eventually, serve_logging_json, spawn_app_with, spawn_database_holder, stripe_event,
    trace_tree, unique_name, Backend, OtlpReceiver, ReceivedSpan, TestApp, TestOptions,
    STRIPE_SECRET,
};
use crate::on_both_backends;
use std::time::Duration;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    a_webhook_and_its_delivery_are_one_trace_that_the_application_joins,
    a_senders_traceparent_is_continued,
    a_failed_attempt_and_its_retry_are_spans_of_the_same_trace,
    nothing_is_exported_or_sent_on_when_tracing_is_off,
    an_unsampled_trace_exports_nothing_and_still_propagates,
    sweeps_and_operator_actions_are_spans,
    the_trace_id_is_in_the_log_lines,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A payload value that must never become an attribute.
const PAYLOAD_MARKER: &str = "pi_secret_payload_value";

async fn application(status: u16) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(status))
        .mount(&server)
        .await;
    server
}

async fn traced_app(backend: Backend, app: &MockServer, telemetry: Option<String>) -> TestApp {
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\n\
             retry_base = \"20ms\"\nretry_cap = \"50ms\"",
            app.uri()
        )),
        telemetry,
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

/// Spans received until `check` holds for them (up to 15 s).
async fn spans_until(
    receiver: &OtlpReceiver,
    what: &str,
    check: impl Fn(&[ReceivedSpan]) -> bool,
) -> Vec<ReceivedSpan> {
    let check = &check;
    eventually(what, || async move { check(&receiver.spans().await) }).await;
    receiver.spans().await
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

/// Posts a stripe webhook signed now, with `traceparent`.
async fn post_traced(app: &TestApp, body: &[u8], traceparent: &str) -> crate::helpers::Reply {
    let signature = crate::helpers::stripe_signature(STRIPE_SECRET, body, app.now().timestamp());
    let headers = [
        ("Stripe-Signature", signature),
        ("traceparent", traceparent.to_owned()),
    ];
    app.post_webhook("stripe", body, &headers).await
}

/// Waits until the application has received `n` requests.
async fn received(app: &MockServer, n: usize) {
    eventually("the deliveries", || async {
        app.received_requests().await.unwrap_or_default().len() == n
    })
    .await;
}

/// The `traceparent` each request to the application carried.
async fn traceparents(app: &MockServer) -> Vec<Option<String>> {
    let requests = app.received_requests().await.unwrap_or_default();
    (requests.iter())
        .map(|r| {
            r.headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .collect()
}

async fn a_webhook_and_its_delivery_are_one_trace_that_the_application_joins(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let app_server = application(200).await;
    let app = traced_app(backend, &app_server, Some(receiver.telemetry(1.0))).await;
    let body = stripe_event("evt_traced", "payment_intent.succeeded", PAYLOAD_MARKER);
    app.post_stripe(&body).await.assert_status(200);

    let spans = spans_until(
        &receiver,
        "the webhook's and the delivery's spans",
        |spans| {
            !named(spans, "POST /webhooks/{source}").is_empty() && !named(spans, "POST").is_empty()
        },
    )
    .await;
    let webhook = one(&spans, "POST /webhooks/{source}");
    let trace = webhook.trace_id.clone();
    println!("{}", trace_tree(&spans, &trace));
    assert_eq!(webhook.kind, 2, "a server span");
    assert_eq!(
        webhook.parent_span_id, "",
        "no traceparent came: a new trace"
    );
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.route", "/webhooks/{source}"),
        ("http.response.status_code", "200"),
        ("inlet.source", "stripe"),
        ("inlet.event.id", "evt_traced"),
        ("inlet.outcome", "accepted"),
        ("url.path", "/webhooks/stripe"),
    ] {
        assert_eq!(webhook.attribute(key), value, "{key}");
    }
    assert_eq!(webhook.resource["service.name"], "inlet-test");
    assert_eq!(webhook.resource["deployment.environment"], "test");

    // Its steps, under it: verification, identity, the wait for a writer, the commit.
    for step in ["verify", "identify", "queued for a writer", "commit"] {
        let span = one(&spans, step);
        assert_eq!(span.trace_id, trace, "{step} is in the webhook's trace");
        assert_eq!(
            span.parent_span_id, webhook.span_id,
            "{step} is under the webhook"
        );
        assert!(
            span.start_ns >= webhook.start_ns && span.end_ns <= webhook.end_ns,
            "{step} inside the request"
        );
    }
    // The group commit it joined: the group's span id on the member's commit, and links
    // both ways.
    let commit = one(&spans, "commit");
    let group = one(&spans, "group commit");
    assert_eq!(commit.attribute("inlet.group.id"), group.span_id);
    assert_eq!(commit.attribute("inlet.group.size"), "1");
    let expected_db = if backend == Backend::Sqlite {
        "sqlite"
    } else {
        "postgresql"
    };
    assert_eq!(commit.attribute("db.system.name"), expected_db);
    assert_eq!(
        commit.links,
        vec![(group.trace_id.clone(), group.span_id.clone())]
    );
    assert_eq!(group.links, vec![(trace.clone(), webhook.span_id.clone())]);
    assert_eq!(
        group.parent_span_id, webhook.span_id,
        "in its recorded member's trace"
    );

    // The delivery attempt: a client span in the same trace, under the webhook's span.
    let attempt = one(&spans, "POST");
    assert_eq!(attempt.trace_id, trace);
    assert_eq!(attempt.parent_span_id, webhook.span_id);
    assert_eq!(attempt.kind, 3, "a client span");
    let port = app_server.address().port().to_string();
    for (key, value) in [
        ("http.request.method", "POST"),
        ("http.response.status_code", "200"),
        ("server.address", "127.0.0.1"),
        ("server.port", port.as_str()),
        ("inlet.destination", "app"),
        ("inlet.source", "stripe"),
        ("inlet.event.id", "evt_traced"),
        ("inlet.event.type", "payment_intent.succeeded"),
        ("inlet.delivery.attempt", "1"),
        ("inlet.delivery.verdict", "delivered"),
    ] {
        assert_eq!(attempt.attribute(key), value, "{key}");
    }
    // The application received the attempt's span as its parent: its spans join the trace.
    let sent = traceparents(&app_server).await;
    assert_eq!(
        sent,
        vec![Some(format!("00-{trace}-{}-01", attempt.span_id))]
    );

    // The trace id is on the event (the API and the console show it).
    let shown = app
        .admin("/admin/events/stripe/evt_traced", None, None)
        .await;
    assert_eq!(shown.json()["trace_id"], trace.as_str());

    // No payload and no secret became an attribute, anywhere.
    for span in &spans {
        for value in span.attributes.values() {
            assert!(!value.contains(PAYLOAD_MARKER), "payload in {span:?}");
            assert!(
                !value.contains(STRIPE_SECRET) && !value.contains(APP_SECRET),
                "secret in {span:?}"
            );
        }
    }
}

async fn a_senders_traceparent_is_continued(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let app_server = application(200).await;
    let app = traced_app(backend, &app_server, Some(receiver.telemetry(1.0))).await;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let body = stripe_event("evt_continued", "charge.succeeded", "ch_1");
    post_traced(&app, &body, &format!("00-{caller_trace}-{caller_span}-01"))
        .await
        .assert_status(200);

    let spans = spans_until(&receiver, "the continued trace", |spans| {
        !named(spans, "POST").is_empty()
    })
    .await;
    let webhook = one(&spans, "POST /webhooks/{source}");
    assert_eq!(
        webhook.trace_id, caller_trace,
        "the sender's trace continues"
    );
    assert_eq!(
        webhook.parent_span_id, caller_span,
        "under the sender's span"
    );
    let attempt = one(&spans, "POST");
    assert_eq!(attempt.trace_id, caller_trace);
    let sent = traceparents(&app_server).await;
    assert_eq!(
        sent,
        vec![Some(format!("00-{caller_trace}-{}-01", attempt.span_id))]
    );

    // A malformed traceparent is ignored: a new trace, and the webhook is accepted.
    let body = stripe_event("evt_malformed_parent", "charge.succeeded", "ch_2");
    post_traced(&app, &body, "00-zz-not-a-trace")
        .await
        .assert_status(200);
    let spans = spans_until(&receiver, "the second webhook's span", |spans| {
        named(spans, "POST /webhooks/{source}").len() == 2
    })
    .await;
    let second = (named(&spans, "POST /webhooks/{source}").into_iter())
        .find(|s| s.attribute("inlet.event.id") == "evt_malformed_parent")
        .expect("the second webhook's span");
    assert_ne!(second.trace_id, caller_trace);
    assert_eq!(second.parent_span_id, "");

    // An unverified request's traceparent is not continued: no one without the secret
    // writes into the caller's trace.
    let body = stripe_event("evt_forged_parent", "charge.succeeded", "ch_3");
    let headers = [
        ("Stripe-Signature", "t=1,v1=0000".to_owned()),
        ("traceparent", format!("00-{caller_trace}-{caller_span}-01")),
    ];
    let refused = app.post_webhook("stripe", &body, &headers).await;
    assert!(refused.status >= 400 && refused.status < 500);
    let spans = spans_until(&receiver, "the refused webhook's span", |spans| {
        named(spans, "POST /webhooks/{source}").len() == 3
    })
    .await;
    let forged = (named(&spans, "POST /webhooks/{source}").into_iter())
        .find(|s| s.attribute("inlet.event.id").is_empty())
        .expect("the refused webhook's span");
    assert_ne!(forged.trace_id, caller_trace, "a trace of its own");
    assert_eq!(forged.parent_span_id, "");
    assert_eq!(
        forged.status_code, 0,
        "a refusal is the sender's, not Inlet's error"
    );
    assert_ne!(forged.attribute("inlet.outcome"), "accepted");
}

async fn a_failed_attempt_and_its_retry_are_spans_of_the_same_trace(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let app_server = MockServer::start().await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("busy"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&app_server)
        .await;
    Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&app_server)
        .await;
    let app = traced_app(backend, &app_server, Some(receiver.telemetry(1.0))).await;
    let body = stripe_event("evt_retried", "charge.succeeded", "ch_retried");
    app.post_stripe(&body).await.assert_status(200);

    let spans = spans_until(&receiver, "two attempts", |spans| {
        named(spans, "POST").len() == 2
    })
    .await;
    let webhook = one(&spans, "POST /webhooks/{source}");
    let mut attempts = named(&spans, "POST");
    attempts.sort_by_key(|s| s.attribute("inlet.delivery.attempt").to_owned());
    let (failed, delivered) = (attempts[0], attempts[1]);
    assert_eq!(failed.trace_id, webhook.trace_id);
    assert_eq!(delivered.trace_id, webhook.trace_id);
    assert_eq!(failed.attribute("inlet.delivery.attempt"), "1");
    assert_eq!(failed.attribute("http.response.status_code"), "503");
    assert_eq!(failed.attribute("error.type"), "503");
    assert_eq!(failed.attribute("inlet.delivery.verdict"), "retry");
    assert_eq!(failed.status_code, 2, "an error status");
    // The answer's text ("busy") is stored with the attempt, never exported.
    assert_eq!(failed.status_message, "503");
    for span in &spans {
        assert!(!span.status_message.contains("busy"), "{span:?}");
        assert!(
            span.attributes.values().all(|v| !v.contains("busy")),
            "{span:?}"
        );
    }
    assert_eq!(delivered.attribute("inlet.delivery.attempt"), "2");
    assert_eq!(delivered.attribute("http.response.status_code"), "200");
    // Each attempt passed on its own span.
    let sent = traceparents(&app_server).await;
    let expected: Vec<Option<String>> = [failed, delivered]
        .iter()
        .map(|s| Some(format!("00-{}-{}-01", s.trace_id, s.span_id)))
        .collect();
    assert_eq!(sent, expected);
}

async fn nothing_is_exported_or_sent_on_when_tracing_is_off(backend: Backend) {
    // A collector is listening, but the configuration names none.
    let receiver = OtlpReceiver::start().await;
    let app_server = application(200).await;
    let app = traced_app(backend, &app_server, None).await;
    let body = stripe_event("evt_untraced", "charge.succeeded", "ch_untraced");
    post_traced(
        &app,
        &body,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    .await
    .assert_status(200);
    received(&app_server, 1).await;
    // Real time must pass: what is checked is that no export comes, and nothing marks its
    // absence; a configured exporter would send within its batch delay (100 ms in these
    // tests), so this waits several.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.exports().await, 0, "no span exported");
    assert_eq!(
        traceparents(&app_server).await,
        vec![None],
        "no traceparent sent on"
    );
    let shown = app
        .admin("/admin/events/stripe/evt_untraced", None, None)
        .await;
    assert!(shown.json()["trace_id"].is_null());
}

async fn an_unsampled_trace_exports_nothing_and_still_propagates(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let app_server = application(200).await;
    let app = traced_app(backend, &app_server, Some(receiver.telemetry(0.0))).await;
    let body = stripe_event("evt_unsampled", "charge.succeeded", "ch_unsampled");
    app.post_stripe(&body).await.assert_status(200);
    received(&app_server, 1).await;
    // Real time must pass: what is checked is that no span is exported, and nothing marks
    // its absence; this waits past several export intervals (a batch delay of 100 ms).
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        receiver.spans().await.len(),
        0,
        "a ratio of 0 records no trace"
    );
    // The context still travels, marked not sampled, so a downstream sampler agrees.
    let sent = traceparents(&app_server).await;
    let sent = sent[0].as_deref().expect("a traceparent");
    assert!(sent.starts_with("00-") && sent.ends_with("-00"), "{sent}");
}

async fn sweeps_and_operator_actions_are_spans(backend: Backend) {
    let receiver = OtlpReceiver::start().await;
    let options = TestOptions {
        sweep_interval: Some("200ms"),
        telemetry: Some(receiver.telemetry(1.0)),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let reply = app
        .client
        .post(format!("{}/admin/replay", app.address))
        .bearer_auth(crate::helpers::OPERATOR_TOKEN)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", "trace-replay-1")
        .header("traceparent", traceparent)
        .body(r#"{"source":"stripe","event_ids":["evt_never_received"]}"#)
        .send()
        .await
        .expect("the request reaches Inlet");
    let status = reply.status().as_u16().to_string();
    // Refused for its token: its traceparent is not continued.
    let forged = app
        .client
        .post(format!("{}/admin/deliveries/requeue", app.address))
        .bearer_auth("not-the-operator-token-0123456789")
        .header("Content-Type", "application/json")
        .header("traceparent", traceparent)
        .body("{}")
        .send()
        .await
        .expect("the request reaches Inlet");
    assert_eq!(forged.status().as_u16(), 401);
    // Reads are not actions: no span.
    app.admin("/admin/events", None, None)
        .await
        .assert_status(200);

    let spans = spans_until(&receiver, "a sweep and the replay", |spans| {
        !named(spans, "sweep").is_empty() && !named(spans, "POST /admin/replay").is_empty()
    })
    .await;
    let sweep = named(&spans, "sweep")[0];
    for key in [
        "inlet.sweep.events",
        "inlet.sweep.deliveries",
        "inlet.sweep.dead_letters",
        "inlet.sweep.skipped",
    ] {
        assert!(sweep.attributes.contains_key(key), "{key} on {sweep:?}");
    }
    let action = one(&spans, "POST /admin/replay");
    assert_eq!(action.kind, 2, "a server span");
    assert_eq!(
        action.trace_id, "0af7651916cd43dd8448eb211c80319c",
        "the caller's trace continues"
    );
    assert_eq!(action.attribute("http.route"), "/admin/replay");
    assert_eq!(action.attribute("http.response.status_code"), status);
    assert!(
        named(&spans, "GET /admin/events").is_empty(),
        "a read is no action"
    );
    let spans = spans_until(&receiver, "the refused action", |spans| {
        !named(spans, "POST /admin/deliveries/requeue").is_empty()
    })
    .await;
    let refused = one(&spans, "POST /admin/deliveries/requeue");
    assert_ne!(refused.trace_id, "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(refused.attribute("http.response.status_code"), "401");
}

/// `inlet serve` with JSON logs: the webhook's log line and its dead letter's carry the
/// trace id, and so does every line under a request (a refusal's, through its span).
async fn the_trace_id_is_in_the_log_lines(backend: Backend) {
    let holder = spawn_database_holder(backend).await;
    let receiver = OtlpReceiver::start().await;
    let refusing = application(400).await;
    let dir = std::env::temp_dir().join(format!("inlet-trace-logs-{}", unique_name()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let config = dir.join("inlet.toml");
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\n[database]\nurl = \"{}\"\n\
         [delivery]\npoll_interval = \"50ms\"\n[retention]\nsweeper = false\n\
         [telemetry]\n{}\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [[sources.destinations]]\nurl = \"{}/events\"\nsecret = \"{APP_SECRET}\"\n",
        holder.database_url(),
        receiver.telemetry(1.0),
        refusing.uri()
    );
    std::fs::write(&config, toml).expect("write config");
    let (mut child, lines) = serve_logging_json(&config);
    let (sender, mut entries) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) {
                if sender.send(entry).is_err() {
                    break;
                }
            }
        }
    });
    let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let refused = "7bf92f3577b34da6a3ce929d0e0e4736";
    let read = async {
        let mut found = Vec::new();
        while let Some(entry) = entries.recv().await {
            let fields = &entry["fields"];
            if fields["message"] == "inlet is listening" {
                let port = fields["port"].as_u64().expect("a port");
                let body = stripe_event("evt_logged", "charge.failed", "ch_logged");
                let signature = crate::helpers::stripe_signature(
                    STRIPE_SECRET,
                    &body,
                    chrono::Utc::now().timestamp(),
                );
                let reply = (holder.client)
                    .post(format!("http://127.0.0.1:{port}/webhooks/stripe"))
                    .header("Stripe-Signature", signature)
                    .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
                    .body(body)
                    .send()
                    .await
                    .expect("the request reaches inlet serve");
                assert_eq!(reply.status().as_u16(), 200);
                // A refused one: its line carries the trace id through the request's span.
                let reply = (holder.client)
                    .post(format!("http://127.0.0.1:{port}/webhooks/stripe"))
                    .header("Stripe-Signature", "t=1,v1=00")
                    .header("traceparent", format!("00-{refused}-00f067aa0ba902b7-01"))
                    .body("{}")
                    .send()
                    .await
                    .expect("the request reaches inlet serve");
                assert!(reply.status().is_client_error());
            }
            let message = fields["message"].as_str().unwrap_or_default();
            let trace_id = match message {
                "webhook processed" | "delivery dead-lettered" => &fields["trace_id"],
                "webhook rejected" => &entry["span"]["trace_id"],
                _ => continue,
            };
            found.push((message.to_owned(), trace_id.as_str().map(str::to_owned)));
            if found.len() == 3 {
                break;
            }
        }
        found
    };
    let mut found = tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("both lines within 30 s");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    found.sort();
    // The refused request's line has its trace id too: a trace of its own, since an
    // unverified request's traceparent is not continued.
    let (rejected, own_trace) = found.pop().expect("the refusal's line");
    assert_eq!(rejected, "webhook rejected");
    let own_trace = own_trace.expect("a trace id under the refused request");
    assert_eq!(own_trace.len(), 32);
    assert_ne!(own_trace, refused);
    assert_eq!(
        found,
        vec![
            ("delivery dead-lettered".to_owned(), Some(trace.to_owned())),
            ("webhook processed".to_owned(), Some(trace.to_owned())),
        ]
    );
}
