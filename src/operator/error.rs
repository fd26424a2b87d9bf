//! Why an operator's request was refused or failed. The HTTP edge (the admin API and the
//! console) turns each into its status and problem `reason`.

use crate::db::StoreError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// The request itself is invalid: a filter, a body, a key's form.
    #[error("{0}")]
    Invalid(String),
    /// A mutating call without its Idempotency-Key.
    #[error("{0}")]
    KeyMissing(String),
    /// An Idempotency-Key used before for another request.
    #[error("{0}")]
    KeyReused(String),
    /// No such event was ever received.
    #[error("{0}")]
    UnknownEvent(String),
    /// No such thing (a bulk action's id).
    #[error("{0}")]
    NotFound(String),
    /// The event was swept after the retention window.
    #[error("{0}")]
    Expired(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A failure inside Inlet.
    #[error("{0}")]
    Internal(String),
    /// The operator already runs as many of these as one operator may at once.
    #[error("{0}")]
    Busy(String),
    /// A confirmation whose preview no longer holds: why, and the fresh preview.
    #[error("{0}")]
    Outdated(String, serde_json::Value),
}

impl From<diesel::result::Error> for OperatorError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<crate::db::CommitInDoubt> for OperatorError {
    fn from(error: crate::db::CommitInDoubt) -> Self {
        Self::Store(error.into())
    }
}

impl From<r2d2::Error> for OperatorError {
    fn from(error: r2d2::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<tokio::task::JoinError> for OperatorError {
    fn from(error: tokio::task::JoinError) -> Self {
        Self::Store(error.into())
    }
}
