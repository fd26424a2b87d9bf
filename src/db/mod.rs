//! Storage: one connection type over SQLite and PostgreSQL, our own r2d2 manager that
//! picks the backend from the URL scheme, per-connection settings, migrations, and the
//! write transaction every ingest runs in.
//!
//! Portable queries take `&mut DbConnection`. The few statements whose SQL differs by
//! dialect (the claim upserts, `SKIP LOCKED` leasing) use [`dialect!`] and live next to
//! the model that owns them — nowhere else.

pub mod arrays;
pub mod schema;

mod settings;

mod checkpoint;
mod error;
mod locks;
mod migrations;
mod pooler;
mod target;

pub use checkpoint::Checkpointer;
pub use error::{CommitInDoubt, StoreError};
pub use locks::AdvisoryLock;
pub use migrations::{pending_migrations, run_migrations};
pub use pooler::{check_pooler, PoolerError};
pub use target::DatabaseTarget;

use crate::faults::LostCommit;
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;
use diesel::Connection;
pub use settings::{
    DatabaseFile, DatabaseSettings, Pooler, SqliteSynchronous, DEFAULT_POOL_SIZE,
    DEFAULT_SQLITE_POOL_SIZE,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A connection to either backend.
#[derive(diesel::MultiConnection)]
pub enum DbConnection {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

/// Runs `$body` with `$c` bound to the backend's own connection type, for the few
/// statements diesel cannot express on the multi-backend (`ON CONFLICT`, `SKIP LOCKED`).
macro_rules! dialect {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            $crate::db::DbConnection::Postgres($c) => $body,
            $crate::db::DbConnection::Sqlite($c) => $body,
        }
    };
}
pub(crate) use dialect;

/// PostgreSQL: this transaction runs at READ COMMITTED whatever the server's or role's
/// default isolation, so each statement sees what committed before it — for the steps
/// that lock a row and then read what its holder wrote. Must be a transaction's first
/// statement. SQLite's transactions are serializable anyway.
pub fn read_committed(conn: &mut DbConnection) -> diesel::QueryResult<()> {
    if let DbConnection::Postgres(c) = conn {
        diesel::RunQueryDsl::execute(
            diesel::sql_query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            c,
        )?;
    }
    Ok(())
}

pub type DbPool = r2d2::Pool<ConnectionManager>;
pub type PooledConnection = r2d2::PooledConnection<ConnectionManager>;

/// Opens connections for r2d2 and applies the per-connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionManager {
    target: DatabaseTarget,
    settings: DatabaseSettings,
}

/// A connection that could not be opened or configured.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConnectError(String);

impl ConnectionManager {
    pub fn new(settings: &DatabaseSettings) -> Self {
        Self {
            target: settings.target.clone(),
            settings: settings.clone(),
        }
    }

    fn connect_sqlite(&self, path: &std::path::Path) -> Result<DbConnection, ConnectError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                ConnectError(format!("cannot create directory {}: {e}", parent.display()))
            })?;
        }
        let path_text = path
            .to_str()
            .ok_or_else(|| ConnectError(format!("{} is not valid UTF-8", path.display())))?;
        let mut conn = SqliteConnection::establish(path_text)
            .map_err(|e| ConnectError(format!("cannot open {path_text}: {e}")))?;
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {}; PRAGMA synchronous = {}; PRAGMA foreign_keys = ON; \
             PRAGMA mmap_size = 268435456; PRAGMA wal_autocheckpoint = {};",
            self.settings.busy_timeout.as_millis(),
            self.settings.synchronous.pragma_value(),
            checkpoint::SAFETY_NET_PAGES,
        ))
        .map_err(|e| ConnectError(format!("cannot configure {path_text}: {e}")))?;
        Ok(DbConnection::Sqlite(conn))
    }

    fn connect_postgres(&self, url: &str) -> Result<DbConnection, ConnectError> {
        let url = with_connect_timeout(url, self.settings.connect_timeout);
        let mut conn = PgConnection::establish(&url).map_err(|e| ConnectError(e.to_string()))?;
        match self.settings.pooler {
            // The session is ours: set once, cache statements on the server.
            Pooler::None => conn
                .batch_execute(&format!(
                    "SET lock_timeout = '{}ms'",
                    self.settings.lock_timeout.as_millis()
                ))
                .map_err(|e| ConnectError(format!("cannot configure the session: {e}")))?,
            // The next transaction may run on another server connection, where a named
            // prepared statement does not exist or — worse — names another statement:
            // every statement goes unnamed (parse, bind and execute in one round).
            Pooler::Transaction => {
                conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled)
            }
        }
        Ok(DbConnection::Postgres(conn))
    }
}

/// Adds libpq's `connect_timeout` unless the URL sets one, so an unreachable server fails
/// within the configured time instead of the operating system's TCP timeout; and TCP
/// keepalives, so a connection to a server that vanished without a reset (a host gone, a
/// network cut) fails within about 20 s instead of the kernel's retransmission timeout of
/// about 15 minutes — during which a writer thread would wait on it.
fn with_connect_timeout(url: &str, timeout: Duration) -> String {
    // libpq treats values below 2 seconds as 2.
    let seconds = timeout.as_secs().max(2).to_string();
    let defaults = [
        ("connect_timeout", seconds.as_str()),
        ("keepalives_idle", "10"),
        ("keepalives_interval", "3"),
        ("keepalives_count", "3"),
    ];
    let mut url = url.to_owned();
    for (key, value) in defaults {
        if url.contains(&format!("{key}=")) {
            continue;
        }
        let separator = if url.contains('?') { '&' } else { '?' };
        url = format!("{url}{separator}{key}={value}");
    }
    url
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = DbConnection;
    type Error = ConnectError;

    fn connect(&self) -> Result<DbConnection, ConnectError> {
        match &self.target {
            DatabaseTarget::Sqlite(path) => self.connect_sqlite(path),
            DatabaseTarget::Postgres(url) => self.connect_postgres(url),
        }
    }

    fn is_valid(&self, conn: &mut DbConnection) -> Result<(), ConnectError> {
        conn.batch_execute("SELECT 1")
            .map_err(|e| ConnectError(e.to_string()))
    }

    fn has_broken(&self, conn: &mut DbConnection) -> bool {
        // An open or failed transaction (a panic mid-transaction, a failed rollback) makes
        // the connection unusable: dropping it lets the server roll back.
        <DbConnection as Connection>::TransactionManager::is_broken_transaction_manager(conn)
    }
}

#[derive(Debug)]
struct LogConnectErrors;

impl r2d2::HandleError<ConnectError> for LogConnectErrors {
    fn handle_error(&self, error: ConnectError) {
        tracing::warn!(%error, "database connection failed");
    }
}

/// Builds the pool. Connections are opened lazily beyond the first, so a database that is
/// briefly away at startup is reported once, clearly.
pub fn build_pool(settings: &DatabaseSettings) -> Result<DbPool, r2d2::Error> {
    let busy_ms = u64::try_from(settings.busy_timeout.as_millis()).unwrap_or(u64::MAX);
    SQLITE_WRITER_WAIT_MS.fetch_max(busy_ms, Ordering::Relaxed);
    if settings.pooler == Pooler::Transaction {
        // Stored plus one: 0 stays "no pool is pooled", a lock_timeout of 0 stays 0.
        let lock_ms = u64::try_from(settings.lock_timeout.as_millis()).unwrap_or(u64::MAX - 1);
        POOLED_LOCK_TIMEOUT_MS.fetch_max(lock_ms.saturating_add(1), Ordering::Relaxed);
    }
    r2d2::Pool::builder()
        .max_size(settings.pool_size)
        .min_idle(Some(1))
        .connection_timeout(settings.connect_timeout)
        // A PostgreSQL connection can die with the server or the network: check it before
        // handing it out (a round trip, about 13 % of peak throughput, worth a clean
        // recovery). A SQLite file cannot go away like that.
        .test_on_check_out(matches!(settings.target, DatabaseTarget::Postgres(_)))
        .error_handler(Box::new(LogConnectErrors))
        .build(ConnectionManager::new(settings))
}

/// SQLite has one writer at a time. Left to themselves, waiting writers poll the file lock
/// with growing sleeps (SQLite's busy handler), so a writer that commits and begins again
/// at once — the sweeper's batches, a burst of webhooks — can starve the others. Inlet's
/// own writers therefore queue here first, and each hands the lock straight to the next
/// (`unlock_fair`); `busy_timeout` still governs waiting on other processes. One gate per
/// process: an Inlet process has one database.
static SQLITE_WRITERS: parking_lot::Mutex<()> = parking_lot::const_mutex(());
/// How long a writer waits at the gate: the largest configured `busy_timeout`, in ms.
static SQLITE_WRITER_WAIT_MS: AtomicU64 = AtomicU64::new(5_000);

/// Behind a transaction pooler no session setting survives: every write transaction
/// sets `lock_timeout` itself — the largest configured, in ms, plus one; 0 while no pool
/// is pooled. One per process, like the SQLite gate: an Inlet process has one database.
static POOLED_LOCK_TIMEOUT_MS: AtomicU64 = AtomicU64::new(0);

/// A writer's turn at the SQLite gate, handed to the next waiter when dropped.
struct FairTurn(Option<parking_lot::MutexGuard<'static, ()>>);

impl Drop for FairTurn {
    fn drop(&mut self) {
        if let Some(turn) = self.0.take() {
            parking_lot::MutexGuard::unlock_fair(turn);
        }
    }
}

/// Runs `work` on a pooled connection on a blocking thread, never on the async executor:
/// the one way request handlers and background tasks reach the database.
pub async fn on_connection<T, E>(
    pool: &DbPool,
    work: impl FnOnce(&mut DbConnection) -> Result<T, E> + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<r2d2::Error> + From<tokio::task::JoinError> + Send + 'static,
{
    let pool = pool.clone();
    tokio::task::spawn_blocking(move || work(&mut *pool.get()?)).await?
}

/// Runs `work` in one write transaction: `BEGIN IMMEDIATE` on SQLite (take the write lock
/// up front, after the in-process writer queue, so no transaction has to upgrade a read
/// lock and fail), `BEGIN` (read committed) on PostgreSQL. Commits when `work` succeeds,
/// rolls back otherwise. A COMMIT whose outcome is unknown — the connection failed while
/// it was in flight — is [`CommitInDoubt`], never a success.
pub fn write_transaction<T, E>(
    conn: &mut DbConnection,
    work: impl FnOnce(&mut DbConnection) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<diesel::result::Error> + From<CommitInDoubt>,
{
    write_transaction_losing(conn, None, work)
}

/// [`write_transaction`], with its COMMIT lost as `lost` says (fault injection: `None`
/// outside tests).
pub fn write_transaction_losing<T, E>(
    conn: &mut DbConnection,
    lost: Option<LostCommit>,
    work: impl FnOnce(&mut DbConnection) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<diesel::result::Error> + From<CommitInDoubt>,
{
    let _turn = begin_write(conn)?;
    match work(conn) {
        Ok(value) => {
            commit::<E>(conn, lost)?;
            Ok(value)
        }
        Err(error) => {
            rollback(conn);
            Err(error)
        }
    }
}

/// `BEGIN IMMEDIATE` after the process's SQLite writer queue, or PostgreSQL's `BEGIN`.
fn begin_write(conn: &mut DbConnection) -> diesel::QueryResult<FairTurn> {
    match conn {
        DbConnection::Sqlite(c) => {
            let wait = Duration::from_millis(SQLITE_WRITER_WAIT_MS.load(Ordering::Relaxed));
            let Some(turn) = SQLITE_WRITERS.try_lock_for(wait) else {
                return Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::Unknown,
                    Box::new(format!(
                        "database is locked: no write turn within {}ms",
                        wait.as_millis()
                    )),
                ));
            };
            AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")?;
            Ok(FairTurn(Some(turn)))
        }
        DbConnection::Postgres(c) => {
            match POOLED_LOCK_TIMEOUT_MS.load(Ordering::Relaxed) {
                0 => AnsiTransactionManager::begin_transaction(c)?,
                // One round trip, as a plain BEGIN.
                stored => AnsiTransactionManager::begin_transaction_sql(
                    c,
                    &format!("BEGIN; SET LOCAL lock_timeout = '{}ms'", stored - 1),
                )?,
            }
            Ok(FairTurn(None))
        }
    }
}

/// Commits, telling a refused COMMIT (nothing was committed) from one whose answer never
/// came (it may have been).
fn commit<E>(conn: &mut DbConnection, lost: Option<LostCommit>) -> Result<(), E>
where
    E: From<diesel::result::Error> + From<CommitInDoubt>,
{
    type Manager = <DbConnection as Connection>::TransactionManager;
    let outcome = match lost {
        Some(LostCommit::BeforeCommit) => {
            rollback(conn);
            Err("injected: the connection was lost before COMMIT".to_owned())
        }
        Some(LostCommit::AfterCommit) => match Manager::commit_transaction(conn) {
            Ok(()) => Err("injected: the connection was lost after COMMIT".to_owned()),
            Err(error) => return Err(error.into()),
        },
        None => match Manager::commit_transaction(conn) {
            Ok(()) => Ok(()),
            Err(error) if refused_commit(&error, matches!(conn, DbConnection::Sqlite(_))) => {
                return Err(error.into())
            }
            Err(error) => Err(format!(
                "the connection failed while COMMIT was in flight, so whether it committed is \
                 unknown: {error}"
            )),
        },
    };
    outcome.map_err(|doubt| {
        metrics::counter!("inlet_db_commits_in_doubt_total").increment(1);
        CommitInDoubt(doubt).into()
    })
}

/// Whether a failed COMMIT is the database's refusal — a constraint checked at commit, a
/// serialization failure, SQLite's busy lock — after which nothing was committed. Anything
/// else (a closed connection, a terminated backend, an error with no class) may have come
/// after the commit landed.
fn refused_commit(error: &diesel::result::Error, sqlite: bool) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    match error {
        Error::DatabaseError(
            Kind::UniqueViolation
            | Kind::ForeignKeyViolation
            | Kind::NotNullViolation
            | Kind::CheckViolation
            | Kind::SerializationFailure
            | Kind::ReadOnlyTransaction,
            _,
        ) => true,
        Error::DatabaseError(_, info) if sqlite => {
            info.message().contains("database is locked") || info.message().contains("busy")
        }
        _ => false,
    }
}

fn rollback(conn: &mut DbConnection) {
    if let Err(rollback) =
        <DbConnection as Connection>::TransactionManager::rollback_transaction(conn)
    {
        // The connection is now marked broken and the pool discards it, which rolls the
        // transaction back on the server.
        tracing::warn!(error = %rollback, "rollback failed");
    }
}

/// PostgreSQL: for the rest of the current transaction, wait at most `wait` on a row lock
/// (a concurrent claim of the same key) instead of `database.lock_timeout`. SQLite has no
/// row locks: nothing to do.
pub fn set_local_lock_timeout(conn: &mut DbConnection, wait: Duration) -> diesel::QueryResult<()> {
    match conn {
        DbConnection::Postgres(c) => c.batch_execute(&format!(
            "SET LOCAL lock_timeout = '{}ms'",
            wait.as_millis()
        )),
        DbConnection::Sqlite(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_timeout_and_keepalives_are_added_once() {
        let d = Duration::from_secs(5);
        let keepalives = "keepalives_idle=10&keepalives_interval=3&keepalives_count=3";
        assert_eq!(
            with_connect_timeout("postgres://h/db", d),
            format!("postgres://h/db?connect_timeout=5&{keepalives}")
        );
        assert_eq!(
            with_connect_timeout("postgres://h/db?sslmode=disable", d),
            format!("postgres://h/db?sslmode=disable&connect_timeout=5&{keepalives}")
        );
        assert_eq!(
            with_connect_timeout(
                "postgres://h/db?connect_timeout=9&keepalives_idle=60&keepalives_interval=3&keepalives_count=3",
                d
            ),
            "postgres://h/db?connect_timeout=9&keepalives_idle=60&keepalives_interval=3&keepalives_count=3"
        );
    }

    use diesel::result::{DatabaseErrorKind as Kind, Error};

    fn error(kind: Kind, message: &str) -> Error {
        Error::DatabaseError(kind, Box::new(message.to_owned()))
    }

    #[test]
    fn a_commit_the_database_refused_is_not_in_doubt() {
        for kind in [
            Kind::UniqueViolation,
            Kind::ForeignKeyViolation,
            Kind::SerializationFailure,
            Kind::ReadOnlyTransaction,
        ] {
            assert!(refused_commit(&error(kind, "refused"), false));
        }
        assert!(refused_commit(
            &error(Kind::Unknown, "database is locked"),
            true
        ));
    }

    #[test]
    fn a_commit_whose_connection_failed_is_in_doubt() {
        for (kind, message) in [
            (
                Kind::ClosedConnection,
                "server closed the connection unexpectedly",
            ),
            (
                Kind::Unknown,
                "terminating connection due to administrator command",
            ),
            (Kind::Unknown, "SSL SYSCALL error: EOF detected"),
            // Only SQLite's lock messages are refusals; the same words from PostgreSQL
            // or a pooler prove nothing.
            (Kind::Unknown, "database is locked"),
        ] {
            assert!(!refused_commit(&error(kind, message), false), "{message}");
        }
        assert!(!refused_commit(&Error::BrokenTransactionManager, false));
    }
}
