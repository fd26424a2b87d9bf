//! PostgreSQL session advisory locks, one key per job that only one Inlet instance may do
//! at a time: applying migrations and sweeping. SQLite needs none: its write lock already
//! serializes writers across processes.

use super::{DbConnection, DbPool, PooledConnection};
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::prelude::*;

/// The jobs, each with its own lock key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryLock {
    Migrations,
    Sweep,
}

impl AdvisoryLock {
    fn key(self) -> i64 {
        match self {
            Self::Migrations => 0x17e7_0001,
            Self::Sweep => 0x17e7_0002,
        }
    }

    /// Waits until this session holds the lock.
    pub fn wait(self, pg: &mut PgConnection) -> QueryResult<()> {
        pg.batch_execute(&format!("SELECT pg_advisory_lock({})", self.key()))
    }

    /// Takes the lock if no other session holds it.
    pub fn try_take(self, pg: &mut PgConnection) -> QueryResult<bool> {
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(&format!(
            "pg_try_advisory_lock({})",
            self.key()
        )))
        .get_result(pg)
    }

    pub fn release(self, pg: &mut PgConnection) -> QueryResult<()> {
        pg.batch_execute(&format!("SELECT pg_advisory_unlock({})", self.key()))
    }
}

/// A lock held on a pooled connection of its own, released when this drops (also while
/// unwinding, and by the server if the connection dies).
pub struct SessionLock {
    lock: AdvisoryLock,
    conn: Option<PooledConnection>,
}

impl SessionLock {
    /// `Some` when this instance holds `lock` now (always on SQLite), `None` when another
    /// instance does.
    pub fn try_take(pool: &DbPool, lock: AdvisoryLock) -> anyhow::Result<Option<Self>> {
        let mut conn = pool.get()?;
        let DbConnection::Postgres(pg) = &mut *conn else {
            return Ok(Some(Self { lock, conn: None }));
        };
        let taken = lock.try_take(pg)?;
        Ok(taken.then_some(Self {
            lock,
            conn: Some(conn),
        }))
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        if let Some(DbConnection::Postgres(pg)) = self.conn.as_deref_mut() {
            if let Err(error) = self.lock.release(pg) {
                tracing::warn!(%error, lock = ?self.lock, "cannot release the lock; it ends with the connection");
            }
        }
    }
}
