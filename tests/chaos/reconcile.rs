//! Inlet down while a provider that never retries sends (GitHub: a failed delivery is
//! not sent again): a real `inlet serve` takes part of the events live, is killed (`kill
//! -9`), stays down while the provider records the rest as failed deliveries, and is
//! started again. Reconciliation (the run `serve` makes as it starts) finds every event
//! it never received in GitHub's record (a stand-in of its API), asks for it again, and
//! each arrives signed and is delivered once: nothing lost, nothing applied twice.

use crate::helpers::{wait_for, Backend, ProviderApi};
use crate::support::{assert_none, drained, kill_9, knob, report, serve, stop, Rig, Snapshot};
use std::time::{Duration, Instant};

chaos_on_both_backends!(a_provider_that_never_retries_loses_nothing_to_downtime);

const SECRET: &str = "github-chaos-reconcile-secret-0123456789";
const TOKEN: &str = "ghp_chaosReconcileToken0123456789";
const HOOK: &str = "repos/acme/shop/hooks/777";

/// The github source, reconciled through `api`, delivering to the rig's application.
fn github_source(api: &ProviderApi, application: &str) -> String {
    format!(
        "\n[[sources]]\nname = \"repo\"\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\n\
         [sources.reconcile]\napi = \"github\"\napi_url = \"{}\"\ncredential = \"{TOKEN}\"\n\
         hook = \"{HOOK}\"\ninterval = \"1m\"\nlookback = \"1d\"\nsettle = \"2s\"\n\
         [[sources.destinations]]\nname = \"app\"\nurl = \"{application}/events\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nretry_base = \"50ms\"\n\
         retry_cap = \"500ms\"\ntimeout = \"1s\"\nconnect_timeout = \"500ms\"\n",
        api.url
    )
}

/// A pull request event `n`, as GitHub sends it.
fn payload(n: u64) -> serde_json::Value {
    serde_json::json!({"action": "opened", "number": n, "repository": {"full_name": "acme/shop"}})
}

/// Posts delivery `guid` of the stand-in to Inlet as GitHub does: signed, once.
async fn deliver_live(api: &ProviderApi, port: u16, guid: &str) -> u16 {
    let body = api.webhook_body(guid);
    let mac = inlet::secret::hmac_sha256(SECRET.as_bytes(), &[&body]);
    let answer = crate::support::load_client()
        .post(format!("http://127.0.0.1:{port}/webhooks/repo"))
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", hex::encode(mac)),
        )
        .header("X-GitHub-Delivery", guid)
        .header("X-GitHub-Event", "pull_request")
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await;
    answer.map_or(0, |answer| answer.status().as_u16())
}

async fn a_provider_that_never_retries_loses_nothing_to_downtime(backend: Backend) {
    let live = knob("INLET_CHAOS_RECONCILE_LIVE", 40);
    let missed = knob("INLET_CHAOS_RECONCILE_MISSED", 120);
    let down_for = Duration::from_secs(knob("INLET_CHAOS_RECONCILE_DOWN_SECS", 15).max(5));
    let api = ProviderApi::github(TOKEN, HOOK, "http://127.0.0.1:9/down", SECRET).await;
    let rig = Rig::fresh_with(backend, "reconcile", 0.05, "").await;
    let config = std::fs::read_to_string(&rig.config).expect("the configuration");
    // One port for both processes, so that GitHub's redeliveries have one address (the
    // run `serve` makes as it starts asks for them at once).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let config = config.replace(
        "bind = \"127.0.0.1:0\"",
        &format!("bind = \"127.0.0.1:{port}\""),
    );
    std::fs::write(&rig.config, config + &github_source(&api, &rig.app.uri()))
        .expect("add the github source");
    api.deliver_to(&format!("http://127.0.0.1:{port}/webhooks/repo"));
    let mut process = serve(&rig.config).await;
    for n in 0..live {
        let (guid, at) = (format!("live-{n}"), chrono::Utc::now());
        api.add_github_delivery(&guid, "pull_request", payload(n), at, 200);
        assert_eq!(deliver_live(&api, process.port, &guid).await, 200, "{guid}");
    }
    drained(&rig.url, Duration::from_secs(60)).await;
    kill_9(process).await;
    // GitHub sends while Inlet is down: each delivery fails and is never retried. Real
    // time passes, as in an outage: the events age past `settle` while nobody listens.
    let down_since = Instant::now();
    // Sent over the outage's first 80 %: the last is older than `settle` (2 s) at restart.
    let spacing = down_for.mul_f64(0.8) / u32::try_from(missed).unwrap_or(1);
    for n in 0..missed {
        let (guid, at) = (format!("missed-{n}"), chrono::Utc::now());
        api.add_github_delivery(&guid, "pull_request", payload(live + n), at, 0);
        // Real time must pass: the deliveries are spread over the outage, as a provider
        // sends them, each older than `settle` by the restart.
        tokio::time::sleep(spacing).await;
    }
    // Real time must pass: Inlet stays down for the whole outage, nothing to wait on.
    tokio::time::sleep(down_for.saturating_sub(down_since.elapsed())).await;
    let down = down_since.elapsed();
    process = serve(&rig.config).await;
    let restarted = Instant::now();
    let total = usize::try_from(live + missed).expect("a count");
    wait_for("every event stored", Duration::from_secs(120), || async {
        let snapshot = Snapshot::read(&rig.url).await;
        let stored = snapshot
            .events
            .keys()
            .filter(|(source, _)| source == "repo")
            .count();
        (stored == total).then_some(())
    })
    .await;
    let recovered_in = restarted.elapsed();
    drained(&rig.url, Duration::from_secs(60)).await;
    let log = rig.app.log();
    let applied = log
        .applied
        .keys()
        .filter(|key| key.starts_with("repo:"))
        .count();
    let mut failures = Vec::new();
    if applied != total {
        failures.push(format!("{applied} of {total} events delivered"));
    }
    if log.applied_more_than_once() > 0 {
        failures.push(format!(
            "{} keys applied twice",
            log.applied_more_than_once()
        ));
    }
    let resends = api.resends().len();
    if resends != usize::try_from(missed).expect("a count") {
        failures.push(format!(
            "{resends} redeliveries asked for {missed} missed events"
        ));
    }
    stop(process).await;
    assert_none(&format!("{backend:?} reconcile"), &failures);
    report(&format!(
        "reconcile ({backend:?}): {live} events live, Inlet down {:.1} s while GitHub sent \
         {missed} (no retries); after restart every one redelivered and stored in {:.1} s, \
         {total} delivered once each ({} refusals by the application retried)",
        down.as_secs_f64(),
        recovered_in.as_secs_f64(),
        log.refused
    ));
}
