//! A real Inlet on port 0 for one test: its options, its database, its clock and faults.

use super::*;
use actix_web::dev::ServerHandle;
use chrono::{DateTime, Utc};
use inlet::clock::AdjustableClock;
use inlet::config::Settings;
use inlet::db::{build_pool, DbPool};
use inlet::faults::Faults;
use inlet::startup::{Application, Hooks};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinHandle;

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
    /// More `[retention]` lines (TOML), e.g. `dead_letters = "90d"`.
    pub retention: &'static str,
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
    /// PostgreSQL through this transaction pooler (a server URL without a database, as
    /// [`PrivatePgBouncer::url`]), with `database.pooler = "transaction"`; default: the
    /// run's `INLET_TEST_POSTGRES_POOLER_URL`, else direct.
    pub through_pooler: Option<String>,
    /// More top-level TOML before `[server]`: `[[operators]]`, `[admin]`, `[console]`.
    pub operators: &'static str,
    /// `[telemetry]` lines (TOML), e.g. `otlp_endpoint = "…"`.
    pub telemetry: Option<String>,
    /// `operator.lockout_after`: wrong tokens in a row before an address waits.
    pub lockout_after: Option<u32>,
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
            retention: "",
            config_file: false,
            delivery_concurrency: None,
            unchecked_secrets: None,
            workers: 2,
            through_pooler: None,
            operators: "",
            telemetry: None,
            lockout_after: None,
        }
    }
}

pub struct TestApp {
    pub backend: Backend,
    pub settings: Settings,
    pub address: String,
    /// The console's own listener, when `console.bind` gives it one.
    pub console_address: Option<String>,
    /// The operator surface's own listener, when `admin.bind` gives it one.
    pub admin_address: Option<String>,
    pub client: reqwest::Client,
    pub clock: Arc<AdjustableClock>,
    pub faults: Arc<Faults>,
    pub proxy: Option<Arc<ToggleProxy>>,
    /// A pool of the test's own, for looking at rows (never through the proxy).
    pub pool: DbPool,
    /// The configuration file, with `TestOptions::config_file`.
    pub config_path: Option<PathBuf>,
    pub(crate) handle: ServerHandle,
    pub(crate) server: Option<JoinHandle<std::io::Result<()>>>,
    // Shared with other instances on the same database; dropped with the last one.
    pub(crate) database: Arc<TestDatabase>,
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

/// `count` Inlet instances started at once on one new, empty database: they race to
/// migrate it.
pub async fn spawn_apps_at_once(
    backend: Backend,
    options: TestOptions,
    count: usize,
) -> Vec<TestApp> {
    let database = tokio::task::spawn_blocking(move || TestDatabase::create(backend))
        .await
        .expect("create the test database");
    let database = Arc::new(database);
    let starting: Vec<_> = (0..count)
        .map(|_| {
            let (database, options) = (database.clone(), options.clone());
            tokio::spawn(async move { start_instance(backend, database, None, options).await })
        })
        .collect();
    let mut apps = Vec::with_capacity(count);
    for app in starting {
        apps.push(app.await.expect("an instance starts"));
    }
    apps
}

async fn start_instance(
    backend: Backend,
    database: Arc<TestDatabase>,
    proxy: Option<Arc<ToggleProxy>>,
    options: TestOptions,
) -> TestApp {
    let through_pooler = match (backend, &proxy) {
        (Backend::Postgres, None) => options.through_pooler.clone().or_else(postgres_pooler_url),
        _ => None,
    };
    let pooler = match through_pooler {
        Some(_) => "pooler = \"transaction\"",
        None => "",
    };
    let url = database.app_url(proxy.as_ref().map(|p| p.port), through_pooler);
    let lock_timeout = options.lock_timeout.unwrap_or("5s");
    let destination = options
        .destination
        .as_deref()
        .map(|body| format!("[[sources.destinations]]\n{body}\n"))
        .unwrap_or_default();
    let toml = format!(
        r#"
        {operators}
        {telemetry}

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
        {pooler}

        [operator]
        token = "{OPERATOR_TOKEN}"
        {lockout_after}

        [retention]
        sweeper = {sweeper}
        sweep_interval = "{sweep_interval}"
        {retention}

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
        retention = options.retention,
        sources = sources_toml(&destination) + &options.extra_sources,
        operators = options.operators,
        lockout_after = options
            .lockout_after
            .map(|n| format!("lockout_after = {n}"))
            .unwrap_or_default(),
        telemetry = options
            .telemetry
            .as_deref()
            .map(|lines| format!("[telemetry]\n{lines}"))
            .unwrap_or_default(),
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
    let admin_address = application
        .admin_port()
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
        admin_address,
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
