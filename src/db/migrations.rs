//! Embedded per-backend migrations (`migrations/sqlite`, `migrations/postgres`, same names
//! and order), run by `inlet migrate` and at `inlet serve` start.

use super::{AdvisoryLock, DbConnection};
use diesel::connection::SimpleConnection;
use diesel::Connection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

const SQLITE: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// Applies every pending migration; returns the versions applied.
pub fn run_migrations(conn: &mut DbConnection) -> anyhow::Result<Vec<String>> {
    let applied = match conn {
        DbConnection::Sqlite(c) => {
            // WAL lets readers proceed while one writer commits; it persists in the file.
            c.batch_execute("PRAGMA journal_mode = WAL")?;
            c.run_pending_migrations(SQLITE)
                .map(|versions| versions.iter().map(ToString::to_string).collect())
                .map_err(|e| anyhow::anyhow!("SQLite migration failed: {e}"))?
        }
        DbConnection::Postgres(c) => {
            // Instances sharing one database migrate one at a time, all migrations in
            // one transaction that holds the lock (each migration a savepoint in it).
            c.transaction::<_, anyhow::Error, _>(|c| {
                AdvisoryLock::Migrations.wait_in_transaction(c)?;
                c.run_pending_migrations(POSTGRES)
                    .map(|versions| versions.iter().map(ToString::to_string).collect())
                    .map_err(|e| anyhow::anyhow!("PostgreSQL migration failed: {e}"))
            })?
        }
    };
    Ok(applied)
}

/// How many migrations this binary knows that the database has not applied.
pub fn pending_migrations(conn: &mut DbConnection) -> anyhow::Result<usize> {
    let pending = match conn {
        DbConnection::Sqlite(c) => c.pending_migrations(SQLITE).map(|p| p.len()),
        DbConnection::Postgres(c) => c.pending_migrations(POSTGRES).map(|p| p.len()),
    };
    pending.map_err(|e| anyhow::anyhow!("cannot read the migration table: {e}"))
}
