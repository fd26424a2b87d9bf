//! Hostile expressions and payloads under load, against a real `inlet serve`: ordinary
//! signed load (24 clients, duplicates included) to a destination whose filter reads a
//! `rating`; beside it, signed webhooks whose rating makes that ordinary-looking filter
//! ask for a terabyte string, and six operators evaluating terabyte and 300 MB strings in
//! loops. Afterwards: the very same process still serves, no request was cut or refused,
//! every ordinary event is stored with its fact and delivered, every hostile one is a
//! visible failed delivery naming its bound — none skipped — and the process that receives
//! webhooks stayed small.

use crate::helpers::Backend;
use crate::load::{Ledger, Load};
use crate::support::{
    assert_none, check_invariants, knob, load_client, post_stripe, report, seeded, serve,
    snapshot_when, stop, Rig, Snapshot,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

chaos_on_both_backends!(hostile_expressions_and_payloads_under_load_skip_nothing);

/// Concurrent clients of the ordinary load.
const CLIENTS: usize = 24;
/// Operators evaluating hostile expressions at once, each in a loop.
const OPERATORS: usize = 6;
const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789abcdef";

/// Takes ordinary events (no rating: 4 stars); a rating of 10^12 asks for a terabyte.
const FILTER: &str = r#"("*" * (.data.object.rating // 4)) | length >= 4"#;

/// The filter on the destination, an admin token, and six operators.
fn extra_config() -> String {
    let mut toml = format!("filter = '{FILTER}'\n[operator]\ntoken = \"{ADMIN_TOKEN}\"\n");
    for i in 0..OPERATORS {
        toml.push_str(&format!(
            "[[operators]]\nname = \"chaos{i}\"\nrole = \"operator\"\ntoken = \"chaos-operator-{i}-0123456789abcdef\"\n"
        ));
    }
    toml
}

/// A signed Stripe event whose object has `rating`.
fn rated(event_id: &str, rating: u64) -> Vec<u8> {
    serde_json::json!({
        "id": event_id, "object": "event", "type": "review.opened",
        "created": chrono::Utc::now().timestamp(),
        "data": {"object": {"id": format!("rev_{event_id}"), "rating": rating}},
    })
    .to_string()
    .into_bytes()
}

async fn hostile_expressions_and_payloads_under_load_skip_nothing(backend: Backend) {
    let seconds = knob("INLET_CHAOS_HOSTILE_SECONDS", 8);
    let mut rng = seeded(&format!("hostile ({backend:?})"));
    let started = Instant::now();
    let rig = Rig::fresh_with(backend, "hostile", 0.0, &extra_config()).await;
    let process = serve(&rig.config).await;
    let port = process.port;
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let load = Load::start(
        ledger.clone(),
        Arc::new(AtomicU16::new(port)),
        CLIENTS,
        "calm",
        rng.u64(..),
    );
    let stop_hostile = Arc::new(AtomicBool::new(false));
    let sender = tokio::spawn(send_hostile(port, stop_hostile.clone()));
    let operators: Vec<_> = (0..OPERATORS)
        .map(|i| tokio::spawn(evaluate_in_a_loop(port, i, stop_hostile.clone())))
        .collect();
    // Real time must pass: the campaign is load for a length of time.
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop_hostile.store(true, Ordering::SeqCst);
    load.stop().await;
    let hostile = sender.await.expect("the hostile sender");
    let mut evaluations = (0, 0, 0);
    for operator in operators {
        let (answered, busy, bound) = operator.await.expect("an operator's loop");
        evaluations = (
            evaluations.0 + answered,
            evaluations.1 + busy,
            evaluations.2 + bound,
        );
    }
    let settled = settled(&rig.url, Duration::from_secs(90)).await;
    let peak = evaluator_peak_mb(port).await;

    let mut failures = Vec::new();
    let mut process = process;
    if process.child.try_wait().expect("wait").is_some() {
        failures.push("the inlet process ended".to_owned());
    }
    failures.extend(hostile_failed_visibly(port, &hostile, &settled).await);
    // The load has stopped: the ledger is the test's alone now.
    let ledger = std::mem::take(&mut *ledger.lock().expect("ledger"));
    if ledger.connection_errors > 0 {
        failures.push(format!("{} requests were cut", ledger.connection_errors));
    }
    failures.extend(ledger.unexpected.iter().cloned());
    failures.extend(ledger.stored_answer_differences());
    // The ordinary load: stored, its facts recorded, each delivered once.
    let mut calm = settled;
    calm.deliveries.retain(|d| !hostile.contains(&d.event_id));
    calm.events.retain(|(_, id), _| !hostile.contains(id));
    let facts = calm.facts.len();
    calm.facts.retain(|_, first| !hostile.contains(first));
    calm.fact_rows -= facts - calm.facts.len();
    failures.extend(check_invariants(
        &calm,
        &ledger.acknowledged(),
        &rig.app.log(),
    ));
    let rss = resident_mb(process.child.id());
    if rss.1 > 400 {
        failures.push(format!("the inlet process reached {} MB resident", rss.1));
    }
    assert_none(&format!("hostile ({backend:?})"), &failures);
    report(&format!(
        "hostile ({backend:?}): {seconds} s of {CLIENTS} clients, {:.1} s in all\n\
         \x20 {} ordinary events acknowledged, {} requests, statuses {:?}; {} hostile webhooks \
         (a terabyte each) acknowledged, each a dead letter naming the memory bound\n\
         \x20 {OPERATORS} operators: {} evaluations answered, {} refused while their last ran, \
         {} reaching a bound; the process never restarted, resident {} MB now and {} MB at \
         its peak; evaluators at most {peak} MB",
        started.elapsed().as_secs_f64(),
        ledger.acknowledged().len(),
        ledger.requests,
        ledger.statuses,
        hostile.len(),
        evaluations.0,
        evaluations.1,
        evaluations.2,
        rss.0,
        rss.1,
    ));
    stop(process).await;
}

/// Posts webhooks whose rating makes the filter ask for a terabyte until `stop`; the ids
/// acknowledged (each sent until it is).
async fn send_hostile(port: u16, stop: Arc<AtomicBool>) -> HashSet<String> {
    let client = load_client();
    let mut acknowledged = HashSet::new();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let id = format!("evt_hostile_{n}");
        let body = rated(&id, 1_000_000_000_000);
        loop {
            let answer = post_stripe(&client, port, &body)
                .await
                .expect("inlet answers");
            assert!(
                [200, 409, 503].contains(&answer.status),
                "{id}: {}",
                answer.status
            );
            if answer.status == 200 {
                acknowledged.insert(id);
                break;
            }
            // Real time must pass: a provider backs off before its retry.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        n += 1;
    }
    acknowledged
}

/// Operator `i` evaluates terabyte and 300 MB strings on a stored hostile event until
/// `stop`: how many were answered, refused while its last ran, and reached a bound.
async fn evaluate_in_a_loop(port: u16, i: usize, stop: Arc<AtomicBool>) -> (u64, u64, u64) {
    let client = load_client();
    let token = format!("chaos-operator-{i}-0123456789abcdef");
    let expressions = [
        r#"("x" * 1000000000000) | length > 0"#,
        r#"("x" * 300000000) | length > 0"#,
    ];
    let (mut answered, mut busy, mut bound) = (0, 0, 0);
    let mut k = 0;
    while !stop.load(Ordering::SeqCst) {
        let body = serde_json::json!({
            "source": "stripe", "event_id": "evt_hostile_0", "filter": expressions[k % 2],
        });
        k += 1;
        let response = client
            .post(format!("http://127.0.0.1:{port}/admin/evaluate"))
            .bearer_auth(&token)
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("inlet answers an evaluation");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        match status {
            200 => {
                answered += 1;
                bound += u64::from(answer["destinations"][0]["filter"]["bound"].is_string());
            }
            429 => busy += 1,
            // The first event may not be stored yet. Real time must pass: an operator
            // pauses before trying again.
            404 => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("an evaluation answered {other}: {answer}"),
        }
    }
    (answered, busy, bound)
}

/// Waits until no delivery is pending or in progress, at most `within`.
async fn settled(url: &str, within: Duration) -> Snapshot {
    snapshot_when(url, within, "every delivery to settle", |snapshot| {
        let statuses = snapshot.delivery_statuses();
        !statuses.contains_key("pending") && !statuses.contains_key("in_progress")
    })
    .await
}

/// Every hostile event acknowledged has its delivery, dead with the memory bound as why:
/// none skipped, none sent.
async fn hostile_failed_visibly(
    port: u16,
    hostile: &HashSet<String>,
    settled: &Snapshot,
) -> Vec<String> {
    let response = load_client()
        .get(format!(
            "http://127.0.0.1:{port}/admin/deliveries?status=dead&limit=500"
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("the dead letters");
    let text = response.text().await.unwrap_or_default();
    let dead: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let reasons: std::collections::HashMap<String, String> = (dead["deliveries"].as_array())
        .into_iter()
        .flatten()
        .map(|d| {
            let id = d["event_id"].as_str().unwrap_or_default().to_owned();
            (id, d["last_error"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let mut failures = Vec::new();
    for id in hostile {
        let rows = settled
            .deliveries
            .iter()
            .filter(|d| &d.event_id == id)
            .count();
        match reasons.get(id) {
            _ if rows != 1 => failures.push(format!("{id}: {rows} deliveries, not one")),
            Some(reason) if reason == "filter failed: memory bound 64 MiB reached" => {}
            other => failures.push(format!(
                "{id}: not a dead letter naming the bound: {other:?}"
            )),
        }
    }
    failures
}

/// The process's resident memory now and at its peak, in MB.
fn resident_mb(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        (status.lines())
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib / 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The most any evaluator process was resident with, in MB (`/metrics`).
async fn evaluator_peak_mb(port: u16) -> u64 {
    let response = load_client()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("metrics");
    let text = response.text().await.unwrap_or_default();
    (text.lines())
        .find_map(|l| l.strip_prefix("inlet_jq_evaluator_peak_rss_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |bytes| (bytes / 1_048_576.0) as u64)
}
