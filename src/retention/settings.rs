//! `[retention]`: how long each kind of row is kept, and the audit that refuses a window
//! not longer than the replay horizon.

use super::{CheckLine, RetentionCheck};
use crate::duration::{setting, span, HumanDuration};
use crate::error::ConfigError;
use serde::Deserialize;
use std::time::Duration;

pub const DEFAULT_RETENTION_EVENTS: &str = "35d";
pub const DEFAULT_REPLAY_HORIZON: &str = "30d";
pub const DEFAULT_OPERATOR_KEYS: &str = "24h";
/// How long dead and discarded deliveries are kept after they became so.
pub const DEFAULT_DEAD_LETTERS: &str = "30d";
/// How long the audit trail of operator actions is kept.
pub const DEFAULT_AUDIT: &str = "400d";
pub const DEFAULT_SWEEP_INTERVAL: &str = "10m";
pub const DEFAULT_SWEEP_BATCH: u32 = 1000;

#[derive(Debug, Clone)]
pub struct RetentionSettings {
    /// How long event rows (payloads and stored responses) are kept.
    pub events: HumanDuration,
    /// The oldest age at which a copy of an event can still arrive, beyond what the
    /// sources' own horizons say (manual resends, operator replays).
    pub replay_horizon: HumanDuration,
    /// How long the operator API keeps Idempotency-Keys (at least 24 h).
    pub operator_keys: HumanDuration,
    /// How long a dead or discarded delivery is kept after it became so (at least 24 h).
    pub dead_letters: HumanDuration,
    /// How long a row of the audit trail of operator actions is kept (`retention.audit`).
    pub audit_trail: HumanDuration,
    /// Run the sweeper inside `inlet serve` (operators may run `inlet sweep` instead).
    pub sweeper: bool,
    /// How often the sweeper runs inside `inlet serve`.
    pub sweep_interval: Duration,
    /// Rows deleted per short transaction.
    pub sweep_batch: u32,
    /// The numbers compared at startup.
    pub check: RetentionCheck,
}

/// `[retention]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RetentionFile {
    events: Option<String>,
    replay_horizon: Option<String>,
    operator_keys: Option<String>,
    dead_letters: Option<String>,
    audit: Option<String>,
    sweep_interval: Option<String>,
    sweep_batch: Option<u32>,
    sweeper: Option<bool>,
}

/// The floor of the windows an operator must be able to come back to.
const DAY: Duration = Duration::from_secs(86_400);

/// Refuses a window shorter than `minimum`, saying why it must be longer.
fn at_least(
    key: &str,
    value: HumanDuration,
    minimum: Duration,
    why: &str,
) -> Result<HumanDuration, ConfigError> {
    if value.0 < minimum {
        return Err(ConfigError::new(
            key,
            format!("{value} is shorter than {}: {why}", HumanDuration(minimum)),
        ));
    }
    Ok(value)
}

impl RetentionFile {
    /// The windows with a floor: operator keys, dead letters, the audit trail, each with
    /// why it must be at least that long.
    fn windows(&self) -> Result<(HumanDuration, HumanDuration, HumanDuration), ConfigError> {
        let [operator_keys, dead_letters, audit_trail] = [
            (
                "retention.operator_keys",
                self.operator_keys.as_deref(),
                DEFAULT_OPERATOR_KEYS,
                DAY,
                "an operator's retry a day later must still find its key",
            ),
            (
                "retention.dead_letters",
                self.dead_letters.as_deref(),
                DEFAULT_DEAD_LETTERS,
                DAY,
                "dead letters must stay long enough for an operator to look at them",
            ),
            (
                "retention.audit",
                self.audit.as_deref(),
                DEFAULT_AUDIT,
                7 * DAY,
                "who did what must stay readable well after an incident",
            ),
        ]
        .map(|(key, value, default, floor, why)| {
            at_least(key, setting(key, value, default)?, floor, why)
        });
        Ok((operator_keys?, dead_letters?, audit_trail?))
    }

    /// Validates the section and runs the audit against `source_horizons` (each source's
    /// replay horizon and where it comes from).
    pub fn validate(
        self,
        source_horizons: Vec<CheckLine>,
    ) -> Result<RetentionSettings, ConfigError> {
        let events = setting(
            "retention.events",
            self.events.as_deref(),
            DEFAULT_RETENTION_EVENTS,
        )?;
        let replay_horizon = setting(
            "retention.replay_horizon",
            self.replay_horizon.as_deref(),
            DEFAULT_REPLAY_HORIZON,
        )?;
        let (operator_keys, dead_letters, audit_trail) = self.windows()?;
        let mut horizons = vec![CheckLine {
            name: "replay horizon (retention.replay_horizon)".to_owned(),
            value: replay_horizon,
            origin: "configuration: manual resends and operator replays".to_owned(),
        }];
        horizons.extend(source_horizons);
        let check = RetentionCheck {
            events,
            horizons,
            operator_keys,
            audit_trail,
        };
        if !check.passes() {
            return Err(ConfigError::new(
                "retention.events",
                format!("the retention check failed:\n{check}"),
            ));
        }
        Ok(RetentionSettings {
            events,
            replay_horizon,
            operator_keys,
            dead_letters,
            audit_trail,
            sweep_interval: span(
                "retention.sweep_interval",
                self.sweep_interval.as_deref(),
                DEFAULT_SWEEP_INTERVAL,
            )?,
            sweep_batch: self.sweep_batch.unwrap_or(DEFAULT_SWEEP_BATCH).max(1),
            sweeper: self.sweeper.unwrap_or(true),
            check,
        })
    }
}
