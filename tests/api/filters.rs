//! Filters and transforms per destination, in jq: concurrent webhooks reach exactly the
//! destinations whose filters take them; a transform's output is what the application
//! receives, signed over those bytes (checked with the Standard Webhooks reference
//! library); a runaway expression is bounded while other webhooks are answered, and its
//! delivery is a dead letter with the reason until the filter is fixed; a failing
//! transform dead-letters and a requeue after a reload delivers the fixed shape; replays,
//! their dry runs and the evaluate call follow the filters.

use crate::helpers::{
    application_answering, eventually, metric, spawn_app_with, Backend, TestApp, TestOptions,
};
use crate::on_both_backends;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use wiremock::MockServer;

on_both_backends!(
    concurrent_payloads_reach_exactly_the_destinations_their_filters_take,
    a_transforms_output_is_delivered_and_signed_over_those_bytes,
    a_runaway_filter_is_bounded_while_other_webhooks_are_answered,
    a_failing_transform_dead_letters_and_a_requeue_after_reload_delivers_the_fixed_shape,
    replays_and_their_dry_runs_follow_the_filters,
    a_payload_that_is_not_json_never_matches_a_filtered_destination,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One destination of the stripe source: its name, application and extra TOML lines.
struct To<'a>(&'a str, &'a MockServer, &'a str);

fn destinations_toml(destinations: &[To<'_>]) -> String {
    destinations
        .iter()
        .map(|To(name, server, extra)| {
            format!(
                "url = \"{}/{name}\"\nsecret = \"{APP_SECRET}\"\nname = \"{name}\"\n\
                 retry_base = \"20ms\"\nretry_cap = \"100ms\"\n{extra}",
                server.uri()
            )
        })
        .collect::<Vec<_>>()
        .join("\n[[sources.destinations]]\n")
}

async fn app_with(backend: Backend, destinations: &[To<'_>], options: TestOptions) -> TestApp {
    let options = TestOptions {
        destination: Some(destinations_toml(destinations)),
        ..options
    };
    spawn_app_with(backend, options).await
}

/// A Stripe event with an amount and a currency.
fn payment(id: &str, event_type: &str, amount: u64, currency: &str) -> Vec<u8> {
    json!({
        "id": id,
        "object": "event",
        "type": event_type,
        "created": 1_733_052_301,
        "data": { "object": { "id": format!("pi_{id}"), "amount": amount, "currency": currency } },
    })
    .to_string()
    .into_bytes()
}

/// The Idempotency-Keys an application received.
async fn keys(server: &MockServer) -> BTreeSet<String> {
    let requests = server.received_requests().await.unwrap_or_default();
    requests
        .iter()
        .filter_map(|r| {
            r.headers
                .get("idempotency-key")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .collect()
}

/// `base` for this backend: metrics are one registry per test process, so a series the
/// test reads must be its own.
fn named(base: &str, backend: Backend) -> String {
    format!("{base}-{}", format!("{backend:?}").to_lowercase())
}

async fn accepted(app: &TestApp, body: &[u8]) {
    let reply = app.post_stripe(body).await;
    reply.assert_status(200);
    assert_eq!(reply.json()["outcome"], "accepted", "{}", reply.text());
}

const FRAUD: &str = "filter = '.data.object.amount > 100000'";
const EURO: &str = "filter = '.data.object.currency == \"eur\"'";
const REFUNDS: &str =
    "filter = '$type | startswith(\"charge.refund\") and ($headers[\"stripe-signature\"] | startswith(\"t=\"))'";

async fn concurrent_payloads_reach_exactly_the_destinations_their_filters_take(backend: Backend) {
    let euro_name = named("euro", backend);
    let (fraud, euro, refunds) = (
        application_answering(200).await,
        application_answering(200).await,
        application_answering(200).await,
    );
    let app = Arc::new(
        app_with(
            backend,
            &[
                To("fraud", &fraud, FRAUD),
                To(&euro_name, &euro, EURO),
                To("refunds", &refunds, REFUNDS),
            ],
            TestOptions::default(),
        )
        .await,
    );
    let kinds = [
        "payment_intent.succeeded",
        "charge.refunded",
        "invoice.paid",
    ];
    let events: Vec<(String, &str, u64, &str)> = (0..30u64)
        .map(|i| {
            let amount = if i % 3 == 0 { 250_000 } else { 900 + i };
            let currency = if i % 2 == 0 { "eur" } else { "usd" };
            (
                format!("evt_f_{i}"),
                kinds[(i % 3) as usize],
                amount,
                currency,
            )
        })
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(events.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for (id, kind, amount, currency) in &events {
        let body = payment(id, kind, *amount, currency);
        let (app, barrier) = (app.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            accepted(&app, &body).await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("every webhook is accepted");
    }
    let wanted = |take: &dyn Fn(&str, u64, &str) -> bool| -> BTreeSet<String> {
        (events.iter())
            .filter(|(_, kind, amount, currency)| take(kind, *amount, currency))
            .map(|(id, ..)| format!("stripe:{id}"))
            .collect()
    };
    let to_fraud = wanted(&|_, amount, _| amount > 100_000);
    let to_euro = wanted(&|_, _, currency| currency == "eur");
    let to_refunds = wanted(&|kind, _, _| kind == "charge.refunded");
    assert_eq!(
        (to_fraud.len(), to_euro.len(), to_refunds.len()),
        (10, 15, 10)
    );
    eventually("every filtered delivery", || async {
        keys(&fraud).await.len() >= 10
            && keys(&euro).await.len() >= 15
            && keys(&refunds).await.len() >= 10
    })
    .await;
    assert_eq!(keys(&fraud).await, to_fraud);
    assert_eq!(keys(&euro).await, to_euro);
    assert_eq!(keys(&refunds).await, to_refunds);
    assert_eq!(
        app.count_deliveries().await,
        35,
        "one outbox row per match, no other"
    );
    let skipped =
        format!("inlet_filter_skipped_total{{source=\"stripe\",destination=\"{euro_name}\"}}");
    assert_eq!(metric(&app, &skipped).await, 15.0);
}

/// Whether the Standard Webhooks reference library (Python, installed by scripts/prepare)
/// verifies `body` under `headers` with `secret`; its error otherwise.
fn standardwebhooks_verifies(
    secret: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> Result<(), String> {
    let python = std::env::var("INLET_TEST_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let dir = std::env::temp_dir().join(format!("inlet-swh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let body_path = dir.join(format!("{}.body", fastrand::u64(..)));
    std::fs::write(&body_path, body).map_err(|e| e.to_string())?;
    let headers: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, v)| (n.clone(), Value::String(v.clone())))
        .collect();
    let script = "import json, sys\n\
                  from standardwebhooks.webhooks import Webhook\n\
                  secret, path, headers = sys.argv[1:]\n\
                  Webhook(secret).verify(open(path, 'rb').read(), json.loads(headers))\n\
                  print('verified')\n";
    let output = std::process::Command::new(&python)
        .args(["-c", script, secret])
        .arg(&body_path)
        .arg(Value::Object(headers).to_string())
        .output()
        .map_err(|e| format!("cannot run {python}: {e} (scripts/prepare installs it)"))?;
    let _ = std::fs::remove_file(&body_path);
    if output.status.success() && String::from_utf8_lossy(&output.stdout).contains("verified") {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

async fn a_transforms_output_is_delivered_and_signed_over_those_bytes(backend: Backend) {
    let slim = application_answering(200).await;
    let transform = "transform = '{id: .id, type: $type, amount: .data.object.amount, currency: (.data.object.currency | ascii_upcase)}'";
    let app = app_with(
        backend,
        &[To("slim", &slim, transform)],
        TestOptions::default(),
    )
    .await;
    accepted(
        &app,
        &payment("evt_slim", "payment_intent.succeeded", 4200, "eur"),
    )
    .await;
    eventually("the transformed delivery", || async {
        !keys(&slim).await.is_empty()
    })
    .await;
    let requests = slim.received_requests().await.unwrap_or_default();
    let request = &requests[0];
    let body = String::from_utf8_lossy(&request.body).into_owned();
    assert_eq!(
        body,
        r#"{"id":"evt_slim","type":"payment_intent.succeeded","amount":4200,"currency":"EUR"}"#
    );
    let header = |name: &str| {
        (request.headers.get(name))
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), "application/json");
    assert_eq!(header("idempotency-key"), "stripe:evt_slim");
    assert_eq!(header("webhook-id"), "stripe:evt_slim");
    let signed: Vec<(String, String)> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .iter()
        .map(|n| ((*n).to_owned(), header(n)))
        .collect();
    standardwebhooks_verifies(APP_SECRET, &request.body, &signed)
        .expect("the reference library verifies the transformed body");
    // The original bytes under the same headers do not verify: the signature is over what
    // was sent.
    let original = payment("evt_slim", "payment_intent.succeeded", 4200, "eur");
    assert!(standardwebhooks_verifies(APP_SECRET, &original, &signed).is_err());
    // What is stored is the event as received.
    let event = app
        .admin("/admin/events/stripe/evt_slim", None, None)
        .await
        .json();
    assert!(
        event["payload"]["data"]
            .as_str()
            .unwrap_or_default()
            .contains("\"currency\":\"eur\""),
        "{event}"
    );
}

async fn a_runaway_filter_is_bounded_while_other_webhooks_are_answered(backend: Backend) {
    let application = application_answering(200).await;
    let runaway =
        "filter = 'if .data.object.id == \"pi_evt_runaway\" then (def f: f; f) else true end'";
    let options = TestOptions {
        operators: "[jq]\ntime_limit = \"8s\"\nmax_steps = 1000000000\n",
        config_file: true,
        ..Default::default()
    };
    let bounded = named("bounded", backend);
    let app = Arc::new(app_with(backend, &[To(&bounded, &application, runaway)], options).await);
    let errors = format!(
        "inlet_filter_errors_total{{source=\"stripe\",destination=\"{bounded}\",reason=\"bound\"}}"
    );
    let slow = {
        let app = app.clone();
        tokio::spawn(async move {
            let reply = app
                .post_stripe(&payment("evt_runaway", "charge.succeeded", 1, "eur"))
                .await;
            (reply.status, reply.json())
        })
    };
    // Twenty other webhooks at once, answered while the runaway evaluation still runs.
    // Real time must pass: nothing outside marks that the runaway request has reached its
    // filter, and it should get there first (not a timing claim: the assertion below is
    // about order).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut others = tokio::task::JoinSet::new();
    for i in 0..20 {
        let app = app.clone();
        others.spawn(async move {
            accepted(
                &app,
                &payment(&format!("evt_calm_{i}"), "charge.succeeded", 5, "usd"),
            )
            .await;
        });
    }
    while let Some(done) = others.join_next().await {
        done.expect("answered");
    }
    assert!(
        !slow.is_finished(),
        "the other webhooks were answered while the runaway ran"
    );
    let (status, answer) = slow.await.expect("the runaway webhook is answered");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["outcome"], "accepted",
        "its fact is recorded all the same"
    );
    assert_eq!(metric(&app, &errors).await, 1.0);
    eventually("the calm deliveries", || async {
        keys(&application).await.len() >= 20
    })
    .await;
    assert!(
        !keys(&application).await.contains("stripe:evt_runaway"),
        "not sent"
    );
    // Not skipped: its delivery is a dead letter that says why, among the others.
    assert_eq!(app.count_deliveries().await, 21);
    let dead = app
        .admin("/admin/deliveries?status=dead", None, None)
        .await
        .json();
    assert_eq!(
        dead["deliveries"][0]["last_error"], "filter failed: time bound 8000 ms reached",
        "{dead}"
    );
    // Once the filter is fixed, a requeue decides it again, and delivers it.
    let requeued = app
        .fix_and_requeue(("(def f: f; f)", "true"), "requeue-runaway")
        .await;
    assert_eq!(requeued, 1);
    eventually("the requeued runaway", || async {
        keys(&application).await.contains("stripe:evt_runaway")
    })
    .await;
}

async fn a_failing_transform_dead_letters_and_a_requeue_after_reload_delivers_the_fixed_shape(
    backend: Backend,
) {
    let application = application_answering(200).await;
    let broken = "transform = '{amount: (.data.object.amount_cents | tonumber)}'";
    let options = TestOptions {
        config_file: true,
        ..Default::default()
    };
    let app = app_with(backend, &[To("shaped", &application, broken)], options).await;
    accepted(
        &app,
        &payment("evt_shape", "payment_intent.succeeded", 1234, "eur"),
    )
    .await;
    eventually("the dead letter", || async {
        app.deliveries_with_status("dead").await == 1
    })
    .await;
    assert_eq!(
        app.count_attempts().await,
        1,
        "dead at once: no retry can fix it"
    );
    let dead = app
        .admin("/admin/deliveries?status=dead", None, None)
        .await
        .json();
    let error = dead["deliveries"][0]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.starts_with("transform failed: "), "{dead}");
    assert!(keys(&application).await.is_empty(), "nothing was sent");

    let fix = (
        "(.data.object.amount_cents | tonumber)",
        ".data.object.amount, currency: .data.object.currency",
    );
    assert_eq!(app.fix_and_requeue(fix, "requeue-shape").await, 1);
    eventually("the fixed delivery", || async {
        !keys(&application).await.is_empty()
    })
    .await;
    let requests = application.received_requests().await.unwrap_or_default();
    assert_eq!(
        String::from_utf8_lossy(&requests[0].body),
        r#"{"amount":1234,"currency":"eur"}"#
    );
}

async fn replays_and_their_dry_runs_follow_the_filters(backend: Backend) {
    let (fraud, euro) = (
        application_answering(200).await,
        application_answering(200).await,
    );
    let app = app_with(
        backend,
        &[To("fraud", &fraud, FRAUD), To("euro", &euro, EURO)],
        TestOptions::default(),
    )
    .await;
    accepted(
        &app,
        &payment("evt_small", "payment_intent.succeeded", 10, "eur"),
    )
    .await;
    accepted(
        &app,
        &payment("evt_big", "payment_intent.succeeded", 500_000, "usd"),
    )
    .await;
    // Settled, not only received: a replay plans no second delivery beside one in flight.
    eventually("the first deliveries", || async {
        keys(&fraud).await.len() == 1
            && keys(&euro).await.len() == 1
            && app.deliveries_with_status("delivered").await == 2
    })
    .await;
    let events = json!([{ "source": "stripe", "event_id": "evt_small" }, { "source": "stripe", "event_id": "evt_big" }]);
    let preview = app
        .admin(
            "/admin/replay",
            Some(&json!({ "events": events, "dry_run": true })),
            None,
        )
        .await
        .json();
    let decisions = |answer: &Value, i: usize| -> Vec<(String, String)> {
        (answer["results"][i]["filters"]
            .as_array()
            .cloned()
            .unwrap_or_default())
        .iter()
        .map(|f| {
            (
                f["destination"].as_str().unwrap_or_default().to_owned(),
                f["decision"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        decisions(&preview, 0),
        [pair("fraud", "skip"), pair("euro", "enqueue")],
        "{preview}"
    );
    assert_eq!(
        decisions(&preview, 1),
        [pair("fraud", "enqueue"), pair("euro", "skip")],
        "{preview}"
    );
    assert_eq!(
        preview["summary"]["deliveries"],
        json!({ "euro": 1, "fraud": 1 })
    );
    let replay = app
        .admin(
            "/admin/replay",
            Some(&json!({ "events": events })),
            Some("replay-filters"),
        )
        .await
        .json();
    assert_eq!(
        replay["summary"]["deliveries"],
        json!({ "euro": 1, "fraud": 1 }),
        "{replay}"
    );
    eventually("the replayed deliveries", || async {
        app.deliveries_with_status("delivered").await == 4
    })
    .await;
    assert_eq!(app.count_deliveries().await, 4);

    // The evaluate call and the CLI say the same of one destination, and try expressions.
    let body = json!({ "source": "stripe", "event_id": "evt_big", "destination": "euro" });
    let answer = app.admin("/admin/evaluate", Some(&body), None).await.json();
    assert_eq!(
        answer["destinations"][0]["filter"]["decision"], "skip",
        "{answer}"
    );
    assert_eq!(answer["destinations"][0]["enqueued"], false);
    let tried = json!({ "source": "stripe", "event_id": "evt_big", "transform": "{cents: .data.object.amount}" });
    let answer = app
        .admin("/admin/evaluate", Some(&tried), None)
        .await
        .json();
    assert_eq!(
        answer["destinations"][0]["transform"]["body"],
        json!({ "cents": 500000 }),
        "{answer}"
    );
    let bad = json!({ "source": "stripe", "event_id": "evt_big", "filter": ".a |\n map(" });
    let refused = app.admin("/admin/evaluate", Some(&bad), None).await;
    refused.assert_status(400);
    assert!(refused.text().contains("line 2"), "{}", refused.text());
    let (code, out, err) = app
        .run_cli(&[
            "filter",
            "test",
            "--source",
            "stripe",
            "--event",
            "evt_big",
            "--destination",
            "fraud",
        ])
        .await;
    assert_eq!(code, Some(0), "{err}");
    let printed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        printed["destinations"][0]["filter"]["decision"], "enqueue",
        "{out}"
    );
}

async fn a_payload_that_is_not_json_never_matches_a_filtered_destination(backend: Backend) {
    let filtered_name = named("filtered", backend);
    let (filtered, everything) = (
        application_answering(200).await,
        application_answering(200).await,
    );
    let options = TestOptions {
        extra_sources: format!(
            "\n[[sources]]\nname = \"notes\"\nscheme = \"standard\"\nsecrets = [\"{APP_SECRET}\"]\n\
             [[sources.destinations]]\n{}\n",
            destinations_toml(&[To(&filtered_name, &filtered, "filter = 'true'"), To("everything", &everything, "")])
        ),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    for (id, body) in [
        ("msg_text", &b"plain text, not JSON"[..]),
        ("msg_json", br#"{"note":"hello"}"#),
    ] {
        let reply = app.post_signed("notes", body, id, None).await;
        reply.assert_status(200);
    }
    eventually("the unfiltered deliveries", || async {
        keys(&everything).await.len() == 2
    })
    .await;
    eventually("the filtered delivery", || async {
        keys(&filtered).await.len() == 1
    })
    .await;
    assert_eq!(
        keys(&filtered).await,
        BTreeSet::from(["notes:msg_json".to_owned()])
    );
    let not_json =
        format!("inlet_filter_errors_total{{source=\"notes\",destination=\"{filtered_name}\",reason=\"not_json\"}}");
    assert_eq!(metric(&app, &not_json).await, 1.0);
}
