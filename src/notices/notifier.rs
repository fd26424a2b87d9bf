//! [`Notices`]: writes the notices that are turned on — inside the transaction of the
//! change they tell of (a breaker's transition, a dead letter: [`SettleWatcher`]), or in
//! a transaction of their own (a fingerprint mismatch, a refused reload, the periodic
//! checks) — then counts and logs each one written. Dead letters are told once per
//! destination per window ([`super::tally`]), and never of an event that was itself a
//! notice sent back to Inlet.

use super::notice::Notice;
use super::settings::{NoticeSettings, NoticeType, SOURCE};
use super::store::{notices_among, write, Keeping};
use super::tally::{dead_letters_notice, Pending, Spans};
use crate::clock::Clock;
use crate::db::{write_transaction, DbConnection, DbPool};
use crate::delivery::DestinationKey;
use crate::delivery::{AfterCommit, DeadLetter, SettleWatcher, SettledChanges, Transition};
use chrono::{DateTime, Utc};
use diesel::QueryResult;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Inlet's operational notices, as configured.
#[derive(Clone)]
pub struct Notices {
    pub settings: NoticeSettings,
    keeping: Keeping,
    clock: Arc<dyn Clock>,
    /// Destinations with dead letters settled in a window not over yet.
    pending: Arc<Pending>,
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
            pending: Arc::default(),
        }
    }

    fn spans(&self) -> Spans {
        Spans {
            window: self.settings.window,
            check_interval: self.settings.check_interval,
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

    /// The dead letters of each destination whose window ended before `now`'s, that its
    /// window's notice did not tell: one notice each, in a transaction of its own.
    pub fn send_untold_dead_letters(&self, conn: &mut DbConnection, now: DateTime<Utc>) {
        if !self.settings.sends(NoticeType::DeliveryDeadLettered) {
            return;
        }
        let spans = self.spans();
        let window_start = spans.window_start(now);
        for key in self.pending.over_before(window_start) {
            let written = write_transaction(conn, |conn| {
                let notice = dead_letters_notice(conn, &key, None, spans, now)?;
                self.write_all(conn, notice.into_iter().collect())
            });
            match written {
                Ok(after) => after.run(),
                Err(error) => {
                    let (source, destination) = (key.source(), key.name());
                    tracing::warn!(%source, %destination, %error, "cannot write an operational notice");
                    // Looked at again at the next check.
                    let before = window_start - chrono::Duration::milliseconds(1);
                    self.pending.saw(&key, before);
                }
            }
        }
    }

    /// The dead-letter notices of a settlement: one per destination per window, none of
    /// the notices destination's own rows nor of an event that was itself a notice.
    fn dead_letters_told(
        &self,
        conn: &mut DbConnection,
        changes: &SettledChanges<'_>,
    ) -> QueryResult<Vec<Notice>> {
        let dead: Vec<DeadLetter> = DeadLetter::find_all(conn, changes.dead)?
            .into_iter()
            .filter(|row| row.source != SOURCE)
            .collect();
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let sent_back = notices_among(conn, &dead)?;
        // The last dead letter of each destination, what its notice describes.
        let mut latest: BTreeMap<DestinationKey, DeadLetter> = BTreeMap::new();
        for row in dead {
            if !sent_back.contains(&(row.source.clone(), row.event_id.clone())) {
                latest.insert(row.destination_key(), row);
            }
        }
        let spans = self.spans();
        let mut told = Vec::new();
        for (key, row) in &latest {
            self.pending.saw(key, spans.window_start(changes.now));
            let notice = dead_letters_notice(conn, key, Some(row), spans, changes.now)?;
            told.extend(notice);
        }
        Ok(told)
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
/// the notices destination itself (its outage would otherwise feed itself notices), nor
/// about the dead letters of an event that was a notice sent back to Inlet.
impl SettleWatcher for Notices {
    fn settled(
        &self,
        conn: &mut DbConnection,
        changes: &SettledChanges<'_>,
    ) -> QueryResult<AfterCommit> {
        let now = changes.now;
        let mut notices = Vec::new();
        for (key, transition) in changes.transitions {
            let (source, destination) = (key.source(), key.name());
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
            notices.extend(self.dead_letters_told(conn, changes)?);
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
