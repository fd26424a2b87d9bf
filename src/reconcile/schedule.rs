//! Runs on schedule in `inlet serve`: each reconciled source once per its `interval`
//! (counted from its last run's start, whichever instance made it), an operator's
//! requested run as soon as one is asked for, and a run an instance left unfinished once
//! its lease has expired.

use super::store::{self, REQUESTED, RUNNING};
use super::{Ground, ReconcileError, Reconciler, RunRequest, Trigger};
use crate::db::on_connection;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the schedule looks at the sources (an operator's request wakes it at once).
const POLL: Duration = Duration::from_secs(5);

impl<S: Ground> Reconciler<S> {
    /// Makes every due run, one source after another, until `stopped`.
    /// The first pass runs every reconciled source, whenever it last ran: an instance
    /// that starts may have been down, and catches up at once (the lease keeps it to one
    /// run at a time; a run starts from the source's mark, so a restart costs little).
    pub async fn run_on_schedule(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        let mut starting = true;
        loop {
            for source in self.due(starting).await {
                let request = RunRequest {
                    source,
                    trigger: Trigger::Schedule,
                    since: None,
                    dry_run: false,
                };
                // A stop does not wait for a run: its row stays running, its cursor kept,
                // and the next holder of the lease continues it.
                let ran = tokio::select! {
                    ran = self.run(request) => ran,
                    _ = stopped.changed() => return,
                };
                match ran {
                    Ok(_) | Err(ReconcileError::Busy(_)) => {}
                    Err(error) => tracing::warn!(%error, "a scheduled reconciliation did not run"),
                }
            }
            starting = false;
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = self.requested.notified() => {}
                _ = stopped.changed() => return,
            }
        }
    }

    /// The reconciled sources with a run due now (all of them when `starting`).
    async fn due(&self, starting: bool) -> Vec<String> {
        let settings = (self.settings)();
        let now = self.clock.now();
        let sources: Vec<(String, chrono::Duration)> = (settings.sources().iter())
            .filter_map(|source| {
                let interval = source.reconcile.as_ref()?.interval;
                Some((
                    source.name.as_str().to_owned(),
                    chrono::Duration::from_std(interval).ok()?,
                ))
            })
            .collect();
        if sources.is_empty() {
            return Vec::new();
        }
        let due = on_connection(&self.pool, move |conn| {
            let mut due = Vec::new();
            for (source, interval) in sources {
                if starting || is_due(conn, &source, interval, now)? {
                    due.push(source);
                }
            }
            Ok::<_, ReconcileError>(due)
        });
        due.await.unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read which reconciliations are due");
            Vec::new()
        })
    }
}

/// A source's run is due when one was asked for or left unfinished, or when its last run
/// started an interval ago (or it never ran).
fn is_due(
    conn: &mut crate::db::DbConnection,
    source: &str,
    interval: chrono::Duration,
    now: DateTime<Utc>,
) -> diesel::QueryResult<bool> {
    let Some(last) = store::runs(conn, source, 1)?.pop() else {
        return Ok(true);
    };
    Ok(last.status == REQUESTED
        || last.status == RUNNING
        || store::oldest_run(conn, source, REQUESTED)?.is_some()
        || last.started_at.and_utc() + interval <= now)
}
