//! `[operator]`: the operator API's token and bounds.

use crate::error::ConfigError;
use crate::secret::Secret;
use serde::Deserialize;

/// Most events one replay (or dead letters one requeue or discard) may touch.
pub const DEFAULT_MAX_REPLAY: u32 = 1000;

/// The operator API (`/admin`).
#[derive(Debug, Clone)]
pub struct OperatorSettings {
    /// The bearer token; without one the operator API refuses every request.
    pub token: Option<Secret>,
    /// Most events one replay may touch.
    pub max_replay: u32,
}

/// `[operator]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OperatorFile {
    token: Option<String>,
    max_replay: Option<u32>,
}

impl OperatorFile {
    pub fn validate(self) -> Result<OperatorSettings, ConfigError> {
        let token = self
            .token
            .as_deref()
            .map(|reference| {
                Secret::resolve(reference).map_err(|m| ConfigError::new("operator.token", m))
            })
            .transpose()?;
        if token.as_ref().is_some_and(|t| t.expose().len() < 16) {
            return Err(ConfigError::new(
                "operator.token",
                "must be at least 16 characters",
            ));
        }
        Ok(OperatorSettings {
            token,
            max_replay: self.max_replay.unwrap_or(DEFAULT_MAX_REPLAY).max(1),
        })
    }
}
