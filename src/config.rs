//! Typed settings: read from a TOML file, overridden by `INLET_<SECTION>__<KEY>`
//! environment variables, resolved (secret references) and validated once at startup.
//!
//! This module only reads, overrides and assembles: each section's types, defaults and
//! validation belong to the module that uses them (`db`, `provider`, `delivery`,
//! `retention`, `operator`), and `Settings::validate` calls each owner in turn. So config
//! sits just below the HTTP layer; no domain module imports it.
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

use crate::db::{DatabaseFile, DatabaseSettings};
use crate::delivery::{
    validate_destinations, DeliveryFile, DeliverySettings, DestinationFile, Destinations, JqFile,
};
use crate::duration::span;
use crate::notices::{NoticeSettings, NoticesFile};
use crate::operator::{
    AdminFile, AdminSettings, ConsoleFile, ConsoleSettings, OperatorEntryFile, OperatorFile,
    OperatorSettings,
};
use crate::provider::record::ReconcileFile;
use crate::provider::{FactRuleFile, HmacFile, SnsFile, SourceFile, SourceName, SourceSettings};
use crate::retention::{CheckLine, RetentionFile, RetentionSettings};
use crate::traces::{TelemetryFile, TelemetrySettings};
use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use serde::Deserialize;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use crate::error::ConfigError;

/// Default listening address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// Default request body limit: 1 MiB, larger than any provider's documented maximum.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
pub const DEFAULT_SHUTDOWN_GRACE: &str = "30s";
/// Time allowed to receive a request body, per started MiB.
pub const DEFAULT_BODY_TIMEOUT: &str = "5s";
/// Connections each worker holds open at once; more wait in the kernel's backlog.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The sections only a restart applies: the listener, the pool, the dispatcher's and the
/// sweeper's loops and the console are built from them once. A reload that changes one
/// is refused. (`[[sources]]` with their destinations, `[operator]` and `[[operators]]`
/// reload live.) `[notices]` is read by the settling transactions and the notice checks,
/// both built once; `[telemetry]` builds the trace exporter once.
pub const RESTART_ONLY: [&str; 8] = [
    "server",
    "database",
    "delivery",
    "console",
    "retention",
    "admin",
    "telemetry",
    "notices",
];

/// The file as written by the operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    database: DatabaseFile,
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    retention: RetentionFile,
    #[serde(default)]
    delivery: DeliveryFile,
    #[serde(default)]
    jq: JqFile,
    #[serde(default)]
    operator: OperatorFile,
    #[serde(default)]
    operators: Vec<OperatorEntryFile>,
    #[serde(default)]
    admin: AdminFile,
    #[serde(default)]
    console: ConsoleFile,
    #[serde(default)]
    telemetry: TelemetryFile,
    #[serde(default)]
    retired_sources: Vec<String>,
    notices: Option<RawNotices>,
}

/// `[notices]` as written: its own keys, and those of its destination (`url`, `secret`,
/// `timeout`, retries, `breaker`, …), which the delivery module reads (and refuses any
/// key it does not know).
#[derive(Debug, Deserialize)]
struct RawNotices {
    #[serde(flatten)]
    notices: NoticesFile,
    #[serde(flatten)]
    destination: Dict,
}

impl RawNotices {
    fn validate(self) -> Result<NoticeSettings, ConfigError> {
        let destination: DestinationFile =
            Value::from(self.destination).deserialize().map_err(|e| {
                let key = std::iter::once("notices".to_owned())
                    .chain(e.path.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(".");
                let kind = match e.kind {
                    // A key `[notices]` does not know (the path is that key): say every key
                    // it does.
                    figment::error::Kind::UnknownField(found, expected) if e.path.len() <= 1 => {
                        figment::error::Kind::UnknownField(found, notices_keys(expected))
                    }
                    other => other,
                };
                ConfigError::new(key, without_values(&kind))
            })?;
        self.notices.validate(destination)
    }
}

/// `[notices]`'s own keys, then its destination's (`destination`, serde's list).
fn notices_keys(destination: &'static [&'static str]) -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let own = crate::notices::NoticesFile::KEYS.iter().copied();
        own.chain(destination.iter().copied()).collect()
    })
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    bind: Option<String>,
    max_body_bytes: Option<usize>,
    workers: Option<usize>,
    shutdown_grace: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
}

/// A `[[sources]]` table: the provider's part and the delivery module's destinations.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    scheme: String,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance_secs: Option<u64>,
    #[serde(default)]
    facts: Vec<FactRuleFile>,
    event_id: Option<String>,
    event_type: Option<String>,
    fact_key: Option<String>,
    replay_horizon: Option<String>,
    hmac: Option<HmacFile>,
    token_header: Option<String>,
    public_url: Option<String>,
    sns: Option<SnsFile>,
    reconcile: Option<ReconcileFile>,
    #[serde(default)]
    destinations: Vec<DestinationFile>,
}

impl RawSource {
    /// Splits the table between its owners.
    fn split(self) -> (SourceFile, Vec<DestinationFile>) {
        let source = SourceFile {
            name: self.name,
            scheme: self.scheme,
            secrets: self.secrets,
            tolerance_secs: self.tolerance_secs,
            facts: self.facts,
            event_id: self.event_id,
            event_type: self.event_type,
            fact_key: self.fact_key,
            replay_horizon: self.replay_horizon,
            hmac: self.hmac,
            token_header: self.token_header,
            public_url: self.public_url,
            sns: self.sns,
            reconcile: self.reconcile,
        };
        (source, self.destinations)
    }
}

/// Everything Inlet needs to run, validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub sources: Vec<SourceSettings>,
    /// Each source's destinations.
    pub destinations: Destinations,
    pub retention: RetentionSettings,
    pub delivery: DeliverySettings,
    pub operator: OperatorSettings,
    pub admin: AdminSettings,
    pub console: ConsoleSettings,
    /// `[telemetry]`: OpenTelemetry traces, off unless an endpoint is set.
    pub telemetry: TelemetrySettings,
    /// Source names no longer served on purpose: their stored events and facts stay (and
    /// expire as usual), and deduplication against them ends (see [`Settings::check_stored_sources`]).
    pub retired_sources: Vec<SourceName>,
    /// `[notices]`: its destination is also among `destinations`, under the reserved
    /// source `inlet`.
    pub notices: Option<NoticeSettings>,
    /// The restart-only sections as read, so a reload can tell which key it would change.
    restart_only: RestartOnlySections,
}

/// The [`RESTART_ONLY`] sections as read (file and environment overrides together). They
/// may hold credentials (`database.url`): never printed.
#[derive(Clone, Default)]
struct RestartOnlySections(Dict);

impl std::fmt::Debug for RestartOnlySections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RestartOnlySections(..)")
    }
}

impl RestartOnlySections {
    fn of(figment: &Figment) -> Self {
        // One merge of the whole configuration: each `find_value` merges (copies) all of
        // it again, thousands of sources included.
        let Ok(all) = figment.extract::<Dict>() else {
            return Self::default();
        };
        let sections = RESTART_ONLY
            .iter()
            .filter_map(|name| Some((name.to_string(), all.get(*name)?.clone())))
            .collect();
        Self(sections)
    }
}

/// The settings in force, replaceable while serving. Each request takes one snapshot with
/// [`LiveSettings::current`] and finishes on it, whatever a reload does meanwhile. A read
/// is an `Arc` clone under a lock only a reload writes, once: cheap enough that no
/// lock-free crate is needed.
#[derive(Clone)]
pub struct LiveSettings(Arc<RwLock<Arc<Settings>>>);

impl LiveSettings {
    pub fn new(settings: Settings) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(settings))))
    }

    /// A snapshot of the settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Puts `next` in force for the requests that start from now on.
    pub fn replace(&self, next: Arc<Settings>) {
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = next;
    }
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub bind: String,
    pub max_body_bytes: usize,
    /// Worker threads; `None` lets actix choose (one per core).
    pub workers: Option<usize>,
    /// After SIGTERM or Ctrl-C: how long in-flight requests and deliveries may finish.
    pub shutdown_grace: Duration,
    /// Time allowed to receive a request body, per started MiB (408 after it).
    pub body_timeout: Duration,
    /// Connections each worker holds open at once.
    pub max_connections: usize,
}

impl RawServer {
    fn validate(self) -> Result<ServerSettings, ConfigError> {
        let server = ServerSettings {
            bind: self.bind.unwrap_or_else(|| DEFAULT_BIND.to_owned()),
            max_body_bytes: self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            workers: self.workers,
            shutdown_grace: span(
                "server.shutdown_grace",
                self.shutdown_grace.as_deref(),
                DEFAULT_SHUTDOWN_GRACE,
            )?,
            body_timeout: span(
                "server.body_timeout",
                self.body_timeout.as_deref(),
                DEFAULT_BODY_TIMEOUT,
            )?,
            max_connections: self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
        };
        if server.body_timeout.is_zero() {
            return Err(ConfigError::new(
                "server.body_timeout",
                "must be longer than 0",
            ));
        }
        if server.max_connections == 0 {
            return Err(ConfigError::new(
                "server.max_connections",
                "must be greater than 0",
            ));
        }
        if server.max_body_bytes == 0 {
            return Err(ConfigError::new(
                "server.max_body_bytes",
                "must be greater than 0",
            ));
        }
        if server.workers == Some(0) {
            return Err(ConfigError::new("server.workers", "must be greater than 0"));
        }
        Ok(server)
    }
}

/// A parse error without the value found: that value may be a secret written in the
/// wrong shape (`secrets = "whsec_…"`), and the message goes to logs and API answers.
fn without_values(kind: &figment::error::Kind) -> String {
    use figment::error::Kind;
    match kind {
        Kind::InvalidType(_, expected) => format!("invalid type: expected {expected}"),
        Kind::InvalidValue(_, expected) => format!("invalid value: expected {expected}"),
        other => other.to_string(),
    }
}

/// The operator's use cases read one snapshot of these settings.
impl crate::operator::Ground for Settings {
    fn destinations(&self) -> &Destinations {
        &self.destinations
    }

    fn retention(&self) -> &RetentionSettings {
        &self.retention
    }

    fn max_replay(&self) -> u32 {
        self.operator.max_replay
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
        let restart_only = RestartOnlySections::of(&figment);
        let raw: RawSettings = figment.extract().map_err(|e| {
            let key = e.path.join(".");
            let key = if key.is_empty() {
                "config".to_owned()
            } else {
                key
            };
            ConfigError::new(key, without_values(&e.kind))
        })?;
        let mut settings = Self::validate(raw)?;
        settings.restart_only = restart_only;
        Ok(settings)
    }

    /// Each section by its owner, then what spans sections: the retention check over
    /// every source's horizon, and each destination's timeout against the lease.
    fn validate(raw: RawSettings) -> Result<Self, ConfigError> {
        let server = raw.server.validate()?;
        let database = raw.database.validate()?;
        let delivery = raw.delivery.validate()?;
        let (sources, mut destinations) = validate_sources(raw.sources, &delivery)?;
        destinations.jq = raw.jq.validate()?;
        let retired_sources = validate_retired(raw.retired_sources, &sources)?;
        let notices = raw.notices.map(RawNotices::validate).transpose()?;
        if let Some(notices) = &notices {
            delivery.check("notices", &notices.destination)?;
            destinations.insert(crate::notices::SOURCE, vec![notices.destination.clone()]);
        }
        let operator = raw.operator.validate(raw.operators)?;
        let admin = raw.admin.validate();
        let console = raw.console.validate(&operator, &admin)?;
        if let Some(notices) = &notices {
            let listeners = [
                Some(("server.bind", server.bind.as_str())),
                admin.bind.as_deref().map(|bind| ("admin.bind", bind)),
                console.bind.as_deref().map(|bind| ("console.bind", bind)),
            ];
            let listeners: Vec<(&str, &str)> = listeners.into_iter().flatten().collect();
            crate::notices::refuse_own_listeners(&notices.destination.url, &listeners)?;
        }
        let horizons = sources
            .iter()
            .map(|source| CheckLine {
                name: format!("source {} ({})", source.name, source.provider.name()),
                value: source.resend_horizon.0,
                origin: source.resend_horizon.1.clone(),
            })
            .collect();
        let retention = raw.retention.validate(horizons)?;
        check_lookbacks(&sources, &retention)?;
        Ok(Self {
            server,
            database,
            sources,
            destinations,
            retention,
            delivery,
            console,
            operator,
            admin,
            telemetry: raw.telemetry.validate()?,
            retired_sources,
            notices,
            restart_only: RestartOnlySections::default(),
        })
    }

    /// Refuses a configuration that drops a source name the database still holds events,
    /// facts or deliveries under (`stored`), unless it is listed in `retired_sources`.
    /// Deduplication is keyed on the name: renaming a source would accept every copy of
    /// its events again under the new name, and leave its outbox rows undeliverable.
    pub fn check_stored_sources(&self, stored: &BTreeSet<String>) -> Result<(), ConfigError> {
        // Sets, not a scan of the sources per stored name: thousands of sources start.
        // Inlet's own notices are events of a source no configuration names.
        let known: HashSet<&str> = (self.sources.iter().map(|s| s.name.as_str()))
            .chain(self.retired_sources.iter().map(|r| r.as_str()))
            .chain([crate::notices::SOURCE])
            .collect();
        let orphaned: Vec<&str> = stored
            .iter()
            .map(String::as_str)
            .filter(|name| !known.contains(name))
            .collect();
        if orphaned.is_empty() {
            return Ok(());
        }
        Err(ConfigError::new(
            "sources",
            format!(
                "the database holds events, facts or deliveries of source{} {} that this \
                 configuration no longer has: a renamed source starts deduplication afresh \
                 (a copy of an event it already accepted would be accepted and delivered \
                 again under the new name). Keep the name, or list it in retired_sources to \
                 stop serving it knowingly",
                if orphaned.len() == 1 { "" } else { "s" },
                orphaned
                    .iter()
                    .map(|name| format!("'{name}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }

    pub fn source(&self, name: &str) -> Option<&SourceSettings> {
        self.sources.iter().find(|s| s.name.as_str() == name)
    }

    /// The first key of a [`RESTART_ONLY`] section that `next` sets otherwise than these
    /// settings were read with (`server.bind`), if any. Compared as written, so removing a
    /// key that held its default counts as a change.
    pub fn restart_only_change(&self, next: &Settings) -> Option<String> {
        RESTART_ONLY.iter().find_map(|section| {
            first_difference(
                section,
                self.restart_only.0.get(*section),
                next.restart_only.0.get(*section),
            )
        })
    }
}

/// `value`'s table, `empty` when it is absent; `None` when it is not a table.
fn table<'a>(value: Option<&'a Value>, empty: &'a Dict) -> Option<&'a Dict> {
    match value {
        None => Some(empty),
        Some(value) => value.as_dict(),
    }
}

/// The first key under `key` whose value differs (an absent table is an empty one).
fn first_difference(key: &str, old: Option<&Value>, new: Option<&Value>) -> Option<String> {
    let empty = Dict::new();
    match (table(old, &empty), table(new, &empty)) {
        (Some(old), Some(new)) => old.keys().chain(new.keys()).find_map(|name| {
            first_difference(&format!("{key}.{name}"), old.get(name), new.get(name))
        }),
        _ if old == new => None,
        _ => Some(key.to_owned()),
    }
}

impl crate::reconcile::Ground for Settings {
    fn sources(&self) -> &[SourceSettings] {
        &self.sources
    }

    fn destinations(&self) -> &Destinations {
        &self.destinations
    }

    fn event_retention(&self) -> std::time::Duration {
        self.retention.events.0
    }
}

/// A reconciliation looks back less far than events are kept: an event swept after the
/// retention window would otherwise look missing and be recovered again (its fact, kept
/// forever, would spare a second effect, but not the provider's resends).
fn check_lookbacks(
    sources: &[SourceSettings],
    retention: &RetentionSettings,
) -> Result<(), ConfigError> {
    for (index, source) in sources.iter().enumerate() {
        let Some(reconcile) = &source.reconcile else {
            continue;
        };
        if reconcile.lookback >= retention.events.0 {
            return Err(ConfigError::new(
                format!("sources[{index}].reconcile.lookback"),
                format!(
                    "{} is not shorter than retention.events ({}): an event swept after it \
                     would look missing and be recovered again",
                    crate::duration::HumanDuration(reconcile.lookback),
                    retention.events
                ),
            ));
        }
    }
    Ok(())
}

/// Every source (names unique) and its destinations.
fn validate_sources(
    raw: Vec<RawSource>,
    delivery: &DeliverySettings,
) -> Result<(Vec<SourceSettings>, Destinations), ConfigError> {
    let mut sources: Vec<SourceSettings> = Vec::with_capacity(raw.len());
    let mut destinations = Destinations::default();
    // A set, not a scan of the sources so far: there may be thousands.
    let mut names = std::collections::HashSet::new();
    for (index, raw) in raw.into_iter().enumerate() {
        let (source, destination_files) = raw.split();
        let source = source.validate(index)?;
        if source.name.as_str() == crate::notices::SOURCE {
            return Err(ConfigError::new(
                format!("sources[{index}].name"),
                format!(
                    "'{}' is reserved: Inlet's own operational notices are its events",
                    crate::notices::SOURCE
                ),
            ));
        }
        if !names.insert(source.name.as_str().to_owned()) {
            return Err(ConfigError::new(
                format!("sources[{index}].name"),
                format!("source '{}' is defined twice", source.name),
            ));
        }
        let prefix = format!("sources[{index}]");
        let typed = source.locators.event_type.is_some();
        let list = validate_destinations(&prefix, destination_files, typed)?;
        for (d, destination) in list.iter().enumerate() {
            delivery.check(&format!("{prefix}.destinations[{d}]"), destination)?;
        }
        destinations.insert(source.name.as_str(), list);
        sources.push(source);
    }
    Ok((sources, destinations))
}

/// `retired_sources`: valid names, none of them a configured source.
fn validate_retired(
    names: Vec<String>,
    sources: &[SourceSettings],
) -> Result<Vec<SourceName>, ConfigError> {
    let mut retired = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let key = format!("retired_sources[{index}]");
        let name = SourceName::parse(name).map_err(|m| ConfigError::new(&key, m))?;
        if sources.iter().any(|s| s.name == name) {
            return Err(ConfigError::new(
                key,
                format!("'{name}' is a configured source: it cannot also be retired"),
            ));
        }
        retired.push(name);
    }
    Ok(retired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::HumanDuration;
    use crate::identity::Locator;
    use crate::secret::Secret;

    const ONE_SOURCE: &str = "[[sources]]\nname = \"gh\"\nscheme = \"github\"\n\
                              secrets = [\"a-github-secret-long-enough-for-any-rule-0123\"]\n";

    #[test]
    fn a_stored_source_must_stay_configured_or_be_retired() {
        let stored: BTreeSet<String> = ["gh", "old"].map(str::to_owned).into();
        let settings = Settings::from_toml(ONE_SOURCE).expect("valid");
        let refused = settings
            .check_stored_sources(&stored)
            .expect_err("old is dropped");
        assert_eq!(refused.key, "sources");
        assert!(refused.message.contains("'old'") && !refused.message.contains("'gh'"));
        let retired = format!("retired_sources = [\"old\"]\n{ONE_SOURCE}");
        let settings = Settings::from_toml(&retired).expect("valid");
        assert!(settings.check_stored_sources(&stored).is_ok());
    }

    #[test]
    fn retired_names_are_source_names_not_configured_ones() {
        let key = |toml: String| Settings::from_toml(&toml).expect_err("refused").key;
        assert_eq!(
            key(format!("retired_sources = [\"gh\"]\n{ONE_SOURCE}")),
            "retired_sources[0]"
        );
        assert_eq!(
            key(format!(
                "retired_sources = [\"ok\", \"Bad Name\"]\n{ONE_SOURCE}"
            )),
            "retired_sources[1]"
        );
    }

    /// Secrets as strong as each scheme asks.
    const GITHUB: &str = "github-secret-0123456789";
    const SHOPIFY: &str = "shopify-secret-0123456789abcdef0123";
    const STRIPE: &str = "whsec_0123456789abcdefghijklmnopqrstuv";

    #[test]
    fn sources_with_unsigned_event_ids_key_facts_on_the_body() {
        let toml = format!(
            r#"
sources = [
  {{ name = "gh", scheme = "github", secrets = ["{GITHUB}"] }},
  {{ name = "shop", scheme = "shopify", secrets = ["{SHOPIFY}"] }},
  {{ name = "svix", scheme = "standard", secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] }},
  {{ name = "stripe", scheme = "stripe", secrets = ["{STRIPE}"] }},
  {{ name = "acme", scheme = "hmac", secrets = ["{GITHUB}"], event_id = "header:X-Acme-Id", replay_horizon = "1d", hmac = {{ header = "X-Acme-Signature" }} }},
  {{ name = "gh-keyed", scheme = "github", secrets = ["{GITHUB}"], fact_key = "json:/after" }},
]
"#
        );
        let settings = Settings::from_toml(&toml).unwrap();
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
            &format!("[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"{GITHUB}\"]\ntolerance_secs = 5\n"),
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].tolerance_secs");

        let err = Settings::from_toml(
            "[[sources]]\nname = \"sw\"\nscheme = \"standard\"\nsecrets = [\"whsec_!!\"]\n",
        )
        .unwrap_err();
        assert_eq!(err.key, "sources[0].secrets[0]");

        let err = Settings::from_toml(
            &format!("[[sources]]\nname = \"h\"\nscheme = \"hmac\"\nsecrets = [\"{GITHUB}\"]\n[sources.hmac]\nheader = \"X-Sig\"\n"),
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

    /// A source of `scheme` with `[sources.reconcile]` holding `lines`: the key an error names.
    fn reconcile_error(scheme: &str, lines: &str, retention: &str) -> Option<String> {
        let secret = match scheme {
            "stripe" => STRIPE,
            "paddle" => "pdl_ntfset_01reconcile_0123456789abcdefghij",
            _ => GITHUB,
        };
        let text = format!(
            "{retention}\n[[sources]]\nname = \"src\"\nscheme = \"{scheme}\"\nsecrets = [\"{secret}\"]\n\
             replay_horizon = \"3d\"\n[sources.reconcile]\ncredential = \"key_0123456789\"\n{lines}\n"
        );
        Settings::from_toml(&text).err().map(|e| e.key)
    }

    #[test]
    fn a_reconciliation_is_checked_against_its_source_and_the_retention() {
        let key = |field: &str| Some(format!("sources[0].reconcile.{field}"));
        assert_eq!(
            reconcile_error("stripe", "api = \"stripe\"\ntypes = [\"invoice.paid\"]", ""),
            None
        );
        assert_eq!(
            reconcile_error("stripe", "api = \"github\"", ""),
            key("api")
        );
        // Stripe: the types the endpoint takes, at most 20, no wildcard; https (or this machine).
        assert_eq!(
            reconcile_error("stripe", "api = \"stripe\"", ""),
            key("types")
        );
        let many = format!(
            "api = \"stripe\"\ntypes = [{}]",
            (0..21)
                .map(|n| format!("\"t.{n}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert_eq!(reconcile_error("stripe", &many, ""), key("types"));
        assert_eq!(
            reconcile_error("stripe", "api = \"stripe\"\ntypes = [\"invoice.*\"]", ""),
            key("types")
        );
        let http = |url: &str| {
            format!("api = \"stripe\"\ntypes = [\"invoice.paid\"]\napi_url = \"{url}\"")
        };
        assert_eq!(
            reconcile_error("stripe", &http("http://api.example.com"), ""),
            key("api_url")
        );
        assert_eq!(
            reconcile_error("stripe", &http("http://127.0.0.1:9/"), ""),
            None
        );
        assert_eq!(
            reconcile_error("stripe", "api = \"shopify\"", ""),
            key("api")
        );
        // At most what the api keeps, shorter than retention.events, settle below lookback.
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\nlookback = \"31d\"",
                ""
            ),
            key("lookback")
        );
        let short = "[retention]\nevents = \"20d\"\nreplay_horizon = \"10d\"";
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]",
                short
            ),
            key("lookback")
        );
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\nlookback = \"10d\"",
                short
            ),
            None
        );
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\nlookback = \"1h\"\nsettle = \"1h\"",
                ""
            ),
            key("settle")
        );
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\ninterval = \"10s\"",
                ""
            ),
            key("interval")
        );
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\nmode = \"dry\"",
                ""
            ),
            key("mode")
        );
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\napi_url = \"ftp://x\"",
                ""
            ),
            key("api_url")
        );
        // Each api's own keys, and what it requires.
        assert_eq!(
            reconcile_error(
                "stripe",
                "api = \"stripe\"\ntypes = [\"invoice.paid\"]\nhook = \"app\"",
                ""
            ),
            key("hook")
        );
        assert_eq!(
            reconcile_error("github", "api = \"github\"", ""),
            key("hook")
        );
        assert_eq!(
            reconcile_error(
                "github",
                "api = \"github\"\nhook = \"repos/a/b/hooks/1\"\ntypes = []",
                ""
            ),
            key("types")
        );
        assert_eq!(
            reconcile_error(
                "github",
                "api = \"github\"\nhook = \"repos/a/b/hooks/1\"",
                ""
            ),
            None
        );
        assert_eq!(
            reconcile_error(
                "github",
                "api = \"github\"\nhook = \"app\"\napp_id = \"7\"",
                ""
            ),
            key("credential")
        );
        // The join key is the provider's event id: a source keyed otherwise is refused.
        let keyed = format!(
            "[[sources]]\nname = \"src\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE}\"]\nevent_id = \"json:/id\"\n\
             [sources.reconcile]\napi = \"stripe\"\ncredential = \"k\"\ntypes = [\"a.b\"]\n"
        );
        assert_eq!(
            Settings::from_toml(&keyed).map(drop).map_err(|e| e.key),
            Err("sources[0].reconcile".to_owned())
        );
        assert_eq!(
            reconcile_error("paddle", "api = \"paddle\"", ""),
            key("notification_setting")
        );
        assert_eq!(
            reconcile_error(
                "paddle",
                "api = \"paddle\"\nnotification_setting = \"ntfset_1\"",
                ""
            ),
            None
        );
        assert_eq!(
            reconcile_error(
                "paddle",
                "api = \"paddle\"\nnotification_setting = \"ntfset_1\"\nlookback = \"90d\"",
                ""
            ),
            key("lookback")
        );
    }

    /// Two destinations on a source `scheme` (with `extra` source lines), the second with
    /// `events = [events]`.
    fn routed_config(scheme: &str, extra: &str, events: &str) -> String {
        let secret = if scheme == "stripe" { STRIPE } else { GITHUB };
        format!(
            r#"
[[sources]]
name = "src"
scheme = "{scheme}"
secrets = ["{secret}"]
{extra}
[[sources.destinations]]
url = "http://127.0.0.1:9000/all"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
[[sources.destinations]]
url = "http://127.0.0.1:9000/some"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
events = [{events}]
"#
        )
    }

    #[test]
    fn event_filters_are_checked_against_their_source() {
        let settings = Settings::from_toml(&routed_config(
            "stripe",
            "",
            r#""payment_intent.*", "invoice.paid""#,
        ))
        .unwrap();
        let routed = |kind: Option<&str>| -> Vec<String> {
            settings
                .destinations
                .routed("src", kind)
                .map(|d| d.name.clone())
                .collect()
        };
        assert_eq!(
            routed(Some("payment_intent.created")),
            ["127.0.0.1:9000/all", "127.0.0.1:9000/some"]
        );
        assert_eq!(routed(Some("charge.refunded")), ["127.0.0.1:9000/all"]);
        assert_eq!(routed(None), ["127.0.0.1:9000/all"]);

        let err =
            Settings::from_toml(&routed_config("stripe", "", r#""a", "b", "a.*.b""#)).unwrap_err();
        assert_eq!(err.key, "sources[0].destinations[1].events[2]");
        let err = Settings::from_toml(&routed_config("stripe", "", "")).unwrap_err();
        assert_eq!(err.key, "sources[0].destinations[1].events");
        assert!(err.message.contains("remove `events`"), "{err}");

        // A generic scheme reads no type unless the source says where it is.
        let hmac = "event_id = \"header:X-Id\"\nreplay_horizon = \"1d\"\n[sources.hmac]\nheader = \"X-Sig\"";
        let err = Settings::from_toml(&routed_config("hmac", hmac, r#""*""#)).unwrap_err();
        assert_eq!(err.key, "sources[0].destinations[1].events");
        assert!(err.message.contains("no type"), "{err}");
        let typed = format!("event_type = \"header:X-Type\"\n{hmac}");
        assert!(Settings::from_toml(&routed_config("hmac", &typed, r#""*""#)).is_ok());
    }

    #[test]
    fn a_reload_names_the_first_restart_only_key_it_would_change() {
        let base = &format!("[server]\nbind = \"127.0.0.1:0\"\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"{GITHUB}\"]\n");
        let running = Settings::from_toml(base).unwrap();
        let change = |text: &str| running.restart_only_change(&Settings::from_toml(text).unwrap());
        // Sources reload live; an absent table is the same as an empty one.
        assert_eq!(
            change(&base.replace(GITHUB, &format!("{GITHUB}\", \"{GITHUB}-next"))),
            None
        );
        assert_eq!(change(&format!("{base}[console]\n")), None);
        assert_eq!(
            change(&base.replace("127.0.0.1:0", "127.0.0.1:1")),
            Some("server.bind".to_owned())
        );
        assert_eq!(
            change(&format!("{base}[delivery]\nlease = \"30s\"\n")),
            Some("delivery.lease".to_owned())
        );
        assert_eq!(
            change(&base.replace("bind = \"127.0.0.1:0\"\n", "")),
            Some("server.bind".to_owned())
        );
        let debug = format!("{running:?}");
        assert!(debug.contains("RestartOnlySections(..)"), "{debug}");
    }

    /// `[notices]` with `extra` lines, beside one source.
    fn with_notices(extra: &str) -> Result<Settings, ConfigError> {
        Settings::from_toml(&format!(
            "[notices]\nurl = \"https://hooks.example.com/inlet\"\n\
             secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n{extra}\n{ONE_SOURCE}"
        ))
    }

    #[test]
    fn notices_are_a_destination_of_the_reserved_source() {
        use crate::notices::{Format, NoticeType, DESTINATION, SOURCE};
        let settings = with_notices("timeout = \"5s\"\nbreaker = { failures = 3 }").unwrap();
        let notices = settings.notices.as_ref().expect("configured");
        assert_eq!(notices.format, Format::Standard);
        assert_eq!(notices.types.len(), NoticeType::ALL.len());
        assert_eq!(notices.dead_letter_threshold, 100);
        let destination = settings.destinations.find(SOURCE, DESTINATION).unwrap();
        assert_eq!(destination.timeout, Duration::from_secs(5));
        assert_eq!(destination.gate.breaker.failures, 3);
        assert!(destination.transform.is_none());
        // The database holds notices under `inlet`: never an orphaned source.
        let stored: BTreeSet<String> = ["gh", SOURCE].map(str::to_owned).into();
        assert!(settings.check_stored_sources(&stored).is_ok());
        let without = Settings::from_toml(ONE_SOURCE).unwrap();
        assert!(without.check_stored_sources(&stored).is_ok());

        let slack = with_notices("format = \"slack\"\ntypes = [\"breaker.opened\"]").unwrap();
        let notices = slack.notices.as_ref().expect("configured");
        assert_eq!(notices.format, Format::Slack);
        assert!(notices.sends(NoticeType::BreakerOpened));
        assert!(!notices.sends(NoticeType::DeliveryDeadLettered));
        let destination = slack.destinations.find(SOURCE, DESTINATION).unwrap();
        assert!(destination.transform.is_some());
    }

    #[test]
    fn notices_errors_name_the_key() {
        let key = |extra: &str| with_notices(extra).expect_err("refused").key;
        assert_eq!(key("format = \"teams\""), "notices.format");
        assert_eq!(
            key("types = [\"breaker.opened\", \"breaker.ajar\"]"),
            "notices.types[1]"
        );
        assert_eq!(
            key("types = [\"breaker.opened\", \"breaker.opened\"]"),
            "notices.types[1]"
        );
        assert_eq!(
            key("dead_letter_threshold = 0"),
            "notices.dead_letter_threshold"
        );
        assert_eq!(key("check_interval = \"soon\""), "notices.check_interval");
        for window in ["0s", "500ms", "2d", "soon"] {
            assert_eq!(key(&format!("window = \"{window}\"")), "notices.window");
        }
        assert_eq!(key("timeout = \"2m\""), "notices.timeout");
        assert_eq!(key("max_attempts = 0"), "notices.max_attempts");
        for inlets in ["name = \"x\"", "events = [\"a\"]", "transform = \".\""] {
            let field = inlets.split(' ').next().unwrap_or_default();
            assert_eq!(key(inlets), format!("notices.{field}"));
        }
        let unknown = with_notices("colour = \"red\"").expect_err("refused");
        assert!(unknown.to_string().contains("colour"), "{unknown}");
        let err = Settings::from_toml(
            "[notices]\nurl = \"nats://127.0.0.1:4222\"\n\
             secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
        )
        .expect_err("refused");
        assert_eq!(err.key, "notices.url");
        let err =
            Settings::from_toml("[notices]\nurl = \"https://x.example\"\nsecret = \"not-whsec\"\n")
                .expect_err("refused");
        assert_eq!(err.key, "notices.secret");
        let err = Settings::from_toml("[notices]\nformat = \"slack\"\n").expect_err("refused");
        assert!(err.to_string().contains("url"), "{err}");
    }

    #[test]
    fn no_source_may_take_the_notices_name_and_notices_reload_only_on_restart() {
        let err = Settings::from_toml(&ONE_SOURCE.replace("\"gh\"", "\"inlet\"")).unwrap_err();
        assert_eq!(err.key, "sources[0].name");
        assert!(err.message.contains("reserved"), "{err}");
        let running = with_notices("").unwrap();
        let next = with_notices("format = \"slack\"").unwrap();
        assert_eq!(
            running.restart_only_change(&next),
            Some("notices.format".to_owned())
        );
    }

    #[test]
    fn a_secret_written_in_the_wrong_shape_is_not_echoed() {
        let err = Settings::from_toml(
            "[[sources]]\nname = \"s\"\nscheme = \"stripe\"\nsecrets = \"whsec_do_not_echo\"\n",
        )
        .unwrap_err();
        assert!(err.key.starts_with("sources"), "{err}");
        assert!(!err.to_string().contains("do_not_echo"), "{err}");
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
