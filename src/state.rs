//! What every HTTP handler shares.

use crate::clock::Clock;
use crate::config::LiveSettings;
use crate::db::{Checkpointer, DbPool};
use crate::delivery::BrokerHealth;
use crate::faults::Faults;
use crate::ingest::Committer;
use crate::reload::Reloader;
use crate::retention::SweeperHealth;
use std::sync::Arc;

/// What every handler shares.
pub struct AppState {
    /// The settings in force: a request takes one snapshot (`settings.current()`) at its
    /// start and uses it throughout.
    pub settings: LiveSettings,
    /// Reads the configuration file again (`POST /admin/reload`, SIGHUP).
    pub reloader: Arc<Reloader>,
    pub pool: DbPool,
    pub clock: Arc<dyn Clock>,
    pub faults: Arc<Faults>,
    /// Commits verified webhooks in groups.
    pub committer: Arc<Committer>,
    /// SQLite: checkpoints the write-ahead log beside the writer (stops when dropped).
    pub checkpointer: Option<Checkpointer>,
    /// Wakes this instance's dispatcher when a new fact has deliveries.
    pub dispatcher_waker: Option<Arc<tokio::sync::Notify>>,
    /// Each broker destination's state, for readiness (none without a dispatcher).
    pub brokers: Option<Arc<BrokerHealth>>,
    /// The in-server sweeper's last success, for readiness.
    pub sweeper: Option<SweeperHealth>,
    /// Operational notices (`[notices]`), for the ones an HTTP handler observes.
    pub notices: Option<Arc<crate::notices::Notices>>,
    /// Webhooks per minute by outcome, for the console.
    pub traffic: crate::observability::Traffic,
    /// Wrong operator tokens by address (the API's and the console's sign-in), which
    /// make the next attempts wait.
    pub sign_in: crate::operator::SignInGuard,
    /// The key console sessions are signed with: from `console.session_secret`, or the
    /// one generated once and stored in the database for every instance.
    pub session_key: [u8; 32],
    /// OpenTelemetry traces (`[telemetry]`): off unless an endpoint is set.
    pub traces: crate::traces::Traces,
    /// The signing certificates fetched for sources verified with one (SNS).
    pub certificates: crate::certificates::Certificates,
    /// Reconciliation with the providers' own records: runs on schedule, and the runs
    /// operators ask for.
    pub reconciler: Arc<crate::reconcile::Reconciler<crate::config::Settings>>,
}
