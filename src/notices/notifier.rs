//! [`Notices`]: writes the notices that are turned on — inside the transaction of the
//! change they tell of (a breaker's transition, a dead letter: [`SettleWatcher`]), or in
//! a transaction of their own (a fingerprint mismatch, a refused reload, the periodic
//! checks) — then counts and logs each one written.

use super::notice::Notice;
use super::settings::{NoticeSettings, NoticeType, SOURCE};
use super::store::{write, Keeping};
use crate::clock::Clock;
use crate::db::{write_transaction, DbConnection, DbPool};
use crate::delivery::{AfterCommit, DeadLetter, SettleWatcher, SettledChanges, Transition};
use diesel::QueryResult;
use std::sync::Arc;
use std::time::Duration;

/// Inlet's operational notices, as configured.
#[derive(Clone)]
pub struct Notices {
    pub settings: NoticeSettings,
    keeping: Keeping,
    clock: Arc<dyn Clock>,
}

impl Notices {
    /// The notices of `settings`, their events kept for `retention` (`retention.events`),
    /// timed by `clock` (the dispatcher's: a notice is due when it is written).
    pub fn new(settings: NoticeSettings, retention: Duration, clock: Arc<dyn Clock>) -> Self {
        let keeping = Keeping {
            retention,
            deadline: settings.destination.policy.deadline,
        };
        Self {
            settings,
            keeping,
            clock,
        }
    }

    /// The time a notice observed now is written with.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }

    /// Writes those of `notices` that are turned on, in the caller's transaction; what
    /// to count and log once it commits.
    pub fn write_all(
        &self,
        conn: &mut DbConnection,
        notices: Vec<Notice>,
    ) -> QueryResult<AfterCommit> {
        let mut after = AfterCommit::default();
        for notice in notices {
            if !self.settings.sends(notice.kind) {
                continue;
            }
            if write(conn, &notice, self.keeping)? {
                after.push(move || report(&notice));
            }
        }
        Ok(after)
    }

    /// Writes `notices` in a transaction of their own, then counts and logs them; a
    /// failure is logged (a notice is never worth failing what it tells of).
    pub fn send(&self, conn: &mut DbConnection, notices: Vec<Notice>) {
        if notices.iter().all(|n| !self.settings.sends(n.kind)) {
            // Nothing to write: no transaction (SQLite's write lock) for nothing.
            return;
        }
        let kinds: Vec<&str> = notices.iter().map(|n| n.kind.as_str()).collect();
        match write_transaction(conn, |conn| self.write_all(conn, notices)) {
            Ok(after) => after.run(),
            Err(error) => tracing::warn!(?kinds, %error, "cannot write an operational notice"),
        }
    }

    /// [`Notices::send`] on a connection of `pool`, off the async executor.
    pub async fn send_from(&self, pool: &DbPool, notices: Vec<Notice>) {
        if notices.iter().all(|n| !self.settings.sends(n.kind)) {
            // Not even a connection.
            return;
        }
        let (this, pool) = (self.clone(), pool.clone());
        let sent = tokio::task::spawn_blocking(move || match pool.get() {
            Ok(mut conn) => this.send(&mut conn, notices),
            Err(error) => tracing::warn!(%error, "cannot write an operational notice"),
        });
        if let Err(error) = sent.await {
            tracing::warn!(%error, "the notice task was aborted");
        }
    }
}

/// Counts and logs a notice once written.
fn report(notice: &Notice) {
    let kind = notice.kind.as_str();
    metrics::counter!("inlet_notices_total", "type" => kind).increment(1);
    tracing::info!(notice = kind, id = %notice.id, summary = %notice.summary, "operational notice");
}

/// Breakers and dead letters, told in the transaction that changed them. Never about
/// the notices destination itself: its outage would otherwise feed itself notices.
impl SettleWatcher for Notices {
    fn settled(
        &self,
        conn: &mut DbConnection,
        changes: &SettledChanges<'_>,
    ) -> QueryResult<AfterCommit> {
        let now = changes.now;
        let mut notices = Vec::new();
        for ((source, destination), transition) in changes.transitions {
            if source == SOURCE {
                continue;
            }
            match transition {
                Transition::Opened => {
                    notices.push(Notice::breaker_opened(source, destination, now))
                }
                Transition::Closed => {
                    notices.push(Notice::breaker_closed(source, destination, now))
                }
                // The same outage: told when it began.
                Transition::Reopened => {}
            }
        }
        if self.settings.sends(NoticeType::DeliveryDeadLettered) && !changes.dead.is_empty() {
            let dead = DeadLetter::find_all(conn, changes.dead)?;
            notices.extend(
                (dead.iter())
                    .filter(|row| row.source != SOURCE)
                    .map(|row| Notice::dead_lettered(row, now)),
            );
        }
        self.write_all(conn, notices)
    }
}

/// Every notice type exported at 0, so that `increase()` sees the first one.
pub fn start_notice_counters() {
    for kind in NoticeType::ALL {
        metrics::counter!("inlet_notices_total", "type" => kind.as_str()).increment(0);
    }
}
