//! The `inlet` binary as an operator runs it: the retention check at startup and in
//! `check-config`, the maintenance commands, `inlet send`, and its logs.

use crate::helpers::{
    spawn_app, spawn_app_with, stripe_event, Backend, TestOptions, STRIPE_SECRET,
};
use crate::on_both_backends;
use std::path::PathBuf;
use std::process::{Command, Output};

on_both_backends!(
    send_prints_the_idempotent_replayed_header,
    sign_prints_a_curl_command_that_is_accepted_as_pasted,
    healthcheck_exits_0_when_ready_and_1_with_the_reason_when_not,
    the_batched_ceiling_writes_the_rows_of_whole_groups,
);

/// Writes `toml` to a fresh directory (its SQLite file goes there too) and runs `inlet`.
fn inlet(toml: &str, args: &[&str]) -> Output {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "inlet-cli-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("inlet.toml");
    let toml = toml.replace("DB", &dir.join("inlet.db").display().to_string());
    std::fs::write(&config, toml).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .env_remove("INLET_RETENTION__EVENTS")
        // The logs as a user gets them by default.
        .env_remove("INLET_LOG")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        // A user who asks for backtraces gets none for an ordinary error either.
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run inlet");
    let _ = std::fs::remove_dir_all(&dir);
    output
}

const STRIPE: &str = "[database]\nurl = \"sqlite://DB\"\n[[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"whsec_check_config_0123456789abcdefghij\"]\n";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A second `inlet serve` on an address already taken says so in one line — what failed,
/// why, and what to do — and exits 1, whatever `RUST_BACKTRACE` asks for.
#[test]
fn an_address_in_use_is_one_clear_line_never_a_backtrace() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("its address").port();
    let toml = format!("[server]\nbind = \"127.0.0.1:{port}\"\n{STRIPE}");
    let output = inlet(&toml, &["serve"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "inlet: cannot listen on 127.0.0.1:{port} (server.bind): "
        )) && stderr.contains("already in use")
            && stderr.contains("another process listens there"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}

#[test]
fn check_config_prints_the_audit_when_it_passes() {
    let output = inlet(STRIPE, &["check-config"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for expected in [
        "retention.events",
        "35d",
        "source stripe (stripe)",
        "30d",
        "ok: events are kept 35d",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from:\n{stdout}"
        );
    }
}

/// Token sources sign nothing: `check-config` says what they do and do not prove, and
/// prints no credential.
#[test]
fn check_config_says_token_sources_prove_only_the_sender() {
    let toml = format!(
        "{STRIPE}[[sources]]\nname = \"legacy\"\nscheme = \"basic\"\n\
         secrets = [\"inlet:pass-not-printed-0123456789\"]\nevent_id = \"json:/id\"\nreplay_horizon = \"1d\"\n\
         [[sources]]\nname = \"forms\"\nscheme = \"header_token\"\n\
         token_header = \"X-Webhook-Token\"\nsecrets = [\"tok-not-printed-0123456789\"]\n\
         event_id = \"json:/id\"\nreplay_horizon = \"1d\"\n"
    );
    let output = inlet(&toml, &["check-config"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for source in ["legacy (basic)", "forms (header_token)"] {
        let note = stdout
            .lines()
            .find(|line| line.starts_with(&format!("note: source {source}")))
            .unwrap_or_else(|| panic!("no note for {source} in:\n{stdout}"));
        assert!(note.contains("proves who sent a request"), "{note}");
        assert!(
            note.contains("not that its body is unaltered or fresh"),
            "{note}"
        );
    }
    assert!(!stdout.contains("stripe) proves"), "{stdout}");
    assert!(!stdout.contains("not-printed"), "{stdout}");
}

/// `check-config` shows which event types each destination receives, and refuses a
/// pattern no event type could match, naming its key.
#[test]
fn check_config_prints_each_destinations_events_and_names_a_bad_pattern() {
    let destination = |name: &str, events: &str| {
        format!(
            "[[sources.destinations]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:9000/{name}\"\n\
             secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n{events}\n"
        )
    };
    let toml = format!(
        "{STRIPE}{}{}",
        destination("all", ""),
        destination("pay", "events = [\"payment_intent.*\", \"invoice.paid\"]")
    );
    let output = inlet(&toml, &["check-config"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for expected in [
        "destination stripe/all (http) receives every event",
        "destination stripe/pay (http) receives payment_intent.*, invoice.paid",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from:\n{stdout}"
        );
    }

    let bad = toml.replace("\"invoice.paid\"]", "\"invoice.paid\", \"*.created\"]");
    let output = inlet(&bad, &["check-config"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sources[0].destinations[1].events[2]") && stderr.contains("*.created"),
        "{stderr}"
    );
}

#[test]
fn serve_refuses_a_window_not_longer_than_the_horizon_and_names_the_numbers() {
    let toml = format!("{STRIPE}[retention]\nevents = \"30d\"\nreplay_horizon = \"7d\"\n");
    let output = inlet(&toml, &["serve"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for expected in [
        "retention.events",
        "30d",
        "7d",
        "source stripe (stripe)",
        "REFUSED",
    ] {
        assert!(
            stderr.contains(expected),
            "{expected} missing from:\n{stderr}"
        );
    }
}

/// Finding 5 of issue 32: each weak secret it names — `whsec_` alone (an empty key), a
/// destination's `whsec_`, basic's `:`, a one-character token, a token in `Host` or
/// `Authorization` — and ones just under a floor are refused by `check-config` and by
/// `serve`, naming the key and never printing the value.
#[test]
fn weak_secrets_are_refused_naming_the_key_never_the_value() {
    const MARK: &str = "Wk3akV4lue";
    let token = |secret: &str, header: &str| {
        format!(
            "{STRIPE}[[sources]]\nname = \"forms\"\nscheme = \"header_token\"\n\
             token_header = \"{header}\"\nsecrets = [\"{secret}\"]\n\
             event_id = \"json:/id\"\nreplay_horizon = \"1d\"\n"
        )
    };
    let basic = |secret: &str| {
        format!(
            "{STRIPE}[[sources]]\nname = \"legacy\"\nscheme = \"basic\"\n\
             secrets = [\"{secret}\"]\nevent_id = \"json:/id\"\nreplay_horizon = \"1d\"\n"
        )
    };
    let standard = |secret: &str| {
        format!("{STRIPE}[[sources]]\nname = \"svix\"\nscheme = \"standard\"\nsecrets = [\"{secret}\"]\n")
    };
    let destination = |secret: &str| {
        format!(
            "{STRIPE}[[sources.destinations]]\nurl = \"http://127.0.0.1:9/app\"\nsecret = \"{secret}\"\n"
        )
    };
    let strong_token = "tok-0123456789abcdef";
    let cases = [
        (standard("whsec_"), "sources[1].secrets[0]"),
        (destination("whsec_"), "sources[0].destinations[0].secret"),
        (basic(":"), "sources[1].secrets[0]"),
        (basic(&format!("inlet:{MARK}")), "sources[1].secrets[0]"),
        (token("x", "X-Webhook-Token"), "sources[1].secrets[0]"),
        (token(MARK, "X-Webhook-Token"), "sources[1].secrets[0]"),
        (token(strong_token, "Host"), "sources[1].token_header"),
        (
            token(strong_token, "Authorization"),
            "sources[1].token_header",
        ),
        (
            STRIPE.replace(
                "whsec_check_config_0123456789abcdefghij",
                &format!("whsec_{MARK}"),
            ),
            "sources[0].secrets[0]",
        ),
    ];
    for (toml, key) in &cases {
        for command in ["check-config", "serve"] {
            let output = inlet(toml, &[command]);
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{command} {key}: {stderr}");
            assert!(
                stderr.contains(key),
                "{command}: {key} missing from:\n{stderr}"
            );
            let printed = format!("{stderr}{}", text(&output.stdout));
            assert!(
                !printed.contains(MARK),
                "{command} printed the secret:\n{printed}"
            );
        }
    }
    assert!(
        inlet(&token(strong_token, "X-Webhook-Token"), &["check-config"])
            .status
            .success()
    );
}

#[test]
fn an_hmac_source_must_state_its_horizon() {
    let toml =
        "[database]\nurl = \"sqlite://DB\"\n[[sources]]\nname = \"acme\"\nscheme = \"hmac\"\n\
                secrets = [\"acme-secret-0123456789\"]\nevent_id = \"json:/id\"\n[sources.hmac]\nheader = \"X-Sig\"\n";
    let output = inlet(toml, &["check-config"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("sources[0].replay_horizon"), "{stderr}");
    let stated = toml.replace("event_id", "replay_horizon = \"2d\"\nevent_id");
    assert!(inlet(&stated, &["check-config"]).status.success());
}

/// `inlet --version` names the version and the commit the binary was built from.
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let output = inlet(STRIPE, &["--version"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        stdout.starts_with(&format!("inlet {version} (")),
        "{stdout}"
    );
    let git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(git) if git.status.success() && std::env::var_os("INLET_COMMIT").is_none() => {
            let commit = text(&git.stdout);
            assert!(
                stdout.contains(&format!("({})", commit.trim())),
                "{stdout} vs {commit}"
            );
        }
        // Not a checkout (or a commit given at build time): a commit is still named.
        _ => assert!(stdout.trim_end().ends_with(')'), "{stdout}"),
    }
}

/// Completions and man pages come from the command definitions, every command included.
#[test]
fn completions_and_man_pages_name_every_command() {
    let bash = inlet(STRIPE, &["completions", "bash"]);
    let script = text(&bash.stdout);
    assert!(bash.status.success(), "{}", text(&bash.stderr));
    for command in ["serve", "sample-app", "check-config", "deadletters"] {
        assert!(
            script.contains(command),
            "{command} missing from the bash completions"
        );
    }
    let zsh = inlet(STRIPE, &["completions", "zsh"]);
    assert!(
        text(&zsh.stdout).starts_with("#compdef inlet"),
        "{}",
        text(&zsh.stdout)
    );

    let page = inlet(STRIPE, &["man"]);
    let roff = text(&page.stdout);
    assert!(page.status.success(), "{}", text(&page.stderr));
    assert!(roff.contains(".TH inlet 1"), "{roff}");
    let dir = std::env::temp_dir().join(format!("inlet-man-{}", std::process::id()));
    let written = inlet(STRIPE, &["man", "--dir", &dir.display().to_string()]);
    assert!(written.status.success(), "{}", text(&written.stderr));
    for page in ["inlet.1", "inlet-serve.1", "inlet-sample-app.1"] {
        let roff = std::fs::read_to_string(dir.join(page)).unwrap_or_default();
        assert!(roff.contains(".TH"), "{page}: {roff}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `inlet sample-app` refuses a secret it could not trust, as a destination's is refused
/// (under its former name `receive` too, which scripts may still use).
#[test]
fn the_sample_app_refuses_a_weak_secret() {
    for (command, weak) in [
        ("sample-app", "whsec_"),
        ("sample-app", "hunter2"),
        ("receive", "hunter2"),
    ] {
        let output = inlet(
            STRIPE,
            &[command, "--bind", "127.0.0.1:0", "--secret", weak],
        );
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{weak} accepted");
        assert!(stderr.contains("--secret"), "{weak}: {stderr}");
    }
}

/// `examples/inlet.toml` is valid and runs SQLite with its measured pool size.
#[test]
fn the_example_configuration_is_valid() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/inlet.toml");
    let example = std::fs::read_to_string(&path).expect("examples/inlet.toml");
    let output = inlet(&example, &["check-config"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let settings = inlet::config::Settings::from_toml(&example).expect("valid");
    assert_eq!(
        settings.database.pool_size,
        inlet::db::DEFAULT_SQLITE_POOL_SIZE
    );
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    // stdout is a pipe here, as under systemd, docker or a log shipper.
    let output = inlet(STRIPE, &["migrate"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("migrations applied"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}'),
        "ANSI escape codes in piped logs:\n{stdout:?}"
    );
}

/// `inlet sign` prints a whole curl command; pasted into a shell it posts the body byte
/// for byte (newlines included, which `curl -d` would strip) and Inlet accepts it.
async fn sign_prints_a_curl_command_that_is_accepted_as_pasted(backend: Backend) {
    let app = spawn_app(backend).await;
    let toml = format!(
        "[database]\nurl = \"sqlite://DB\"\n[[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\n\
         secrets = [\"{STRIPE_SECRET}\"]\n"
    );
    // A body with newlines, as `jq .` or an editor writes it.
    let body = std::env::temp_dir().join(format!("inlet-sign-{}.json", std::process::id()));
    let event = stripe_event("evt_pasted", "charge.succeeded", "ch_pasted");
    let pretty: serde_json::Value = serde_json::from_slice(&event).expect("JSON");
    let pretty = serde_json::to_string_pretty(&pretty).expect("pretty") + "\n";
    std::fs::write(&body, &pretty).expect("the body");
    let url = format!("{}/webhooks/stripe", app.address);
    let path = body.display().to_string();
    let signed = tokio::task::spawn_blocking(move || {
        inlet(
            &toml,
            &["sign", "--source", "stripe", "--body", &path, "--url", &url],
        )
    })
    .await
    .expect("task");
    let command = text(&signed.stdout);
    assert!(signed.status.success(), "{command}{}", text(&signed.stderr));
    assert!(
        command.contains("--data-binary @-") && command.contains("Stripe-Signature: t="),
        "{command}"
    );
    let pasted = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg("-c")
            .arg(&command)
            .output()
            .expect("bash")
    })
    .await
    .expect("task");
    let answer = text(&pasted.stdout);
    assert!(
        answer.contains("\"outcome\":\"accepted\""),
        "{answer}{}",
        text(&pasted.stderr)
    );
    let _ = std::fs::remove_file(&body);
}

/// `inlet send` shows that an answer is a stored one: the `Idempotent-Replayed` header.
async fn send_prints_the_idempotent_replayed_header(backend: Backend) {
    let app = spawn_app(backend).await;
    let toml = format!(
        "[database]\nurl = \"sqlite://DB\"\n[[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\n\
         secrets = [\"{STRIPE_SECRET}\"]\n"
    );
    let body = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/events/payment_intent.succeeded.json")
        .display()
        .to_string();
    let url = format!("{}/webhooks/stripe", app.address);
    let send = || {
        let (toml, body, url) = (toml.clone(), body.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            inlet(
                &toml,
                &["send", "--source", "stripe", "--body", &body, "--url", &url],
            )
        })
    };

    let first = send().await.expect("task");
    let stdout = text(&first.stdout);
    assert!(first.status.success(), "{stdout}{}", text(&first.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "200", "{stdout}");
    assert!(lines[1].contains("\"outcome\":\"accepted\""), "{stdout}");
    assert!(!stdout.contains("Idempotent-Replayed"), "{stdout}");

    let again = send().await.expect("task");
    let stdout = text(&again.stdout);
    assert!(again.status.success(), "{stdout}{}", text(&again.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "200", "{stdout}");
    assert_eq!(lines[1], "Idempotent-Replayed: true", "{stdout}");
    assert!(lines[2].contains("\"outcome\":\"accepted\""), "{stdout}");
}

#[test]
fn sweep_and_deliver_run_against_a_fresh_database() {
    let output = inlet(STRIPE, &["sweep", "--dry-run"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout)
        .contains("would delete: events 0, deliveries 0, dead letters 0, operator keys 0"));
    let output = inlet(STRIPE, &["deliver", "--once"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("delivered: 0"));
}

/// The operator commands talk to a running Inlet with a URL and a token: no config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_use_the_admin_api() {
    use crate::helpers::stripe_event;
    let app = spawn_app(Backend::Sqlite).await;
    app.post_stripe(&stripe_event("evt_cli_1", "charge.refunded", "ch_cli"))
        .await
        .assert_status(200);

    let (code, stdout, stderr) = app.run_cli(&["events", "list", "--source", "stripe"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("evt_cli_1"));

    let (_, stdout, _) = app
        .run_cli(&["events", "show", "stripe", "evt_cli_1"])
        .await;
    assert!(
        stdout.contains("\"first_event_id\": \"evt_cli_1\""),
        "{stdout}"
    );

    let (code, stdout, stderr) = app
        .run_cli(&["replay", "--event", "stripe/evt_cli_1"])
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("no_destinations"));

    let (code, stdout, _) = app.run_cli(&["deadletters", "list"]).await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("\"deliveries\": []"));

    let (code, stdout, _) = app
        .run_cli_with_token(&["events", "list"], "operator-token-that-is-wrong-000")
        .await;
    assert_eq!(code, Some(1));
    assert!(stdout.contains("unauthorized"));
}

/// `inlet healthcheck` (the image's HEALTHCHECK): exit 0 and the `/readyz` answer when a
/// running Inlet is ready, found at --url or at the configuration's listener; exit 1 with
/// the status when it is not ready, and naming the URL when nothing answers there.
async fn healthcheck_exits_0_when_ready_and_1_with_the_reason_when_not(backend: Backend) {
    let app = spawn_app(backend).await;
    let probe = |url: String| {
        tokio::task::spawn_blocking(move || inlet(STRIPE, &["healthcheck", "--url", &url]))
    };
    let ready = probe(app.address.clone()).await.expect("task");
    let stdout = text(&ready.stdout);
    assert!(ready.status.success(), "{stdout}{}", text(&ready.stderr));
    assert!(stdout.contains("/readyz: 200"), "{stdout}");

    // Without --url: the configuration's listener (as the image's HEALTHCHECK runs it).
    let bind = app.address.trim_start_matches("http://").to_owned();
    let own = tokio::task::spawn_blocking(move || {
        inlet(
            &format!("[server]\nbind = \"{bind}\"\n{STRIPE}"),
            &["healthcheck"],
        )
    })
    .await
    .expect("task");
    assert!(own.status.success(), "{}", text(&own.stderr));

    // Not ready: exit 1 with the status, the answer's control characters left out.
    let unready = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path("/readyz"))
        .respond_with(
            wiremock::ResponseTemplate::new(503).set_body_string("database: down\u{1b}[31m"),
        )
        .mount(&unready)
        .await;
    let down = probe(unready.uri()).await.expect("task");
    let stderr = text(&down.stderr);
    assert_eq!(down.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/readyz: 503 database: down[31m"),
        "{stderr}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let dead = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    let gone = probe(dead.clone()).await.expect("task");
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone.stdout));
    assert!(
        text(&gone.stderr).contains(&format!("{dead}/readyz")),
        "{}",
        text(&gone.stderr)
    );
}

/// `inlet bench --ceiling --batch 64`: Inlet's group transaction on the database alone,
/// 64 webhooks a transaction — each with its event, fact and (payload-free) delivery row.
async fn the_batched_ceiling_writes_the_rows_of_whole_groups(backend: Backend) {
    let app = spawn_app_with(
        backend,
        TestOptions {
            config_file: true,
            ..Default::default()
        },
    )
    .await;
    let config = app.config_path.clone().expect("a configuration file");
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_inlet"))
            .arg("--config")
            .arg(config)
            .args(["bench", "--ceiling", "--batch", "64", "--concurrency", "2"])
            .args(["--duration", "1s", "--json"])
            .output()
            .expect("run inlet bench")
    })
    .await
    .expect("bench task");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    let accepted = report["accepted"].as_i64().expect("accepted");
    assert!(accepted >= 64 && accepted % 64 == 0, "{report}");
    assert_eq!(app.count_events().await, accepted);
    assert_eq!(app.count_facts().await, accepted);
    assert_eq!(app.count_deliveries().await, accepted);
    let shared = app
        .with_conn(|c| {
            use diesel::prelude::*;
            use inlet::db::schema::deliveries;
            deliveries::table
                .filter(deliveries::payload.is_null())
                .count()
                .get_result::<i64>(c)
        })
        .await;
    assert_eq!(
        shared, accepted,
        "every outbox row refers to its event's payload"
    );
}
