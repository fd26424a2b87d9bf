//! `[database]`: where the database is and how connections behave.

use super::DatabaseTarget;
use crate::duration::span;
use crate::error::ConfigError;
use serde::Deserialize;
use std::time::Duration;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/inlet.db";
/// PostgreSQL's default pool size.
pub const DEFAULT_POOL_SIZE: u32 = 16;
/// SQLite's default pool size: it has one writer, and one connection keeps one page cache
/// warm (measured: more connections only contend for the write lock).
pub const DEFAULT_SQLITE_POOL_SIZE: u32 = 1;
pub const DEFAULT_CONNECT_TIMEOUT: &str = "5s";
pub const DEFAULT_BUSY_TIMEOUT: &str = "5s";
pub const DEFAULT_LOCK_TIMEOUT: &str = "5s";

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

    fn parse(text: Option<&str>) -> Result<Self, ConfigError> {
        match text {
            None | Some("normal") | Some("NORMAL") => Ok(Self::Normal),
            Some("full") | Some("FULL") => Ok(Self::Full),
            Some(other) => Err(ConfigError::new(
                "database.synchronous",
                format!("'{other}' is not one of normal, full"),
            )),
        }
    }
}

/// `[database]` as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DatabaseFile {
    url: Option<String>,
    pool_size: Option<u32>,
    connect_timeout: Option<String>,
    busy_timeout: Option<String>,
    lock_timeout: Option<String>,
    synchronous: Option<String>,
}

impl DatabaseFile {
    pub fn validate(self) -> Result<DatabaseSettings, ConfigError> {
        let url = self.url.as_deref().unwrap_or(DEFAULT_DATABASE_URL);
        let target = DatabaseTarget::parse(url).map_err(|m| ConfigError::new("database.url", m))?;
        let is_postgres = matches!(target, DatabaseTarget::Postgres(_));
        let pool_size = self.pool_size.unwrap_or(if is_postgres {
            DEFAULT_POOL_SIZE
        } else {
            DEFAULT_SQLITE_POOL_SIZE
        });
        if pool_size == 0 {
            return Err(ConfigError::new(
                "database.pool_size",
                "must be greater than 0",
            ));
        }
        if is_postgres && pool_size < 2 {
            return Err(ConfigError::new(
                "database.pool_size",
                "PostgreSQL needs at least 2 (the sweeper holds one for its lock while it sweeps)",
            ));
        }
        Ok(DatabaseSettings {
            target,
            pool_size,
            connect_timeout: span(
                "database.connect_timeout",
                self.connect_timeout.as_deref(),
                DEFAULT_CONNECT_TIMEOUT,
            )?,
            busy_timeout: span(
                "database.busy_timeout",
                self.busy_timeout.as_deref(),
                DEFAULT_BUSY_TIMEOUT,
            )?,
            lock_timeout: span(
                "database.lock_timeout",
                self.lock_timeout.as_deref(),
                DEFAULT_LOCK_TIMEOUT,
            )?,
            synchronous: SqliteSynchronous::parse(self.synchronous.as_deref())?,
        })
    }
}
