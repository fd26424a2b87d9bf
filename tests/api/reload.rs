//! Live configuration reload (`POST /admin/reload`, SIGHUP): secrets rotate under load
//! without a failed or lost request, new sources and destinations take effect, and a
//! refused reload changes nothing and says which key is to blame.

use crate::helpers::{
    application_answering, eventually, holds_within, metric, spawn_app_with, spawn_database_holder,
    start_process, stripe_event, stripe_signature, Backend, TestApp, TestOptions,
    STRIPE_OLD_SECRET, STRIPE_SECRET,
};
use crate::on_both_backends;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

on_both_backends!(
    secrets_rotate_under_load_without_a_failed_or_lost_request,
    a_reload_adds_and_removes_a_source_and_its_destination,
    a_refused_reload_names_the_key_and_changes_nothing,
    a_reload_with_a_weak_secret_is_refused_and_changes_nothing,
    a_request_in_flight_finishes_on_the_configuration_it_started_with,
    a_dispatcher_that_does_not_know_a_destination_yet_puts_its_rows_back,
    a_renamed_source_is_refused_until_its_old_name_is_retired,
    a_webhook_is_answered_while_a_reload_builds_its_destinations,
    hundreds_of_destinations_share_one_client_and_deliver,
);

const SENDERS: usize = 20;

async fn reloadable(backend: Backend) -> TestApp {
    spawn_app_with(
        backend,
        TestOptions {
            config_file: true,
            ..Default::default()
        },
    )
    .await
}

/// The configuration with the stripe source's secrets replaced by `secrets`.
fn with_stripe_secrets(config: &str, secrets: &[&str]) -> String {
    let at = config.find("name = \"stripe\"").expect("the stripe source");
    let line_start = at + config[at..].find("secrets = [").expect("its secrets");
    let line_end = line_start + config[line_start..].find('\n').expect("a line");
    let list: Vec<String> = secrets.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "{}secrets = [{}]{}",
        &config[..line_start],
        list.join(", "),
        &config[line_end..]
    )
}

/// Writes `config` and reloads; the reload must be applied.
async fn apply(app: &TestApp, config: &str) -> serde_json::Value {
    app.write_config(config);
    let reply = app.reload().await;
    reply.assert_status(200);
    reply.json()
}

/// Posts a Stripe event signed with `secret` now.
async fn post_signed_stripe(app: &TestApp, id: &str, secret: &str) -> u16 {
    let body = stripe_event(id, "charge.captured", id);
    let signature = stripe_signature(secret, &body, app.now().timestamp());
    app.post_webhook("stripe", &body, &[("Stripe-Signature", signature)])
        .await
        .status
}

/// The value of one sample line of `/metrics` (`name{labels}`), 0 when absent.
/// What the senders share: the secret to sign with (and its generation), each sender's
/// generation of its latest request, and every answer.
#[derive(Default)]
struct Load {
    signing: RwLock<(u32, String)>,
    started: Vec<AtomicU32>,
    answers: Mutex<Vec<(String, Result<u16, String>)>>,
    stop: AtomicBool,
}

impl Load {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            signing: RwLock::new((0, STRIPE_SECRET.to_owned())),
            started: (0..SENDERS).map(|_| AtomicU32::new(0)).collect(),
            ..Default::default()
        })
    }

    /// Signs from now on with `secret`, then waits until every sender's requests signed
    /// with the previous one have been answered (a sender's requests are sequential).
    async fn switch_to(&self, secret: &str) {
        let generation = {
            let mut signing = self.signing.write().expect("signing");
            *signing = (signing.0 + 1, secret.to_owned());
            signing.0
        };
        eventually("every sender on the new secret", || async {
            self.started
                .iter()
                .all(|g| g.load(Ordering::SeqCst) >= generation)
        })
        .await;
    }
}

/// One sender: fresh event ids, each signed with the current secret, until stopped.
async fn send(
    load: Arc<Load>,
    sender: usize,
    address: String,
    clock: Arc<dyn inlet::clock::Clock>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    for i in 0.. {
        if load.stop.load(Ordering::SeqCst) {
            break;
        }
        let (generation, secret) = load.signing.read().expect("signing").clone();
        load.started[sender].store(generation, Ordering::SeqCst);
        let id = format!("evt_reload_{sender}_{i}");
        let body = stripe_event(&id, "charge.captured", &id);
        let signature = stripe_signature(&secret, &body, clock.now().timestamp());
        let answer = client
            .post(format!("{address}/webhooks/stripe"))
            .header("Stripe-Signature", signature)
            .body(body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .map_err(|e| e.to_string());
        load.answers.lock().expect("answers").push((id, answer));
    }
}

/// Twenty senders post without pause while the stripe secret rotates twice (add the new
/// one, reload, sign with it, remove the old one, reload). Each request is signed with a
/// secret valid in every configuration it can meet, so every answer must be 200, and the
/// database must hold exactly the accepted events.
async fn secrets_rotate_under_load_without_a_failed_or_lost_request(backend: Backend) {
    let app = reloadable(backend).await;
    let original = app.config_text();
    let load = Load::new();
    let mut senders = tokio::task::JoinSet::new();
    for sender in 0..SENDERS {
        let clock: Arc<dyn inlet::clock::Clock> = app.clock.clone();
        senders.spawn(send(load.clone(), sender, app.address.clone(), clock));
    }
    // Every configuration meets requests: 25 more answers between two steps (not a
    // moment's sleep, which a busy machine can fill with none).
    let pause = || async {
        let from = load.answers.lock().expect("answers").len();
        eventually("25 more answers under this configuration", || async {
            load.answers.lock().expect("answers").len() >= from + 25
        })
        .await;
    };
    let mut current = STRIPE_SECRET.to_owned();
    for next in [
        "whsec_rotated_in_1_0123456789abcdefghijklmn",
        "whsec_rotated_in_2_0123456789abcdefghijklmn",
    ] {
        pause().await;
        let added = apply(&app, &with_stripe_secrets(&original, &[&current, next])).await;
        assert_eq!(added["changes"]["sources"]["changed"][0], "stripe");
        load.switch_to(next).await;
        pause().await;
        apply(&app, &with_stripe_secrets(&original, &[next])).await;
        // Removed means refused, for a request that starts after the reload.
        let status = post_signed_stripe(&app, &format!("evt_removed_{next}"), &current).await;
        assert_eq!(
            status, 401,
            "the removed secret {current} is still accepted"
        );
        current = next.to_owned();
    }
    pause().await;
    load.stop.store(true, Ordering::SeqCst);
    while let Some(done) = senders.join_next().await {
        done.expect("a sender");
    }

    let answers = load.answers.lock().expect("answers").clone();
    assert!(
        answers.len() > 100,
        "only {} requests were sent",
        answers.len()
    );
    let failed: Vec<_> = answers.iter().filter(|(_, a)| a != &Ok(200)).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(5)]
    );
    let accepted = answers.len() as i64;
    assert_eq!(
        app.count_events().await,
        accepted,
        "the database holds other events than the accepted ones"
    );
}

/// A source with a destination added by a reload accepts webhooks and delivers their
/// facts; removed again, it is unknown. The answer names what changed, never a secret
/// or a URL.
async fn a_reload_adds_and_removes_a_source_and_its_destination(backend: Backend) {
    let app = reloadable(backend).await;
    let application = application_answering(200).await;
    let original = app.config_text();
    let billing_secret = "whsec_billing_secret_0123456789abcdefghij";
    let added = format!(
        "{original}\n[[sources]]\nname = \"billing\"\nscheme = \"stripe\"\nsecrets = [\"{billing_secret}\"]\n\
         [[sources.destinations]]\nname = \"billing-app\"\nurl = \"{}/events\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
        application.uri()
    );
    let body = stripe_event("evt_billing_1", "invoice.paid", "in_1");
    let signed = |body: &[u8]| {
        let signature = stripe_signature(billing_secret, body, app.now().timestamp());
        [("Stripe-Signature", signature)]
    };
    app.post_webhook("billing", &body, &signed(&body))
        .await
        .assert_problem(404, "unknown_source");

    app.write_config(&added);
    let reply = app.reload().await;
    reply.assert_status(200);
    let text = reply.text();
    assert!(
        !text.contains(billing_secret) && !text.contains(&application.uri()),
        "{text}"
    );
    let changes = &reply.json()["changes"];
    assert_eq!(changes["sources"]["added"], serde_json::json!(["billing"]));
    assert_eq!(
        changes["destinations"]["added"],
        serde_json::json!(["billing/billing-app"])
    );
    assert_eq!(changes["sources"]["changed"], serde_json::json!([]));
    let metrics = app.get("/metrics").await.text();
    assert!(
        metrics.contains(
            "inlet_webhooks_total{source=\"billing\",outcome=\"fingerprint_mismatch\"} 0"
        ),
        "the new source's counters start at 0"
    );

    app.post_webhook("billing", &body, &signed(&body))
        .await
        .assert_status(200);
    eventually("the new destination receives the new fact", || async {
        crate::helpers::requests_per_key(&application)
            .await
            .contains_key("billing:evt_billing_1")
    })
    .await;

    // The database holds billing's event and fact: dropping the source is refused…
    app.write_config(&original);
    let refused = app.reload().await;
    refused.assert_problem(422, "config_refused");
    assert_eq!(refused.json()["key"], "sources");
    assert!(refused.text().contains("'billing'"), "{}", refused.text());
    // …until it is retired on purpose.
    let removed = apply(
        &app,
        &format!("retired_sources = [\"billing\"]\n{original}"),
    )
    .await;
    assert_eq!(
        removed["changes"]["sources"]["removed"],
        serde_json::json!(["billing"])
    );
    assert_eq!(
        removed["changes"]["destinations"]["removed"],
        serde_json::json!(["billing/billing-app"])
    );
    let body = stripe_event("evt_billing_2", "invoice.paid", "in_2");
    app.post_webhook("billing", &body, &signed(&body))
        .await
        .assert_problem(404, "unknown_source");
}

/// Finding 5 of issue 32: a secret below its scheme's floor (`whsec_` alone, an empty
/// Standard Webhooks key; a Stripe secret shorter than Stripe issues) is refused by a
/// reload as at startup: 422 naming the key, never the value, and nothing changes — a
/// request signed with the weak secret is still refused.
async fn a_reload_with_a_weak_secret_is_refused_and_changes_nothing(backend: Backend) {
    let app = reloadable(backend).await;
    let original = app.config_text();
    let strong = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert!(original.contains(strong), "the standard source's secret");
    let weak_stripe = "whsec_Wk3akV4lue";
    let refusals = [
        (
            with_stripe_secrets(&original, &[STRIPE_SECRET, weak_stripe]),
            "sources[0].secrets[1]",
        ),
        (
            original.replacen(strong, "whsec_", 1),
            "sources[2].secrets[0]",
        ),
    ];
    for (config, key) in refusals {
        app.write_config(&config);
        let reply = app.reload().await;
        reply.assert_problem(422, "config_refused");
        assert_eq!(reply.json()["key"], key, "{}", reply.text());
        assert!(reply.text().contains("too weak"), "{}", reply.text());
        assert!(!reply.text().contains("Wk3akV4lue"), "{}", reply.text());
    }
    assert_eq!(
        post_signed_stripe(&app, "evt_weak_1", STRIPE_SECRET).await,
        200
    );
    assert_eq!(
        post_signed_stripe(&app, "evt_weak_2", weak_stripe).await,
        401
    );
    // Signed with the empty key that `whsec_` alone would have been.
    let body = br#"{"type":"thing.happened"}"#;
    app.post_signed("standard", body, "msg_weak", Some("whsec_"))
        .await
        .assert_problem(401, "bad_signature");
    app.post_signed("standard", body, "msg_strong", None)
        .await
        .assert_status(200);
}

/// Invalid TOML, an invalid secret, a restart-only change: each answers 422 naming the
/// key, counts a refusal, and the running configuration keeps serving unchanged.
async fn a_refused_reload_names_the_key_and_changes_nothing(backend: Backend) {
    let app = reloadable(backend).await;
    let original = app.config_text();
    let new_secret = "whsec_never_applied_0123456789abcdefghijk";
    let refusals = [
        ("[[sources]\nname = ".to_owned(), None),
        (
            with_stripe_secrets(&original, &[new_secret, "env:INLET_TEST_RELOAD_UNSET"]),
            Some("sources[0].secrets[1]"),
        ),
        (
            with_stripe_secrets(&original, &[STRIPE_SECRET, new_secret])
                .replace("bind = \"127.0.0.1:0\"", "bind = \"127.0.0.1:1\""),
            Some("server.bind"),
        ),
        (
            original.replace("poll_interval = \"50ms\"", "poll_interval = \"1s\""),
            Some("delivery.poll_interval"),
        ),
    ];
    for (config, key) in refusals {
        let before = metric(&app, "inlet_config_reloads_total{result=\"refused\"}").await;
        app.write_config(&config);
        let reply = app.reload().await;
        reply.assert_problem(422, "config_refused");
        let problem = reply.json();
        if let Some(key) = key {
            assert_eq!(problem["key"], key, "{problem}");
            assert!(
                problem["detail"].as_str().unwrap_or_default().contains(key),
                "{problem}"
            );
        }
        if key.is_some_and(|k| k.starts_with("server") || k.starts_with("delivery")) {
            assert!(problem["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("only on restart"));
        }
        let after = metric(&app, "inlet_config_reloads_total{result=\"refused\"}").await;
        assert!(
            after >= before + 1.0,
            "refusals counted: {before} then {after}"
        );
        // The old configuration still serves: its secrets, not the refused one.
        let id = format!("evt_refused_{}", after);
        assert_eq!(post_signed_stripe(&app, &id, STRIPE_SECRET).await, 200);
        assert_eq!(
            post_signed_stripe(&app, &format!("{id}_old"), STRIPE_OLD_SECRET).await,
            200
        );
        assert_eq!(
            post_signed_stripe(&app, &format!("{id}_new"), new_secret).await,
            401
        );
    }
    let text = app.get("/metrics").await.text();
    assert!(text.contains("inlet_config_last_reload_success"));
    assert!(text.contains("inlet_config_last_reload_timestamp_seconds"));

    // `inlet reload` says the same, and exits 1 on a refusal.
    let (code, out, err) = app.run_cli(&["reload"]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("delivery.poll_interval changes only on restart"),
        "{out}"
    );

    // Fixed, the same file applies.
    apply(
        &app,
        &with_stripe_secrets(&original, &[STRIPE_SECRET, new_secret]),
    )
    .await;
    assert_eq!(
        post_signed_stripe(&app, "evt_after_fix", new_secret).await,
        200
    );
    let (code, out, _) = app.run_cli(&["reload"]).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("\"applied\""), "{out}");
}

/// A webhook whose body is still arriving when a reload removes its secret is verified
/// against the configuration it started with, and accepted; the next one is refused.
async fn a_request_in_flight_finishes_on_the_configuration_it_started_with(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = reloadable(backend).await;
    let original = app.config_text();
    let body = stripe_event("evt_in_flight", "charge.captured", "ch_in_flight");
    let signature = stripe_signature(STRIPE_SECRET, &body, app.now().timestamp());
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    let head = format!(
        "POST /webhooks/stripe HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Stripe-Signature: {signature}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.split_at(body.len() / 2);
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(first).await.expect("first half");
    stream.flush().await.expect("flush");
    // Real time must pass: nothing outside marks that Inlet has begun this request; a
    // moment lets it read the head and start on the configuration of now.
    tokio::time::sleep(Duration::from_millis(200)).await;

    apply(
        &app,
        &with_stripe_secrets(&original, &["whsec_only_new_0123456789abcdefghijklmnopq"]),
    )
    .await;
    stream.write_all(rest).await.expect("second half");
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        post_signed_stripe(&app, "evt_after_removal", STRIPE_SECRET).await,
        401
    );
    assert_eq!(app.count_events().await, 1);
}

/// The real binary: SIGHUP after editing the file puts a new secret in force, the process
/// keeps serving, and the reload is in the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_of_a_running_process() {
    let holder = spawn_database_holder(Backend::Sqlite).await;
    let dir = std::env::temp_dir().join(format!("inlet-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("inlet.toml");
    let config = |secrets: &str| {
        format!(
            "[server]\nbind = \"127.0.0.1:0\"\nworkers = 1\n\
             [database]\nurl = \"{}\"\n\
             [retention]\nsweeper = false\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [{secrets}]\n",
            holder.database_url()
        )
    };
    std::fs::write(&path, config(&format!("\"{STRIPE_SECRET}\""))).expect("write config");
    let process = tokio::task::spawn_blocking({
        let path = path.clone();
        move || start_process(&path)
    })
    .await
    .expect("start");
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/webhooks/stripe", process.port);
    let post = |id: &'static str, secret: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = stripe_event(id, "charge.captured", id);
            let signature = stripe_signature(secret, &body, chrono::Utc::now().timestamp());
            client
                .post(url)
                .header("Stripe-Signature", signature)
                .body(body)
                .send()
                .await
                .expect("inlet answers")
                .status()
                .as_u16()
        }
    };
    let rotated = "whsec_rotated_by_sighup_0123456789abcdefgh";
    assert_eq!(post("evt_hup_1", rotated).await, 401);

    std::fs::write(
        &path,
        config(&format!("\"{STRIPE_SECRET}\", \"{rotated}\"")),
    )
    .expect("edit");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &process.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let attempts = AtomicUsize::new(0);
    eventually("the secret added before SIGHUP to be accepted", || async {
        let attempt = attempts.fetch_add(1, Ordering::SeqCst);
        post(["evt_hup_2", "evt_hup_3"][attempt % 2], rotated).await == 200
    })
    .await;
    assert_eq!(post("evt_hup_4", STRIPE_SECRET).await, 200);
    // In the audit trail like an operator's reload: by the process itself, on a signal.
    let trail = holder
        .admin("/admin/audit?action=reload", None, None)
        .await
        .json();
    let row = &trail["audit"][0];
    assert_eq!(
        (
            row["operator"].as_str(),
            row["surface"].as_str(),
            row["outcome"].as_str()
        ),
        (Some("system"), Some("signal"), Some("done")),
        "{trail}"
    );
    assert!(
        row["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("applied")),
        "{trail}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `inlet deliver` alone: SIGHUP after the file moves a destination to another URL sends
/// the next facts there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_moves_the_destinations_of_a_running_dispatcher() {
    let (before, after) = (
        application_answering(200).await,
        application_answering(200).await,
    );
    let destination = |server: &wiremock::MockServer| {
        format!(
            "name = \"app\"\nurl = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            server.uri()
        )
    };
    // This instance only ingests; the process under test dispatches.
    let app = spawn_app_with(
        Backend::Sqlite,
        TestOptions {
            dispatch: false,
            destination: Some(destination(&before)),
            ..Default::default()
        },
    )
    .await;
    let dir = std::env::temp_dir().join(format!("inlet-reload-deliver-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("inlet.toml");
    let config = |server: &wiremock::MockServer| {
        format!(
            "[database]\nurl = \"{}\"\n[delivery]\npoll_interval = \"50ms\"\nlease = \"15s\"\n\
             [retention]\nsweeper = false\n\
             [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
             [[sources.destinations]]\n{}",
            app.database_url(),
            destination(server)
        )
    };
    std::fs::write(&path, config(&before)).expect("write config");
    let mut dispatcher = std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args(["deliver", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start inlet deliver");

    app.post_stripe(&stripe_event("evt_deliver_1", "charge.captured", "ch_1"))
        .await
        .assert_status(200);
    eventually("the first fact at the first URL", || async {
        crate::helpers::requests_per_key(&before)
            .await
            .contains_key("stripe:evt_deliver_1")
    })
    .await;

    std::fs::write(&path, config(&after)).expect("edit config");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &dispatcher.id().to_string()])
        .status()
        .expect("kill");
    assert!(hup.success());
    // Until the reload is applied a fact may still go to the first URL: post until one
    // reaches the second.
    let posted = AtomicUsize::new(0);
    let moved = holds_within(Duration::from_secs(10), || async {
        let id = format!(
            "evt_deliver_moved_{}",
            posted.fetch_add(1, Ordering::SeqCst)
        );
        app.post_stripe(&stripe_event(&id, "charge.captured", &id))
            .await
            .assert_status(200);
        crate::helpers::requests_per_key(&after)
            .await
            .keys()
            .any(|key| key.starts_with("stripe:evt_deliver_moved_"))
    })
    .await;
    let alive = dispatcher.try_wait().expect("wait").is_none();
    let _ = dispatcher.kill();
    let _ = dispatcher.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(alive, "inlet deliver exited on SIGHUP");
    assert!(
        moved,
        "no fact reached the destination's new URL after SIGHUP"
    );
}

/// Mid-rollout, an instance that has not reloaded yet leases a row queued for a
/// destination it does not know: it parks the row for later instead of dead-lettering it,
/// and sends nothing. Its reload that adds the destination makes the row due at once
/// (not after the park's minute), and the parks spent none of `max_attempts`: with two,
/// a 503 and a retry still deliver.
async fn a_dispatcher_that_does_not_know_a_destination_yet_puts_its_rows_back(backend: Backend) {
    let application = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(503))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&application)
        .await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&application)
        .await;
    let added = format!(
        "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"added\"\n\
         max_attempts = 2\nretry_base = \"20ms\"\nretry_cap = \"50ms\"",
        application.uri()
    );
    let knows = spawn_app_with(
        backend,
        TestOptions {
            destination: Some(added.clone()),
            dispatch: false,
            ..Default::default()
        },
    )
    .await;
    let unaware = knows
        .another_instance(TestOptions {
            config_file: true,
            ..Default::default()
        })
        .await;
    knows
        .post_stripe(&stripe_event(
            "evt_rollout",
            "charge.succeeded",
            "ch_rollout",
        ))
        .await
        .assert_status(200);
    eventually("the unaware dispatcher to put the row back", || async {
        let pending = unaware
            .admin("/admin/deliveries?status=pending", None, None)
            .await
            .json();
        pending["deliveries"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("not configured on this instance"))
    })
    .await;
    assert_eq!(unaware.deliveries_with_status("dead").await, 0);
    let received = application.received_requests().await.map_or(0, |r| r.len());
    assert_eq!(received, 0, "nothing was sent");

    // The destination table goes under the stripe source: before the source after it.
    let text = unaware.config_text();
    let stripe = text.find("name = \"stripe\"").expect("the stripe source");
    let next = stripe
        + text[stripe..]
            .find("\n[[sources]]")
            .expect("a source after it");
    let table = format!("\n[[sources.destinations]]\n{added}\n");
    let with_destination = format!("{}{table}{}", &text[..next], &text[next..]);
    unaware.write_config(&with_destination);
    unaware.reload().await.assert_status(200);
    eventually("the parked row delivered after the reload", || async {
        unaware.deliveries_with_status("delivered").await == 1
    })
    .await;
    let received = application.received_requests().await.map_or(0, |r| r.len());
    assert_eq!(received, 2, "a 503, then a retry within max_attempts = 2");
}

/// A source renamed by reload would start deduplication afresh under its new name (the
/// same event accepted and delivered again). The reload is refused naming the old name,
/// and so is a start with the renamed configuration; once the old name is listed in
/// `retired_sources`, the operator has chosen that, and the rename applies.
async fn a_renamed_source_is_refused_until_its_old_name_is_retired(backend: Backend) {
    let app = reloadable(backend).await;
    let original = app.config_text();
    let body = stripe_event("evt_renamed_1", "charge.captured", "ch_renamed_1");
    app.post_stripe(&body).await.assert_status(200);

    let renamed = original.replace("name = \"stripe\"", "name = \"stripe-live\"");
    assert_ne!(renamed, original);
    app.write_config(&renamed);
    let refused = app.reload().await;
    refused.assert_problem(422, "config_refused");
    assert_eq!(refused.json()["key"], "sources");
    assert!(refused.text().contains("'stripe'"), "{}", refused.text());
    // Nothing changed: the old name still answers from the store, the new one is unknown.
    assert!(app.post_stripe(&body).await.replayed());
    let signature = stripe_signature(STRIPE_SECRET, &body, app.now().timestamp());
    app.post_webhook(
        "stripe-live",
        &body,
        &[("Stripe-Signature", signature.clone())],
    )
    .await
    .assert_problem(404, "unknown_source");

    // A start with the renamed configuration on the same database is refused too.
    let settings = inlet::config::Settings::from_toml(&renamed).expect("valid on its own");
    let started = inlet::startup::Application::build(settings).await;
    let error = format!("{:#}", started.err().expect("refused"));
    assert!(
        error.contains("'stripe'") && error.contains("retired_sources"),
        "{error}"
    );

    apply(&app, &format!("retired_sources = [\"stripe\"]\n{renamed}")).await;
    app.post_webhook("stripe-live", &body, &[("Stripe-Signature", signature)])
        .await
        .assert_status(200);
    app.post_stripe(&body)
        .await
        .assert_problem(404, "unknown_source");
}

/// `count` sources (`fleet-0`, `fleet-1`…), each with one destination under `url` (its
/// index appended to the path) and the extra destination lines `extra`.
fn fleet(from: usize, count: usize, url: &str, extra: &str) -> String {
    (from..from + count)
        .map(|i| {
            format!(
                "\n[[sources]]\nname = \"fleet-{i}\"\nscheme = \"github\"\n\
                 secrets = [\"fleet_secret_{i}_long_enough_for_anyone\"]\n\
                 [[sources.destinations]]\nurl = \"{url}/{i}\"\n\
                 secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n{extra}"
            )
        })
        .collect()
}

/// Lets held reloads go on when dropped, so that a failing test never leaves one held.
struct ReleaseOnDrop<'a>(&'a inlet::faults::Faults);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.release_reloads();
    }
}

/// With a single HTTP worker, a reload held in its build step (where it builds the new
/// destinations) does not hold the worker: a webhook sent meanwhile is answered while the
/// reload is still unfinished, and the reload then applies. (On the worker, the hold
/// would block every request behind it: the webhook would get no answer at all, which the
/// 20 s bound turns into a failure instead of a hang.)
async fn a_webhook_is_answered_while_a_reload_builds_its_destinations(backend: Backend) {
    let app = spawn_app_with(
        backend,
        TestOptions {
            config_file: true,
            workers: 1,
            ..Default::default()
        },
    )
    .await;
    let original = app.config_text();
    app.write_config(&(original + &fleet(0, 50, "http://127.0.0.1:9/fleet", "")));
    app.faults.hold_reloads();
    let _release = ReleaseOnDrop(&app.faults);
    let reload = app.reload();
    tokio::pin!(reload);
    tokio::select! {
        _ = &mut reload => panic!("the reload went past its hold"),
        _ = eventually("the reload to reach its build step", || async { app.faults.reload_held() }) => {}
    }

    let webhook = tokio::time::timeout(
        Duration::from_secs(20),
        post_signed_stripe(&app, "evt_during_reload", STRIPE_SECRET),
    );
    let answered = tokio::select! {
        answered = webhook => answered,
        _ = &mut reload => panic!("the reload went past its hold"),
    };
    assert_eq!(
        answered.ok(),
        Some(200),
        "a webhook sent while a reload builds is answered, before the reload completes"
    );
    assert!(app.faults.reload_held(), "the reload is still unfinished");

    app.faults.release_reloads();
    let reply = reload.await;
    reply.assert_status(200);
    let added = &reply.json()["changes"]["sources"]["added"];
    assert_eq!(added.as_array().map(Vec::len), Some(50), "{added}");
    assert_eq!(
        post_signed_stripe(&app, "evt_after_reload", STRIPE_SECRET).await,
        200
    );
}

/// Three hundred sources with a destination each (and the stripe source's own) start on
/// one HTTP client, and a fact reaches its destination. A reload that adds a hundred more
/// destinations builds a client only for the one whose connect timeout is new.
async fn hundreds_of_destinations_share_one_client_and_deliver(backend: Backend) {
    let application = application_answering(200).await;
    let app = spawn_app_with(
        backend,
        TestOptions {
            config_file: true,
            destination: Some(format!(
                "name = \"app\"\nurl = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
                application.uri()
            )),
            extra_sources: fleet(0, 300, "http://127.0.0.1:9/fleet", ""),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(app.faults.http_clients(), 1, "301 destinations, one client");

    // The dispatcher's first lease round writes a gate row per destination; on SQLite's
    // one connection a webhook may meanwhile be answered 503 (stored nothing, retry).
    let body = stripe_event("evt_many", "charge.succeeded", "ch_many");
    eventually("the webhook to be accepted", || async {
        let status = app.post_stripe(&body).await.status;
        assert!(status == 200 || status == 503, "answered {status}");
        status == 200
    })
    .await;
    eventually("the fact to reach its destination", || async {
        crate::helpers::requests_per_key(&application)
            .await
            .contains_key("stripe:evt_many")
    })
    .await;

    let more = fleet(300, 100, "http://127.0.0.1:9/fleet", "")
        + &fleet(
            400,
            1,
            "http://127.0.0.1:9/fleet",
            "connect_timeout = \"1s\"\n",
        );
    let reply = apply(&app, &(app.config_text() + &more)).await;
    let added = &reply["changes"]["destinations"]["added"];
    assert_eq!(added.as_array().map(Vec::len), Some(101), "{added}");
    assert_eq!(
        app.faults.http_clients(),
        2,
        "one more client, for the new connect timeout only"
    );
}
