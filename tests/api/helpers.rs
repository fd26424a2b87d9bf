//! Test harness: every test gets a real Inlet on port 0 backed by its own fresh database —
//! an SQLite file or a new PostgreSQL database — and talks to it over HTTP like a provider.
//!
//! `INLET_TEST_POSTGRES_URL` names the PostgreSQL server used to create test databases
//! (default `postgres://postgres@127.0.0.1:5432/postgres`). A PostgreSQL test fails, never
//! skips, when that server is unreachable.
// Shared by the `api` and `outage` test binaries; each uses part of it.
#![allow(dead_code)]

use actix_web::dev::ServerHandle;
use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::{Connection, PgConnection, SqliteConnection};
use hmac::{Hmac, KeyInit, Mac};
use inlet::clock::AdjustableClock;
use inlet::config::Settings;
use inlet::db::schema::{events, facts};
use inlet::db::{build_pool, DbPool};
use inlet::faults::Faults;
use inlet::startup::{Application, Hooks};
use sha2::Sha256;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Every test secret is as strong as its scheme asks (configurations with weaker ones are
/// refused); where a test needs a provider's documented, shorter, example secret it sets
/// it after validation ([`TestOptions::unchecked_secrets`]).
pub const STRIPE_SECRET: &str = "whsec_current_test_secret_0123456789abcdef";
pub const STRIPE_OLD_SECRET: &str = "whsec_rotating_out_test_secret_0123456789";
pub const OPERATOR_TOKEN: &str = "operator-token-for-tests-0123456789";

/// Every source of the test configuration (one per scheme, `acme` is generic hmac), with
/// its current secret, the one rotating out, and one that was removed.
pub const SOURCES: [(&str, [&str; 3]); 7] = [
    (
        "stripe",
        [
            STRIPE_SECRET,
            STRIPE_OLD_SECRET,
            "whsec_removed_test_secret_0123456789abcdef",
        ],
    ),
    (
        "github",
        [
            "gh-current-0123456789abcdef",
            "gh-rotating-out-0123456789abcdef",
            "gh-removed-0123456789abcdef",
        ],
    ),
    (
        "standard",
        [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "whsec_cmVtb3ZlZC1zZWNyZXQtcmVtb3ZlZA==",
        ],
    ),
    (
        "shopify",
        [
            "shop-current-0123456789abcdefghijklmnop",
            "shop-rotating-out-0123456789abcdefghij",
            "shop-removed-0123456789abcdefghijklmnop",
        ],
    ),
    (
        "slack",
        [
            "slack-current-0123456789abcdefghijklmn",
            "slack-rotating-out-0123456789abcdefghij",
            "slack-removed-0123456789abcdefghijklmn",
        ],
    ),
    (
        "slack-commands",
        [
            "cmd-current-0123456789abcdefghijklmnop",
            "cmd-rotating-out-0123456789abcdefghijk",
            "cmd-removed-0123456789abcdefghijklmnop",
        ],
    ),
    (
        "acme",
        [
            "acme-current-0123456789",
            "acme-rotating-out-0123456789",
            "acme-removed-0123456789",
        ],
    ),
];

/// The test sources; `stripe_extra` is appended to the stripe source (destinations).
fn sources_toml(stripe_extra: &str) -> String {
    let mut toml = String::new();
    for (name, [current, old, _]) in SOURCES {
        let scheme = match name {
            "acme" => "hmac",
            "slack-commands" => "slack",
            other => other,
        };
        toml.push_str(&format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"{scheme}\"\nsecrets = [\"{current}\", \"{old}\"]\n"
        ));
        match name {
            "acme" => toml.push_str(
                "event_id = \"header:X-Acme-Event-Id\"\nevent_type = \"json:/type\"\nreplay_horizon = \"2d\"\n\
                 [sources.hmac]\nheader = \"X-Acme-Signature\"\nprefix = \"sha256=\"\n\
                 encoding = \"hex\"\ntimestamp_header = \"X-Acme-Timestamp\"\n",
            ),
            "slack-commands" => {
                toml.push_str("event_id = \"form:trigger_id\"\nevent_type = \"form:command\"\n")
            }
            "stripe" => toml.push_str(stripe_extra),
            _ => {}
        }
    }
    toml
}

pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// For requests sent without any extra header.
pub const NO_HEADERS: &[(&str, &str)] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates one `#[tokio::test]` per backend for each listed `async fn(Backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            )*
        }
    };
}

/// A name no other test (or run) uses: a database, a stream, a queue.
pub fn unique_name() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = Utc::now().timestamp_subsec_nanos();
    format!(
        "inlet_test_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn postgres_admin_url() -> String {
    std::env::var("INLET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database that exists for one test and is removed afterwards.
pub enum TestDatabase {
    Sqlite(PathBuf),
    Postgres { name: String },
}

impl TestDatabase {
    fn create(backend: Backend) -> Self {
        let name = unique_name();
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                Self::Sqlite(dir.join("inlet.db"))
            }
            Backend::Postgres => {
                let mut admin = PgConnection::establish(&postgres_admin_url())
                    .expect("PostgreSQL must be reachable for the PostgreSQL tests (INLET_TEST_POSTGRES_URL)");
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .expect("create the test database");
                Self::Postgres { name }
            }
        }
    }

    /// The URL Inlet connects with; `via` routes PostgreSQL through a proxy port.
    fn url(&self, via: Option<u16>) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres { name } => {
                let admin = postgres_admin_url();
                let (server, _) = admin.rsplit_once('/').expect("a database URL has a path");
                let server = match via {
                    Some(port) => {
                        let (prefix, _) = server
                            .rsplit_once('@')
                            .map_or((server, ""), |(p, h)| (p, h));
                        format!("{prefix}@127.0.0.1:{port}")
                    }
                    None => server.to_owned(),
                };
                format!("{server}/{name}")
            }
        }
    }

    fn upstream(&self) -> SocketAddr {
        let admin = postgres_admin_url();
        let host = admin
            .rsplit_once('@')
            .map(|(_, rest)| rest)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("127.0.0.1:5432");
        let host = if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:5432")
        };
        host.replace("localhost", "127.0.0.1")
            .parse()
            .expect("an IP:port PostgreSQL address")
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match self {
            Self::Sqlite(path) => {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Self::Postgres { name } => {
                if let Ok(mut admin) = PgConnection::establish(&postgres_admin_url()) {
                    let _ = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
                }
            }
        }
    }
}

/// A TCP proxy to PostgreSQL that the test can cut: down drops every open connection and
/// refuses new ones, up lets them through again.
pub struct ToggleProxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl ToggleProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let up = up.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    connections.lock().expect("proxy lock").push(task);
                }
            })
        };
        Self {
            port,
            up,
            connections,
            accept,
        }
    }

    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for task in self.connections.lock().expect("proxy lock").drain(..) {
            task.abort();
        }
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for ToggleProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
    }
}

/// Knobs for one test's Inlet.
#[derive(Clone)]
pub struct TestOptions {
    /// Route PostgreSQL through a [`ToggleProxy`].
    pub proxy: bool,
    /// Start the clock here instead of now.
    pub clock_at: Option<DateTime<Utc>>,
    /// Stop the clock: it moves only when the test advances it.
    pub clock_stopped: bool,
    /// PostgreSQL `lock_timeout` (default 5s).
    pub lock_timeout: Option<&'static str>,
    /// `database.max_group` (default: Inlet's).
    pub max_group: Option<u32>,
    /// A `[[sources.destinations]]` body (TOML lines) for the stripe source.
    pub destination: Option<String>,
    /// Run the dispatcher in this instance (default true).
    pub dispatch: bool,
    /// `server.shutdown_grace` (default 2s).
    pub shutdown_grace: &'static str,
    /// More `[[sources]]` tables, appended to the configuration.
    pub extra_sources: String,
    /// Run the sweeper in this instance every this often (default: no sweeper).
    pub sweep_interval: Option<&'static str>,
    /// Write the configuration to a file of the test's and start from it, so the test
    /// can edit it ([`TestApp::write_config`]) and reload ([`TestApp::reload`]).
    pub config_file: bool,
    /// `delivery.concurrency` (default: Inlet's).
    pub delivery_concurrency: Option<u32>,
    /// A source's secrets, set after the configuration is validated: for the providers'
    /// published vectors, whose example secrets are shorter than what the providers
    /// issue (and than Inlet accepts in a configuration).
    pub unchecked_secrets: Option<(&'static str, &'static [&'static str])>,
    /// `server.workers` (default 2).
    pub workers: usize,
}

impl Default for TestOptions {
    fn default() -> Self {
        Self {
            proxy: false,
            clock_at: None,
            clock_stopped: false,
            lock_timeout: None,
            max_group: None,
            destination: None,
            dispatch: true,
            shutdown_grace: "2s",
            extra_sources: String::new(),
            sweep_interval: None,
            config_file: false,
            delivery_concurrency: None,
            unchecked_secrets: None,
            workers: 2,
        }
    }
}

pub struct TestApp {
    pub backend: Backend,
    pub settings: Settings,
    pub address: String,
    /// The console's own listener, when `console.bind` gives it one.
    pub console_address: Option<String>,
    pub client: reqwest::Client,
    pub clock: Arc<AdjustableClock>,
    pub faults: Arc<Faults>,
    pub proxy: Option<Arc<ToggleProxy>>,
    /// A pool of the test's own, for looking at rows (never through the proxy).
    pub pool: DbPool,
    /// The configuration file, with `TestOptions::config_file`.
    pub config_path: Option<PathBuf>,
    handle: ServerHandle,
    server: Option<JoinHandle<std::io::Result<()>>>,
    // Shared with other instances on the same database; dropped with the last one.
    database: Arc<TestDatabase>,
}

pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_with(backend, TestOptions::default()).await
}

/// A fresh database, migrated, for tests that run `inlet serve` processes of their own on
/// it: the in-process Inlet only holds it (and drops it with itself); it neither
/// dispatches nor sweeps.
pub async fn spawn_database_holder(backend: Backend) -> TestApp {
    spawn_app_with(
        backend,
        TestOptions {
            dispatch: false,
            ..Default::default()
        },
    )
    .await
}

pub async fn spawn_app_with(backend: Backend, options: TestOptions) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        // Logging lasts as long as the test process.
        std::mem::forget(inlet::observability::init_logging(
            inlet::observability::LogFormat::Text,
        ));
    }
    let database = tokio::task::spawn_blocking(move || TestDatabase::create(backend))
        .await
        .expect("create the test database");
    let proxy = match (backend, options.proxy) {
        (Backend::Postgres, true) => Some(Arc::new(ToggleProxy::start(database.upstream()).await)),
        _ => None,
    };
    start_instance(backend, Arc::new(database), proxy, options).await
}

async fn start_instance(
    backend: Backend,
    database: Arc<TestDatabase>,
    proxy: Option<Arc<ToggleProxy>>,
    options: TestOptions,
) -> TestApp {
    let url = database.url(proxy.as_ref().map(|p| p.port));
    let lock_timeout = options.lock_timeout.unwrap_or("5s");
    let destination = options
        .destination
        .as_deref()
        .map(|body| format!("[[sources.destinations]]\n{body}\n"))
        .unwrap_or_default();
    let toml = format!(
        r#"
        [server]
        bind = "127.0.0.1:0"
        max_body_bytes = {MAX_BODY_BYTES}
        workers = {workers}
        shutdown_grace = "{grace}"
        body_timeout = "1s"

        [database]
        url = "{url}"
        {pool_size}
        connect_timeout = "1s"
        busy_timeout = "2s"
        lock_timeout = "{lock_timeout}"
        {max_group}

        [operator]
        token = "{OPERATOR_TOKEN}"

        [retention]
        sweeper = {sweeper}
        sweep_interval = "{sweep_interval}"

        [delivery]
        enabled = {dispatch}
        poll_interval = "50ms"
        lease = "15s"
        {concurrency}
        {sources}
        "#,
        grace = options.shutdown_grace,
        workers = options.workers,
        max_group = options
            .max_group
            .map(|n| format!("max_group = {n}"))
            .unwrap_or_default(),
        // SQLite runs with its production default (one connection).
        pool_size = if backend == Backend::Postgres {
            "pool_size = 8"
        } else {
            ""
        },
        dispatch = options.dispatch,
        concurrency = options
            .delivery_concurrency
            .map(|n| format!("concurrency = {n}"))
            .unwrap_or_default(),
        sweeper = options.sweep_interval.is_some(),
        sweep_interval = options.sweep_interval.unwrap_or("10m"),
        sources = sources_toml(&destination) + &options.extra_sources,
    );
    let config_path = options.config_file.then(|| {
        let path = std::env::temp_dir().join(format!("inlet-{}.toml", unique_name()));
        std::fs::write(&path, &toml).expect("write the test configuration");
        path
    });
    let settings = match &config_path {
        Some(path) => Settings::load(path),
        None => Settings::from_toml(&toml),
    }
    .expect("valid test configuration");
    let mut settings = settings;
    if let Some((name, secrets)) = options.unchecked_secrets {
        let source = settings
            .sources
            .iter_mut()
            .find(|s| s.name.as_str() == name)
            .expect("a configured source");
        source.secrets = secrets
            .iter()
            .map(|s| inlet::secret::Secret::new(*s))
            .collect();
    }
    let clock = Arc::new(match (options.clock_at, options.clock_stopped) {
        (at, true) => AdjustableClock::stopped_at(at.unwrap_or_else(Utc::now)),
        (Some(at), false) => AdjustableClock::at(at),
        (None, false) => AdjustableClock::default(),
    });
    let faults = Arc::new(Faults::default());
    let hooks = Hooks {
        clock: clock.clone(),
        faults: faults.clone(),
    };
    let application = Application::build_reloadable(settings.clone(), hooks, config_path.clone())
        .await
        .expect("Inlet starts");
    let address = format!("http://127.0.0.1:{}", application.port());
    let console_address = application
        .console_port()
        .map(|port| format!("http://127.0.0.1:{port}"));
    let handle = application.handle();
    let server = tokio::spawn(application.run_until_stopped());

    let mut direct = settings.database.clone();
    direct.target = inlet::db::DatabaseTarget::parse(&database.url(None)).expect("test URL");
    let pool = tokio::task::spawn_blocking(move || build_pool(&direct))
        .await
        .expect("pool task")
        .expect("the test's own pool");

    TestApp {
        backend,
        settings,
        address,
        console_address,
        client: reqwest::Client::new(),
        clock,
        faults,
        proxy,
        pool,
        config_path,
        handle,
        server: Some(server),
        database,
    }
}

impl TestApp {
    /// The database URL (direct, not through the proxy), for processes of their own.
    pub fn database_url(&self) -> String {
        self.database.url(None)
    }

    /// Another Inlet on the same database (a second instance, or a restart).
    pub async fn another_instance(&self, options: TestOptions) -> TestApp {
        start_instance(
            self.backend,
            self.database.clone(),
            self.proxy.clone(),
            options,
        )
        .await
    }

    /// Stops the server as SIGTERM does: in-flight requests get the grace period, then the
    /// dispatcher finishes or gives back its deliveries. Returns once it has exited.
    pub async fn stop(&mut self) {
        self.handle.stop(true).await;
        if let Some(server) = self.server.take() {
            server.await.expect("server task").expect("clean exit");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(path) = &self.config_path {
            let _ = std::fs::remove_file(path);
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// A running `inlet serve` process (the real binary) and the port it reported. Dropping
/// it kills the process, so a failing test leaves no server behind.
pub struct Process {
    pub child: Child,
    pub port: u16,
}

/// Starts `inlet serve --config config` with JSON logs and waits for its port.
pub fn start_process(config: &std::path::Path) -> Process {
    start_process_reading_logs(config, true)
}

/// `inlet serve` with `config`, logging JSON lines at `info`: the child and its log lines.
pub fn serve_logging_json(
    config: &std::path::Path,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args(["--log-format", "json", "serve", "--config"])
        .arg(config)
        .env("INLET_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start inlet");
    let stdout = child.stdout.take().expect("stdout");
    (child, BufReader::new(stdout).lines())
}

/// Starts `inlet serve` and, after its port, reads its logs on (`drain`) or never again.
pub fn start_process_reading_logs(config: &std::path::Path, drain: bool) -> Process {
    let (child, mut lines) = serve_logging_json(config);
    let port = loop {
        let line = lines
            .next()
            .expect("inlet logs its port before anything else")
            .expect("a log line");
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if entry["fields"]["message"] == "inlet is listening" {
            break entry["fields"]["port"].as_u64().expect("a port") as u16;
        }
    };
    if drain {
        std::thread::spawn(move || lines.for_each(drop));
    } else {
        // Hold the pipe open, unread, for as long as the process lives.
        std::mem::forget(lines);
    }
    Process { child, port }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already exited after a SIGTERM test: nothing to kill, nothing to report.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGTERM, as an orchestrator stopping Inlet does.
pub fn sigterm(process: &Process) {
    let status = Command::new("kill")
        .args(["-TERM", &process.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits for the process to exit, at most `within`.
pub fn wait_exit(process: &mut Process, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = process.child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "inlet did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn replayed(&self) -> bool {
        self.header("Idempotent-Replayed") == Some("true")
    }

    /// Asserts the status, showing the body when it differs.
    pub fn assert_status(&self, status: u16) {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
    }

    /// Asserts a problem+json rejection with this status and reason.
    pub fn assert_problem(&self, status: u16, reason: &str) {
        assert_eq!(
            self.status,
            status,
            "expected {status} {reason}, got {}: {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let body = self.json();
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["status"], status, "{body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
}

impl TestApp {
    pub fn now(&self) -> DateTime<Utc> {
        inlet::clock::Clock::now(self.clock.as_ref())
    }

    pub async fn post_webhook<N: AsRef<str>, V: AsRef<str>>(
        &self,
        source: &str,
        body: &[u8],
        headers: &[(N, V)],
    ) -> Reply {
        let mut request = self
            .client
            .post(format!("{}/webhooks/{source}", self.address))
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name.as_ref(), value.as_ref().to_owned());
        }
        read(request.send().await.expect("the request reaches Inlet")).await
    }

    /// The headers `source`'s provider would send for `body` now, signed with `secret`
    /// (the source's current one by default), carrying `event_id` where the scheme sends
    /// it in a header.
    pub fn sign_for(
        &self,
        source: &str,
        body: &[u8],
        event_id: &str,
        secret: Option<&str>,
    ) -> Vec<(String, String)> {
        let mut settings = self
            .settings
            .source(source)
            .expect("a configured source")
            .clone();
        if let Some(secret) = secret {
            settings.secrets = vec![inlet::secret::Secret::new(secret)];
        }
        let event = inlet::signature::EventToSign {
            id: event_id.to_owned(),
            event_type: "thing.happened".to_owned(),
        };
        inlet::cli::signed_headers_for(&settings, body, self.now(), &event)
    }

    /// Posts `body` to `source`, signed as its provider would with `secret`.
    pub async fn post_signed(
        &self,
        source: &str,
        body: &[u8],
        event_id: &str,
        secret: Option<&str>,
    ) -> Reply {
        let headers = self.sign_for(source, body, event_id, secret);
        self.post_webhook(source, body, &headers).await
    }

    /// An operator API call: `GET` when `body` is `None`, else `POST` with the body and,
    /// when given, an Idempotency-Key.
    pub async fn admin(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
        key: Option<&str>,
    ) -> Reply {
        let url = format!("{}{path}", self.address);
        let mut request = match body {
            None => self.client.get(url),
            Some(body) => self
                .client
                .post(url)
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        };
        request = request.bearer_auth(OPERATOR_TOKEN);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        read(request.send().await.expect("the request reaches Inlet")).await
    }

    /// The configuration file as it is now (`TestOptions::config_file`).
    pub fn config_text(&self) -> String {
        let path = self.config_path.as_ref().expect("started with config_file");
        std::fs::read_to_string(path).expect("read the configuration file")
    }

    /// Replaces the configuration file (`TestOptions::config_file`); nothing changes until
    /// a reload.
    pub fn write_config(&self, text: &str) {
        let path = self.config_path.as_ref().expect("started with config_file");
        std::fs::write(path, text).expect("write the configuration file");
    }

    /// `POST /admin/reload`.
    pub async fn reload(&self) -> Reply {
        self.admin("/admin/reload", Some(&serde_json::json!({})), None)
            .await
    }

    /// Runs the `inlet` binary's operator commands against this instance (no local
    /// configuration needed); returns its exit code and stdout and stderr as text.
    pub async fn run_cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        self.run_cli_with_token(args, OPERATOR_TOKEN).await
    }

    /// [`Self::run_cli`] with another operator token.
    pub async fn run_cli_with_token(
        &self,
        args: &[&str],
        token: &'static str,
    ) -> (Option<i32>, String, String) {
        let address = self.address.clone();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
                .args(["--config", "/nonexistent/inlet.toml"])
                .args(&args)
                .args(["--admin-url", &address, "--token", token])
                .env_remove("INLET_OPERATOR_TOKEN")
                .output()
                .expect("run inlet")
        })
        .await
        .expect("the inlet process");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Posts `body` to the stripe source, signed now with the current secret.
    pub async fn post_stripe(&self, body: &[u8]) -> Reply {
        let signature = stripe_signature(STRIPE_SECRET, body, self.now().timestamp());
        self.post_webhook("stripe", body, &[("Stripe-Signature", signature)])
            .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        let response = self
            .client
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .expect("the request reaches Inlet");
        read(response).await
    }

    /// A request with any method and no body.
    pub async fn request(&self, method: &str, path: &str) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let response = self
            .client
            .request(method, format!("{}{path}", self.address))
            .send()
            .await
            .expect("the request reaches Inlet");
        read(response).await
    }

    pub async fn with_conn<T: Send + 'static>(
        &self,
        query: impl FnOnce(&mut inlet::db::DbConnection) -> QueryResult<T> + Send + 'static,
    ) -> T {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get().expect("a test connection");
            query(&mut conn).expect("test query")
        })
        .await
        .expect("test query task")
    }

    pub async fn count_events(&self) -> i64 {
        self.with_conn(|c| events::table.count().get_result(c))
            .await
    }

    pub async fn count_facts(&self) -> i64 {
        self.with_conn(|c| facts::table.count().get_result(c)).await
    }

    pub async fn count_deliveries(&self) -> i64 {
        self.with_conn(|c| inlet::db::schema::deliveries::table.count().get_result(c))
            .await
    }

    pub async fn count_attempts(&self) -> i64 {
        self.with_conn(|c| {
            inlet::db::schema::delivery_attempts::table
                .count()
                .get_result(c)
        })
        .await
    }

    /// How many deliveries the operator API lists with `status`.
    pub async fn deliveries_with_status(&self, status: &str) -> usize {
        self.admin(&format!("/admin/deliveries?status={status}"), None, None)
            .await
            .json()["deliveries"]
            .as_array()
            .map_or(0, Vec::len)
    }

    pub async fn facts_of(&self, kind: &str) -> Vec<(String, String)> {
        let kind = kind.to_owned();
        self.with_conn(move |c| {
            facts::table
                .filter(facts::kind.eq(kind))
                .select((facts::fact_key, facts::first_event_id))
                .order(facts::id)
                .load(c)
        })
        .await
    }

    /// One sweeper round now (on this instance's clock), as `inlet sweep` runs it.
    pub async fn sweep(&self, dry_run: bool) -> inlet::retention::SweepReport {
        let sweeper = inlet::retention::Sweeper::new(
            self.pool.clone(),
            self.clock.clone(),
            self.settings.retention.clone(),
        );
        tokio::task::spawn_blocking(move || sweeper.sweep(dry_run))
            .await
            .expect("sweep task")
            .expect("a sweep")
    }

    /// A connection of the test's own, outside Inlet's pool.
    pub fn direct_connection(&self) -> inlet::db::DbConnection {
        inlet::db::DbConnection::establish(&self.database.url(None).replace("sqlite://", ""))
            .expect("a direct connection")
    }

    /// SQLite only: another process holds the write lock until the returned guard drops.
    pub fn lock_sqlite_database(&self) -> SqliteConnection {
        let TestDatabase::Sqlite(path) = self.database.as_ref() else {
            panic!("lock_sqlite_database is for SQLite");
        };
        let mut conn =
            SqliteConnection::establish(path.to_str().expect("UTF-8 path")).expect("open");
        conn.batch_execute("BEGIN EXCLUSIVE")
            .expect("take the write lock");
        conn
    }
}

async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("read the body").to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

/// Stripe's algorithm, written independently of Inlet's: `t=…,v1=hex(HMAC(secret, "t.body"))`.
pub fn stripe_signature(secret: &str, body: &[u8], timestamp: i64) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

/// A Stripe event body.
pub fn stripe_event(id: &str, event_type: &str, object_id: &str) -> Vec<u8> {
    serde_json::json!({
        "id": id,
        "object": "event",
        "type": event_type,
        "created": 1_733_052_301,
        "data": { "object": { "id": object_id, "object": "payment_intent", "amount": 2000 } },
    })
    .to_string()
    .into_bytes()
}

/// The published vectors: `tests/fixtures/signatures.json`, a copy of the team's shared
/// fixtures (`.ci/run` checks that the copy has not drifted).
pub fn signature_vectors(scheme: &str) -> Vec<serde_json::Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signatures.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the signature vectors at {}: {e}",
            path.display()
        )
    });
    let all: serde_json::Value = serde_json::from_str(&text).expect("vectors are JSON");
    all["vectors"]
        .as_array()
        .expect("a vectors array")
        .iter()
        .filter(|v| v["scheme"] == scheme)
        .cloned()
        .collect()
}

/// How many requests a mock application received under each Idempotency-Key.
pub async fn requests_per_key(
    server: &wiremock::MockServer,
) -> std::collections::HashMap<String, usize> {
    let mut per_key = std::collections::HashMap::new();
    for request in server.received_requests().await.unwrap_or_default() {
        let key = request
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        *per_key.entry(key).or_default() += 1;
    }
    per_key
}

/// The destination's gate as `GET /admin/destinations` shows it.
pub async fn gate(app: &TestApp, destination: &str) -> serde_json::Value {
    let reply = app.admin("/admin/destinations", None, None).await;
    reply.assert_status(200);
    reply.json()["destinations"]
        .as_array()
        .and_then(|all| all.iter().find(|d| d["destination"] == destination))
        .cloned()
        .unwrap_or_else(|| panic!("no destination {destination} in {}", reply.text()))
}

/// Waits (up to 15 s) until `check` holds.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(what, std::time::Duration::from_secs(15), check).await
}

/// Waits up to `limit` until `check` holds: for work whose size, not its speed, is what
/// a test is about (hundreds of deliveries on a busy machine).
pub async fn eventually_within<F, Fut>(what: &str, limit: std::time::Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // 50 ms between checks, the time of the checks not counted (as before: a slow
    // machine slows the checks too).
    for _ in 0..limit.as_millis() / 50 {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A stand-in for the user's application: answers every POST with `status`.
pub async fn application_answering(status: u16) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(status))
        .mount(&server)
        .await;
    server
}

/// Serves `handler` for every request on a port of its own, with `data` (a stand-in for
/// the user's application that a test watches): its URL and its server's handle.
pub fn serve_application<T, F, Args>(
    data: actix_web::web::Data<T>,
    handler: F,
) -> (String, ServerHandle)
where
    T: Send + Sync + 'static,
    F: actix_web::Handler<Args> + Clone + Send + 'static,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    use actix_web::{web, App, HttpServer};
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(handler.clone()))
    })
    .workers(2)
    .bind(("127.0.0.1", 0))
    .expect("bind the application");
    let url = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    (url, handle)
}

/// What a watching application saw: deliveries out at once, and per Idempotency-Key.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub in_flight: usize,
    pub most_in_flight: usize,
    /// Idempotency-Key → deliveries received under it.
    pub per_key: std::collections::HashMap<String, usize>,
}

impl Seen {
    /// A delivery arrives: counted under its key and as in flight; how many are out now.
    pub fn arrive(&mut self, request: &actix_web::HttpRequest) -> usize {
        let key = request
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        *self.per_key.entry(key).or_default() += 1;
        self.in_flight += 1;
        self.most_in_flight = self.most_in_flight.max(self.in_flight);
        self.in_flight
    }
}

/// The value of one exposed series (`name{labels}` as Prometheus prints it), 0 when absent.
pub async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The book's bus encoding (docs/src/delivery/event-bus.md), written here independently
/// of Inlet's: a value fills one subject or routing-key token, ASCII letters, digits, `-` and `_` as they are and every
/// other UTF-8 byte as `%XX` (upper-case hex); a fact without a type is `~`.
pub fn bus_token(value: Option<&str>) -> String {
    let Some(value) = value else {
        return "~".to_owned();
    };
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
