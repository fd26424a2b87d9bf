//! Builds the application on its own listener (port 0 in tests) and runs it until stopped.

use crate::clock::{Clock, SystemClock};
use crate::config::Settings;
use crate::db::{self, DbPool};
use crate::delivery::Dispatcher;
use crate::error::{Problem, Reason};
use crate::faults::Faults;
use crate::health::{healthz, metrics, readyz};
use crate::ingest::{receive_webhook, Outcome};
use crate::observability::observe;
use crate::operator;
use crate::retention::{Sweeper, SweeperHealth};
use actix_web::dev::{Server, ServerHandle};
use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer, ResponseError};
use anyhow::Context;
use std::net::TcpListener;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What every handler shares.
pub struct AppState {
    pub settings: Arc<Settings>,
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
    pub faults: Arc<Faults>,
    /// Wakes this instance's dispatcher when a new fact has deliveries.
    pub dispatcher_waker: Option<Arc<tokio::sync::Notify>>,
    /// The in-server sweeper's last success, for readiness.
    pub sweeper: Option<SweeperHealth>,
}

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
    server: Server,
    /// Stops the background tasks (dispatcher, sweeper); dropping it stops them too.
    stop_background: watch::Sender<bool>,
    background: Vec<JoinHandle<()>>,
}

/// Opens the pool and applies pending migrations (blocking work, off the executor).
pub async fn open_database(settings: &Settings) -> anyhow::Result<DbPool> {
    let database = settings.database.clone();
    web::block(move || -> anyhow::Result<DbPool> {
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

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        Self::build_with(settings, Hooks::default()).await
    }

    pub async fn build_with(settings: Settings, hooks: Hooks) -> anyhow::Result<Self> {
        crate::observability::prometheus();
        let sources: Vec<&str> = settings.sources.iter().map(|s| s.name.as_str()).collect();
        crate::observability::start_webhook_counters(&sources, &alerted_outcomes());
        crate::observability::record_sweeper_enabled(settings.retention.sweeper);
        let pool = open_database(&settings).await?;
        let listener = TcpListener::bind(&settings.server.bind)
            .with_context(|| format!("cannot listen on {} (server.bind)", settings.server.bind))?;
        let port = listener.local_addr()?.port();
        let workers = settings.server.workers;
        let grace = settings.server.shutdown_grace;
        let (stop_background, stopped) = watch::channel(false);
        let mut background = Vec::new();
        let mut dispatcher_waker = None;
        if settings.delivery.enabled {
            let dispatcher = Arc::new(Dispatcher::new(
                &settings,
                pool.clone(),
                hooks.clock.clone(),
            )?);
            dispatcher_waker = Some(dispatcher.waker());
            background.push(tokio::spawn(dispatcher.run(stopped.clone())));
        }
        let mut sweeper_health = None;
        if settings.retention.sweeper {
            let sweeper = Arc::new(Sweeper::new(
                pool.clone(),
                hooks.clock.clone(),
                settings.retention.clone(),
            ));
            sweeper_health = Some(sweeper.health());
            background.push(tokio::spawn(sweeper.run(stopped)));
        }
        let state = web::Data::new(AppState {
            settings: Arc::new(settings),
            pool,
            clock: hooks.clock,
            faults: hooks.faults,
            dispatcher_waker,
            sweeper: sweeper_health,
        });
        let mut server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(actix_web::middleware::from_fn(observe))
                .configure(register_routes)
                .default_service(web::to(no_route))
        })
        .shutdown_timeout(grace.as_secs())
        .listen(listener)?;
        if let Some(workers) = workers {
            server = server.workers(workers);
        }
        Ok(Self {
            port,
            server: server.run(),
            stop_background,
            background,
        })
    }

    /// The port actually bound (the configured one, or the one chosen for port 0).
    pub fn port(&self) -> u16 {
        self.port
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
        served
    }
}

/// Generates the route table and its registration from one list, so the table the
/// OpenAPI document is checked against is the set of routes actually served.
macro_rules! routes {
    ($($method:ident $path:expr => $handler:path;)*) => {
        /// Every route Inlet serves, as (method, path pattern).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        fn register_routes(config: &mut web::ServiceConfig) {
            $(config.route($path, web::$method().to($handler));)*
        }
    };
}

routes! {
    post WEBHOOK_ROUTE => receive_webhook;
    get "/healthz" => healthz;
    get "/readyz" => readyz;
    get "/metrics" => metrics;
    get "/openapi.json" => openapi;
    get "/admin/events" => operator::list_events;
    get "/admin/events/{source}/{event_id}" => operator::show_event;
    post "/admin/replay" => operator::replay;
    get "/admin/deliveries" => operator::list_deliveries;
    post "/admin/deliveries/requeue" => operator::requeue;
    post "/admin/deliveries/discard" => operator::discard;
    get "/admin/retention" => operator::retention;
}

/// The OpenAPI 3.1 document of these routes (`openapi.json` in the repository).
pub const OPENAPI: &str = include_str!("../openapi.json");

async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(OPENAPI)
}

/// Where providers deliver.
pub const WEBHOOK_ROUTE: &str = "/webhooks/{source}";

/// The `inlet_webhooks_total` outcomes exported at 0 from the start for every configured
/// source: the ones `examples/prometheus-alerts.yml` alerts on, and `accepted` for rates.
fn alerted_outcomes() -> [&'static str; 3] {
    [
        Outcome::Accepted.as_str(),
        Outcome::DuplicateAfterExpiry.as_str(),
        Reason::FingerprintMismatch.code(),
    ]
}

/// Requests no route takes: a served path asked with another method is `405` with
/// `Allow` (for webhooks also counted and logged as a rejection); anything else is `404`.
async fn no_route(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let Some(pattern) = request
        .match_pattern()
        .filter(|pattern| ROUTES.iter().any(|(_, path)| path == pattern))
    else {
        return Problem::new(
            Reason::NotFound,
            "no such route (webhooks are POST /webhooks/{source})",
        )
        .error_response();
    };
    let allow = ROUTES
        .iter()
        .filter(|(_, path)| *path == pattern)
        .map(|(method, _)| method.to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(", ");
    let problem = Problem::new(
        Reason::MethodNotAllowed,
        format!("{} {pattern} is not served: use {allow}", request.method()),
    );
    if pattern == WEBHOOK_ROUTE {
        // No route matched, so the path was not captured: the pattern matched, so the
        // name is the one segment after the prefix. As in the webhook handler, a name that
        // is not configured is never a label as sent.
        let source = request
            .path()
            .strip_prefix("/webhooks/")
            .and_then(|name| state.settings.source(name))
            .map_or("unknown", |source| source.name.as_str());
        let reason = problem.reason.code();
        let span = tracing::Span::current();
        span.record("source", source);
        span.record("outcome", reason);
        metrics::counter!("inlet_webhooks_total", "source" => source.to_owned(), "outcome" => reason)
            .increment(1);
        tracing::warn!(%source, reason, detail = %problem.detail, method = %request.method(), "webhook rejected");
    }
    let mut response = problem.error_response();
    if let Ok(value) = HeaderValue::from_str(&allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}
