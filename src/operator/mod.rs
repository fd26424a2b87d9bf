//! The operator's use cases: inspect events and deliveries, replay events (or preview a
//! replay), requeue or discard dead letters. The HTTP handlers in `routes::admin` run the
//! mutating ones inside the caller's Idempotency-Key transaction.

pub mod actions;
mod error;
pub mod sessions;
mod settings;
mod sign_in;
pub mod views;

pub use error::OperatorError;
pub use settings::{
    ConsoleFile, ConsoleSettings, OperatorFile, OperatorSettings, DEFAULT_MAX_REPLAY,
    DEFAULT_SESSION_TTL,
};
pub use sign_in::SignInGuard;
