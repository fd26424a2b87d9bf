//! `[operator]` and `[[operators]]`: who may use the operator surface, with which role,
//! and its bounds; `[admin]`: its own listener; `[console]`: the operator console.

use super::roles::{Account, Role, LEGACY_NAME};
use crate::duration::span;
use crate::error::ConfigError;
use crate::secret::Secret;
use serde::Deserialize;
use std::time::Duration;

/// Most events one replay (or dead letters one requeue or discard) may touch.
pub const DEFAULT_MAX_REPLAY: u32 = 1000;

/// Wrong operator tokens in a row from one address before it must wait, by default.
pub const DEFAULT_LOCKOUT_AFTER: u32 = 3;
/// The most `lockout_after` may be: past it, guessing would hardly be slowed.
const MAX_LOCKOUT_AFTER: u32 = 1000;

/// The shortest operator token accepted, and how many different characters it needs: a
/// token is a password that the API, the CLI and the console accept from anyone who can
/// reach them.
pub const MIN_TOKEN_CHARS: usize = 16;
const MIN_DISTINCT_CHARS: usize = 8;

/// The operator API (`/admin`) and who may use it.
#[derive(Debug, Clone)]
pub struct OperatorSettings {
    /// Every configured operator: the `[operator] token` (an admin named `operator`)
    /// first, then `[[operators]]`. Without any, the operator API refuses every request.
    pub accounts: Vec<Account>,
    /// The `[operator] token` (also the first of `accounts`).
    pub token: Option<Secret>,
    /// Most events one replay may touch.
    pub max_replay: u32,
    /// Wrong tokens in a row from one address before it must wait.
    pub lockout_after: u32,
}

impl OperatorSettings {
    /// The operator named `name`.
    pub fn account(&self, name: &str) -> Option<&Account> {
        self.accounts.iter().find(|account| account.name == name)
    }

    pub fn any(&self) -> bool {
        !self.accounts.is_empty()
    }
}

/// `[operator]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct OperatorFile {
    token: Option<String>,
    max_replay: Option<u32>,
    lockout_after: Option<u32>,
}

/// An `[[operators]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEntryFile {
    name: String,
    token: String,
    role: String,
}

/// Refuses a token too short or too uniform to resist guessing (never saying the value).
fn check_token(key: &str, token: &Secret) -> Result<(), ConfigError> {
    let text = token.expose();
    let distinct: std::collections::HashSet<char> = text.chars().collect();
    if text.chars().count() < MIN_TOKEN_CHARS || distinct.len() < MIN_DISTINCT_CHARS {
        return Err(ConfigError::new(
            key,
            format!(
                "too weak: an operator token needs at least {MIN_TOKEN_CHARS} characters, \
                 {MIN_DISTINCT_CHARS} of them different (e.g. openssl rand -hex 24)"
            ),
        ));
    }
    Ok(())
}

/// Names are shown in the console and the audit trail, and carried in session cookies.
fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._@-".contains(c);
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(ConfigError::new(
            key,
            "1 to 64 letters, digits, '.', '_', '@' or '-'",
        ));
    }
    Ok(())
}

impl OperatorFile {
    /// The `[operator]` section and the `[[operators]]` entries: names unique, roles
    /// known, every token strong and no two alike.
    pub fn validate(
        self,
        entries: Vec<OperatorEntryFile>,
    ) -> Result<OperatorSettings, ConfigError> {
        let mut accounts = Vec::with_capacity(entries.len() + 1);
        let token = self
            .token
            .as_deref()
            .map(|reference| {
                let token = Secret::resolve(reference)
                    .map_err(|m| ConfigError::new("operator.token", m))?;
                check_token("operator.token", &token)?;
                Ok::<_, ConfigError>(token)
            })
            .transpose()?;
        if let Some(token) = &token {
            accounts.push(Account::legacy(token.clone()));
        }
        for (i, entry) in entries.into_iter().enumerate() {
            accounts.push(entry.validate(i, &accounts)?);
        }
        let lockout_after = self.lockout_after.unwrap_or(DEFAULT_LOCKOUT_AFTER);
        if !(1..=MAX_LOCKOUT_AFTER).contains(&lockout_after) {
            return Err(ConfigError::new(
                "operator.lockout_after",
                format!("1 to {MAX_LOCKOUT_AFTER} wrong tokens"),
            ));
        }
        Ok(OperatorSettings {
            accounts,
            token,
            max_replay: self.max_replay.unwrap_or(DEFAULT_MAX_REPLAY).max(1),
            lockout_after,
        })
    }
}

impl OperatorEntryFile {
    /// The `i`th entry, checked against the operators before it.
    fn validate(self, i: usize, before: &[Account]) -> Result<Account, ConfigError> {
        let key = |field: &str| format!("operators[{i}].{field}");
        check_name(&key("name"), &self.name)?;
        if before.iter().any(|account| account.name == self.name) {
            let also = if self.name == LEGACY_NAME {
                " (the [operator] token signs in as \"operator\")"
            } else {
                ""
            };
            return Err(ConfigError::new(
                key("name"),
                format!("another operator is named {}{also}", self.name),
            ));
        }
        let role = Role::parse(&self.role)
            .ok_or_else(|| ConfigError::new(key("role"), "must be viewer, operator or admin"))?;
        let token = Secret::resolve(&self.token).map_err(|m| ConfigError::new(key("token"), m))?;
        check_token(&key("token"), &token)?;
        if let Some(other) = before.iter().find(|account| account.token == token) {
            return Err(ConfigError::new(
                key("token"),
                format!(
                    "the same token as operator {}: each operator needs their own",
                    other.name
                ),
            ));
        }
        Ok(Account::named(self.name, role, token))
    }
}

/// `[admin]`: the operator surface's own listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminSettings {
    /// Where `/admin`, `/console`, `/metrics` and `/openapi.json` are served (e.g.
    /// `127.0.0.1:9091`); the webhook listener then serves only webhooks and health.
    /// `None`: everything on the webhook listener.
    pub bind: Option<String>,
}

/// `[admin]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AdminFile {
    bind: Option<String>,
}

impl AdminFile {
    pub fn validate(self) -> AdminSettings {
        AdminSettings { bind: self.bind }
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
    /// The key session cookies are signed with; `None`: one generated once and stored
    /// in the database (`server_secrets`), so every instance shares it.
    pub session_secret: Option<Secret>,
}

/// `[console]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConsoleFile {
    enabled: Option<bool>,
    bind: Option<String>,
    secure_cookie: Option<bool>,
    session_ttl: Option<String>,
    session_secret: Option<String>,
}

impl ConsoleFile {
    /// The console needs an operator: a token is what signs in. On `admin.bind` when
    /// that is set (then not on a listener of its own as well).
    pub fn validate(
        self,
        operator: &OperatorSettings,
        admin: &AdminSettings,
    ) -> Result<ConsoleSettings, ConfigError> {
        let has_token = operator.any();
        if self.enabled == Some(true) && !has_token {
            return Err(ConfigError::new(
                "console.enabled",
                "the console signs in with an operator's token: configure operator.token or [[operators]]",
            ));
        }
        if self.bind.is_some() && admin.bind.is_some() {
            return Err(ConfigError::new(
                "console.bind",
                "the console is served on admin.bind: remove console.bind",
            ));
        }
        let session_secret = self
            .session_secret
            .as_deref()
            .map(|reference| {
                let secret = Secret::resolve(reference)
                    .map_err(|m| ConfigError::new("console.session_secret", m))?;
                if secret.expose().len() < 32 {
                    return Err(ConfigError::new(
                        "console.session_secret",
                        "too weak: at least 32 characters (e.g. openssl rand -hex 32)",
                    ));
                }
                Ok(secret)
            })
            .transpose()?;
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
            session_secret,
        })
    }
}
