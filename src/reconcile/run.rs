//! One run: take the source's lease, start (or resume) its row, then page through the
//! provider's record — each page joined with the claimed events, its missing events
//! recovered (or only counted, in `report` mode), its progress committed — and end the
//! row, counted in the metrics.

use super::store::{self, Ending, Mark, NewRun, Progress, RunRow, FAILED, OK, REQUESTED, RUNNING};
use super::ReconcileError;
use crate::certificates::Certificates;
use crate::clock::Clock;
use crate::db::{on_connection, write_transaction, DbPool};
use crate::delivery::Destinations;
use crate::faults::Faults;
use crate::ingest::{Committer, Intake, Outcome};
use crate::provider::record::{
    window_of, ApiClient, ApiError, Listed, ReconcileMode, Reconciliation, Recovery, Window,
};
use crate::provider::SourceSettings;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Schedule,
    Cli,
    Api,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Cli => "cli",
            Self::Api => "api",
        }
    }
}

/// A run to make now.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub source: String,
    pub trigger: Trigger,
    /// Look back this far instead of from where the last clean run ended.
    pub since: Option<Duration>,
    /// `report` whatever the source's mode (`--dry-run`).
    pub dry_run: bool,
}

/// How a run ended: its row, and what it found missing.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub run: RunRow,
    /// Whether it continued a run an earlier holder left unfinished.
    pub resumed: bool,
}

/// What an event recovered as fetched is claimed with: the services of the intake.
pub struct IntakeServices {
    pub committer: Arc<Committer>,
    pub waker: Option<Arc<Notify>>,
    pub faults: Arc<Faults>,
    pub certificates: Certificates,
}

/// What a run reads of the settings in force (the configuration implements it).
pub trait Ground: Send + Sync + 'static {
    fn sources(&self) -> &[SourceSettings];
    fn destinations(&self) -> &Destinations;
    /// How long an event's payload and answer are kept (`retention.events`).
    fn event_retention(&self) -> Duration;
}

/// The settings in force now (they change on reload; each run takes a snapshot).
pub type CurrentSettings<S> = Arc<dyn Fn() -> Arc<S> + Send + Sync>;

/// This instance's reconciliation: runs of any source, on request or on schedule.
pub struct Reconciler<S> {
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
    pub settings: CurrentSettings<S>,
    pub intake: IntakeServices,
    /// This instance's name on the leases it takes.
    pub holder: String,
    /// Wakes the schedule when an operator asked for a run.
    pub requested: Notify,
}

/// A run under way: what it reads and where it got.
struct Running<'a, S> {
    source: &'a SourceSettings,
    reconciliation: &'a Reconciliation,
    settings: &'a S,
    row: RunRow,
    window: Window,
    mode: ReconcileMode,
    progress: Progress,
    /// Event ids already handled in this run (a record lists redeliveries too).
    seen: HashSet<String>,
    /// When the lease was last renewed.
    renewed: std::time::Instant,
}

impl<S: Ground> Reconciler<S> {
    /// Makes one run of `request.source` now, holding its lease throughout.
    pub async fn run(&self, request: RunRequest) -> Result<RunReport, ReconcileError> {
        let settings = (self.settings)();
        let source = (settings.sources().iter())
            .find(|source| source.name.as_str() == request.source)
            .ok_or_else(|| {
                ReconcileError::NotConfigured(format!("no source is named {}", request.source))
            })?;
        let reconciliation = source.reconcile.as_ref().ok_or_else(|| {
            ReconcileError::NotConfigured(format!(
                "source {} has no [sources.reconcile]",
                request.source
            ))
        })?;
        let (row, resumed) = self.begin(&request, reconciliation).await?;
        let window = Window {
            from: row.window_from.and_utc(),
            to: row.window_to.and_utc(),
        };
        let mode = match row.mode.as_str() {
            "report" => ReconcileMode::Report,
            _ => ReconcileMode::Recover,
        };
        let mut running = Running {
            source,
            reconciliation,
            settings: settings.as_ref(),
            progress: Progress::of(&row),
            row,
            window,
            mode,
            seen: HashSet::new(),
            renewed: std::time::Instant::now(),
        };
        let outcome = self.work(&mut running).await;
        let run = self.end(&mut running, outcome).await?;
        Ok(RunReport { run, resumed })
    }

    /// Takes the lease, then the run to make: one an earlier holder left running (same
    /// mode), an operator's request (on schedule), or a new one.
    async fn begin(
        &self,
        request: &RunRequest,
        reconciliation: &Reconciliation,
    ) -> Result<(RunRow, bool), ReconcileError> {
        let now = self.clock.now();
        let holder = self.holder.clone();
        let request = request.clone();
        let reconciliation = reconciliation.clone();
        on_connection(&self.pool, move |conn| {
            let source = request.source.as_str();
            if !store::take_lease(conn, source, &holder, now)? {
                return Err(ReconcileError::Busy(source.to_owned()));
            }
            let mode = match request.dry_run {
                true => ReconcileMode::Report,
                false => reconciliation.mode,
            };
            if let Some(left) = left_running(conn, source, &holder, mode, now)? {
                return Ok((left, true));
            }
            if request.trigger == Trigger::Schedule {
                if let Some(asked) = store::oldest_run(conn, source, REQUESTED)? {
                    store::start_run(conn, asked.id, (asked.window_from, asked.window_to))?;
                    return Ok((
                        RunRow {
                            status: RUNNING.to_owned(),
                            ..asked
                        },
                        false,
                    ));
                }
            }
            let (checked_until, _) = store::source_state(conn, source)?;
            let window = window_of(
                &reconciliation,
                now,
                request.since,
                checked_until.map(|at| at.and_utc()),
            );
            let run = new_run(&request, mode, window, None, now);
            Ok((
                store::insert_run(
                    conn,
                    NewRun {
                        status: RUNNING,
                        ..run
                    },
                )?,
                false,
            ))
        })
        .await
    }

    /// Pages through the record until its end, the lease lost, or an error.
    async fn work(&self, running: &mut Running<'_, S>) -> Result<(), ReconcileError> {
        let record = running.reconciliation.api.record();
        // One client for the run (its connections kept), authorized afresh per page: a
        // GitHub App's token, signed as it is made, lasts minutes.
        let mut api = running.reconciliation.api.client()?;
        loop {
            running.reconciliation.api.reauthorize(&mut api)?;
            let cursor = running.progress.cursor.clone();
            let page = record.page(&api, running.window, cursor.as_deref()).await?;
            self.handle(running, &api, &page.listed).await?;
            running.progress.listed += i64::try_from(page.entries).unwrap_or(i64::MAX);
            running.progress.cursor = page.next;
            self.save(running).await?;
            if running.progress.cursor.is_none() {
                return Ok(());
            }
        }
    }

    /// A page's events: which are missing, and each recovered (in `recover` mode).
    async fn handle(
        &self,
        running: &mut Running<'_, S>,
        api: &ApiClient,
        listed: &[Listed],
    ) -> Result<(), ReconcileError> {
        let fresh: Vec<&Listed> = (listed.iter())
            .filter(|listed| running.seen.insert(listed.event_id.clone()))
            .collect();
        let source = running.source.name.as_str().to_owned();
        let ids: Vec<String> = fresh.iter().map(|listed| listed.event_id.clone()).collect();
        let claimed = on_connection(&self.pool, move |conn| {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            store::claimed(conn, &source, &ids).map_err(ReconcileError::from)
        })
        .await?;
        for listed in fresh.into_iter().filter(|l| !claimed.contains(&l.event_id)) {
            running.progress.found_missing(&listed.event_id);
            tracing::info!(source = %running.source.name, event_id = %listed.event_id, mode = running.mode.as_str(), "reconciliation: an event the provider sent was never received");
            if running.mode == ReconcileMode::Recover {
                self.recover(running, api, listed).await?;
                self.renew_if_due(running).await?;
            }
        }
        Ok(())
    }

    /// Renews the run's lease within a page that takes long (many resends).
    async fn renew_if_due(&self, running: &mut Running<'_, S>) -> Result<(), ReconcileError> {
        if running.renewed.elapsed() < store::RENEW_EVERY {
            return Ok(());
        }
        let source = running.source.name.as_str().to_owned();
        let (holder, now) = (self.holder.clone(), self.clock.now());
        let kept = on_connection(&self.pool, move |conn| {
            store::take_lease(conn, &source, &holder, now).map_err(ReconcileError::from)
        })
        .await?;
        running.renewed = std::time::Instant::now();
        match kept {
            true => Ok(()),
            false => Err(ReconcileError::Lost(running.source.name.to_string())),
        }
    }

    /// Recovers one missing event: asks the provider to resend it, or claims it as
    /// fetched. A refused credential or an unknown hook fails the run; anything else about
    /// one event is counted as an error and the run goes on.
    async fn recover(
        &self,
        running: &mut Running<'_, S>,
        api: &ApiClient,
        listed: &Listed,
    ) -> Result<(), ReconcileError> {
        let record = running.reconciliation.api.record();
        let recovered = match (record.recovery(), &listed.event, listed.refused) {
            // Inlet refused the provider's last resend of it (a secret, a size): another
            // would be refused alike. An operator looks (the run's errors, the warning).
            (Recovery::Resend, _, Some(status)) => Err(ApiError::Answer(format!(
                "Inlet answered the provider's last resend HTTP {status}: not asked again"
            ))),
            // Not one the provider resends: it is still retrying it (the next run sees).
            (Recovery::Resend, _, None) if listed.resend_id.is_none() => Ok(false),
            (Recovery::Resend, _, None) => record.resend(api, listed).await.map(|()| true),
            (Recovery::Fetch, Some(event), _) => self.claim(running, event.clone()).await,
            (Recovery::Fetch, None, _) => Err(ApiError::Answer(
                "the record served no event to claim".to_owned(),
            )),
        };
        let source = running.source.name.as_str();
        match recovered {
            Ok(true) => {
                running.progress.recovered += 1;
                metrics::counter!("inlet_reconcile_recovered_total", "source" => source.to_owned())
                    .increment(1);
                Ok(())
            }
            Ok(false) => Ok(()),
            // Every other event would fail alike: the run fails, visibly.
            Err(error @ (ApiError::Credential(_) | ApiError::NotFound(_))) => Err(error.into()),
            Err(why) => {
                running.progress.errors += 1;
                tracing::warn!(source, event_id = %listed.event_id, %why, "reconciliation: a missing event could not be recovered; the next run tries again");
                Ok(())
            }
        }
    }

    /// Claims a fetched event: whether it was recovered now (a copy that arrived meanwhile
    /// got there first otherwise).
    async fn claim(&self, running: &Running<'_, S>, event: bytes::Bytes) -> Result<bool, ApiError> {
        let settings = running.settings;
        let intake = Intake {
            source: running.source,
            destinations: settings.destinations(),
            retention: settings.event_retention(),
            now: self.clock.now(),
            waker: self.intake.waker.as_deref(),
            faults: &self.intake.faults,
            pool: &self.pool,
            certificates: &self.intake.certificates,
            clock: self.clock.as_ref(),
            watcher: None,
        };
        match intake.recover(&self.intake.committer, event).await {
            Ok(outcome) => Ok(outcome != Outcome::StoredAnswer),
            Err(refusal) => Err(ApiError::Answer(format!(
                "the event could not be claimed: {refusal}"
            ))),
        }
    }

    /// Commits the run's progress with its lease.
    async fn save(&self, running: &mut Running<'_, S>) -> Result<(), ReconcileError> {
        let run = (running.row.id, running.source.name.as_str().to_owned());
        let (holder, progress, now) = (
            self.holder.clone(),
            running.progress.clone(),
            self.clock.now(),
        );
        let kept = on_connection(&self.pool, move |conn| {
            write_transaction(conn, |conn| {
                Ok::<_, ReconcileError>(store::save_progress(
                    conn,
                    (run.0, &run.1),
                    &holder,
                    &progress,
                    now,
                )?)
            })
        })
        .await?;
        running.renewed = std::time::Instant::now();
        match kept {
            true => Ok(()),
            false => Err(ReconcileError::Lost(running.source.name.to_string())),
        }
    }

    /// Ends the run's row as `outcome` says, counted: its row as ended.
    async fn end(
        &self,
        running: &mut Running<'_, S>,
        outcome: Result<(), ReconcileError>,
    ) -> Result<RunRow, ReconcileError> {
        let source = running.source.name.as_str().to_owned();
        if let Err(ReconcileError::Lost(_)) = outcome {
            return outcome.map(|()| running.row.clone());
        }
        let error = outcome.as_ref().err().map(ToString::to_string);
        let status = if error.is_none() { OK } else { FAILED };
        // The mark moves only past a window found whole: a run that recovered events
        // leaves it, so the next run lists them again and sees them arrive.
        let whole = error.is_none() && running.progress.missing == 0;
        let mark = (whole && running.mode == ReconcileMode::Recover).then(|| Mark {
            from: running.window.from.naive_utc(),
            to: running.window.to.naive_utc(),
            from_lookback: running.window.from
                <= running.row.started_at.and_utc() - lookback_of(running.reconciliation)
                    + chrono::Duration::seconds(1),
        });
        let (holder, now, id) = (self.holder.clone(), self.clock.now(), running.row.id);
        let progress = running.progress.clone();
        let row = on_connection(&self.pool, move |conn| {
            write_transaction(conn, |conn| {
                if !store::save_progress(conn, (id, &source), &holder, &progress, now)? {
                    return Ok::<_, ReconcileError>(None);
                }
                let ending = Ending {
                    status,
                    error: error.as_deref(),
                    mark,
                };
                store::finish_run(conn, (id, &source), &holder, &ending, now)?;
                Ok(store::run(conn, id)?)
            })
        })
        .await?;
        let Some(row) = row else {
            // Another instance took the run over while this one failed: it ends it.
            return Err(ReconcileError::Lost(running.source.name.to_string()));
        };
        record_metrics(&row, now_secs(self.clock.now()));
        if let Err(error) = &outcome {
            tracing::warn!(source = %running.source.name, %error, "reconciliation run failed");
        }
        Ok(row)
    }
}

/// Asks for a run of `source` (an operator's): its row, `requested` until a schedule
/// takes it. `since` and `dry_run` as [`RunRequest`]'s.
pub fn ask(
    conn: &mut crate::db::DbConnection,
    request: &RunRequest,
    reconciliation: &Reconciliation,
    operator: &str,
    now: DateTime<Utc>,
) -> diesel::QueryResult<RunRow> {
    let mode = match request.dry_run {
        true => ReconcileMode::Report,
        false => reconciliation.mode,
    };
    let (checked_until, _) = store::source_state(conn, &request.source)?;
    let window = window_of(
        reconciliation,
        now,
        request.since,
        checked_until.map(|at| at.and_utc()),
    );
    let run = new_run(request, mode, window, Some(operator), now);
    store::insert_run(
        conn,
        NewRun {
            status: REQUESTED,
            ..run
        },
    )
}

/// The run an earlier holder of `source`'s lease left running, to resume when it is of
/// `mode`; one of another mode is ended as interrupted (and the lease taken again).
fn left_running(
    conn: &mut crate::db::DbConnection,
    source: &str,
    holder: &str,
    mode: ReconcileMode,
    now: DateTime<Utc>,
) -> diesel::QueryResult<Option<RunRow>> {
    let Some(left) = store::oldest_run(conn, source, RUNNING)? else {
        return Ok(None);
    };
    if left.mode == mode.as_str() {
        return Ok(Some(left));
    }
    let ending = Ending {
        status: FAILED,
        error: Some("interrupted: its instance stopped, and the next run was of another mode"),
        mark: None,
    };
    store::finish_run(conn, (left.id, source), holder, &ending, now)?;
    store::take_lease(conn, source, holder, now)?;
    Ok(None)
}

/// A run's row before its status is set.
fn new_run<'a>(
    request: &'a RunRequest,
    mode: ReconcileMode,
    window: Window,
    requested_by: Option<&'a str>,
    now: DateTime<Utc>,
) -> NewRun<'a> {
    NewRun {
        source: &request.source,
        trigger: request.trigger.as_str(),
        mode: mode.as_str(),
        status: RUNNING,
        window_from: window.from.naive_utc(),
        window_to: window.to.naive_utc(),
        requested_by,
        started_at: now.naive_utc(),
    }
}

fn lookback_of(reconciliation: &Reconciliation) -> chrono::Duration {
    chrono::Duration::from_std(reconciliation.lookback).unwrap_or(chrono::Duration::MAX)
}

fn now_secs(now: DateTime<Utc>) -> f64 {
    now.timestamp_millis() as f64 / 1000.0
}

/// A finished run, in the metrics.
fn record_metrics(row: &RunRow, now: f64) {
    let source = row.source.clone();
    metrics::counter!("inlet_reconcile_runs_total", "source" => source.clone(), "outcome" => row.status.clone()).increment(1);
    metrics::gauge!("inlet_reconcile_missing", "source" => source.clone()).set(row.missing as f64);
    if row.status == OK {
        metrics::gauge!("inlet_reconcile_last_success_timestamp_seconds", "source" => source)
            .set(now);
    }
}
