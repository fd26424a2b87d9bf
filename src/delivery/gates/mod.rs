//! What protects a destination, shared by every Inlet instance through the database
//! (`destination_gates`): a circuit breaker, and limits on deliveries in flight and per
//! second.
//!
//! - **Breaker.** After `failures` consecutive transient failures (no answer, a timeout,
//!   408, 429 or 5xx) the destination opens for `cooldown`; while open no dispatcher
//!   leases its deliveries, so they spend neither attempts nor sends. When the cool-down
//!   has passed, one delivery is leased as the probe: an answer closes the breaker, a
//!   failure opens it again for twice as long, up to `cooldown_cap`.
//! - **`max_in_flight`.** Rows of the destination leased and not yet settled, counted in
//!   the `deliveries` table across every instance, never pass it.
//! - **`rate`.** A token bucket in the gate row: `rate` leases per second, `rate_burst` at
//!   once after a quiet spell.
//!
//! The decisions are pure functions here; [`store`] reads and writes the rows.

mod store;

pub use store::Gated;
pub(super) use store::{
    gate_in, load_all, lock, read_all, read_committed, record_observations, save, Key,
};

/// A breaker's transition, by destination.
pub type BreakerChange = (DestinationKey, Transition);

use crate::delivery::DestinationKey;
use crate::duration::{span, HumanDuration};
use crate::error::ConfigError;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;
use std::time::Duration;

pub const DEFAULT_BREAKER_FAILURES: u32 = 10;
pub const DEFAULT_BREAKER_COOLDOWN: &str = "30s";
pub const DEFAULT_BREAKER_COOLDOWN_CAP: &str = "10m";

/// `breaker = { failures = 10, cooldown = "30s", cooldown_cap = "10m" }` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BreakerFile {
    failures: Option<u32>,
    cooldown: Option<String>,
    cooldown_cap: Option<String>,
}

/// A destination's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// Consecutive transient failures that open it; 0 turns the breaker off.
    pub failures: u32,
    /// The first cool-down; each failed probe doubles it.
    pub cooldown: Duration,
    pub cooldown_cap: Duration,
}

/// A destination's rate limit: `per_second` leases, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

/// Everything that may hold a destination's deliveries back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateSettings {
    pub breaker: BreakerSettings,
    pub max_in_flight: Option<u32>,
    pub rate: Option<RateLimit>,
}

impl GateSettings {
    /// The destination's gate from its table; `key` names a field for errors.
    pub fn validate(
        key: &dyn Fn(&str) -> String,
        breaker: Option<BreakerFile>,
        max_in_flight: Option<u32>,
        rate: Option<f64>,
        rate_burst: Option<u32>,
    ) -> Result<Self, ConfigError> {
        if max_in_flight == Some(0) {
            return Err(ConfigError::new(key("max_in_flight"), "must be at least 1"));
        }
        if rate_burst.is_some() && rate.is_none() {
            return Err(ConfigError::new(key("rate_burst"), "needs a rate"));
        }
        let rate = match rate {
            None => None,
            Some(per_second) if per_second.is_finite() && per_second > 0.0 => Some(RateLimit {
                per_second,
                burst: rate_burst.unwrap_or_else(|| one_second_of(per_second)),
            }),
            Some(_) => {
                return Err(ConfigError::new(
                    key("rate"),
                    "must be a positive number of deliveries per second",
                ))
            }
        };
        if rate.is_some_and(|r| r.burst == 0) {
            return Err(ConfigError::new(key("rate_burst"), "must be at least 1"));
        }
        Ok(Self {
            breaker: BreakerSettings::validate(&|field| key(&format!("breaker.{field}")), breaker)?,
            max_in_flight,
            rate,
        })
    }

    /// Where `gate`'s breaker stands at `now` (closed while the breaker is turned off,
    /// whatever the row says).
    pub fn breaker_of(&self, gate: &Gate, now: DateTime<Utc>) -> BreakerState {
        match self.breaker.failures {
            0 => BreakerState::Closed,
            _ => gate.breaker(now),
        }
    }

    /// Whether the gate may hold deliveries back at all.
    pub fn any(&self) -> bool {
        self.breaker.failures > 0 || self.limits()
    }

    /// Whether leases for this destination count (in flight or per second).
    pub fn limits(&self) -> bool {
        self.max_in_flight.is_some() || self.rate.is_some()
    }
}

/// A second's worth of `per_second`, at least one.
fn one_second_of(per_second: f64) -> u32 {
    // Saturating float-to-int conversion: a huge rate gets the largest burst.
    (per_second.ceil() as u32).max(1)
}

impl BreakerSettings {
    fn validate(
        key: &dyn Fn(&str) -> String,
        file: Option<BreakerFile>,
    ) -> Result<Self, ConfigError> {
        let file = file.unwrap_or_default();
        let cooldown = span(
            &key("cooldown"),
            file.cooldown.as_deref(),
            DEFAULT_BREAKER_COOLDOWN,
        )?;
        let cooldown_cap = span(
            &key("cooldown_cap"),
            file.cooldown_cap.as_deref(),
            DEFAULT_BREAKER_COOLDOWN_CAP,
        )?;
        if cooldown.is_zero() {
            return Err(ConfigError::new(key("cooldown"), "must be longer than 0"));
        }
        if cooldown_cap < cooldown {
            return Err(ConfigError::new(
                key("cooldown_cap"),
                format!(
                    "({}) is shorter than the cool-down ({})",
                    HumanDuration(cooldown_cap),
                    HumanDuration(cooldown)
                ),
            ));
        }
        Ok(Self {
            failures: file.failures.unwrap_or(DEFAULT_BREAKER_FAILURES),
            cooldown,
            cooldown_cap,
        })
    }

    /// The cool-down after one of `last` (zero: the breaker was closed).
    fn next_cooldown(&self, last: Duration) -> Duration {
        match last.is_zero() {
            true => self.cooldown,
            false => last.saturating_mul(2).min(self.cooldown_cap),
        }
    }
}

/// Where a breaker stands at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Cooling down: nothing is leased.
    Open,
    /// The cool-down has passed: one probe at a time is leased.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }

    /// The `inlet_breaker_state` gauge: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> f64 {
        match self {
            Self::Closed => 0.0,
            Self::HalfOpen => 1.0,
            Self::Open => 2.0,
        }
    }
}

/// One destination's row of `destination_gates`, as the decisions see it (the default: a
/// closed breaker, no failure, a full bucket).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gate {
    /// Consecutive transient failures.
    pub failures: i32,
    /// Set while the breaker is open (past: half-open).
    pub open_until: Option<NaiveDateTime>,
    /// The last cool-down, 0 when closed.
    pub cooldown_ms: i64,
    pub opened_at: Option<NaiveDateTime>,
    /// The rate limit's bucket, counted at `tokens_at` (`None`: full).
    pub tokens: f64,
    pub tokens_at: Option<NaiveDateTime>,
}

impl Gate {
    pub fn breaker(&self, now: DateTime<Utc>) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) if now.naive_utc() < until => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// The bucket's tokens at `now` for `rate`.
    pub fn tokens_at(&self, rate: &RateLimit, now: DateTime<Utc>) -> f64 {
        let burst = f64::from(rate.burst);
        match self.tokens_at {
            None => burst,
            Some(at) => {
                let elapsed = (now.naive_utc() - at).num_milliseconds().max(0) as f64 / 1000.0;
                (self.tokens + elapsed * rate.per_second).min(burst)
            }
        }
    }
}

/// How a finished attempt bears on the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// The destination answered (delivered, or refused for good): it is up.
    Answered,
    /// No answer, a timeout, 408, 429 or 5xx.
    Failed,
}

/// One finished attempt's bearing on its destination's breaker.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Its destination.
    pub key: DestinationKey,
    pub breaker: BreakerSettings,
    pub health: Health,
}

/// Finished attempts for one destination's breaker, in the order they finished.
#[derive(Debug, Clone)]
pub struct Observed {
    /// Their destination.
    pub key: DestinationKey,
    pub settings: BreakerSettings,
    pub healths: Vec<Health>,
}

/// `observations` grouped by destination, each in the order they finished.
pub fn by_destination(observations: impl IntoIterator<Item = Observation>) -> Vec<Observed> {
    let mut grouped: Vec<Observed> = Vec::new();
    for o in observations {
        match grouped.iter_mut().find(|g| g.key == o.key) {
            Some(group) => group.healths.push(o.health),
            None => grouped.push(Observed {
                key: o.key,
                settings: o.breaker,
                healths: vec![o.health],
            }),
        }
    }
    grouped
}

/// A breaker's change, for `inlet_breaker_transitions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A closed breaker opened: an outage begins.
    Opened,
    /// A half-open breaker's probe failed: open again, for longer (the same outage).
    Reopened,
    Closed,
}

impl Transition {
    pub fn to(self) -> BreakerState {
        match self {
            Self::Opened | Self::Reopened => BreakerState::Open,
            Self::Closed => BreakerState::Closed,
        }
    }
}

/// Applies finished attempts, in order, to `gate`; the transitions they caused.
pub fn observe(
    gate: &mut Gate,
    healths: &[Health],
    settings: &BreakerSettings,
    now: DateTime<Utc>,
) -> Vec<Transition> {
    let mut transitions = Vec::new();
    for health in healths {
        match health {
            Health::Answered => {
                gate.failures = 0;
                if gate.open_until.take().is_some() {
                    gate.opened_at = None;
                    gate.cooldown_ms = 0;
                    transitions.push(Transition::Closed);
                }
            }
            Health::Failed => {
                gate.failures = gate.failures.saturating_add(1);
                let opens = match gate.breaker(now) {
                    BreakerState::Closed => (settings.failures > 0
                        && gate.failures >= i32::try_from(settings.failures).unwrap_or(i32::MAX))
                    .then_some(Transition::Opened),
                    // The probe failed.
                    BreakerState::HalfOpen => Some(Transition::Reopened),
                    // A send leased before the breaker opened.
                    BreakerState::Open => None,
                };
                if let Some(transition) = opens {
                    open(gate, settings, now);
                    transitions.push(transition);
                }
            }
        }
    }
    transitions
}

fn open(gate: &mut Gate, settings: &BreakerSettings, now: DateTime<Utc>) {
    let last = Duration::from_millis(u64::try_from(gate.cooldown_ms).unwrap_or(0));
    let cooldown = settings.next_cooldown(last);
    let span = chrono::Duration::from_std(cooldown).unwrap_or(chrono::Duration::MAX);
    gate.open_until = Some(now.naive_utc() + span);
    gate.opened_at = Some(now.naive_utc());
    gate.cooldown_ms = i64::try_from(cooldown.as_millis()).unwrap_or(i64::MAX);
}

/// How many deliveries a lease round may take for a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    Any,
    UpTo(u32),
}

impl Allowance {
    fn min(self, other: u32) -> Self {
        match self {
            Self::Any => Self::UpTo(other),
            Self::UpTo(n) => Self::UpTo(n.min(other)),
        }
    }
}

/// What `gate` lets a lease round take at `now`, with `in_flight` of the destination's
/// deliveries leased and unsettled across every instance.
pub fn allowance(
    gate: &Gate,
    settings: &GateSettings,
    in_flight: i64,
    now: DateTime<Utc>,
) -> Allowance {
    let free = |limit: i64| u32::try_from((limit - in_flight).max(0)).unwrap_or(u32::MAX);
    let mut allowed = Allowance::Any;
    match settings.breaker_of(gate, now) {
        BreakerState::Open => return Allowance::UpTo(0),
        BreakerState::HalfOpen => allowed = allowed.min(free(1)),
        BreakerState::Closed => {}
    }
    if let Some(max) = settings.max_in_flight {
        allowed = allowed.min(free(i64::from(max)));
    }
    if let Some(rate) = &settings.rate {
        // Whole tokens only; the fraction stays in the bucket.
        allowed = allowed.min(gate.tokens_at(rate, now).floor().max(0.0) as u32);
    }
    allowed
}

/// How long until `gate` may let something through again, when it holds everything now.
pub fn ready_in(gate: &Gate, settings: &GateSettings, now: DateTime<Utc>) -> Option<Duration> {
    if settings.breaker_of(gate, now) == BreakerState::Open {
        let until = gate.open_until?.and_utc();
        return (until - now).to_std().ok();
    }
    let rate = settings.rate?;
    let missing = 1.0 - gate.tokens_at(&rate, now);
    (missing > 0.0).then(|| Duration::from_secs_f64(missing / rate.per_second))
}

/// `leased` deliveries taken from the bucket at `now`.
pub fn spend(gate: &mut Gate, rate: &RateLimit, leased: usize, now: DateTime<Utc>) {
    gate.tokens = gate.tokens_at(rate, now) - leased as f64;
    gate.tokens_at = Some(now.naive_utc());
}

#[cfg(test)]
mod tests;
