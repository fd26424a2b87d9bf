//! Builds the application on its own listener (port 0 in tests) and runs it until stopped.

use crate::clock::{Clock, SystemClock};
use crate::config::{LiveSettings, ServerSettings, Settings};
use crate::db::{self, DbPool};
use crate::delivery::Dispatcher;
use crate::faults::Faults;
use crate::ingest::{Committer, Outcome};
use crate::notices::{Checks, Notices};
use crate::operator::BulkRunner;
use crate::operator::ConsoleSettings;
use crate::reconcile::{IntakeServices, Reconciler, RunReport, RunRequest};
use crate::reload::{warn_about_schemes, Reloader};
use crate::retention::{Sweeper, SweeperHealth};
use crate::routes::observe;
use crate::routes::register_routes;
use crate::routes::Reason;
use crate::state::AppState;
use crate::traces::Traces;
use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Replaceable parts, for tests: the clock, and (test builds) armed faults.
#[derive(Clone)]
pub struct Hooks {
    pub clock: Arc<dyn Clock>,
    pub faults: Arc<Faults>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            faults: Arc::new(Faults::default()),
        }
    }
}

/// A bound, migrated, ready-to-run Inlet.
pub struct Application {
    port: u16,
    /// The console's own listener's port, when `console.bind` gives it one.
    console_port: Option<u16>,
    /// The operator surface's own listener's port, when `admin.bind` gives it one.
    admin_port: Option<u16>,
    server: Server,
    /// Stops the background tasks (dispatcher, sweeper); dropping it stops them too.
    stop_background: watch::Sender<bool>,
    background: Vec<JoinHandle<()>>,
    reloader: Arc<Reloader>,
    /// Flushed when the server stops.
    traces: Traces,
}

/// Opens the pool and applies pending migrations (blocking work, off the executor).
pub async fn open_database(settings: &Settings) -> anyhow::Result<DbPool> {
    let database = settings.database.clone();
    web::block(move || -> anyhow::Result<DbPool> {
        // Before the pool: its connections set session state a transaction pooler would
        // hand to other clients.
        db::check_pooler(&database).map_err(|error| match error {
            db::PoolerError::Probe(_) => {
                anyhow::Error::new(error).context(format!("cannot connect to {}", database.target))
            }
            refused => anyhow::Error::new(refused),
        })?;
        let pool = db::build_pool(&database)
            .with_context(|| format!("cannot connect to {}", database.target))?;
        let mut conn = pool.get().context("no database connection")?;
        let applied = db::run_migrations(&mut conn)?;
        if !applied.is_empty() {
            tracing::info!(?applied, "migrations applied");
        }
        drop(conn);
        Ok(pool)
    })
    .await
    .context("the database task was aborted")?
}

/// [`open_database`] for a process that serves `settings`' sources (`serve`, `deliver`):
/// refused when they drop a source the database still holds rows of.
pub async fn open_serving_database(settings: &Settings) -> anyhow::Result<DbPool> {
    let pool = open_database(settings).await?;
    check_stored_sources(&pool, settings).await?;
    let (sessions_pool, accounts) = (pool.clone(), settings.operator.accounts.clone());
    tokio::task::spawn_blocking(move || {
        crate::operator::sessions::end_sessions_of_removed_operators(&sessions_pool, &accounts)
    })
    .await
    .context("the database task was aborted")?;
    Ok(pool)
}

/// Refuses `settings` when they drop a source the database still holds rows of (a
/// rename resets deduplication); see [`Settings::check_stored_sources`].
pub async fn check_stored_sources(pool: &DbPool, settings: &Settings) -> anyhow::Result<()> {
    let stored = crate::ledger::stored_sources_in(pool).await?;
    settings
        .check_stored_sources(&stored)
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        Self::build_with(settings, Hooks::default()).await
    }

    pub async fn build_with(settings: Settings, hooks: Hooks) -> anyhow::Result<Self> {
        Self::build_reloadable(settings, hooks, None).await
    }

    /// [`Application::build_with`], able to reload `reload_from` (the configuration file
    /// `settings` were read from) on `POST /admin/reload` or through [`Self::reloader`].
    pub async fn build_reloadable(
        settings: Settings,
        hooks: Hooks,
        reload_from: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        start_metrics(&settings, hooks.clock.now().timestamp());
        let pool = open_serving_database(&settings).await?;
        let listener = TcpListener::bind(&settings.server.bind)
            .with_context(|| format!("cannot listen on {} (server.bind)", settings.server.bind))?;
        let port = listener.local_addr()?.port();
        let (admin_listener, admin_port) = bind_admin(&settings)?;
        let server_settings = settings.server.clone();
        let grace = settings.server.shutdown_grace;
        raise_open_files_limit();
        return_freed_memory_periodically();
        let session_key = session_key(&settings, &pool, hooks.clock.now()).await?;
        let (stop_background, stopped) = watch::channel(false);
        let mut background = Vec::new();
        let starting = Starting {
            settings: &settings,
            pool: &pool,
            hooks: &hooks,
            stopped: &stopped,
        };
        let parts = start_background(&starting, session_key, &mut background)?;
        let traces = parts.traces.clone();
        let console = settings.console.clone();
        let (state, reloader) = shared_state(settings, pool, hooks, parts, reload_from)?;
        background.push(start_bulk_runner(&state, &stopped));
        let reconciler = state.reconciler.clone();
        background.push(tokio::spawn(reconciler.run_on_schedule(stopped.clone())));
        let console_port = console_listener(&console, &state, grace, &stopped, &mut background)?;
        // The console is on the operator surface's listener unless it has one of its own.
        let console_here = console.enabled && console.bind.is_none();
        let main = match admin_listener {
            Some(admin) => {
                let surface = Surface::operator(console_here);
                let server = http_server(state.clone(), admin, surface, &server_settings)?;
                background.push(stop_with(server, stopped));
                let port = admin_port.unwrap_or_default();
                tracing::info!(port, "operator surface listening on admin.bind");
                Surface::webhooks()
            }
            None => Surface::everything(console_here),
        };
        let server = http_server(state, listener, main, &server_settings)?;
        Ok(Self {
            port,
            console_port,
            admin_port,
            server,
            stop_background,
            background,
            reloader,
            traces,
        })
    }

    /// Reloads this instance's configuration file (what SIGHUP does in `inlet serve`).
    pub fn reloader(&self) -> Arc<Reloader> {
        self.reloader.clone()
    }

    /// The port actually bound (the configured one, or the one chosen for port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The console's own port, when `console.bind` gives it a listener of its own.
    pub fn console_port(&self) -> Option<u16> {
        self.console_port
    }

    /// The operator surface's own port, when `admin.bind` gives it a listener of its own.
    pub fn admin_port(&self) -> Option<u16> {
        self.admin_port
    }

    /// A handle to stop the server gracefully.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until SIGTERM or Ctrl-C (or a stop through [`Application::handle`]):
    /// in-flight requests get the grace period, then the dispatcher finishes or gives back
    /// its deliveries.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let served = self.server.await;
        let _ = self.stop_background.send(true);
        for task in self.background {
            if let Err(error) = task.await {
                tracing::warn!(%error, "a background task ended abnormally");
            }
        }
        // The last spans (the shutdown's own deliveries) go out before the process ends.
        let traces = self.traces;
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        served
    }
}

/// The console's own listener, when `console.bind` gives it one: its port.
fn console_listener(
    console: &ConsoleSettings,
    state: &web::Data<AppState>,
    grace: std::time::Duration,
    stopped: &watch::Receiver<bool>,
    background: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Option<u16>> {
    let (Some(bind), true) = (&console.bind, console.enabled) else {
        return Ok(None);
    };
    let (port, stop) = serve_console(bind, state.clone(), grace)?;
    background.push(stop_with(stop, stopped.clone()));
    Ok(Some(port))
}

/// What the background tasks started before the shared state hand it.
struct BackgroundParts {
    dispatcher: Option<Arc<Dispatcher>>,
    /// The sweeper's health, when this instance sweeps.
    sweeper: Option<SweeperHealth>,
    /// What console sessions are signed with.
    session_key: [u8; 32],
    traces: Traces,
    /// The operational notices, when `[notices]` configures them.
    notices: Option<Arc<Notices>>,
}

/// What the background tasks are started with.
struct Starting<'a> {
    settings: &'a Settings,
    pool: &'a DbPool,
    hooks: &'a Hooks,
    stopped: &'a watch::Receiver<bool>,
}

/// The tracer, then the dispatcher (telling the notices of breakers and dead letters), the
/// sweeper and the notice checks, as this instance runs them, until `stopped`.
fn start_background(
    starting: &Starting<'_>,
    session_key: [u8; 32],
    background: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<BackgroundParts> {
    let traces = Traces::start(
        &starting.settings.telemetry,
        tokio::runtime::Handle::current(),
    )
    .context("cannot set up trace export (telemetry.otlp_endpoint)")?;
    let notices = notices_of(starting.settings, starting.hooks.clock.clone());
    let dispatcher = start_dispatcher(starting, &traces, &notices, background)?;
    let sweeper = start_sweeper(starting, &traces, background);
    start_notice_checks(starting, &notices, &sweeper, background);
    Ok(BackgroundParts {
        dispatcher,
        sweeper,
        session_key,
        traces,
        notices,
    })
}

/// The periodic notice checks (a stalled sweeper, dead letters over the threshold), when
/// `[notices]` is configured, running until `stopped`.
fn start_notice_checks(
    starting: &Starting<'_>,
    notices: &Option<Arc<Notices>>,
    sweeper: &Option<SweeperHealth>,
    background: &mut Vec<JoinHandle<()>>,
) {
    let Some(notices) = notices else { return };
    let checks = Checks {
        notices: notices.clone(),
        pool: starting.pool.clone(),
        clock: starting.hooks.clock.clone(),
        sweeper: sweeper.clone(),
    };
    background.push(tokio::spawn(checks.run(starting.stopped.clone())));
}

/// The operational notices of `settings`, when `[notices]` configures them, timed by
/// `clock`.
pub fn notices_of(settings: &Settings, clock: Arc<dyn Clock>) -> Option<Arc<Notices>> {
    let notices = settings.notices.clone()?;
    let retention = settings.retention.events.0;
    Some(Arc::new(Notices::new(notices, retention, clock)))
}

/// What every handler shares — the live settings, the database, the group-commit
/// writers, the checkpoint thread, the dispatcher's waker and health, the sweeper's — and
/// the reloader that swaps the settings.
fn shared_state(
    settings: Settings,
    pool: DbPool,
    hooks: Hooks,
    parts: BackgroundParts,
    reload_from: Option<PathBuf>,
) -> anyhow::Result<(web::Data<AppState>, Arc<Reloader>)> {
    let checkpointer = db::Checkpointer::start(&settings.database)
        .context("cannot start the checkpoint thread")?;
    let committer = Committer::start(
        pool.clone(),
        hooks.faults.clone(),
        &settings.database,
        &parts.traces,
    )
    .context("cannot start the group-commit writers")?;
    let committer = Arc::new(committer);
    let live = LiveSettings::new(settings);
    let reconciler = reconciler_of(&pool, &hooks, &live, &committer, &parts);
    let reloader = Arc::new(
        Reloader::new(
            reload_from,
            live.clone(),
            parts.dispatcher.clone(),
            Some(pool.clone()),
            &alerted_outcomes(),
        )
        .with_notices(parts.notices.clone()),
    );
    let state = web::Data::new(AppState {
        settings: live,
        reloader: reloader.clone(),
        pool,
        clock: hooks.clock,
        faults: hooks.faults,
        committer,
        checkpointer,
        dispatcher_waker: parts.dispatcher.as_ref().map(|d| d.waker()),
        brokers: parts.dispatcher.as_ref().map(|d| d.broker_health()),
        sweeper: parts.sweeper,
        notices: parts.notices,
        traffic: Default::default(),
        sign_in: Default::default(),
        session_key: parts.session_key,
        traces: parts.traces,
        certificates: Default::default(),
        reconciler,
    });
    Ok((state, reloader))
}

/// The process-wide metrics, each source's webhook counters from zero, and a warning for
/// each source whose scheme proves only the sender.
fn start_metrics(settings: &Settings, now_secs: i64) {
    crate::observability::prometheus();
    let sources: Vec<&str> = settings.sources.iter().map(|s| s.name.as_str()).collect();
    crate::observability::start_webhook_counters(&sources, &alerted_outcomes());
    crate::observability::record_sweeper_enabled(settings.retention.sweeper);
    crate::observability::start_config_reload_metrics(now_secs);
    if settings.notices.is_some() {
        crate::notices::start_notice_counters();
    }
    warn_about_schemes(settings, &sources);
}

/// The operator surface's own listener and its port, when `admin.bind` asks for one.
fn bind_admin(settings: &Settings) -> anyhow::Result<(Option<TcpListener>, Option<u16>)> {
    let Some(bind) = &settings.admin.bind else {
        return Ok((None, None));
    };
    let listener =
        TcpListener::bind(bind).with_context(|| format!("cannot listen on {bind} (admin.bind)"))?;
    let port = listener.local_addr()?.port();
    Ok((Some(listener), Some(port)))
}

/// What one listener serves: which routes of the table, and the console or not.
#[derive(Debug, Clone, Copy)]
struct Surface {
    routes: fn(&str) -> bool,
    console: bool,
}

impl Surface {
    fn everything(console: bool) -> Self {
        Self {
            routes: crate::routes::everything,
            console,
        }
    }

    fn webhooks() -> Self {
        Self {
            routes: crate::routes::is_public,
            console: false,
        }
    }

    fn operator(console: bool) -> Self {
        Self {
            routes: crate::routes::is_operator,
            console,
        }
    }
}

/// A listener's server, running: the routes of `surface`, its connection limit, worker
/// count and shutdown grace.
fn http_server(
    state: web::Data<AppState>,
    listener: TcpListener,
    surface: Surface,
    settings: &ServerSettings,
) -> anyhow::Result<Server> {
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(actix_web::middleware::from_fn(observe))
            .configure(|config| register_routes(config, surface.routes))
            .configure(|config| {
                if surface.console {
                    crate::routes::console::register(config);
                }
            })
            .default_service(web::to(crate::routes::no_route))
    })
    .shutdown_timeout(settings.shutdown_grace.as_secs())
    .max_connections(settings.max_connections)
    .listen(listener)?;
    if let Some(workers) = settings.workers {
        server = server.workers(workers);
    }
    Ok(server.run())
}

/// The console's session key: `console.session_secret`'s, or else the one derived from
/// the server secret stored in the database (the first instance to start generates it;
/// every instance, and every restart, reads the same).
async fn session_key(
    settings: &Settings,
    pool: &DbPool,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<[u8; 32]> {
    let secret = match &settings.console.session_secret {
        Some(secret) => secret.expose().to_owned(),
        None => {
            let generated = hex::encode(crate::secret::random_bytes::<32>()?);
            let pool = pool.clone();
            web::block(move || -> anyhow::Result<String> {
                let mut conn = pool.get().context("no database connection")?;
                let now = now.naive_utc();
                crate::operator::sessions::server_secret(
                    &mut conn,
                    "console_session",
                    &generated,
                    now,
                )
                .context("cannot read or store the console's session secret")
            })
            .await
            .context("the database task was aborted")??
        }
    };
    Ok(crate::secret::hmac_sha256(
        secret.as_bytes(),
        &[b"inlet console session key"],
    ))
}

/// Serves the console alone on `bind` (`console.bind`): its port and its server, which
/// runs until stopped.
fn serve_console(
    bind: &str,
    state: web::Data<AppState>,
    grace: std::time::Duration,
) -> anyhow::Result<(u16, Server)> {
    let listener = TcpListener::bind(bind)
        .with_context(|| format!("cannot listen on {bind} (console.bind)"))?;
    let port = listener.local_addr()?.port();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(actix_web::middleware::from_fn(observe))
            .configure(crate::routes::console::register)
            .default_service(web::to(crate::routes::no_route))
    })
    .shutdown_timeout(grace.as_secs())
    .workers(1)
    .listen(listener)?
    .run();
    tracing::info!(%bind, port, "console listening on its own address");
    Ok((port, server))
}

/// Runs `server` until the background tasks are told to stop, then stops it gracefully.
fn stop_with(server: Server, mut stopped: watch::Receiver<bool>) -> JoinHandle<()> {
    let handle = server.handle();
    tokio::spawn(async move {
        let serving = tokio::spawn(server);
        let _ = stopped.changed().await;
        handle.stop(true).await;
        if let Err(error) = serving.await {
            tracing::warn!(%error, "a listener of the operator surface ended abnormally");
        }
    })
}

/// After a flood of connections glibc keeps the freed memory in its arenas (measured: 13 MB
/// → 192 MB after five waves of 5,000 slow clients, and it stayed there). Every 10 s a
/// thread hands what is free back to the kernel with `malloc_trim`.
fn return_freed_memory_periodically() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static STARTED: std::sync::Once = std::sync::Once::new();
        STARTED.call_once(|| {
            let started = std::thread::Builder::new()
                .name("malloc-trim".to_owned())
                .spawn(|| loop {
                    std::thread::sleep(std::time::Duration::from_secs(10));
                    // SAFETY: malloc_trim only releases free memory of the allocator.
                    unsafe { libc::malloc_trim(0) };
                });
            if let Err(error) = started {
                tracing::warn!(%error, "cannot start returning freed memory to the kernel");
            }
        });
    }
}

/// Raises the soft open-files limit to the hard one, so a flood of connections meets
/// `server.max_connections` before it meets "Too many open files"; logs both numbers.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if read != 0 {
        tracing::warn!("cannot read the open-files limit");
        return;
    }
    let before = limit.rlim_cur;
    if before < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            tracing::warn!(
                soft = before,
                hard = limit.rlim_max,
                "cannot raise the open-files limit"
            );
            return;
        }
    }
    tracing::info!(before, now = limit.rlim_cur, "open-files limit");
}

/// The `inlet_webhooks_total` outcomes exported at 0 from the start for every configured
/// source: the ones `examples/prometheus-alerts.yml` alerts on, and `accepted` for rates.
fn alerted_outcomes() -> [&'static str; 3] {
    [
        Outcome::Accepted.as_str(),
        Outcome::DuplicateAfterExpiry.as_str(),
        Reason::FingerprintMismatch.code(),
    ]
}

/// The dispatcher, when this instance delivers: it probes its brokers in the background
/// (an unreachable broker is logged, never a reason not to serve webhooks) and runs until
/// `stopped`.
fn start_dispatcher(
    starting: &Starting<'_>,
    traces: &Traces,
    notices: &Option<Arc<Notices>>,
    background: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Option<Arc<Dispatcher>>> {
    if !starting.settings.delivery.enabled {
        return Ok(None);
    }
    let parts = (starting.settings, starting.pool, starting.hooks);
    let dispatcher = dispatcher_of(parts, traces, notices)?;
    background.push(tokio::spawn(
        dispatcher.clone().run(starting.stopped.clone()),
    ));
    Ok(Some(dispatcher))
}

/// The dispatcher of `settings` on `pool`, as every command that delivers assembles it:
/// its clock and faults, its traces, the notices it tells of breakers and dead letters,
/// and its brokers probed in the background.
fn dispatcher_of(
    (settings, pool, hooks): (&Settings, &DbPool, &Hooks),
    traces: &Traces,
    notices: &Option<Arc<Notices>>,
) -> anyhow::Result<Arc<Dispatcher>> {
    let dispatcher = Dispatcher::new(
        &settings.destinations,
        &settings.delivery,
        settings.server.shutdown_grace,
        pool.clone(),
        hooks.clock.clone(),
    )?;
    let mut dispatcher = dispatcher
        .with_faults(hooks.faults.clone())
        .with_traces(traces.clone());
    if let Some(notices) = notices {
        dispatcher = dispatcher.with_watcher(notices.clone());
    }
    let dispatcher = Arc::new(dispatcher);
    let probing = dispatcher.clone();
    tokio::spawn(async move { probing.probe_brokers().await });
    Ok(dispatcher)
}

/// `inlet deliver`: the dispatcher alone, assembled as `serve` assembles its own, on the
/// serving database.
pub struct Delivering {
    dispatcher: Arc<Dispatcher>,
    pool: DbPool,
    notices: Option<Arc<Notices>>,
    traces: Traces,
}

impl Delivering {
    pub async fn build(settings: &Settings, hooks: Hooks) -> anyhow::Result<Self> {
        let pool = open_serving_database(settings).await?;
        let traces = Traces::start(&settings.telemetry, tokio::runtime::Handle::current())
            .context("cannot set up trace export (telemetry.otlp_endpoint)")?;
        let notices = notices_of(settings, hooks.clock.clone());
        let dispatcher = dispatcher_of((settings, &pool, &hooks), &traces, &notices)?;
        Ok(Self {
            dispatcher,
            pool,
            notices,
            traces,
        })
    }

    /// What is due now, delivered once: how each attempt settled.
    pub async fn run_once(self) -> anyhow::Result<crate::delivery::Report> {
        let report = self.dispatcher.run_once().await;
        self.flush_traces().await?;
        report
    }

    /// Delivers until Ctrl-C, reading `config` again on SIGHUP.
    pub async fn run_until_stopped(
        self,
        settings: Settings,
        config: &std::path::Path,
    ) -> anyhow::Result<()> {
        let reloader = Reloader::new(
            Some(config.to_owned()),
            LiveSettings::new(settings),
            Some(self.dispatcher.clone()),
            Some(self.pool.clone()),
            &[],
        )
        .with_notices(self.notices.clone());
        tokio::spawn(crate::reload::reload_on_hangup(Arc::new(reloader)));
        let (stop, stopped) = watch::channel(false);
        let run = tokio::spawn(self.dispatcher.clone().run(stopped));
        tokio::signal::ctrl_c().await?;
        let _ = stop.send(true);
        run.await?;
        self.flush_traces().await
    }

    /// The attempts' last spans go out before the command ends.
    async fn flush_traces(self) -> anyhow::Result<()> {
        let traces = self.traces;
        Ok(tokio::task::spawn_blocking(move || traces.shutdown()).await?)
    }
}

/// The reconciliation of `serve`: recovered events are committed with the webhooks' group
/// and wake this instance's dispatcher.
fn reconciler_of(
    pool: &DbPool,
    hooks: &Hooks,
    live: &LiveSettings,
    committer: &Arc<Committer>,
    parts: &BackgroundParts,
) -> Arc<Reconciler<Settings>> {
    let current = live.clone();
    Arc::new(Reconciler {
        pool: pool.clone(),
        clock: hooks.clock.clone(),
        settings: Arc::new(move || current.current()),
        intake: IntakeServices {
            committer: committer.clone(),
            waker: parts.dispatcher.as_ref().map(|d| d.waker()),
            faults: hooks.faults.clone(),
            certificates: Default::default(),
        },
        holder: lease_name(),
        requested: Default::default(),
    })
}

/// One reconciliation run of `request.source` in this process (`inlet reconcile`): the
/// database, group-commit writers and the run, as `serve` would make it.
pub async fn reconcile_once(settings: Settings, request: RunRequest) -> anyhow::Result<RunReport> {
    let pool = open_database(&settings).await?;
    let faults = Arc::new(Faults::default());
    let settings = Arc::new(settings);
    let committer = Committer::start(
        pool.clone(),
        faults.clone(),
        &settings.database,
        &Traces::default(),
    )
    .context("cannot start the group-commit writers")?;
    let reconciler = Reconciler {
        pool,
        clock: Arc::new(crate::clock::SystemClock),
        settings: Arc::new(move || settings.clone()),
        intake: IntakeServices {
            committer: Arc::new(committer),
            waker: None,
            faults,
            certificates: Default::default(),
        },
        holder: lease_name(),
        requested: Default::default(),
    };
    Ok(reconciler.run(request).await?)
}

/// The runner of bulk operator actions (every instance has one; they share the work
/// through leases), running until `stopped`.
fn start_bulk_runner(
    state: &web::Data<AppState>,
    stopped: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let live = state.settings.clone();
    let runner = Arc::new(BulkRunner {
        pool: state.pool.clone(),
        clock: state.clock.clone(),
        settings: Arc::new(move || live.current()),
        faults: state.faults.clone(),
        waker: state.dispatcher_waker.clone(),
        holder: lease_name(),
    });
    tokio::spawn(runner.run(stopped.clone()))
}

/// A name for this instance's leases: its process id and random bytes (the process id
/// alone repeats across containers).
fn lease_name() -> String {
    let random = crate::secret::random_bytes::<8>().map(hex::encode);
    format!("{}-{}", std::process::id(), random.unwrap_or_default())
}

/// The sweeper, when this instance sweeps, running until `stopped`: its health.
fn start_sweeper(
    starting: &Starting<'_>,
    traces: &Traces,
    background: &mut Vec<JoinHandle<()>>,
) -> Option<SweeperHealth> {
    let retention = &starting.settings.retention;
    if !retention.sweeper {
        return None;
    }
    let sweeper = Sweeper::new(
        starting.pool.clone(),
        starting.hooks.clock.clone(),
        retention.clone(),
    );
    let sweeper = Arc::new(sweeper.with_traces(traces.clone()));
    let health = sweeper.health();
    background.push(tokio::spawn(sweeper.run(starting.stopped.clone())));
    Some(health)
}

/// Sources listed by name in the startup log; the rest are counted.
const SOURCES_LOGGED: usize = 20;

/// What `inlet serve` logs once it listens: each source's webhook URL (the first
/// [`SOURCES_LOGGED`]) under `base`, the metrics and, when it is served there, the console
/// under `operator_base` (the same, or `admin.bind`'s). A wildcard host is shown as it is.
pub fn listening_urls(
    sources: &[String],
    base: &str,
    operator_base: &str,
    console: bool,
) -> Vec<(String, String)> {
    let mut urls: Vec<(String, String)> = sources
        .iter()
        .take(SOURCES_LOGGED)
        .map(|name| {
            let what = format!("source {name}: register this webhook URL (behind your proxy)");
            (what, format!("{base}/webhooks/{name}"))
        })
        .collect();
    if sources.len() > SOURCES_LOGGED {
        let more = sources.len() - SOURCES_LOGGED;
        urls.push((
            format!("and {more} more sources"),
            format!("{base}/webhooks/…"),
        ));
    }
    urls.push((
        "metrics (Prometheus)".to_owned(),
        format!("{operator_base}/metrics"),
    ));
    if console {
        let what =
            "console: sign in with an operator's token ([operator] token, or one of [[operators]])";
        urls.push((what.to_owned(), format!("{operator_base}/console")));
    }
    urls
}
