//! The operator's use cases: inspect events and deliveries, replay events (or preview a
//! replay), requeue or discard dead letters — typed calls on [`Calls`], which the admin
//! API and the console adapt to HTTP; the mutating ones run inside the caller's
//! Idempotency-Key transaction. `actions` holds their queries, `views` the console's.

pub mod actions;
mod calls;
mod dead_letters;
mod error;
mod listing;
mod replay;
pub mod sessions;
mod settings;
mod sign_in;
pub mod views;

pub use calls::{json_answer, Called, Caller, Calls, Encode, Ground, IdempotencyKey, Keyed};
pub use dead_letters::{DeadLetterAction, DeadLetterReport, DeadLetterRequest, DeadLetters};
pub use error::OperatorError;
pub use listing::{Listing, DEFAULT_PAGE, MAX_PAGE};
pub use replay::{EventRef, Replay, ReplayReport, ReplayRequest, REPLAY_ROUTE};
pub use settings::{
    ConsoleFile, ConsoleSettings, OperatorFile, OperatorSettings, DEFAULT_MAX_REPLAY,
    DEFAULT_SESSION_TTL,
};
pub use sign_in::SignInGuard;
