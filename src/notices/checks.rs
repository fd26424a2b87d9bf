//! What no transaction tells: every `check_interval`, each instance looks whether its
//! sweeper has stalled, whether the dead letters have passed the threshold, and which
//! destinations' dead letters a window's notice left untold once the window is over.
//! Several instances looking at the same thing write one notice: the ids name the
//! occurrence (the sweeper's last success, the dead row that passed the threshold, the
//! destination and the window).

use super::notice::Notice;
use super::notifier::Notices;
use super::settings::{NoticeType, SOURCE};
use crate::clock::Clock;
use crate::db::{DbConnection, DbPool};
use crate::delivery::{count_dead_except, nth_dead_except};
use crate::retention::SweeperHealth;
use chrono::{DateTime, Utc};
use diesel::QueryResult;
use std::sync::Arc;
use tokio::sync::watch;

/// What the checks look at.
pub struct Checks {
    pub notices: Arc<Notices>,
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
    /// This instance's sweeper, when it runs one.
    pub sweeper: Option<SweeperHealth>,
}

impl Checks {
    /// Checks every `check_interval` until `shutdown` (a dropped sender also stops it).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let interval = self.notices.settings.check_interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                changed = shutdown.changed() => if changed.is_err() || *shutdown.borrow() { break },
            }
            let now = self.clock.now();
            let stalled = (self.sweeper.as_ref()).and_then(|sweeper| sweeper.stalled_since(now));
            let (notices, pool) = (self.notices.clone(), self.pool.clone());
            let checked = tokio::task::spawn_blocking(move || {
                let mut conn = pool.get().map_err(|e| e.to_string())?;
                let mut found: Vec<Notice> = stalled
                    .map(|since| Notice::sweeper_stalled(since, now))
                    .into_iter()
                    .collect();
                found.extend(over_threshold(&notices, &mut conn, now).map_err(|e| e.to_string())?);
                found.extend(
                    failed_reconciliations(&notices, &mut conn, now).map_err(|e| e.to_string())?,
                );
                notices.send(&mut conn, found);
                notices.send_untold_dead_letters(&mut conn, now);
                Ok::<_, String>(())
            });
            match checked.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "cannot check for operational notices"),
                Err(error) => tracing::warn!(%error, "the notice checks were aborted"),
            }
        }
    }
}

/// A `reconcile.failed` notice for each reconciliation run that failed in the last hour
/// (each told once: its id names the run).
fn failed_reconciliations(
    notices: &Notices,
    conn: &mut DbConnection,
    now: DateTime<Utc>,
) -> QueryResult<Vec<Notice>> {
    if !notices.settings.sends(NoticeType::ReconcileFailed) {
        return Ok(Vec::new());
    }
    let since = now - chrono::Duration::hours(1);
    let failed = crate::reconcile::store::failed_since(conn, since)?;
    Ok(failed
        .iter()
        .map(|run| {
            let error = run.error.as_deref().unwrap_or("no reason recorded");
            Notice::reconcile_failed(run.id, &run.source, error, now)
        })
        .collect())
}

/// A `dead_letters.over_threshold` notice when more deliveries than the threshold are
/// dead (the notices destination's own not counted).
fn over_threshold(
    notices: &Notices,
    conn: &mut DbConnection,
    now: DateTime<Utc>,
) -> QueryResult<Option<Notice>> {
    if !notices.settings.sends(NoticeType::DeadLettersOverThreshold) {
        return Ok(None);
    }
    let threshold = notices.settings.dead_letter_threshold;
    let Some(crossing) = nth_dead_except(conn, SOURCE, i64::from(threshold))? else {
        return Ok(None);
    };
    let count = count_dead_except(conn, SOURCE)?;
    Ok(Some(Notice::over_threshold(
        threshold, count, crossing, now,
    )))
}
