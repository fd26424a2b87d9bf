//! What can go wrong in the database, sorted by what the caller should do about it: an
//! unreachable or busy database ([`StoreError::Unavailable`]: nothing was stored, retry
//! later), a key another transaction holds ([`StoreError::Contended`]: retry soon), and
//! anything else ([`StoreError::Failed`]: a bug or a broken database, logged). The HTTP
//! edge turns these into 503, 409 and 500.

/// A database failure, classified once, where diesel's and r2d2's errors are known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached, or stayed locked past its timeout.
    #[error("{0}")]
    Unavailable(String),
    /// A concurrent transaction holds the same key (PostgreSQL's `lock_timeout`, a
    /// serialization failure, or a row swept while it was read).
    #[error("{0}")]
    Contended(String),
    /// The connection failed while COMMIT was in flight: the transaction may or may not
    /// have committed. Nothing may be answered as done; a retry finds out.
    #[error("{0}")]
    InDoubt(String),
    /// Anything else the database refused.
    #[error("{0}")]
    Failed(String),
}

/// A COMMIT whose outcome is unknown (see [`StoreError::InDoubt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInDoubt(pub String);

impl From<CommitInDoubt> for StoreError {
    fn from(error: CommitInDoubt) -> Self {
        Self::InDoubt(error.0)
    }
}

/// Callers that speak diesel's error see an in-doubt commit as a failed connection.
impl From<CommitInDoubt> for diesel::result::Error {
    fn from(error: CommitInDoubt) -> Self {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::ClosedConnection,
            Box::new(error.0),
        )
    }
}

impl From<diesel::result::Error> for StoreError {
    fn from(error: diesel::result::Error) -> Self {
        use diesel::result::{DatabaseErrorKind, Error};
        match &error {
            Error::DatabaseError(DatabaseErrorKind::ClosedConnection, _)
            | Error::BrokenTransactionManager => {
                Self::Unavailable(format!("the database connection failed: {error}"))
            }
            Error::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => {
                Self::Contended("a concurrent transaction touched the same event; retry".to_owned())
            }
            Error::DatabaseError(DatabaseErrorKind::Unknown, info) => {
                let message = info.message();
                if message.contains("lock timeout") {
                    // PostgreSQL `lock_timeout` while waiting on a concurrent claim.
                    Self::Contended(
                        "a concurrent request holds this event's claim; retry".to_owned(),
                    )
                } else if message.contains("database is locked")
                    || message.contains("database is busy")
                {
                    // SQLite `busy_timeout` expired waiting for the write lock.
                    Self::Unavailable("the database stayed locked past busy_timeout".to_owned())
                } else {
                    Self::Failed(format!("database error: {message}"))
                }
            }
            _ => Self::Failed(format!("database error: {error}")),
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(error: r2d2::Error) -> Self {
        metrics::counter!("inlet_db_pool_timeouts_total").increment(1);
        Self::Unavailable(format!("no database connection: {error}"))
    }
}

impl From<tokio::task::JoinError> for StoreError {
    fn from(_: tokio::task::JoinError) -> Self {
        Self::Failed("the database task was aborted".to_owned())
    }
}
