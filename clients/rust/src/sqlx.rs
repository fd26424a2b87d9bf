//! The inbox on sqlx 0.9 (PostgreSQL and SQLite), async.
//!
//! ```ignore
//! let claim = inlet_inbox::sqlx::process(&pool, "payments", &delivery, Force::No, |tx, delivery| {
//!     Box::pin(record_payment(tx, delivery)) // the handler's writes, in the claim's transaction
//! })
//! .await?; // committed here: answer 2xx now
//! ```

use crate::table::sqlite_time;
use crate::{check_names, Claim, Dialect, Error, Force, Verified};
use chrono::{DateTime, Utc};
use sqlx::{Connection, Database, Pool, Postgres, Sqlite};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A handler's future, borrowing the transaction's connection (sqlx's own idiom).
pub type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// A database the inbox works on: PostgreSQL and SQLite. Each knows its statements and
/// how its inbox transaction begins.
pub trait InboxDatabase: Database {
    /// Which DDL and statements apply.
    const DIALECT: Dialect;
    /// How a [`process`] transaction begins: PostgreSQL's `BEGIN` (the insert locks the
    /// key), SQLite's `BEGIN IMMEDIATE` (its write lock from the first statement).
    const BEGIN: &'static str;
    #[doc(hidden)]
    fn run<'c>(
        conn: &'c mut Self::Connection,
        statement: Statement,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'c;
}

/// The inbox's statements, with their parameters.
#[doc(hidden)]
pub enum Statement {
    Ddl(&'static str),
    Claim(String, String),
    Unclaim(String, String),
    Purge(DateTime<Utc>),
}

macro_rules! inbox_database {
    ($database:ty, $dialect:expr, $begin:literal, $claim:literal, $unclaim:literal,
     $purge:literal, $cutoff:expr) => {
        impl InboxDatabase for $database {
            const DIALECT: Dialect = $dialect;
            const BEGIN: &'static str = $begin;

            async fn run(
                conn: &mut Self::Connection,
                statement: Statement,
            ) -> Result<u64, sqlx::Error> {
                let query = match statement {
                    Statement::Ddl(sql) => sqlx::query(sql),
                    Statement::Claim(consumer, id) => sqlx::query($claim).bind(consumer).bind(id),
                    Statement::Unclaim(consumer, id) => {
                        sqlx::query($unclaim).bind(consumer).bind(id)
                    }
                    Statement::Purge(cutoff) => sqlx::query($purge).bind($cutoff(cutoff)),
                };
                Ok(query.execute(conn).await?.rows_affected())
            }
        }
    };
}

inbox_database!(
    Postgres,
    Dialect::Postgres,
    "BEGIN",
    "INSERT INTO inlet_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    "DELETE FROM inlet_inbox WHERE consumer = $1 AND message_id = $2",
    "DELETE FROM inlet_inbox WHERE claimed_at < $1",
    |cutoff: DateTime<Utc>| cutoff
);

inbox_database!(
    Sqlite,
    Dialect::Sqlite,
    "BEGIN IMMEDIATE",
    "INSERT INTO inlet_inbox (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
    "DELETE FROM inlet_inbox WHERE consumer = ? AND message_id = ?",
    "DELETE FROM inlet_inbox WHERE claimed_at < ?",
    sqlite_time
);

/// Creates the inbox table and its purge index when missing (or put [`crate::ddl`] in your
/// migrations).
pub async fn create_table<DB: InboxDatabase>(conn: &mut DB::Connection) -> Result<(), Error> {
    for statement in crate::ddl(DB::DIALECT) {
        DB::run(conn, Statement::Ddl(statement))
            .await
            .map_err(Error::Sqlx)?;
    }
    Ok(())
}

/// Claims `message_id` for `consumer` inside the caller's open transaction (`&mut *tx`)
/// and commits nothing: the caller commits the claim with the handler's writes. Refuses a
/// connection outside a transaction. [`Force::Rerun`] deletes the row first, in the same
/// transaction, and claims it again.
pub async fn claim<DB: InboxDatabase>(
    conn: &mut DB::Connection,
    consumer: &str,
    message_id: &str,
    force: Force,
) -> Result<Claim, Error> {
    check_names(consumer, message_id)?;
    if !conn.is_in_transaction() {
        return Err(Error::NotInTransaction);
    }
    let key = || (consumer.to_owned(), message_id.to_owned());
    if force == Force::Rerun {
        let (consumer, id) = key();
        DB::run(conn, Statement::Unclaim(consumer, id))
            .await
            .map_err(Error::Sqlx)?;
    }
    let (consumer, id) = key();
    match DB::run(conn, Statement::Claim(consumer, id))
        .await
        .map_err(Error::Sqlx)?
    {
        0 => Ok(Claim::Duplicate),
        _ => Ok(Claim::New),
    }
}

/// The whole exactly-once step: begins a transaction on `pool`, claims the delivery and,
/// when it is new, runs `handler` on the transaction's connection; commits when both
/// succeed, rolls back (claim included) when either fails. Returns only after the commit:
/// answer `2xx` after it, `5xx` on an error.
pub async fn process<DB, E, F>(
    pool: &Pool<DB>,
    consumer: &str,
    delivery: &Verified,
    force: Force,
    handler: F,
) -> Result<Claim, E>
where
    DB: InboxDatabase,
    F: for<'c> FnOnce(&'c mut DB::Connection, &'c Verified) -> BoxFuture<'c, Result<(), E>>,
    E: From<Error>,
{
    let mut tx = pool.begin_with(DB::BEGIN).await.map_err(Error::Sqlx)?;
    let claimed = claim::<DB>(&mut tx, consumer, delivery.message_id(), force).await?;
    if claimed == Claim::New {
        handler(&mut tx, delivery).await?;
    }
    tx.commit().await.map_err(Error::Sqlx)?;
    Ok(claimed)
}

/// Deletes the rows claimed more than `older_than` before `now` (use
/// [`crate::DEFAULT_PURGE_WINDOW`], longer than Inlet's `retention.events`); returns how
/// many.
pub async fn purge<DB: InboxDatabase>(
    conn: &mut DB::Connection,
    older_than: Duration,
    now: DateTime<Utc>,
) -> Result<u64, Error> {
    let cutoff = crate::purge_cutoff(older_than, now)?;
    DB::run(conn, Statement::Purge(cutoff))
        .await
        .map_err(Error::Sqlx)
}
