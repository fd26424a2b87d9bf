//! Typed settings: read from a TOML file, overridden by `INLET_<SECTION>__<KEY>`
//! environment variables, resolved (secret references) and validated once at startup.
//!
//! Environment variables read here:
//! - `INLET_CONFIG` — the configuration file path (through the command line, default
//!   `inlet.toml`);
//! - `INLET_<SECTION>__<KEY>` — overrides any scalar key, e.g. `INLET_DATABASE__URL`,
//!   `INLET_SERVER__BIND`, `INLET_RETENTION__EVENTS`;
//! - whatever `env:NAME` secret references name.
//!
//! Every validation error names the offending key (`sources[0].secrets[1]`,
//! `database.url`, …) so an operator can find it in the file.

use crate::db::DatabaseTarget;
use crate::duration::HumanDuration;
use crate::identity::{JsonPointer, Locator, Locators};
use crate::ledger::FactRule;
use crate::retention::{AuditLine, RetentionAudit};
use crate::secret::Secret;
use crate::signature::{Encoding, HmacScheme, SchemeConfig};
use figment::providers::{Env, Format, Toml};
use figment::Figment;
use serde::Deserialize;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// Default listening address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// Default request body limit: 1 MiB, larger than any provider's documented maximum.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default database: an SQLite file below the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/inlet.db";
/// PostgreSQL: connections per Inlet instance.
pub const DEFAULT_POOL_SIZE: u32 = 16;
/// SQLite: one writer at a time, and a single connection keeps its page cache warm
/// (measured: about 30 % more webhooks per second than 16 connections).
pub const DEFAULT_SQLITE_POOL_SIZE: u32 = 1;
pub const DEFAULT_SHUTDOWN_GRACE: &str = "30s";
pub const DEFAULT_CONNECT_TIMEOUT: &str = "5s";
pub const DEFAULT_BUSY_TIMEOUT: &str = "5s";
pub const DEFAULT_LOCK_TIMEOUT: &str = "5s";
/// Stripe's and Slack's libraries use five minutes.
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;
pub const DEFAULT_RETENTION_EVENTS: &str = "35d";
pub const DEFAULT_DESTINATION_TIMEOUT: &str = "10s";
pub const DEFAULT_DESTINATION_CONNECT_TIMEOUT: &str = "2s";
pub const DEFAULT_MAX_ATTEMPTS: u32 = 12;
pub const DEFAULT_RETRY_BASE: &str = "5s";
pub const DEFAULT_RETRY_CAP: &str = "1h";
pub const DEFAULT_DEADLINE: &str = "3d";
pub const DEFAULT_RETRY_RATE: f64 = 10.0;
pub const DEFAULT_RETRY_BURST: u32 = 100;
pub const DEFAULT_POLL_INTERVAL: &str = "1s";
pub const DEFAULT_LEASE: &str = "60s";
pub const DEFAULT_DELIVERY_BATCH: u32 = 32;
pub const DEFAULT_DELIVERY_CONCURRENCY: u32 = 16;
pub const DEFAULT_REPLAY_HORIZON: &str = "30d";
pub const DEFAULT_OPERATOR_KEYS: &str = "24h";
/// How long dead and discarded deliveries are kept after they became so.
pub const DEFAULT_DEAD_LETTERS: &str = "30d";
pub const DEFAULT_SWEEP_INTERVAL: &str = "10m";
pub const DEFAULT_SWEEP_BATCH: u32 = 1000;
pub const DEFAULT_MAX_REPLAY: u32 = 1000;

/// A configuration that could not be loaded or is not safe to run.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The file format, as written by the operator.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    retention: RawRetention,
    #[serde(default)]
    delivery: RawDelivery,
    #[serde(default)]
    operator: RawOperator,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    token: Option<String>,
    max_replay: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDelivery {
    enabled: Option<bool>,
    poll_interval: Option<String>,
    lease: Option<String>,
    batch: Option<u32>,
    concurrency: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDestination {
    url: String,
    secret: String,
    name: Option<String>,
    timeout: Option<String>,
    connect_timeout: Option<String>,
    max_attempts: Option<u32>,
    retry_base: Option<String>,
    retry_cap: Option<String>,
    deadline: Option<String>,
    retry_rate: Option<f64>,
    retry_burst: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    bind: Option<String>,
    max_body_bytes: Option<usize>,
    workers: Option<usize>,
    shutdown_grace: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Option<String>,
    pool_size: Option<u32>,
    connect_timeout: Option<String>,
    busy_timeout: Option<String>,
    lock_timeout: Option<String>,
    synchronous: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    scheme: String,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance_secs: Option<u64>,
    #[serde(default)]
    facts: Vec<RawFactRule>,
    event_id: Option<String>,
    event_type: Option<String>,
    fact_key: Option<String>,
    replay_horizon: Option<String>,
    hmac: Option<RawHmac>,
    #[serde(default)]
    destinations: Vec<RawDestination>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHmac {
    header: String,
    prefix: Option<String>,
    encoding: Option<String>,
    timestamp_header: Option<String>,
    signed_content: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFactRule {
    types: Vec<String>,
    key: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    events: Option<String>,
    replay_horizon: Option<String>,
    operator_keys: Option<String>,
    dead_letters: Option<String>,
    sweep_interval: Option<String>,
    sweep_batch: Option<u32>,
    sweeper: Option<bool>,
}

// ---------------------------------------------------------------------------------------
// The validated settings the rest of Inlet uses.

/// Everything Inlet needs to run, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub sources: Vec<SourceSettings>,
    pub retention: RetentionSettings,
    pub delivery: DeliverySettings,
    pub operator: OperatorSettings,
}

/// The operator API (`/admin`).
#[derive(Debug, Clone)]
pub struct OperatorSettings {
    /// The bearer token; without one the operator API refuses every request.
    pub token: Option<Secret>,
    /// Most events one replay may touch.
    pub max_replay: u32,
}

/// The dispatcher that sends outbox rows to destinations.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// Run the dispatcher inside `inlet serve` (operators may run `inlet deliver` instead).
    pub enabled: bool,
    /// How often to look for due deliveries when not woken by a new fact.
    pub poll_interval: Duration,
    /// How long a leased row belongs to its dispatcher; longer than any destination timeout.
    pub lease: Duration,
    /// Rows leased per query.
    pub batch: u32,
    /// Deliveries in flight at once per Inlet instance.
    pub concurrency: u32,
}

/// Where a source's new facts are sent, and how.
#[derive(Debug, Clone)]
pub struct DestinationSettings {
    /// Stable name stored with each delivery and used as a metric label (default: the URL's
    /// host, port and path).
    pub name: String,
    pub url: String,
    /// `whsec_<base64>`: Inlet signs each delivery with it (Standard Webhooks).
    pub secret: Secret,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub policy: crate::delivery::RetryPolicy,
    /// Retries per second a destination may receive once `retry_burst` is spent.
    pub retry_rate: f64,
    pub retry_burst: u32,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub bind: String,
    pub max_body_bytes: usize,
    /// Worker threads; `None` lets actix choose (one per core).
    pub workers: Option<usize>,
    /// After SIGTERM or Ctrl-C: how long in-flight requests and deliveries may finish.
    pub shutdown_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    pub target: DatabaseTarget,
    pub pool_size: u32,
    /// How long to wait for a pooled connection (or a new one) before answering 503.
    pub connect_timeout: Duration,
    /// SQLite: how long a writer waits for the write lock.
    pub busy_timeout: Duration,
    /// PostgreSQL: how long a claim waits on a concurrent claim of the same key.
    pub lock_timeout: Duration,
    /// SQLite `synchronous` pragma: `normal` (default) or `full`.
    pub synchronous: SqliteSynchronous,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    Normal,
    Full,
}

impl SqliteSynchronous {
    pub fn pragma_value(self) -> &'static str {
        match self {
            Self::Normal => "NORMAL",
            Self::Full => "FULL",
        }
    }
}

/// One webhook sender: `POST /webhooks/{name}`.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub name: SourceName,
    pub scheme: SchemeConfig,
    /// Where the event id, type and fact key are read (scheme defaults, overridden).
    pub locators: Locators,
    /// Every one of these verifies (rotation); the first one signs (`inlet sign`).
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
    /// Configured rules first, then the scheme's defaults.
    pub fact_rules: Vec<FactRule>,
    /// Every new fact of this source is delivered to each of these.
    pub destinations: Vec<DestinationSettings>,
    /// The oldest age at which this source can still send a copy, and where that number
    /// comes from.
    pub replay_horizon: (HumanDuration, String),
}

#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// How long event rows (payloads and stored responses) are kept.
    pub events: HumanDuration,
    /// The oldest age at which a copy of an event can still arrive, beyond what the
    /// sources' own horizons say (manual resends, operator replays).
    pub replay_horizon: HumanDuration,
    /// How long the operator API keeps Idempotency-Keys (at least 24 h).
    pub operator_keys: HumanDuration,
    /// How long a dead or discarded delivery is kept after it became so (at least 1 h).
    pub dead_letters: HumanDuration,
    /// Run the sweeper inside `inlet serve` (operators may run `inlet sweep` instead).
    pub sweeper: bool,
    /// How often the sweeper runs inside `inlet serve`.
    pub sweep_interval: Duration,
    /// Rows deleted per short transaction.
    pub sweep_batch: u32,
    /// The numbers compared at startup.
    pub audit: crate::retention::RetentionAudit,
}

impl SourceSettings {
    /// Each destination's name and the deadline of a delivery enqueued at `now`.
    pub fn delivery_deadlines(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
        self.destinations
            .iter()
            .map(|d| (d.name.clone(), now + d.policy.deadline))
            .collect()
    }
}

/// A source's name, as it appears in the URL path: `[a-z0-9_-]`, 1 to 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceName(String);

impl SourceName {
    pub fn parse(name: &str) -> Result<Self, String> {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "'{name}' is not a valid source name (1-64 of a-z, 0-9, '_' and '-')"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Settings {
    /// Loads `path` (which must exist) with environment overrides.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        if !path.exists() {
            return Err(ConfigError::new(
                "config",
                format!("configuration file {} does not exist", path.display()),
            ));
        }
        let figment = Figment::from(Toml::file(path)).merge(
            Env::prefixed("INLET_")
                .filter(|key| key.as_str().contains("__"))
                .split("__"),
        );
        Self::from_figment(figment)
    }

    /// Parses a TOML document without environment overrides (tests, examples).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_figment(Figment::from(Toml::string(text)))
    }

    fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        let raw: RawSettings = figment.extract().map_err(|e| {
            let key = e.path.join(".");
            let key = if key.is_empty() {
                "config".to_owned()
            } else {
                key
            };
            ConfigError::new(key, e.kind.to_string())
        })?;
        Self::validate(raw)
    }

    fn validate(raw: RawSettings) -> Result<Self, ConfigError> {
        let server = ServerSettings {
            bind: raw.server.bind.unwrap_or_else(|| DEFAULT_BIND.to_owned()),
            max_body_bytes: raw.server.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            workers: raw.server.workers,
            shutdown_grace: span(
                "server.shutdown_grace",
                raw.server.shutdown_grace.as_deref(),
                DEFAULT_SHUTDOWN_GRACE,
            )?,
        };
        if server.max_body_bytes == 0 {
            return Err(ConfigError::new(
                "server.max_body_bytes",
                "must be greater than 0",
            ));
        }
        if server.workers == Some(0) {
            return Err(ConfigError::new("server.workers", "must be greater than 0"));
        }

        let url = raw.database.url.as_deref().unwrap_or(DEFAULT_DATABASE_URL);
        let database = DatabaseSettings {
            target: DatabaseTarget::parse(url).map_err(|m| ConfigError::new("database.url", m))?,
            pool_size: raw
                .database
                .pool_size
                .unwrap_or(if url.starts_with("sqlite:") {
                    DEFAULT_SQLITE_POOL_SIZE
                } else {
                    DEFAULT_POOL_SIZE
                }),
            connect_timeout: span(
                "database.connect_timeout",
                raw.database.connect_timeout.as_deref(),
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            busy_timeout: span(
                "database.busy_timeout",
                raw.database.busy_timeout.as_deref(),
                DEFAULT_BUSY_TIMEOUT,
            )?,
            lock_timeout: span(
                "database.lock_timeout",
                raw.database.lock_timeout.as_deref(),
                DEFAULT_LOCK_TIMEOUT,
            )?,
            synchronous: match raw.database.synchronous.as_deref() {
                None | Some("normal") | Some("NORMAL") => SqliteSynchronous::Normal,
                Some("full") | Some("FULL") => SqliteSynchronous::Full,
                Some(other) => {
                    return Err(ConfigError::new(
                        "database.synchronous",
                        format!("'{other}' is not one of normal, full"),
                    ))
                }
            },
        };
        if database.pool_size == 0 {
            return Err(ConfigError::new(
                "database.pool_size",
                "must be greater than 0",
            ));
        }
        if matches!(database.target, DatabaseTarget::Postgres(_)) && database.pool_size < 2 {
            return Err(ConfigError::new(
                "database.pool_size",
                "PostgreSQL needs at least 2 (the sweeper holds one for its lock while it sweeps)",
            ));
        }

        let mut sources: Vec<SourceSettings> = Vec::with_capacity(raw.sources.len());
        for (index, source) in raw.sources.into_iter().enumerate() {
            let settings = validate_source(index, source)?;
            if sources.iter().any(|s| s.name == settings.name) {
                return Err(ConfigError::new(
                    format!("sources[{index}].name"),
                    format!("source '{}' is defined twice", settings.name),
                ));
            }
            sources.push(settings);
        }

        let events = duration(
            "retention.events",
            raw.retention.events.as_deref(),
            DEFAULT_RETENTION_EVENTS,
        )?;
        let replay_horizon = duration(
            "retention.replay_horizon",
            raw.retention.replay_horizon.as_deref(),
            DEFAULT_REPLAY_HORIZON,
        )?;
        let operator_keys = duration(
            "retention.operator_keys",
            raw.retention.operator_keys.as_deref(),
            DEFAULT_OPERATOR_KEYS,
        )?;
        if operator_keys.0 < Duration::from_secs(86_400) {
            return Err(ConfigError::new(
                "retention.operator_keys",
                format!("{operator_keys} is shorter than 24h: an operator's retry a day later must still find its key"),
            ));
        }
        let dead_letters = duration(
            "retention.dead_letters",
            raw.retention.dead_letters.as_deref(),
            DEFAULT_DEAD_LETTERS,
        )?;
        if dead_letters.0 < Duration::from_secs(3_600) {
            return Err(ConfigError::new(
                "retention.dead_letters",
                format!("{dead_letters} is shorter than 1h: dead letters must stay long enough to be looked at"),
            ));
        }
        let mut horizons = vec![AuditLine {
            name: "replay horizon (retention.replay_horizon)".to_owned(),
            value: replay_horizon,
            origin: "configuration: manual resends and operator replays".to_owned(),
        }];
        horizons.extend(sources.iter().map(|source| AuditLine {
            name: format!("source {} ({})", source.name, source.scheme.name()),
            value: source.replay_horizon.0,
            origin: source.replay_horizon.1.clone(),
        }));
        let audit = RetentionAudit {
            events,
            horizons,
            operator_keys,
        };
        if !audit.passes() {
            return Err(ConfigError::new(
                "retention.events",
                format!("the retention audit failed:\n{audit}"),
            ));
        }
        let retention = RetentionSettings {
            events,
            replay_horizon,
            operator_keys,
            dead_letters,
            sweep_interval: span(
                "retention.sweep_interval",
                raw.retention.sweep_interval.as_deref(),
                DEFAULT_SWEEP_INTERVAL,
            )?,
            sweep_batch: raw
                .retention
                .sweep_batch
                .unwrap_or(DEFAULT_SWEEP_BATCH)
                .max(1),
            sweeper: raw.retention.sweeper.unwrap_or(true),
            audit,
        };

        let delivery = DeliverySettings {
            enabled: raw.delivery.enabled.unwrap_or(true),
            poll_interval: span(
                "delivery.poll_interval",
                raw.delivery.poll_interval.as_deref(),
                DEFAULT_POLL_INTERVAL,
            )?,
            lease: span(
                "delivery.lease",
                raw.delivery.lease.as_deref(),
                DEFAULT_LEASE,
            )?,
            batch: raw.delivery.batch.unwrap_or(DEFAULT_DELIVERY_BATCH).max(1),
            concurrency: raw
                .delivery
                .concurrency
                .unwrap_or(DEFAULT_DELIVERY_CONCURRENCY)
                .max(1),
        };
        for (index, source) in sources.iter().enumerate() {
            for (d, destination) in source.destinations.iter().enumerate() {
                if destination.timeout >= delivery.lease {
                    return Err(ConfigError::new(
                        format!("sources[{index}].destinations[{d}].timeout"),
                        format!(
                            "{} is not shorter than delivery.lease ({}): a slow attempt would \
                             lose its lease while still running",
                            HumanDuration(destination.timeout),
                            HumanDuration(delivery.lease)
                        ),
                    ));
                }
            }
        }

        let operator = OperatorSettings {
            token: raw
                .operator
                .token
                .as_deref()
                .map(|reference| {
                    Secret::resolve(reference).map_err(|m| ConfigError::new("operator.token", m))
                })
                .transpose()?,
            max_replay: raw.operator.max_replay.unwrap_or(DEFAULT_MAX_REPLAY).max(1),
        };
        if operator
            .token
            .as_ref()
            .is_some_and(|t| t.expose().len() < 16)
        {
            return Err(ConfigError::new(
                "operator.token",
                "must be at least 16 characters",
            ));
        }

        Ok(Self {
            server,
            database,
            sources,
            retention,
            delivery,
            operator,
        })
    }

    pub fn source(&self, name: &str) -> Option<&SourceSettings> {
        self.sources.iter().find(|s| s.name.as_str() == name)
    }
}

fn duration(key: &str, value: Option<&str>, default: &str) -> Result<HumanDuration, ConfigError> {
    HumanDuration::parse(value.unwrap_or(default)).map_err(|m| ConfigError::new(key, m))
}

/// [`duration`] as a `std::time::Duration`.
fn span(key: &str, value: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    duration(key, value, default).map(|d| d.0)
}

fn validate_source(index: usize, raw: RawSource) -> Result<SourceSettings, ConfigError> {
    let key = |field: &str| format!("sources[{index}].{field}");
    let name = SourceName::parse(&raw.name).map_err(|m| ConfigError::new(key("name"), m))?;
    let hmac = raw
        .hmac
        .map(|h| {
            let encoding = Encoding::parse(h.encoding.as_deref().unwrap_or("hex"))
                .map_err(|m| ConfigError::new(key("hmac.encoding"), m))?;
            HmacScheme::new(
                h.header,
                h.prefix,
                encoding,
                h.timestamp_header,
                h.signed_content,
            )
            .map_err(|(field, m)| ConfigError::new(key(&format!("hmac.{field}")), m))
        })
        .transpose()?;
    let scheme =
        SchemeConfig::named(&raw.scheme, hmac).map_err(|m| ConfigError::new(key("scheme"), m))?;
    if matches!(scheme, SchemeConfig::Hmac(_)) && raw.event_id.is_none() {
        return Err(ConfigError::new(
            key("event_id"),
            "the hmac scheme needs event_id (\"header:NAME\" or \"json:/pointer\")",
        ));
    }
    if raw.secrets.is_empty() {
        return Err(ConfigError::new(
            key("secrets"),
            "at least one secret is required (unsigned webhooks are never accepted)",
        ));
    }
    let mut secrets = Vec::with_capacity(raw.secrets.len());
    for (i, reference) in raw.secrets.iter().enumerate() {
        let field = key(&format!("secrets[{i}]"));
        let secret = Secret::resolve(reference).map_err(|m| ConfigError::new(&field, m))?;
        scheme
            .scheme()
            .check_secret(&secret)
            .map_err(|m| ConfigError::new(&field, m))?;
        secrets.push(secret);
    }
    if raw.tolerance_secs.is_some() && !scheme.scheme().signs_timestamp() {
        return Err(ConfigError::new(
            key("tolerance_secs"),
            format!(
                "the {} scheme signs no timestamp, so no tolerance applies",
                scheme.name()
            ),
        ));
    }

    let mut locators = scheme.scheme().locators();
    let locator = |field: &str, value: &str| {
        Locator::parse(value).map_err(|m| ConfigError::new(key(field), m))
    };
    if let Some(value) = &raw.event_id {
        locators.event_id = locator("event_id", value)?;
    }
    if let Some(value) = &raw.event_type {
        locators.event_type = Some(locator("event_type", value)?);
    }
    match &raw.fact_key {
        Some(value) => locators.fact_key = Some(locator("fact_key", value)?),
        // Whoever holds a captured request can re-send its signed body under a fresh,
        // unsigned id: key the fact on the body itself, so that is no new fact.
        None if !scheme.scheme().signs(&locators.event_id) => {
            locators.fact_key = Some(Locator::BodyDigest);
        }
        None => {}
    }

    let mut fact_rules = Vec::new();
    for (i, rule) in raw.facts.into_iter().enumerate() {
        if rule.types.is_empty() {
            return Err(ConfigError::new(
                key(&format!("facts[{i}].types")),
                "names no event type",
            ));
        }
        let pointer = JsonPointer::parse(&rule.key)
            .map_err(|m| ConfigError::new(key(&format!("facts[{i}].key")), m))?;
        let rule = FactRule::new(rule.types, pointer);
        if let Some(update_like) = rule.update_like_type() {
            return Err(ConfigError::new(
                key(&format!("facts[{i}].types")),
                format!(
                    "'{update_like}' is an update: distinct updates of one object are distinct \
                     facts, so it must not be keyed on the object alone"
                ),
            ));
        }
        fact_rules.push(rule);
    }
    fact_rules.extend(scheme.scheme().default_fact_rules());

    let replay_horizon = match (&raw.replay_horizon, scheme.scheme().replay_horizon()) {
        (Some(value), _) => (
            HumanDuration::parse(value).map_err(|m| ConfigError::new(key("replay_horizon"), m))?,
            format!("configuration (sources[{index}].replay_horizon)"),
        ),
        (None, Some((value, origin))) => (
            HumanDuration(value),
            format!("{} default: {origin}", scheme.name()),
        ),
        (None, None) => {
            return Err(ConfigError::new(
                key("replay_horizon"),
                format!(
                    "the {} scheme has no documented retry window: state how late a copy can \
                     arrive (e.g. replay_horizon = \"3d\")",
                    scheme.name()
                ),
            ))
        }
    };

    let mut destinations: Vec<DestinationSettings> = Vec::with_capacity(raw.destinations.len());
    for (d, destination) in raw.destinations.into_iter().enumerate() {
        let destination = validate_destination(&key(&format!("destinations[{d}]")), destination)?;
        if destinations
            .iter()
            .any(|other| other.name == destination.name)
        {
            return Err(ConfigError::new(
                key(&format!("destinations[{d}].name")),
                format!(
                    "destination '{}' is defined twice for this source",
                    destination.name
                ),
            ));
        }
        destinations.push(destination);
    }

    Ok(SourceSettings {
        name,
        scheme,
        locators,
        secrets,
        tolerance: Duration::from_secs(raw.tolerance_secs.unwrap_or(DEFAULT_TOLERANCE_SECS)),
        fact_rules,
        destinations,
        replay_horizon,
    })
}

fn validate_destination(
    prefix: &str,
    raw: RawDestination,
) -> Result<DestinationSettings, ConfigError> {
    let key = |field: &str| format!("{prefix}.{field}");
    let url =
        reqwest::Url::parse(&raw.url).map_err(|e| ConfigError::new(key("url"), e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ConfigError::new(
            key("url"),
            "must be an http:// or https:// URL with a host",
        ));
    }
    let name = match raw.name {
        Some(name) if !name.is_empty() && name.len() <= 128 => name,
        Some(_) => return Err(ConfigError::new(key("name"), "must be 1 to 128 characters")),
        // Never the query or credentials: they may hold tokens.
        None => format!(
            "{}{}{}",
            url.host_str().unwrap_or_default(),
            url.port().map(|p| format!(":{p}")).unwrap_or_default(),
            url.path()
        ),
    };
    let secret = Secret::resolve(&raw.secret).map_err(|m| ConfigError::new(key("secret"), m))?;
    crate::signature::SchemeConfig::Standard
        .scheme()
        .check_secret(&secret)
        .map_err(|m| ConfigError::new(key("secret"), m))?;
    let get = |field: &str, value: Option<&str>, default: &str| {
        duration(&key(field), value, default).map(|d| d.0)
    };
    let policy = crate::delivery::RetryPolicy {
        base: get("retry_base", raw.retry_base.as_deref(), DEFAULT_RETRY_BASE)?,
        cap: get("retry_cap", raw.retry_cap.as_deref(), DEFAULT_RETRY_CAP)?,
        max_attempts: raw.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
        deadline: get("deadline", raw.deadline.as_deref(), DEFAULT_DEADLINE)?,
    };
    if policy.max_attempts == 0 {
        return Err(ConfigError::new(key("max_attempts"), "must be at least 1"));
    }
    let retry_rate = raw.retry_rate.unwrap_or(DEFAULT_RETRY_RATE);
    if !(retry_rate.is_finite() && retry_rate > 0.0) {
        return Err(ConfigError::new(
            key("retry_rate"),
            "must be a positive number of retries per second",
        ));
    }
    Ok(DestinationSettings {
        name,
        url: url.to_string(),
        secret,
        timeout: get(
            "timeout",
            raw.timeout.as_deref(),
            DEFAULT_DESTINATION_TIMEOUT,
        )?,
        connect_timeout: get(
            "connect_timeout",
            raw.connect_timeout.as_deref(),
            DEFAULT_DESTINATION_CONNECT_TIMEOUT,
        )?,
        policy,
        retry_rate,
        retry_burst: raw.retry_burst.unwrap_or(DEFAULT_RETRY_BURST),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_with_unsigned_event_ids_key_facts_on_the_body() {
        let toml = r#"
[[sources]]
name = "gh"
scheme = "github"
secrets = ["s"]
[[sources]]
name = "shop"
scheme = "shopify"
secrets = ["s"]
[[sources]]
name = "svix"
scheme = "standard"
secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
[[sources]]
name = "stripe"
scheme = "stripe"
secrets = ["s"]
[[sources]]
name = "acme"
scheme = "hmac"
secrets = ["s"]
event_id = "header:X-Acme-Id"
replay_horizon = "1d"
[sources.hmac]
header = "X-Acme-Signature"
[[sources]]
name = "gh-keyed"
scheme = "github"
secrets = ["s"]
fact_key = "json:/after"
"#;
        let settings = Settings::from_toml(toml).unwrap();
        let fact_key = |name: &str| settings.source(name).unwrap().locators.fact_key.clone();
        for unsigned in ["gh", "shop", "acme"] {
            assert_eq!(fact_key(unsigned), Some(Locator::BodyDigest), "{unsigned}");
        }
        for signed in ["svix", "stripe"] {
            assert_eq!(fact_key(signed), None, "{signed}");
        }
        assert_eq!(
            fact_key("gh-keyed"),
            Some(Locator::parse("json:/after").unwrap())
        );
    }

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(
            HumanDuration::parse("500ms").unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!(
            HumanDuration::parse("35d").unwrap().0,
            Duration::from_secs(35 * 86_400)
        );
        assert_eq!(HumanDuration::parse("35d").unwrap().to_string(), "35d");
        assert_eq!(HumanDuration::parse("90s").unwrap().to_string(), "90s");
        assert!(HumanDuration::parse("5").is_err());
        assert!(HumanDuration::parse("5w").is_err());
        assert!(HumanDuration::parse("d").is_err());
        assert!(HumanDuration::parse("99999999999999999999d").is_err());
    }

    #[test]
    fn errors_name_the_offending_key() {
        let err = Settings::from_toml("[database]\nurl = \"sqlite:/x.db\"\n").unwrap_err();
        assert_eq!(err.key, "database.url");

        let err = Settings::from_toml(
            "[[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"env:INLET_TEST_UNSET_VAR\"]\n",
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].secrets[0]");
        assert!(err.message.contains("INLET_TEST_UNSET_VAR"));

        let err = Settings::from_toml(
            "[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"s\"]\ntolerance_secs = 5\n",
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].tolerance_secs");

        let err = Settings::from_toml(
            "[[sources]]\nname = \"sw\"\nscheme = \"standard\"\nsecrets = [\"whsec_!!\"]\n",
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].secrets[0]");

        let err = Settings::from_toml(
            "[[sources]]\nname = \"h\"\nscheme = \"hmac\"\nsecrets = [\"s\"]\n[sources.hmac]\nheader = \"X-Sig\"\n",
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].event_id");

        let err = Settings::from_toml("[server]\nbnd = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("bnd"), "{err}");

        let err = Settings::from_toml("[retention]\nevents = \"3d\"\nreplay_horizon = \"30d\"\n")
            .unwrap_err();
        assert_eq!(err.key, "retention.events");
        assert!(err.message.contains("3d") && err.message.contains("30d"));
    }

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("whsec_very_secret");
        assert!(!format!("{secret:?}").contains("very_secret"));
    }

    #[test]
    fn file_secrets_drop_the_trailing_newline() {
        let path = std::env::temp_dir().join(format!("inlet-secret-{}", std::process::id()));
        std::fs::write(&path, "whsec_from_file\n").unwrap();
        let secret = Secret::resolve(&format!("file:{}", path.display())).unwrap();
        assert_eq!(secret.expose(), "whsec_from_file");
        let _ = std::fs::remove_file(path);
    }
}
