//! Operational notices: Inlet's own events (a breaker opened or closed, a dead letter,
//! dead letters over a threshold, a fingerprint mismatch, a refused reload, a handshake's
//! secret established or refused) delivered to
//! the `[notices]` destination like any event — signed, once each — in the standard or
//! the Slack form, only the types turned on, and never about the notices destination
//! itself.

use crate::helpers::{
    eventually, holds_within, spawn_app_with, stripe_event, verifies_as_standard_webhook, Backend,
    TestApp, TestOptions,
};
use crate::on_both_backends;
use diesel::prelude::*;
use inlet::db::schema::events;
use serde_json::Value;
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    a_breaker_opening_and_closing_is_told_once_each_and_signed,
    dead_letters_are_told_each_and_once_over_the_threshold,
    a_type_turned_off_is_not_sent,
    the_slack_form_sends_text_and_blocks,
    the_slack_form_quotes_a_senders_id_in_a_code_span,
    a_failing_notices_destination_tells_nothing_of_itself,
    a_fingerprint_mismatch_is_told_once_per_event_id,
    a_refused_reload_is_told,
    a_stalled_sweeper_is_told_once,
    a_handshake_secret_is_told_and_a_refused_handshake_once,
    dead_letters_of_a_destination_are_told_once_per_window_with_a_count,
    a_notice_that_comes_back_as_a_webhook_is_never_told_of,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NOTICES_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// A server answering every POST with `status`.
async fn answering(status: u16) -> MockServer {
    let server = MockServer::start().await;
    answer(&server, status).await;
    server
}

async fn answer(server: &MockServer, status: u16) {
    server.reset().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status))
        .mount(server)
        .await;
}

/// An Inlet delivering the stripe source to `app` (with `app_extra` lines) and its
/// notices to `notices` (with `notices_extra` lines under `[notices]`).
async fn app_with_notices(
    backend: Backend,
    app: &MockServer,
    app_extra: &str,
    notices: &MockServer,
    notices_extra: &str,
    config_file: bool,
) -> TestApp {
    let options = TestOptions {
        config_file,
        ..Default::default()
    };
    app_with_notices_and(backend, (app, app_extra), (notices, notices_extra), options).await
}

/// [`app_with_notices`] with more `options`.
async fn app_with_notices_and(
    backend: Backend,
    (app, app_extra): (&MockServer, &str),
    (notices, notices_extra): (&MockServer, &str),
    options: TestOptions,
) -> TestApp {
    let notices_table = format!(
        "[notices]\nurl = \"{}/inlet\"\nsecret = \"{NOTICES_SECRET}\"\n\
         retry_base = \"20ms\"\nretry_cap = \"100ms\"\n{notices_extra}\n",
        notices.uri()
    );
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\n{app_extra}",
            app.uri()
        )),
        clock_stopped: true,
        // Top-level tables before `[server]`; the harness takes a static string.
        operators: Box::leak(notices_table.into_boxed_str()),
        ..options
    };
    spawn_app_with(backend, options).await
}

/// Every notice the notices destination received, as JSON, in arrival order.
async fn received(server: &MockServer) -> Vec<Value> {
    (server.received_requests().await.unwrap_or_default())
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
        .collect()
}

/// The notices received of `kind`.
async fn of_type(server: &MockServer, kind: &str) -> Vec<Value> {
    let all = received(server).await;
    all.into_iter().filter(|n| n["type"] == kind).collect()
}

/// Waits for a notice of `kind`, gives the dispatcher time to send a second one, and
/// returns the one there is.
async fn told_once(server: &MockServer, kind: &str) -> Value {
    eventually(&format!("a {kind} notice"), || async {
        !of_type(server, kind).await.is_empty()
    })
    .await;
    let_it_poll().await;
    let mut told = of_type(server, kind).await;
    assert_eq!(told.len(), 1, "{kind} told once: {told:?}");
    told.remove(0)
}

/// Gives the dispatcher (polling every 50 ms) time to send what it should not.
async fn let_it_poll() {
    // Real time must pass: what is checked is that nothing more is told, and nothing
    // marks the absence of a notice.
    tokio::time::sleep(Duration::from_millis(600)).await;
}

async fn post(app: &TestApp, id: &str) {
    app.post_stripe(&stripe_event(id, "charge.succeeded", &format!("ch_{id}")))
        .await
        .assert_status(200);
}

/// The event ids stored under the source `inlet`.
async fn notice_ids(app: &TestApp) -> Vec<String> {
    app.with_conn(|c| {
        events::table
            .filter(events::source.eq("inlet"))
            .select(events::event_id)
            .load(c)
    })
    .await
}

async fn a_breaker_opening_and_closing_is_told_once_each_and_signed(backend: Backend) {
    let app_server = answering(500).await;
    let notices = answering(200).await;
    let breaker = "breaker = { failures = 3, cooldown = \"30s\" }";
    let app = app_with_notices(backend, &app_server, breaker, &notices, "", false).await;
    for n in 0..3 {
        post(&app, &format!("evt_breaker_{n}")).await;
    }
    let opened = told_once(&notices, "breaker.opened").await;
    assert_eq!(opened["destination"], "app");
    assert_eq!(opened["source"], "stripe");
    assert!(opened["summary"]
        .as_str()
        .is_some_and(|s| s.contains("app")));
    let requests = notices.received_requests().await.unwrap_or_default();
    assert!(
        verifies_as_standard_webhook(NOTICES_SECRET, &requests[0]),
        "signed with the notices secret"
    );
    assert!(!verifies_as_standard_webhook(APP_SECRET, &requests[0]));
    let key = requests[0].headers.get("idempotency-key").cloned();
    let key = key.and_then(|v| v.to_str().ok().map(str::to_owned));
    assert_eq!(
        key,
        Some(format!("inlet:{}", opened["id"].as_str().unwrap_or("-")))
    );

    // The application recovers: the probe after the cool-down closes the breaker.
    answer(&app_server, 200).await;
    app.clock.advance(chrono::Duration::seconds(31));
    told_once(&notices, "breaker.closed").await;
    assert_eq!(of_type(&notices, "breaker.opened").await.len(), 1);
    assert_eq!(received(&notices).await.len(), 2, "nothing else was told");
}

async fn dead_letters_are_told_each_and_once_over_the_threshold(backend: Backend) {
    let app_server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(400).set_body_string("card 4242 declined for evt"))
        .mount(&app_server)
        .await;
    let notices = answering(200).await;
    let extra = "dead_letter_threshold = 2\ncheck_interval = \"100ms\"";
    let app = app_with_notices(backend, &app_server, "", &notices, extra, false).await;
    post(&app, "evt_dead_0").await;
    let dead = told_once(&notices, "delivery.dead_lettered").await;
    assert_eq!(dead["event_id"], "evt_dead_0");
    assert_eq!(dead["destination"], "app");
    assert_eq!(dead["source"], "stripe");
    assert_eq!(dead["last_status"], 400);
    // The kind of error alone: the answer's text may echo the payload.
    assert_eq!(dead["last_error"], "HTTP 400");
    assert!(!dead.to_string().contains("4242"), "{dead}");
    assert!(dead["delivery_id"].is_i64(), "{dead}");
    assert!(of_type(&notices, "dead_letters.over_threshold")
        .await
        .is_empty());

    assert_eq!(dead["dead_letters"], 1, "it stands for itself: {dead}");

    // Passing the threshold of 2 is told once, however many dead letters follow; within
    // the window the destination's dead letters are not told one by one.
    for n in 1..5 {
        post(&app, &format!("evt_dead_{n}")).await;
    }
    eventually("the threshold", || async {
        !of_type(&notices, "dead_letters.over_threshold")
            .await
            .is_empty()
    })
    .await;
    let_it_poll().await;
    let over = of_type(&notices, "dead_letters.over_threshold").await;
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!(over[0]["threshold"], 2);
    assert!(over[0]["dead_letters"].as_i64().is_some_and(|n| n >= 3));
    assert_eq!(of_type(&notices, "delivery.dead_lettered").await.len(), 1);
}

async fn a_type_turned_off_is_not_sent(backend: Backend) {
    let app_server = answering(400).await;
    let notices = answering(200).await;
    let extra = "types = [\"breaker.opened\", \"breaker.closed\"]";
    let app = app_with_notices(backend, &app_server, "", &notices, extra, false).await;
    post(&app, "evt_off").await;
    eventually("the delivery to die", || async {
        let dead = app.admin("/admin/deliveries?status=dead", None, None).await;
        dead.json()["deliveries"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
    })
    .await;
    let_it_poll().await;
    assert!(received(&notices).await.is_empty());
    assert!(notice_ids(&app).await.is_empty(), "nothing written either");
}

/// An Inlet sending Slack-form notices, the event `id` posted and dead-lettered, and the
/// notice it sent.
async fn slack_notice_of(backend: Backend, id: &str) -> (TestApp, Value) {
    let app_server = answering(400).await;
    let notices = answering(200).await;
    let app = app_with_notices(
        backend,
        &app_server,
        "",
        &notices,
        "format = \"slack\"",
        false,
    )
    .await;
    post(&app, id).await;
    eventually("a notice in the Slack form", || async {
        !received(&notices).await.is_empty()
    })
    .await;
    let slack = received(&notices).await.remove(0);
    (app, slack)
}

async fn the_slack_form_sends_text_and_blocks(backend: Backend) {
    let (app, slack) = slack_notice_of(backend, "evt_slack_<!here>&").await;
    let text = slack["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("[Inlet] ") && text.contains("evt_slack_&lt;!here&gt;&amp;"),
        "{slack}"
    );
    assert!(
        !slack.to_string().contains("<!here>"),
        "mrkdwn escaped: {slack}"
    );
    assert_eq!(slack["blocks"][0]["type"], "section");
    assert_eq!(slack["blocks"][0]["text"]["type"], "mrkdwn");
    let block = slack["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(block.starts_with("*delivery.dead_lettered*\n"), "{block}");
    assert!(slack.get("type").is_none(), "only Slack's keys: {slack}");
    // What is stored stays the canonical notice.
    let ids = notice_ids(&app).await;
    assert_eq!(ids.len(), 1);
    let stored = app
        .admin(&format!("/admin/events/inlet/{}", ids[0]), None, None)
        .await;
    stored.assert_status(200);
    assert_eq!(
        stored.json()["event"]["event_type"],
        "delivery.dead_lettered",
        "{}",
        stored.text()
    );
}

/// The text outside the code spans of a Slack mrkdwn `text`, and the spans' contents.
fn mrkdwn_parts(text: &str) -> (String, Vec<String>) {
    let mut outside = String::new();
    let mut spans = Vec::new();
    for (n, part) in text.split('`').enumerate() {
        match n % 2 {
            0 => outside.push_str(part),
            _ => spans.push(part.to_owned()),
        }
    }
    (outside, spans)
}

/// An event id is the sender's text: in the Slack form it is quoted in a code span, so
/// `*bold*`, `_italic_`, `~strike~` and links show as typed, `&`, `<` and `>` are escaped
/// as Slack asks, and a backtick of its own cannot end the span early.
async fn the_slack_form_quotes_a_senders_id_in_a_code_span(backend: Backend) {
    let id = "evt_*bold*_it_~x~`<https://evil.example|click>`<!here>&";
    let (_app, slack) = slack_notice_of(backend, id).await;
    let texts = [
        slack["text"].as_str().unwrap_or_default(),
        slack["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap_or_default(),
    ];
    for text in texts {
        let (outside, spans) = mrkdwn_parts(text);
        assert_eq!(text.matches('`').count(), 2, "one code span: {text}");
        assert!(spans[0].starts_with("evt_*bold*_it_~x~"), "{text}");
        assert!(
            spans[0].contains("&lt;https://evil.example|click&gt;"),
            "{text}"
        );
        assert!(spans[0].ends_with("&lt;!here&gt;&amp;"), "{text}");
        for sent in ["*bold*", "_it_", "~x~", "<", "evil.example", "!here"] {
            assert!(
                !outside.contains(sent),
                "{sent} outside a code span: {text}"
            );
        }
    }
}

async fn a_failing_notices_destination_tells_nothing_of_itself(backend: Backend) {
    let app_server = answering(400).await;
    let notices = answering(500).await;
    let extra = "max_attempts = 1\nbreaker = { failures = 1, cooldown = \"30s\" }";
    let app = app_with_notices(backend, &app_server, "", &notices, extra, false).await;
    post(&app, "evt_loop").await;
    eventually("the notice's one attempt", || async {
        !received(&notices).await.is_empty()
    })
    .await;
    eventually("the notices breaker to open", || async {
        crate::helpers::gate(&app, "notices").await["breaker"] == "open"
    })
    .await;
    // Its breaker opened and its notice is dead: neither is told.
    app.clock.advance(chrono::Duration::seconds(60));
    let_it_poll().await;
    let ids = notice_ids(&app).await;
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(ids[0].starts_with("delivery.dead_lettered:"), "{ids:?}");
    assert_eq!(received(&notices).await.len(), 1);
}

async fn a_fingerprint_mismatch_is_told_once_per_event_id(backend: Backend) {
    let app_server = answering(200).await;
    let notices = answering(200).await;
    let app = app_with_notices(backend, &app_server, "", &notices, "", false).await;
    let first = stripe_event("evt_fp", "charge.succeeded", "ch_1");
    let other = stripe_event("evt_fp", "charge.succeeded", "ch_2");
    app.post_stripe(&first).await.assert_status(200);
    for _ in 0..3 {
        app.post_stripe(&other).await.assert_status(422);
    }
    let told = told_once(&notices, "event.fingerprint_mismatch").await;
    assert_eq!(told["event_id"], "evt_fp");
    assert_eq!(told["source"], "stripe");
    assert_eq!(
        told["received_fingerprint"],
        inlet::ingest::fingerprint(&other)
    );
    assert_eq!(
        told["stored_fingerprint"],
        inlet::ingest::fingerprint(&first)
    );
    // A third body of the same event is refused as well, but not told again: bodies are
    // the sender's to vary, the notices must not flood.
    let third = stripe_event("evt_fp", "charge.succeeded", "ch_3");
    app.post_stripe(&third).await.assert_status(422);
    // Another event's mismatch is told.
    app.post_stripe(&stripe_event("evt_fp_2", "charge.succeeded", "ch_4"))
        .await
        .assert_status(200);
    let other_event = stripe_event("evt_fp_2", "charge.succeeded", "ch_5");
    app.post_stripe(&other_event).await.assert_status(422);
    eventually("the second event's mismatch notice", || async {
        of_type(&notices, "event.fingerprint_mismatch").await.len() == 2
    })
    .await;
    let told = of_type(&notices, "event.fingerprint_mismatch").await;
    let events: Vec<&str> = told.iter().filter_map(|n| n["event_id"].as_str()).collect();
    assert_eq!(events, ["evt_fp", "evt_fp_2"]);
    // Nobody can post as `inlet`: only Inlet writes notices.
    let answer = app
        .post_webhook("inlet", b"{}", crate::helpers::NO_HEADERS)
        .await;
    answer.assert_status(404);
}

async fn a_refused_reload_is_told(backend: Backend) {
    let app_server = answering(200).await;
    let notices = answering(200).await;
    let app = app_with_notices(backend, &app_server, "", &notices, "", true).await;
    let path = app.config_path.clone().expect("a configuration file");
    let text = std::fs::read_to_string(&path).expect("the configuration");
    app.write_config(&text.replace("poll_interval = \"50ms\"", "poll_interval = \"60ms\""));
    app.reload().await.assert_status(422);
    app.reload().await.assert_status(422);
    let told = told_once(&notices, "config.reload_refused").await;
    assert_eq!(told["key"], "delivery.poll_interval");
}

async fn a_stalled_sweeper_is_told_once(backend: Backend) {
    let app_server = answering(200).await;
    let notices = answering(200).await;
    let options = TestOptions {
        sweep_interval: Some("1h"),
        ..Default::default()
    };
    let extra = "check_interval = \"100ms\"";
    let app = app_with_notices_and(backend, (&app_server, ""), (&notices, extra), options).await;
    let started = app.now();
    // The first sweep runs at once; the next only in an hour. Three intervals later (on
    // the test's clock) the sweeper has stalled. Should the first sweep have finished only
    // after the clock moved, move it again.
    for _ in 0..5 {
        app.clock.advance(chrono::Duration::hours(4));
        let stalled = holds_within(Duration::from_secs(2), || async {
            !of_type(&notices, "sweeper.stalled").await.is_empty()
        })
        .await;
        if stalled {
            break;
        }
    }
    let told = told_once(&notices, "sweeper.stalled").await;
    let last = told["last_success"].as_str().unwrap_or_default();
    let last = chrono::DateTime::parse_from_rfc3339(last).expect("an RFC 3339 time");
    assert!(last.timestamp() >= started.timestamp(), "{told}");
    assert!(
        told["stalled_seconds"]
            .as_i64()
            .is_some_and(|s| s >= 4 * 3600),
        "{told}"
    );
    assert_eq!(
        told["id"],
        format!("sweeper.stalled:{}", last.timestamp()),
        "keyed on the last success"
    );
}

/// An asana source's handshake: the secret established is told (never the secret), and
/// handshakes refused while it is held are told once, however many come.
async fn a_handshake_secret_is_told_and_a_refused_handshake_once(backend: Backend) {
    let app_server = answering(200).await;
    let notices = answering(200).await;
    let options = TestOptions {
        extra_sources: "\n[[sources]]\nname = \"asana\"\nscheme = \"asana\"\n".to_owned(),
        ..Default::default()
    };
    let app = app_with_notices_and(backend, (&app_server, ""), (&notices, ""), options).await;
    let secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    let handshake = |offered: &'static str| {
        let app = &app;
        async move {
            app.post_webhook("asana", b"", &[("X-Hook-Secret", offered)])
                .await
        }
    };
    handshake(secret).await.assert_status(200);
    let told = told_once(&notices, "hook_secret.established").await;
    assert_eq!(told["source"], "asana");
    let established = told["established_at"].as_str().expect("a time").to_owned();
    for other in [
        "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "1f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
    ] {
        handshake(other).await.assert_status(409);
    }
    let refused = told_once(&notices, "hook_secret.refused").await;
    assert_eq!(refused["held_since"], established.as_str());
    let all = received(&notices).await;
    assert!(
        all.iter().all(|n| !n.to_string().contains(secret)),
        "{all:?}"
    );
}

/// How many of the stripe source's deliveries are dead.
async fn dead_deliveries(app: &TestApp) -> usize {
    let dead = app.admin("/admin/deliveries?status=dead", None, None).await;
    dead.json()["deliveries"].as_array().map_or(0, Vec::len)
}

/// A destination's dead letters are told once per `notices.window`: the first at once,
/// the ones after it in the same window counted, and told — with their count — by the
/// destination's next notice, or by the checks once the window is over when no other
/// dead letter comes. Nothing is told twice, nothing is left out of a count.
async fn dead_letters_of_a_destination_are_told_once_per_window_with_a_count(backend: Backend) {
    let app_server = answering(400).await;
    let notices = answering(200).await;
    let extra = "window = \"1m\"\ncheck_interval = \"100ms\"\ntypes = [\"delivery.dead_lettered\"]";
    let app = app_with_notices(backend, &app_server, "", &notices, extra, false).await;
    post(&app, "evt_window_0").await;
    let first = told_once(&notices, "delivery.dead_lettered").await;
    assert_eq!(first["dead_letters"], 1, "{first}");
    assert_eq!(first["event_id"], "evt_window_0");
    // Four more in the same window, each dead before the next is sent: none told yet.
    for n in 1..5 {
        post(&app, &format!("evt_window_{n}")).await;
        eventually("the delivery to die", || async {
            dead_deliveries(&app).await == n + 1
        })
        .await;
    }
    let_it_poll().await;
    assert_eq!(
        received(&notices).await.len(),
        1,
        "one per destination per window"
    );

    // The window ends: the checks tell what the first notice did not, once.
    app.clock.advance(chrono::Duration::seconds(61));
    eventually("the window's count told", || async {
        of_type(&notices, "delivery.dead_lettered").await.len() == 2
    })
    .await;
    let_it_poll().await;
    let told = of_type(&notices, "delivery.dead_lettered").await;
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[1]["dead_letters"], 4, "{}", told[1]);
    assert_eq!(told[1]["destination"], "app");
    let summary = told[1]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("4 more dead letters"), "{summary}");
    assert_ne!(told[0]["id"], told[1]["id"]);

    // That notice took its own window: the next window's first dead letter is told at
    // once, standing for itself.
    app.clock.advance(chrono::Duration::seconds(60));
    post(&app, "evt_window_5").await;
    eventually("the next window's notice", || async {
        of_type(&notices, "delivery.dead_lettered").await.len() == 3
    })
    .await;
    let third = &of_type(&notices, "delivery.dead_lettered").await[2];
    assert_eq!(third["dead_letters"], 1, "{third}");
}

/// Notices sent to one of Inlet's own sources (the same secret, on another instance's
/// listener, so no configuration check can see it) arrive as webhooks carrying the
/// marker every notice delivery carries (`Inlet-Source: inlet`). When such an event's
/// delivery dead-letters, nothing is told of it: the loop the issue saw (1,163 events in
/// 13 s) stops after the first notice.
async fn a_notice_that_comes_back_as_a_webhook_is_never_told_of(backend: Backend) {
    let app_server = answering(400).await;
    let looping = answering(400).await;
    let loop_source = format!(
        "\n[[sources]]\nname = \"loop\"\nscheme = \"standard\"\nsecrets = [\"{NOTICES_SECRET}\"]\n\
         [[sources.destinations]]\nname = \"loopback\"\nurl = \"{}/loop\"\nsecret = \"{APP_SECRET}\"\n",
        looping.uri()
    );
    let receiver = spawn_app_with(
        backend,
        TestOptions {
            dispatch: false,
            clock_stopped: true,
            extra_sources: loop_source.clone(),
            ..Default::default()
        },
    )
    .await;
    let notices_table = format!(
        "[notices]\nurl = \"{}/webhooks/loop\"\nsecret = \"{NOTICES_SECRET}\"\n",
        receiver.address
    );
    let app = receiver
        .another_instance(TestOptions {
            destination: Some(format!(
                "url = \"{}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"app\"\n",
                app_server.uri()
            )),
            clock_stopped: true,
            extra_sources: loop_source,
            operators: Box::leak(notices_table.into_boxed_str()),
            ..Default::default()
        })
        .await;
    post(&app, "evt_comes_back").await;
    eventually(
        "the notice received as a webhook and its delivery dead",
        || async {
            !looping
                .received_requests()
                .await
                .unwrap_or_default()
                .is_empty()
                && dead_deliveries(&app).await == 2
        },
    )
    .await;
    let_it_poll().await;
    let_it_poll().await;
    let ids = notice_ids(&app).await;
    assert_eq!(ids.len(), 1, "told of the stripe event only: {ids:?}");
    let loop_events: i64 = app
        .with_conn(|c| {
            events::table
                .filter(events::source.eq("loop"))
                .count()
                .get_result(c)
        })
        .await;
    assert_eq!(loop_events, 1, "the notice came back once, and no other");

    // The same notice id with another body is a fingerprint mismatch (422): not told of
    // either when it carries the mark, told when it does not.
    let id = format!("inlet:{}", ids[0]);
    let other = br#"{"type":"delivery.dead_lettered","summary":"another body"}"#;
    let mut marked = app.sign_for("loop", other, &id, None);
    marked.push(("Inlet-Source".to_owned(), "inlet".to_owned()));
    app.post_webhook("loop", other, &marked)
        .await
        .assert_problem(422, "fingerprint_mismatch");
    let_it_poll().await;
    assert_eq!(
        notice_ids(&app).await.len(),
        1,
        "a notice's mismatch is not told"
    );
    let unmarked = app.sign_for("loop", other, &id, None);
    app.post_webhook("loop", other, &unmarked)
        .await
        .assert_problem(422, "fingerprint_mismatch");
    eventually("an unmarked mismatch told", || async {
        notice_ids(&app).await.len() == 2
    })
    .await;
}

/// A `[notices] url` that reaches one of Inlet's own listeners — `server.bind`,
/// `admin.bind`, `console.bind`, as written or by a loopback or any-address form of it —
/// is refused at startup and on reload (both read the configuration through this), with
/// the key and the listener named.
#[test]
fn a_notices_url_that_reaches_inlet_itself_is_refused() {
    let config = |bind: &str, url: &str, more: &str| {
        format!(
            "[server]\nbind = \"{bind}\"\n{more}\n[notices]\nurl = \"{url}\"\n\
             secret = \"{NOTICES_SECRET}\"\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\n\
             secrets = [\"gh-current-0123456789abcdef\"]\n"
        )
    };
    for (bind, url, more, listener) in [
        (
            "127.0.0.1:8080",
            "http://127.0.0.1:8080/webhooks/standard",
            "",
            "server.bind",
        ),
        (
            "127.0.0.1:8080",
            "http://localhost:8080/webhooks/standard",
            "",
            "server.bind",
        ),
        (
            "0.0.0.0:8080",
            "http://127.0.0.2:8080/webhooks/standard",
            "",
            "server.bind",
        ),
        ("0.0.0.0:8080", "http://[::1]:8080/x", "", "server.bind"),
        ("[::]:8080", "http://0.0.0.0:8080/x", "", "server.bind"),
        (
            "0.0.0.0:80",
            "http://localhost/webhooks/standard",
            "",
            "server.bind",
        ),
        (
            "10.0.0.5:443",
            "https://10.0.0.5/webhooks/standard",
            "",
            "server.bind",
        ),
        (
            "127.0.0.1:8080",
            "http://127.0.0.1:9090/webhooks/standard",
            "[admin]\nbind = \"127.0.0.1:9090\"\n",
            "admin.bind",
        ),
    ] {
        let error = inlet::config::Settings::from_toml(&config(bind, url, more))
            .expect_err(&format!("{url} reaches {bind}"));
        assert_eq!(error.key, "notices.url", "{url}: {error}");
        assert!(error.to_string().contains(listener), "{url}: {error}");
    }
    for (bind, url) in [
        ("127.0.0.1:8080", "http://127.0.0.1:8081/webhooks/standard"),
        ("10.0.0.5:8080", "http://127.0.0.1:8080/webhooks/standard"),
        ("127.0.0.1:8080", "https://hooks.example.com:8080/inlet"),
        ("127.0.0.1:0", "http://127.0.0.1:8080/x"),
    ] {
        inlet::config::Settings::from_toml(&config(bind, url, ""))
            .unwrap_or_else(|e| panic!("{url} beside {bind}: {e}"));
    }
}
