//! Metrics and logs.
//!
//! Metrics are Prometheus text from `GET /metrics`, recorded with the `metrics` crate.
//! Names are stable and labels low-cardinality: routes are patterns, sources and
//! destinations are configured names, outcomes are fixed words — never event ids, payloads
//! or secrets. Logs go through `tracing`, human-readable or JSON (`--log-format json`),
//! with one span per request carrying its request id (`X-Request-Id`, honoured or made),
//! and the source, event id and outcome where known. `INLET_LOG` (or `RUST_LOG`) sets the
//! filter, `info` by default.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::ffi::OsStr;
use std::io::IsTerminal;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The request id header, honoured when the client sends a sane one and always returned.
pub const REQUEST_ID: &str = "x-request-id";

/// Latency buckets, in seconds: from sub-millisecond to the 10 s where providers give up.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Group sizes of the group committer: one webhook per transaction up to the largest
/// group allowed.
const GROUP_BUCKETS: [f64; 11] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1000.0,
];

/// How often histogram samples are folded into their buckets.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the log subscriber: the `INLET_LOG` (or `RUST_LOG`) filter, text or JSON on
/// stdout, colours only for a person at a terminal (see [`colour_logs`]).
/// Keeps the log writer's thread; dropping it writes out what is still buffered.
#[must_use = "logs stop being written when the guard is dropped"]
pub struct LogGuard {
    _writer: Option<tracing_appender::non_blocking::WorkerGuard>,
}

/// Logs to stdout through a buffer and a thread of their own: request threads never wait
/// on stdout, so a stalled log reader cannot stall the service. When the buffer is full
/// (128,000 lines) further lines are dropped rather than waited for.
/// The HTTP library's own complaints about a connection (see [`ProtocolErrors`]) are not
/// written as they come.
pub fn init_logging(format: LogFormat) -> LogGuard {
    let filter = EnvFilter::try_from_env("INLET_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        // actix's own start-up lines say what Inlet's say already.
        .unwrap_or_else(|_| EnvFilter::new("info,actix_server=warn"));
    let colour = colour_logs(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("inlet-logs")
        .finish(std::io::stdout());
    let protocol_errors = Arc::new(ProtocolErrors::default());
    let written = filter_fn(|metadata| !ProtocolErrors::from_http_library(metadata));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(ProtocolErrorLayer(protocol_errors.clone()));
    let text = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .with_writer(writer);
    // A second call (tests) keeps the first subscriber.
    let installed = match format {
        LogFormat::Text => registry.with(text.with_filter(written)).try_init(),
        LogFormat::Json => registry
            .with(text.json().with_current_span(true).with_filter(written))
            .try_init(),
    };
    if installed.is_ok() {
        protocol_errors.report_in_background();
    }
    LogGuard {
        _writer: installed.is_ok().then_some(guard),
    }
}

/// How often at most the HTTP library's complaints are logged.
pub const PROTOCOL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Requests the HTTP library (actix-http) refuses before Inlet sees them — a request line
/// or header it cannot parse, a head over its size limit, a connection broken mid-request
/// — it logs itself, one ERROR line per connection (`stream error: request parse error:
/// invalid Header provided`, target `actix_http::h1::dispatcher`): noise that anyone can
/// make at any rate. Those events are counted instead
/// (`inlet_http_protocol_errors_total{kind}`), and logged as a WARN at most once per
/// [`PROTOCOL_LOG_INTERVAL`], with how many there were since the last line and the last
/// one's detail. (actix-web's own `log` records are not collected at all.)
#[derive(Debug, Default)]
pub struct ProtocolErrors {
    pending: Mutex<Pending>,
    arrived: Condvar,
}

/// What happened since the last line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Pending {
    count: u64,
    kind: &'static str,
    detail: String,
}

impl ProtocolErrors {
    /// Whether an event is the HTTP library's warning or error.
    fn from_http_library(metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("actix_http") && *metadata.level() <= Level::WARN
    }

    /// The kind of a complaint, from the library's message.
    fn kind_of(message: &str) -> &'static str {
        if message.contains("head is too large") {
            "too_large"
        } else if message.contains("parse error") {
            "malformed"
        } else if message.contains("I/O error") {
            "io"
        } else {
            "other"
        }
    }

    fn record(&self, message: &str) {
        let kind = Self::kind_of(message);
        metrics::counter!("inlet_http_protocol_errors_total", "kind" => kind).increment(1);
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.count += 1;
        pending.kind = kind;
        pending.detail = message.chars().take(200).collect();
        self.arrived.notify_one();
    }

    /// Waits for a complaint; takes what arrived.
    fn next(&self) -> Pending {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let mut pending = self
            .arrived
            .wait_while(pending, |pending| pending.count == 0)
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut *pending)
    }

    /// A thread of its own writes the lines (a subscriber cannot log from inside itself).
    fn report_in_background(self: Arc<Self>) {
        let started = std::thread::Builder::new()
            .name("inlet-http-errors".to_owned())
            .spawn(move || loop {
                let Pending {
                    count,
                    kind,
                    detail,
                } = self.next();
                tracing::warn!(
                    count,
                    last_kind = kind,
                    last = %detail,
                    "HTTP requests refused before routing (malformed, too large or broken \
                     connections), logged at most once per {}s",
                    PROTOCOL_LOG_INTERVAL.as_secs()
                );
                std::thread::sleep(PROTOCOL_LOG_INTERVAL);
            });
        if let Err(error) = started {
            tracing::warn!(%error, "cannot start the HTTP error reporter; they are only counted");
        }
    }
}

/// Hands the HTTP library's complaints to [`ProtocolErrors`].
struct ProtocolErrorLayer(Arc<ProtocolErrors>);

impl<S: Subscriber> Layer<S> for ProtocolErrorLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if ProtocolErrors::from_http_library(event.metadata()) {
            let mut message = Message::default();
            event.record(&mut message);
            self.0.record(&message.0);
        }
    }
}

/// An event's `message` field, as text.
#[derive(Default)]
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// Whether text logs carry ANSI colour codes: only when stdout is a terminal, and never
/// when `NO_COLOR` is set to anything but the empty string (<https://no-color.org>). Logs
/// piped to a file or a log collector stay plain text.
pub fn colour_logs(stdout_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// The process's Prometheus recorder, installed on first use.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &LATENCY_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("inlet_ingest_group_size".to_owned()),
                    &GROUP_BUCKETS,
                )
            })
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed (an embedding application); its
        // metrics then go there and /metrics shows only what this handle records.
        let _ = metrics::set_global_recorder(recorder);
        // Histogram samples accumulate until upkeep drains them into their buckets: without
        // it memory grows with every request between scrapes (measured: ~37 bytes each).
        let upkeep = handle.clone();
        let started = std::thread::Builder::new()
            .name("metrics-upkeep".to_owned())
            .spawn(move || loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                upkeep.run_upkeep();
            });
        if let Err(error) = started {
            tracing::warn!(%error, "cannot start metrics upkeep; histograms drain only when scraped");
        }
        describe();
        describe_protocol_errors();
        handle
    })
}

fn describe() {
    describe_requests();
    describe_delivery_and_storage();
    describe_operations();
    record_build_info();
    // Exported from the start: `increase()` needs the 0 before the first timeout to see it.
    metrics::counter!("inlet_db_pool_timeouts_total").increment(0);
    metrics::counter!("inlet_db_commits_in_doubt_total").increment(0);
    metrics::counter!("inlet_ingest_group_retries_total").increment(0);
}

/// The HTTP requests and the webhooks' path to their commit.
fn describe_requests() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(
        "inlet_http_requests_total",
        "HTTP requests by route pattern and status"
    );
    describe_histogram!(
        "inlet_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request latency by route pattern"
    );
    describe_counter!("inlet_webhooks_total", "Webhooks by source and outcome (accepted, replayed, duplicate_fact, duplicate_after_expiry, handshake, or a rejection reason)");
    describe_histogram!(
        "inlet_ingest_duration_seconds",
        Unit::Seconds,
        "From a verified webhook's body being read to its answer being ready (queueing for \
         its group and the group's commit included), by source"
    );
    describe_histogram!(
        "inlet_ingest_group_size",
        Unit::Count,
        "Webhooks committed together in one transaction"
    );
    describe_histogram!(
        "inlet_ingest_commit_seconds",
        Unit::Seconds,
        "Duration of one group's transaction"
    );
    describe_counter!(
        "inlet_ingest_group_retries_total",
        "Groups whose transaction failed and were committed again member by member"
    );
}

/// Deliveries, the sweeper and the database pool.
fn describe_delivery_and_storage() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "inlet_deliveries_total",
        "Delivery attempts by destination and outcome"
    );
    describe_gauge!(
        "inlet_outbox_pending",
        "Deliveries not yet delivered nor dead"
    );
    describe_gauge!("inlet_dead_letters", "Deliveries that gave up");
    describe_counter!("inlet_sweeper_runs_total", "Sweeper rounds by result");
    describe_counter!(
        "inlet_sweeper_deleted_total",
        "Rows deleted by the sweeper, by table"
    );
    describe_gauge!(
        "inlet_sweeper_last_success_timestamp_seconds",
        "Unix time of the last successful sweep"
    );
    describe_gauge!(
        "inlet_db_pool_connections",
        "Database pool connections by state (idle, in_use)"
    );
    describe_counter!(
        "inlet_db_pool_timeouts_total",
        "Waits for a database connection that timed out"
    );
    describe_counter!(
        "inlet_db_commits_in_doubt_total",
        "COMMITs whose connection failed in flight (outcome unknown; answered 503)"
    );
}

/// The sweeper's switch, configuration reloads and the build.
fn describe_operations() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        "inlet_sweeper_enabled",
        "1 when this instance runs the sweeper (retention.sweeper), else 0"
    );
    describe_counter!(
        "inlet_config_reloads_total",
        "Configuration reloads (SIGHUP, POST /admin/reload) by result (applied, refused)"
    );
    describe_gauge!(
        "inlet_config_last_reload_success",
        "1 when the last configuration load or reload was applied, 0 when it was refused"
    );
    describe_gauge!(
        "inlet_config_last_reload_timestamp_seconds",
        "Unix time of the last configuration load or reload attempt"
    );
    describe_counter!(
        "inlet_notices_total",
        "Operational notices written for the [notices] destination, by type (breaker.opened, \
         breaker.closed, delivery.dead_lettered, dead_letters.over_threshold, \
         config.reload_refused, event.fingerprint_mismatch, sweeper.stalled)"
    );
    describe_gauge!(
        "inlet_build_info",
        "Always 1; the version and commit labels say which build runs"
    );
    describe_counter!(
        "inlet_trace_exports_total",
        "OTLP span exports to telemetry.otlp_endpoint by result (ok, failed)"
    );
}

/// `inlet_build_info`: the version and the commit `inlet --version` names.
fn record_build_info() {
    let (version, commit) = (env!("CARGO_PKG_VERSION"), env!("INLET_COMMIT"));
    metrics::gauge!("inlet_build_info", "version" => version, "commit" => commit).set(1.0);
}

/// `inlet_http_protocol_errors_total`, every kind exported from 0.
fn describe_protocol_errors() {
    metrics::describe_counter!(
        "inlet_http_protocol_errors_total",
        "Requests the HTTP library refused before routing, by kind (malformed: an \
         unparsable request line or header; too_large: a head over the limit; io: a \
         connection broken mid-request; other)"
    );
    for kind in ["malformed", "too_large", "io", "other"] {
        metrics::counter!("inlet_http_protocol_errors_total", "kind" => kind).increment(0);
    }
}

/// Exports `inlet_webhooks_total{source, outcome}` at 0 for every configured source and
/// each of `outcomes` (the ones alert rules and dashboards watch). A counter that first
/// appears at 1 has no earlier sample, so `increase()` and `rate()` never see the first
/// event — the first fingerprint mismatch would not alert. Counters that already moved
/// (another instance in the same process) are left as they are.
pub fn start_webhook_counters(sources: &[&str], outcomes: &[&'static str]) {
    for source in sources {
        for outcome in outcomes {
            // Same label order as the ingest handler's, so both name one series.
            metrics::counter!(
                "inlet_webhooks_total",
                "source" => (*source).to_owned(),
                "outcome" => *outcome
            )
            .increment(0);
        }
    }
}

/// Exports the reload metrics from startup: both results at 0 (so `increase()` sees the
/// first refusal) and the configuration loaded at `at` as the last success.
pub fn start_config_reload_metrics(at: i64) {
    for result in ["applied", "refused"] {
        metrics::counter!("inlet_config_reloads_total", "result" => result).increment(0);
    }
    set_last_reload(true, at);
}

/// Counts a configuration reload attempted at `at` (Unix seconds) and its result.
pub fn record_config_reload(applied: bool, at: i64) {
    let result = if applied { "applied" } else { "refused" };
    metrics::counter!("inlet_config_reloads_total", "result" => result).increment(1);
    set_last_reload(applied, at);
}

fn set_last_reload(applied: bool, at: i64) {
    metrics::gauge!("inlet_config_last_reload_success").set(if applied { 1.0 } else { 0.0 });
    metrics::gauge!("inlet_config_last_reload_timestamp_seconds").set(at as f64);
}

/// Exports whether this instance runs the sweeper, so the stalled-sweeper alert can tell
/// "never swept" from "sweeping is done elsewhere" (`retention.sweeper = false`).
pub fn record_sweeper_enabled(enabled: bool) {
    metrics::gauge!("inlet_sweeper_enabled").set(if enabled { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::{colour_logs, ProtocolErrors};
    use std::ffi::OsStr;

    #[test]
    fn the_http_library_complaints_gather_until_a_line_takes_them() {
        let errors = ProtocolErrors::default();
        errors.record("stream error: request parse error: invalid Header provided");
        errors.record("stream error: request parse error: message head is too large");
        let taken = errors.next();
        assert_eq!((taken.count, taken.kind), (2, "too_large"));
        assert!(taken.detail.ends_with("message head is too large"));
        errors.record("stream error: I/O error: Connection reset by peer");
        let taken = errors.next();
        assert_eq!((taken.count, taken.kind), (1, "io"));
        assert_eq!(
            ProtocolErrors::kind_of("stream error: request parse error: invalid Method specified"),
            "malformed"
        );
        assert_eq!(
            ProtocolErrors::kind_of("Response payload stream error"),
            "other"
        );
    }

    #[test]
    fn logs_are_coloured_only_at_a_terminal_without_no_color() {
        assert!(colour_logs(true, None));
        assert!(
            colour_logs(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour_logs(true, Some(OsStr::new("1"))));
        assert!(!colour_logs(false, None), "piped or redirected");
        assert!(!colour_logs(false, Some(OsStr::new("1"))));
    }
}

/// Webhooks per minute by source and outcome over the last day, in this instance: the
/// console's overview reads it (the Prometheus counters hold the same totals, without the
/// time axis). Rejections are never stored, so this is the only record of them by time.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Oldest first: (Unix minute, counts by (source, outcome)).
    minutes: std::sync::Mutex<std::collections::VecDeque<(i64, TrafficCounts)>>,
}

/// Counts by (source, outcome).
pub type TrafficCounts = std::collections::BTreeMap<(String, &'static str), u64>;

/// Minutes of traffic kept.
pub const TRAFFIC_MINUTES: i64 = 24 * 60;

impl Traffic {
    /// Counts one webhook answered at Unix second `at`.
    pub fn record(&self, source: &str, outcome: &'static str, at: i64) {
        let minute = at.div_euclid(60);
        let Ok(mut minutes) = self.minutes.lock() else {
            return;
        };
        if minutes.back().is_none_or(|(last, _)| *last < minute) {
            minutes.push_back((minute, TrafficCounts::new()));
        }
        while minutes
            .front()
            .is_some_and(|(first, _)| *first <= minute - TRAFFIC_MINUTES)
        {
            minutes.pop_front();
        }
        // A clock that stepped back counts into the newest minute.
        if let Some((_, counts)) = minutes.back_mut() {
            *counts.entry((source.to_owned(), outcome)).or_default() += 1;
        }
    }

    /// Every recorded minute from Unix second `since` on, oldest first.
    pub fn since(&self, since: i64) -> Vec<(i64, TrafficCounts)> {
        let first = since.div_euclid(60);
        self.minutes.lock().map_or_else(
            |_| Vec::new(),
            |minutes| {
                minutes
                    .iter()
                    .filter(|(minute, _)| *minute >= first)
                    .cloned()
                    .collect()
            },
        )
    }
}
