//! The inbox on diesel 2 (PostgreSQL and SQLite, plain connections or r2d2's pooled ones).
//!
//! ```ignore
//! let claim = inlet_inbox::diesel::process(&mut conn, "payments", &delivery, |tx, delivery| {
//!     record_payment(tx, delivery) // the handler's writes, in the claim's transaction
//! })?; // committed here: answer 2xx now
//! ```

use crate::table::sqlite_time;
use crate::{check_names, Claim, Dialect, Error, Force, Verified};
use chrono::{DateTime, Utc};
use diesel::connection::{Connection, SimpleConnection, TransactionManager};
use diesel::result::Error as DieselError;
use diesel::sql_types::{Text, Timestamptz};
use diesel::{PgConnection, RunQueryDsl, SqliteConnection};
use std::time::Duration;

/// A connection the inbox works on: PostgreSQL's and SQLite's (a pooled connection derefs
/// to one). Each knows its placeholders and how its inbox transaction begins.
pub trait InboxConnection: Connection + SimpleConnection + Sized {
    /// Which DDL and statements apply.
    const DIALECT: Dialect;
    #[doc(hidden)]
    fn insert_claim(&mut self, consumer: &str, message_id: &str) -> Result<usize, DieselError>;
    #[doc(hidden)]
    fn delete_claim(&mut self, consumer: &str, message_id: &str) -> Result<usize, DieselError>;
    #[doc(hidden)]
    fn delete_before(&mut self, cutoff: DateTime<Utc>) -> Result<usize, DieselError>;
    /// Runs `work` in a transaction that holds the inbox's lock from its first statement:
    /// PostgreSQL's `BEGIN` (the key is locked by the insert), SQLite's `BEGIN IMMEDIATE`
    /// (a deferred transaction that read first would fail "database is locked" when a
    /// concurrent copy commits).
    fn inbox_transaction<T, E, F>(&mut self, work: F) -> Result<T, E>
    where
        F: FnOnce(&mut Self) -> Result<T, E>,
        E: From<DieselError>;
}

macro_rules! inbox_connection {
    ($connection:ty, $dialect:expr, $claim:literal, $unclaim:literal, $purge:literal,
     $cutoff_type:ty, $cutoff:expr, $begin:ident) => {
        impl InboxConnection for $connection {
            const DIALECT: Dialect = $dialect;

            fn insert_claim(
                &mut self,
                consumer: &str,
                message_id: &str,
            ) -> Result<usize, DieselError> {
                diesel::sql_query($claim)
                    .bind::<Text, _>(consumer)
                    .bind::<Text, _>(message_id)
                    .execute(self)
            }

            fn delete_claim(
                &mut self,
                consumer: &str,
                message_id: &str,
            ) -> Result<usize, DieselError> {
                diesel::sql_query($unclaim)
                    .bind::<Text, _>(consumer)
                    .bind::<Text, _>(message_id)
                    .execute(self)
            }

            fn delete_before(&mut self, cutoff: DateTime<Utc>) -> Result<usize, DieselError> {
                let cutoff = $cutoff(cutoff);
                diesel::sql_query($purge)
                    .bind::<$cutoff_type, _>(cutoff)
                    .execute(self)
            }

            fn inbox_transaction<T, E, F>(&mut self, work: F) -> Result<T, E>
            where
                F: FnOnce(&mut Self) -> Result<T, E>,
                E: From<DieselError>,
            {
                self.$begin(work)
            }
        }
    };
}

inbox_connection!(
    PgConnection,
    Dialect::Postgres,
    "INSERT INTO inlet_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    "DELETE FROM inlet_inbox WHERE consumer = $1 AND message_id = $2",
    "DELETE FROM inlet_inbox WHERE claimed_at < $1",
    Timestamptz,
    |cutoff: DateTime<Utc>| cutoff,
    transaction
);

inbox_connection!(
    SqliteConnection,
    Dialect::Sqlite,
    "INSERT INTO inlet_inbox (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
    "DELETE FROM inlet_inbox WHERE consumer = ? AND message_id = ?",
    "DELETE FROM inlet_inbox WHERE claimed_at < ?",
    Text,
    sqlite_time,
    immediate_transaction
);

/// Creates the inbox table and its purge index when missing (or put [`crate::ddl`] in your
/// migrations).
pub fn create_table<C: InboxConnection>(conn: &mut C) -> Result<(), Error> {
    for statement in crate::ddl(C::DIALECT) {
        conn.batch_execute(statement).map_err(Error::Diesel)?;
    }
    Ok(())
}

/// Claims `message_id` for `consumer` inside the caller's open transaction and commits
/// nothing: the caller commits the claim with the handler's writes. Refuses a connection
/// outside a transaction ([`Error::NotInTransaction`]). [`Force::Rerun`] deletes the row
/// first, in the same transaction, and claims it again.
pub fn claim<C: InboxConnection>(
    conn: &mut C,
    consumer: &str,
    message_id: &str,
    force: Force,
) -> Result<Claim, Error> {
    check_names(consumer, message_id)?;
    if !in_transaction(conn)? {
        return Err(Error::NotInTransaction);
    }
    if force == Force::Rerun {
        conn.delete_claim(consumer, message_id)
            .map_err(Error::Diesel)?;
    }
    match conn
        .insert_claim(consumer, message_id)
        .map_err(Error::Diesel)?
    {
        0 => Ok(Claim::Duplicate),
        _ => Ok(Claim::New),
    }
}

/// The whole exactly-once step: in one transaction, claim the delivery and, when it is
/// new, run `handler` with the same connection; the transaction commits when both succeed
/// and rolls back (claim included) when either fails, so the next copy runs the handler
/// again. Returns only after the commit: answer `2xx` after it, `5xx` on an error. It
/// begins the transaction itself, so it refuses a connection already inside one
/// ([`Error::AlreadyInTransaction`]): there its "commit" would be a savepoint's release,
/// before the real commit. Inside a transaction of your own, use [`claim`].
pub fn process<C, E, F>(
    conn: &mut C,
    consumer: &str,
    delivery: &Verified,
    force: Force,
    handler: F,
) -> Result<Claim, E>
where
    C: InboxConnection,
    F: FnOnce(&mut C, &Verified) -> Result<(), E>,
    E: From<Error>,
{
    if in_transaction(conn).map_err(E::from)? {
        return Err(E::from(Error::AlreadyInTransaction));
    }
    let outcome = conn.inbox_transaction(|tx| {
        let claimed = claim(tx, consumer, delivery.message_id(), force).map_err(Rollback::Inbox)?;
        if claimed == Claim::New {
            handler(tx, delivery).map_err(Rollback::Handler)?;
        }
        Ok(claimed)
    });
    outcome.map_err(|rollback| match rollback {
        Rollback::Inbox(error) => E::from(error),
        Rollback::Handler(error) => error,
    })
}

/// Whether the connection is inside a transaction.
fn in_transaction<C: InboxConnection>(conn: &mut C) -> Result<bool, Error> {
    let depth = C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()
        .map_err(Error::Diesel)?;
    Ok(depth.is_some())
}

/// Why a [`process`] transaction rolled back.
enum Rollback<E> {
    Inbox(Error),
    Handler(E),
}

impl<E> From<DieselError> for Rollback<E> {
    fn from(error: DieselError) -> Self {
        Rollback::Inbox(Error::Diesel(error))
    }
}

/// Deletes the rows claimed more than `older_than` before `now` (use
/// [`crate::DEFAULT_PURGE_WINDOW`], longer than Inlet's `retention.events`), in whatever
/// transaction the connection is in; returns how many.
pub fn purge<C: InboxConnection>(
    conn: &mut C,
    older_than: Duration,
    now: DateTime<Utc>,
) -> Result<usize, Error> {
    let cutoff = crate::purge_cutoff(older_than, now)?;
    conn.delete_before(cutoff).map_err(Error::Diesel)
}

/// SQLite opened as the inbox wants it, for an r2d2 pool
/// (`Pool::builder().connection_customizer(Box::new(SqliteSetup::default()))`): WAL, so
/// readers never wait for the writer, and a busy timeout, so a copy racing the first
/// attempt waits for its commit (then is a `Duplicate`) instead of failing "database is
/// locked".
#[derive(Debug, Clone, Copy)]
pub struct SqliteSetup {
    pub busy_timeout: Duration,
}

impl Default for SqliteSetup {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(10),
        }
    }
}

impl diesel::r2d2::CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqliteSetup {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        // The timeout first: pool connections opening at once on a fresh file contend for
        // the switch to WAL.
        let pragmas = format!(
            "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL;",
            self.busy_timeout.as_millis()
        );
        conn.batch_execute(&pragmas)
            .map_err(diesel::r2d2::Error::QueryError)
    }
}
