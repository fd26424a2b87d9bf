//! The operator's use cases: inspect events and deliveries, replay events (or preview a
//! replay), requeue or discard dead letters — typed calls on [`UseCases`], which the admin
//! API and the console adapt to HTTP; the mutating ones run inside the caller's
//! Idempotency-Key transaction. `actions` holds their queries, `views` the console's.

pub mod actions;
pub mod as_documented;
pub mod audit;
mod bulk;
mod bulk_runner;
mod caller;
mod calls;
mod dead_letters;
mod error;
mod evaluate;
mod hook_secrets;
mod listing;
mod reconcile;
mod replay;
pub mod roles;
pub mod sessions;
mod settings;
mod sign_in;
mod trail;
pub mod views;

pub use audit::{AuditFilter, AuditRow, Entry as AuditEntry, Outcome, Recorder};
pub use bulk::{
    Bulk, BulkCreated, BulkFilter, BulkKind, BulkPreview, BulkRequest, BulkRow, Previewed,
    PREVIEW_PLANNED,
};
pub use bulk_runner::BulkRunner;
pub use caller::Caller;
pub use calls::{json_answer, Answered, Encode, Ground, IdempotencyKey, KeyedRequest, UseCases};
pub use dead_letters::{DeadLetterAction, DeadLetterReport, DeadLetterRequest, DeadLetters};
pub use error::OperatorError;
pub use evaluate::{DestinationEvaluation, EvaluateRequest, Evaluation, ExpressionResult};
pub use hook_secrets::{
    ClearHookSecretRequest, HookSecretCleared, HookSecretView, CLEAR_HOOK_SECRET_ROUTE,
};
pub use listing::{Listing, DEFAULT_PAGE, MAX_PAGE};
pub use reconcile::{ReconcileAsked, ReconcileCall, RECONCILE_ROUTE};
pub use replay::{EventRef, Replay, ReplayReport, ReplayRequest, REPLAY_ROUTE};
pub use roles::{Account, Role};
pub use settings::{
    AdminFile, AdminSettings, ConsoleFile, ConsoleSettings, OperatorEntryFile, OperatorFile,
    OperatorSettings, DEFAULT_MAX_REPLAY, DEFAULT_SESSION_TTL,
};
pub use sign_in::SignInGuard;
