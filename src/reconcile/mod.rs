//! Reconciliation: nothing lost even after the provider gave up. A run lists the
//! provider's own record of what it sent (`crate::provider::record`) over a window, joins
//! it with the events Inlet claimed on the provider's event id, and recovers what is
//! missing — asking the provider to send it again where it can (it then arrives signed,
//! by the ordinary path), or claiming it as the API served it (the same claim + fact +
//! outbox transaction, marked recovered). The UNIQUE constraints decide a recovery racing
//! the provider's own late copy, as always.
//!
//! One run at a time per source across every instance (a lease row per source); each run
//! is a row whose cursor and counts commit after every page, so a run whose instance died
//! continues from its last page in whichever instance takes the lease next.

mod run;
mod schedule;
pub mod store;

pub use run::{
    ask, CurrentSettings, Ground, IntakeServices, Reconciler, RunReport, RunRequest, Trigger,
};
pub use store::{RunRow, RunView};

use crate::db::{CommitInDoubt, StoreError};
use crate::provider::record::ApiError;

/// Why a run did not happen, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The source is not configured, or not for reconciliation.
    #[error("{0}")]
    NotConfigured(String),
    /// Another run of the source holds its lease (in this or another instance).
    #[error("a reconciliation of source {0} is running (in this or another instance); try again once it ends")]
    Busy(String),
    /// The run's lease was taken over by another instance (this one stalled).
    #[error("the run of source {0} was taken over by another instance")]
    Lost(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<diesel::result::Error> for ReconcileError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<CommitInDoubt> for ReconcileError {
    fn from(error: CommitInDoubt) -> Self {
        Self::Store(error.into())
    }
}

impl From<r2d2::Error> for ReconcileError {
    fn from(error: r2d2::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<tokio::task::JoinError> for ReconcileError {
    fn from(error: tokio::task::JoinError) -> Self {
        Self::Store(error.into())
    }
}
