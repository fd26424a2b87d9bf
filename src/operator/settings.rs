//! `[operator]`: the operator API's token and bounds; `[console]`: the operator console.

use crate::duration::span;
use crate::error::ConfigError;
use crate::secret::Secret;
use serde::Deserialize;
use std::time::Duration;

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

/// How long a console session lasts by default.
pub const DEFAULT_SESSION_TTL: &str = "8h";

/// The operator console (`/console`).
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Served at all: by default whenever an operator token is configured.
    pub enabled: bool,
    /// A listener of its own (e.g. `127.0.0.1:9091`) instead of the main one.
    pub bind: Option<String>,
    /// Mark the session cookie `Secure` (serve the console over TLS, or behind a proxy
    /// that terminates it).
    pub secure_cookie: bool,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
}

/// `[console]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConsoleFile {
    enabled: Option<bool>,
    bind: Option<String>,
    secure_cookie: Option<bool>,
    session_ttl: Option<String>,
}

impl ConsoleFile {
    /// The console needs the operator token: it is what signs in.
    pub fn validate(self, operator: &OperatorSettings) -> Result<ConsoleSettings, ConfigError> {
        let has_token = operator.token.is_some();
        if self.enabled == Some(true) && !has_token {
            return Err(ConfigError::new(
                "console.enabled",
                "the console signs in with the operator token: configure operator.token",
            ));
        }
        let session_ttl = span(
            "console.session_ttl",
            self.session_ttl.as_deref(),
            DEFAULT_SESSION_TTL,
        )?;
        if session_ttl < Duration::from_secs(60) || session_ttl > Duration::from_secs(7 * 86_400) {
            return Err(ConfigError::new(
                "console.session_ttl",
                "must be between 1m and 7d",
            ));
        }
        Ok(ConsoleSettings {
            enabled: self.enabled.unwrap_or(has_token),
            bind: self.bind,
            secure_cookie: self.secure_cookie.unwrap_or(false),
            session_ttl,
        })
    }
}
