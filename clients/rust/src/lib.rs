//! Exactly once into your application.
//!
//! Inlet stores each webhook once and delivers it to your application *at least once*: a
//! delivery whose `2xx` is lost is sent again, and an operator's replay sends it again on
//! purpose. This crate closes that last hop in your own database:
//!
//! - [`Verifier::verify`] checks a delivery exactly as Inlet signs it (Standard Webhooks
//!   `v1`), and hands back a [`Verified`] delivery — handlers take that type, so an
//!   unverified body cannot reach them;
//! - the adapters' `claim` inserts the delivery's `webhook-id` into the `inlet_inbox` table
//!   with `ON CONFLICT DO NOTHING` **inside the caller's transaction**, so the handler's
//!   writes and the claim commit together: a later copy finds the committed row and is a
//!   [`Claim::Duplicate`]; a concurrent copy waits on the key until the first transaction
//!   commits (then it is a duplicate) or rolls back (then it claims and runs).
//!
//! Adapters, each a cargo feature: [`diesel`](crate::diesel) (PostgreSQL and SQLite) and
//! `actix_web` on by default; `sqlx` and `axum` off by default.

pub mod verify;

#[cfg(feature = "diesel")]
pub mod diesel;

#[cfg(feature = "actix-web")]
pub mod actix;

#[cfg(feature = "sqlx")]
pub mod sqlx;

#[cfg(feature = "axum")]
pub mod axum;

mod table;

#[cfg(any(feature = "actix-web", feature = "axum"))]
mod answer;

pub use table::{
    ddl, purge_cutoff, sqlite_time, Dialect, PurgeWindowTooShort, DEFAULT_PURGE_WINDOW,
    MIN_PURGE_WINDOW, TABLE,
};
pub use verify::{sign, InvalidSignature, Verified, Verifier, DEFAULT_TOLERANCE};

/// What a claim found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This transaction owns the message: run the handler; its writes commit with the claim.
    New,
    /// A committed transaction already applied it: answer `2xx` and do nothing.
    Duplicate,
}

impl Claim {
    /// `"new"` or `"duplicate"`, as the adapters answer it.
    pub fn as_str(self) -> &'static str {
        match self {
            Claim::New => "new",
            Claim::Duplicate => "duplicate",
        }
    }
}

/// Whether a claim takes a message that was already applied: [`Force::Rerun`] deletes the
/// message's row and claims it again in the same transaction, under the same key, so later
/// copies are still duplicates and a failed re-run rolls its delete back with it. Never take
/// it from the request: only the body and the three `webhook-` headers are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Force {
    /// The normal claim: a copy of an applied message is a duplicate.
    #[default]
    No,
    /// Run the message's handler again on purpose (the handler was wrong and now is right).
    Rerun,
}

/// What a claim or a purge can fail with (a handler's own errors are its own type, which
/// must take this one: `From<inlet_inbox::Error>`).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The connection is not inside a transaction: the claim would commit on its own,
    /// apart from the handler's writes.
    NotInTransaction,
    /// `process` was given a connection already inside a transaction: it must begin (and
    /// commit) its own, or its answer could precede the real commit.
    AlreadyInTransaction,
    /// An empty consumer or message id.
    EmptyName(EmptyName),
    /// A purge window under a day.
    PurgeWindow(PurgeWindowTooShort),
    #[cfg(feature = "diesel")]
    Diesel(::diesel::result::Error),
    #[cfg(feature = "sqlx")]
    Sqlx(::sqlx::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotInTransaction => f.write_str(
                "an inbox claim needs an open transaction: outside one it would commit \
                 before the handler's writes",
            ),
            Error::AlreadyInTransaction => f.write_str(
                "process begins its own transaction: it cannot run inside another (use claim)",
            ),
            Error::EmptyName(error) => error.fmt(f),
            Error::PurgeWindow(error) => error.fmt(f),
            #[cfg(feature = "diesel")]
            Error::Diesel(error) => write!(f, "the inbox's database: {error}"),
            #[cfg(feature = "sqlx")]
            Error::Sqlx(error) => write!(f, "the inbox's database: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "diesel")]
            Error::Diesel(error) => Some(error),
            #[cfg(feature = "sqlx")]
            Error::Sqlx(error) => Some(error),
            _ => None,
        }
    }
}

impl From<EmptyName> for Error {
    fn from(error: EmptyName) -> Self {
        Error::EmptyName(error)
    }
}

impl From<PurgeWindowTooShort> for Error {
    fn from(error: PurgeWindowTooShort) -> Self {
        Error::PurgeWindow(error)
    }
}

/// Refuses empty keys: every message claimed under an empty id would be one message.
pub fn check_names(consumer: &str, message_id: &str) -> Result<(), EmptyName> {
    match (consumer.is_empty(), message_id.is_empty()) {
        (false, false) => Ok(()),
        (true, _) => Err(EmptyName("consumer")),
        (_, true) => Err(EmptyName("message_id")),
    }
}

/// A claim's consumer or message id was empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmptyName(pub &'static str);

impl std::fmt::Display for EmptyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an inbox claim's {} must not be empty", self.0)
    }
}

impl std::error::Error for EmptyName {}
