//! PostgreSQL advisory locks, one key per job that only one Inlet instance may do at a
//! time: applying migrations and sweeping. Each is held by a transaction and ends with it
//! — never by a session, which a transaction pooler (PgBouncer) would hand to another
//! client with the lock still held. SQLite needs none: its write lock already serializes
//! writers across processes.

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

    /// Waits until the current transaction holds the lock (released at its end).
    pub fn wait_in_transaction(self, pg: &mut PgConnection) -> QueryResult<()> {
        pg.batch_execute(&format!("SELECT pg_advisory_xact_lock({})", self.key()))
    }

    /// Takes the lock for the current transaction if no other transaction holds it.
    pub fn try_in_transaction(self, pg: &mut PgConnection) -> QueryResult<bool> {
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(&format!(
            "pg_try_advisory_xact_lock({})",
            self.key()
        )))
        .get_result(pg)
    }
}
