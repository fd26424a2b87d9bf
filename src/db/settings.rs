//! `[database]`: where the database is and how connections behave.

use super::target::DatabaseTarget;
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
/// PostgreSQL's default number of group-commit writers: while one group's commit waits
/// for its WAL flush, the next group is being written (measured, see
/// docs/src/internals/group-commit.md).
pub const DEFAULT_POSTGRES_WRITERS: u32 = 2;
/// The most webhooks one group commits together.
pub const DEFAULT_MAX_GROUP: u32 = 256;
/// The largest group allowed: its multi-row statements stay well inside both databases'
/// limits on bound parameters.
pub const MAX_GROUP_LIMIT: u32 = 1000;

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
    /// SQLite `synchronous` pragma: `full` (default) or `normal`.
    pub synchronous: SqliteSynchronous,
    /// Group-commit writer loops: one on SQLite (it has one writer), a few on PostgreSQL.
    pub writers: u32,
    /// The most webhooks one group commits in one transaction.
    pub max_group: u32,
    /// What sits between Inlet and PostgreSQL (`database.pooler`).
    pub pooler: Pooler,
}

/// `database.pooler`: whether a connection pooler between Inlet and PostgreSQL hands one
/// server connection to many clients between transactions (PgBouncer's `pool_mode =
/// transaction`). Then nothing may outlive a transaction on the server: no session
/// settings, no named prepared statements, no session locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooler {
    /// PostgreSQL itself, or a pooler that keeps a server connection per client session.
    None,
    /// A transaction-pooling pooler: statements are not cached on the server, and
    /// `lock_timeout` is set in every write transaction instead of once per session.
    Transaction,
}

impl Pooler {
    fn parse(text: Option<&str>, is_postgres: bool) -> Result<Self, ConfigError> {
        let key = "database.pooler";
        match text {
            None | Some("none") => Ok(Self::None),
            Some("transaction") if is_postgres => Ok(Self::Transaction),
            Some("transaction") => Err(ConfigError::new(
                key,
                "only PostgreSQL is reached through a pooler: leave it unset for SQLite",
            )),
            Some(other) => Err(ConfigError::new(
                key,
                format!("'{other}' is not one of none, transaction"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Transaction => "transaction",
        }
    }
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
            None | Some("full") | Some("FULL") => Ok(Self::Full),
            Some("normal") | Some("NORMAL") => Ok(Self::Normal),
            Some(other) => Err(ConfigError::new(
                "database.synchronous",
                format!("'{other}' is not one of full, normal"),
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
    writers: Option<u32>,
    max_group: Option<u32>,
    pooler: Option<String>,
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
                "PostgreSQL needs at least 2 (a writer, and one for readiness, delivery and the sweeper)",
            ));
        }
        let writers = writers(self.writers, is_postgres, pool_size)?;
        let max_group = self.max_group.unwrap_or(DEFAULT_MAX_GROUP);
        if !(1..=MAX_GROUP_LIMIT).contains(&max_group) {
            return Err(ConfigError::new(
                "database.max_group",
                format!("must be between 1 and {MAX_GROUP_LIMIT}"),
            ));
        }
        Ok(DatabaseSettings {
            target,
            pool_size,
            writers,
            max_group,
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
            pooler: Pooler::parse(self.pooler.as_deref(), is_postgres)?,
        })
    }
}

/// `database.writers`: one on SQLite, which has one writer; on PostgreSQL at least one and
/// fewer than the pool, so readiness, the dispatcher and the sweeper still get connections.
fn writers(configured: Option<u32>, is_postgres: bool, pool_size: u32) -> Result<u32, ConfigError> {
    let key = "database.writers";
    match (configured, is_postgres) {
        (None, false) | (Some(1), false) => Ok(1),
        (Some(_), false) => Err(ConfigError::new(
            key,
            "SQLite has one writer: leave it unset or write 1",
        )),
        (Some(0), true) => Err(ConfigError::new(key, "must be at least 1")),
        (None, true) => Ok(DEFAULT_POSTGRES_WRITERS.min(pool_size - 1).max(1)),
        (Some(writers), true) => {
            if writers >= pool_size {
                return Err(ConfigError::new(
                    key,
                    format!("{writers} writers need a database.pool_size above {writers} (it is {pool_size})"),
                ));
            }
            Ok(writers)
        }
    }
}
