//! What a settling transaction tells whoever watches deliveries (Inlet's operational
//! notices): the breakers it opened or closed and the rows it dead-lettered. The watcher
//! writes inside that same transaction, so what it writes commits with the change it is
//! about or not at all; what it reports (metrics, log lines) waits for the commit.

use super::gates::BreakerChange;
use crate::db::DbConnection;
use chrono::{DateTime, Utc};
use diesel::QueryResult;

/// What one settling transaction changed.
#[derive(Debug, Clone, Copy)]
pub struct SettledChanges<'a> {
    /// The breakers it opened, opened again or closed, by destination.
    pub transitions: &'a [BreakerChange],
    /// The rows it dead-lettered (`deliveries.id`).
    pub dead: &'a [i64],
    pub now: DateTime<Utc>,
}

impl SettledChanges<'_> {
    pub fn is_empty(&self) -> bool {
        self.transitions.is_empty() && self.dead.is_empty()
    }
}

/// Work for after the commit: counting and logging what the transaction wrote (a
/// rolled-back write is neither counted nor logged).
#[derive(Default)]
#[must_use]
pub struct AfterCommit(Vec<Box<dyn FnOnce() + Send>>);

impl AfterCommit {
    pub fn push(&mut self, work: impl FnOnce() + Send + 'static) {
        self.0.push(Box::new(work));
    }

    /// Runs the work (call it once the transaction committed).
    pub fn run(self) {
        for work in self.0 {
            work();
        }
    }
}

/// Watches what settling deliveries changes, inside the settling transaction.
pub trait SettleWatcher: Send + Sync {
    /// Called in the settling transaction (in a savepoint of it) when it changed a
    /// breaker or dead-lettered a row; an error undoes only this call's writes, and the
    /// settlement commits.
    fn settled(
        &self,
        conn: &mut DbConnection,
        changes: &SettledChanges<'_>,
    ) -> QueryResult<AfterCommit>;
}
