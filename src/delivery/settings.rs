//! Delivery's settings: the dispatcher (`[delivery]`) and each source's destinations
//! (`[[sources.destinations]]`), validated here, with the event types each one receives.

mod routing;

use super::gates::{BreakerFile, GateSettings};
use super::keys::{DestinationKey, DestinationName};
use super::outbox::Route;
use super::target::DestinationKind;
use super::RetryPolicy;
use crate::duration::{span, HumanDuration};
use crate::error::ConfigError;
use crate::jq::{self, Limits, Program};
use crate::secret::Secret;
use crate::signature::check_standard_secret;
use chrono::{DateTime, Utc};
use routing::EventTypeFilter;
use serde::Deserialize;
use std::time::Duration;

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
/// Rows leased per statement at most: one lease may refill half the slots. Under load a
/// lease waits its turn for the database, so rows per lease bound the drain rate: with 64,
/// SQLite delivered about 1,650/s while ingesting 3,000/s; with 128 (and 256 in flight)
/// it kept up.
pub const DEFAULT_DELIVERY_BATCH: u32 = 128;
/// Sends in flight per Inlet instance, all destinations together. Measured on 2 cores
/// against a sink answering in about 5 ms (docs/src/delivery/index.md): an
/// outbox drains at 1,200/s with 16 on PostgreSQL, 4,400–6,500/s with 128; while ingesting
/// at concurrency 64, 256 kept the backlog under a few hundred rows on both backends.
pub const DEFAULT_DELIVERY_CONCURRENCY: u32 = 256;

/// The dispatcher that sends outbox rows to destinations.
#[derive(Debug, Clone)]
pub struct DeliverySettings {
    /// Run the dispatcher inside `inlet serve` (operators may run `inlet deliver` instead).
    pub enabled: bool,
    /// How often to look for due deliveries when not woken by a new fact.
    pub poll_interval: Duration,
    /// How long a leased row belongs to its dispatcher; longer than any destination timeout.
    pub lease: Duration,
    /// Rows leased per statement at most.
    pub batch: u32,
    /// Deliveries in flight at once per Inlet instance, all destinations together.
    pub concurrency: u32,
}

/// Where a source's new facts are sent, and how.
#[derive(Debug, Clone)]
pub struct DestinationSettings {
    /// HTTP, NATS JetStream or RabbitMQ (from the URL's scheme).
    pub kind: DestinationKind,
    /// Stable name stored with each delivery and used as a metric label (default: the URL's
    /// host, port and path).
    pub name: String,
    /// May carry credentials (`amqp://user:password@host`): never logged.
    pub url: String,
    /// `whsec_<base64>`: Inlet signs each delivery with it (Standard Webhooks).
    pub secret: Secret,
    /// The event types it receives (`events`; every event when not set).
    pub events: EventTypeFilter,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub policy: RetryPolicy,
    /// Retries per second a destination may receive once `retry_burst` is spent.
    pub retry_rate: f64,
    pub retry_burst: u32,
    /// The circuit breaker and the limits, shared by every instance.
    pub gate: GateSettings,
    /// `filter`: a jq expression that must yield `true` for an event to be enqueued here
    /// (evaluated at ingest, after the `events` filter).
    pub filter: Option<Program>,
    /// `transform`: a jq expression whose output is the body sent (evaluated at send time).
    pub transform: Option<Program>,
}

/// Every configured source's destinations, in configuration order (an empty list for a
/// source that delivers nowhere), and the bounds of their filters and transforms.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    list: Vec<(String, Vec<DestinationSettings>)>,
    /// `[jq]`.
    pub jq: Limits,
}

impl DestinationSettings {
    /// Its key as a destination of `source`.
    pub fn key_in(&self, source: &str) -> DestinationKey {
        let source = crate::provider::SourceName::stored(source.to_owned());
        DestinationKey::new(source, DestinationName::new(self.name.clone()))
    }
}

impl Destinations {
    /// Adds `source`'s destinations.
    pub fn insert(&mut self, source: &str, destinations: Vec<DestinationSettings>) {
        self.list.push((source.to_owned(), destinations));
    }

    /// Whether `source` is configured.
    pub fn knows(&self, source: &str) -> bool {
        self.list.iter().any(|(name, _)| name == source)
    }

    /// `source`'s destinations (none for an unknown source).
    pub fn of(&self, source: &str) -> &[DestinationSettings] {
        self.list
            .iter()
            .find(|(name, _)| name == source)
            .map_or(&[], |(_, destinations)| destinations.as_slice())
    }

    /// One destination of `source` by name.
    pub fn find(&self, source: &str, name: &str) -> Option<&DestinationSettings> {
        self.of(source).iter().find(|d| d.name == name)
    }

    /// The destinations of `source` whose filter takes an event of `event_type`, in
    /// configuration order.
    pub fn routed<'a>(
        &'a self,
        source: &str,
        event_type: Option<&'a str>,
    ) -> impl Iterator<Item = &'a DestinationSettings> {
        self.of(source)
            .iter()
            .filter(move |d| d.events.matches(event_type))
    }

    /// Each destination of `source` that receives an event of `event_type`, with the
    /// deadline of a delivery enqueued at `now`: the outbox rows of a new fact, before
    /// the filters.
    pub fn routes(&self, source: &str, event_type: Option<&str>, now: DateTime<Utc>) -> Vec<Route> {
        self.routed(source, event_type)
            .map(|d| Route::taken(d.name.clone(), now + d.policy.deadline))
            .collect()
    }

    /// Every destination's key and gate settings.
    pub fn gated(&self) -> Vec<super::gates::Gated> {
        self.iter()
            .map(|(source, d)| (d.key_in(source), d.gate))
            .collect()
    }

    /// Every (source, destination) pair.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &DestinationSettings)> {
        self.list
            .iter()
            .flat_map(|(source, list)| list.iter().map(move |d| (source.as_str(), d)))
    }
}

/// `[delivery]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DeliveryFile {
    enabled: Option<bool>,
    poll_interval: Option<String>,
    lease: Option<String>,
    batch: Option<u32>,
    concurrency: Option<u32>,
}

impl DeliveryFile {
    pub fn validate(self) -> Result<DeliverySettings, ConfigError> {
        Ok(DeliverySettings {
            enabled: self.enabled.unwrap_or(true),
            poll_interval: span(
                "delivery.poll_interval",
                self.poll_interval.as_deref(),
                DEFAULT_POLL_INTERVAL,
            )?,
            lease: span("delivery.lease", self.lease.as_deref(), DEFAULT_LEASE)?,
            batch: self.batch.unwrap_or(DEFAULT_DELIVERY_BATCH).max(1),
            concurrency: self
                .concurrency
                .unwrap_or(DEFAULT_DELIVERY_CONCURRENCY)
                .max(1),
        })
    }
}

impl DeliverySettings {
    /// Refuses a destination whose attempt could outlive its lease. A broker attempt may
    /// first connect, then wait for the confirmation: both timeouts count.
    pub fn check(&self, key: &str, destination: &DestinationSettings) -> Result<(), ConfigError> {
        let (longest, what) = match destination.kind {
            DestinationKind::Http => (destination.timeout, "timeout"),
            _ => (
                destination.timeout + destination.connect_timeout,
                "timeout plus connect_timeout",
            ),
        };
        if longest < self.lease {
            return Ok(());
        }
        Err(ConfigError::new(
            format!("{key}.timeout"),
            format!(
                "{what} ({}) is not shorter than delivery.lease ({}): a slow attempt would \
                 lose its lease while still running",
                HumanDuration(longest),
                HumanDuration(self.lease)
            ),
        ))
    }
}

/// `[[sources.destinations]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationFile {
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
    subject: Option<String>,
    exchange: Option<String>,
    routing_key: Option<String>,
    breaker: Option<BreakerFile>,
    max_in_flight: Option<u32>,
    rate: Option<f64>,
    rate_burst: Option<u32>,
    events: Option<Vec<String>>,
    filter: Option<String>,
    transform: Option<String>,
}

/// `[jq]` as written: the bounds of every filter and transform.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JqFile {
    /// `threads` is its name from before evaluators were processes.
    #[serde(alias = "threads")]
    workers: Option<usize>,
    operator_workers: Option<usize>,
    time_limit: Option<String>,
    max_steps: Option<u64>,
    max_memory_bytes: Option<usize>,
    max_output_bytes: Option<usize>,
}

impl JqFile {
    pub fn validate(self) -> Result<Limits, ConfigError> {
        let time = span(
            "jq.time_limit",
            self.time_limit.as_deref(),
            jq::DEFAULT_TIME,
        )?;
        if time.is_zero() {
            return Err(ConfigError::new("jq.time_limit", "must be longer than 0s"));
        }
        Ok(Limits {
            workers: positive("workers", self.workers, jq::DEFAULT_WORKERS)?,
            operator_workers: positive(
                "operator_workers",
                self.operator_workers,
                jq::DEFAULT_OPERATOR_WORKERS,
            )?,
            time,
            steps: positive("max_steps", self.max_steps, jq::DEFAULT_STEPS)?,
            memory: positive(
                "max_memory_bytes",
                self.max_memory_bytes,
                jq::DEFAULT_MEMORY,
            )?,
            output: positive(
                "max_output_bytes",
                self.max_output_bytes,
                jq::DEFAULT_OUTPUT,
            )?,
        })
    }
}

/// `value` (else `default`), refused when 0.
fn positive<T: Default + PartialEq>(
    key: &str,
    value: Option<T>,
    default: T,
) -> Result<T, ConfigError> {
    match value {
        Some(zero) if zero == T::default() => {
            Err(ConfigError::new(format!("jq.{key}"), "must be at least 1"))
        }
        other => Ok(other.unwrap_or(default)),
    }
}

/// `text` compiled, or the key and the position of its error.
fn expression(key: &str, text: Option<String>) -> Result<Option<Program>, ConfigError> {
    let Some(text) = text else { return Ok(None) };
    jq::compile(&text)
        .map(Some)
        .map_err(|e| ConfigError::new(key, format!("{e}")))
}

/// A source's destinations, validated; `prefix` is the source's key (`sources[0]`), and
/// `typed` says whether its events can carry a type (an `events` filter needs one).
pub fn validate_destinations(
    prefix: &str,
    files: Vec<DestinationFile>,
    typed: bool,
) -> Result<Vec<DestinationSettings>, ConfigError> {
    let mut destinations: Vec<DestinationSettings> = Vec::with_capacity(files.len());
    for (d, file) in files.into_iter().enumerate() {
        let key = format!("{prefix}.destinations[{d}]");
        let destination = file.validate(&key, typed)?;
        if destinations
            .iter()
            .any(|other| other.name == destination.name)
        {
            return Err(ConfigError::new(
                format!("{key}.name"),
                format!(
                    "destination '{}' is defined twice for this source",
                    destination.name
                ),
            ));
        }
        destinations.push(destination);
    }
    Ok(destinations)
}

impl DestinationFile {
    /// The retry policy and the retry budget's rate, or the key to blame.
    fn retries(&self, key: &dyn Fn(&str) -> String) -> Result<(RetryPolicy, f64), ConfigError> {
        let get = |field: &str, value: &Option<String>, default: &str| {
            span(&key(field), value.as_deref(), default)
        };
        let policy = RetryPolicy {
            base: get("retry_base", &self.retry_base, DEFAULT_RETRY_BASE)?,
            cap: get("retry_cap", &self.retry_cap, DEFAULT_RETRY_CAP)?,
            max_attempts: self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            deadline: get("deadline", &self.deadline, DEFAULT_DEADLINE)?,
        };
        if policy.max_attempts == 0 {
            return Err(ConfigError::new(key("max_attempts"), "must be at least 1"));
        }
        let retry_rate = self.retry_rate.unwrap_or(DEFAULT_RETRY_RATE);
        if !(retry_rate.is_finite() && retry_rate > 0.0) {
            return Err(ConfigError::new(
                key("retry_rate"),
                "must be a positive number of retries per second",
            ));
        }
        Ok((policy, retry_rate))
    }

    /// `name`, or the URL's host, port and path (never the query or credentials: they may
    /// hold tokens).
    fn name(
        &mut self,
        key: &dyn Fn(&str) -> String,
        host: &str,
        url: &reqwest::Url,
        kind: &DestinationKind,
    ) -> Result<String, ConfigError> {
        match self.name.take() {
            Some(name) if !name.is_empty() && name.len() <= 128 => Ok(name),
            Some(_) => Err(ConfigError::new(key("name"), "must be 1 to 128 characters")),
            None => Ok(format!(
                "{host}{}{}",
                url.port().map(|p| format!(":{p}")).unwrap_or_default(),
                kind.default_name_path(url.path())
            )),
        }
    }

    /// One of Inlet's own destinations (the notices destination), named `name`, under
    /// `prefix` (`notices`): an HTTP URL with the ordinary keys (secret, timeouts, retries,
    /// breaker, limits), sent the output of `transform`. The keys that name it, choose its
    /// events or shape its body are Inlet's to set, and refused.
    pub fn validate_own(
        mut self,
        prefix: &str,
        name: &str,
        transform: Option<Program>,
    ) -> Result<DestinationSettings, ConfigError> {
        let key = |field: &str| format!("{prefix}.{field}");
        let inlets = [
            ("name", self.name.is_some()),
            ("events", self.events.is_some()),
            ("filter", self.filter.is_some()),
            ("transform", self.transform.is_some()),
            ("subject", self.subject.is_some()),
            ("exchange", self.exchange.is_some()),
            ("routing_key", self.routing_key.is_some()),
        ];
        if let Some((field, _)) = inlets.iter().find(|(_, set)| *set) {
            return Err(ConfigError::new(
                key(field),
                "is not a key of this destination: Inlet sets it (remove it)",
            ));
        }
        self.name = Some(name.to_owned());
        let mut destination = self.validate(prefix, true)?;
        if destination.kind != DestinationKind::Http {
            return Err(ConfigError::new(
                key("url"),
                "must be an http:// or https:// URL",
            ));
        }
        destination.transform = transform;
        Ok(destination)
    }

    fn validate(mut self, prefix: &str, typed: bool) -> Result<DestinationSettings, ConfigError> {
        let key = |field: &str| format!("{prefix}.{field}");
        let events = EventTypeFilter::parse(&key("events"), self.events.take(), typed)?;
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| ConfigError::new(key("url"), e.to_string()))?;
        let Some(host) = url.host_str() else {
            return Err(ConfigError::new(key("url"), "must have a host"));
        };
        let kind = DestinationKind::from_file(
            url.scheme(),
            self.subject.take(),
            self.exchange.take(),
            self.routing_key.take(),
        )
        .map_err(|(field, message)| ConfigError::new(key(field), message))?;
        let name = self.name(&key, host, &url, &kind)?;
        let secret =
            Secret::resolve(&self.secret).map_err(|m| ConfigError::new(key("secret"), m))?;
        check_standard_secret(&secret).map_err(|m| ConfigError::new(key("secret"), m))?;
        let (policy, retry_rate) = self.retries(&key)?;
        let filter = expression(&key("filter"), self.filter.take())?;
        let transform = expression(&key("transform"), self.transform.take())?;
        let gate = GateSettings::validate(
            &key,
            self.breaker.take(),
            self.max_in_flight,
            self.rate,
            self.rate_burst,
        )?;
        Ok(DestinationSettings {
            gate,
            kind,
            name,
            url: url.to_string(),
            secret,
            events,
            timeout: span(
                &key("timeout"),
                self.timeout.as_deref(),
                DEFAULT_DESTINATION_TIMEOUT,
            )?,
            connect_timeout: span(
                &key("connect_timeout"),
                self.connect_timeout.as_deref(),
                DEFAULT_DESTINATION_CONNECT_TIMEOUT,
            )?,
            policy,
            retry_rate,
            retry_burst: self.retry_burst.unwrap_or(DEFAULT_RETRY_BURST),
            filter,
            transform,
        })
    }
}
