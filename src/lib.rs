//! Inlet: webhook ingestion with exactly-once effects.
//!
//! The request path verifies a provider's signature over the raw bytes, claims the event
//! on a UNIQUE constraint, records its fact in a permanent ledger and stores the answer —
//! all in one database transaction — so that every duplicate gets the stored answer and
//! every real-world fact takes effect once. The book (docs/) describes the contract, and
//! docs/src/internals/architecture.md the layout of these modules (each imports only its own
//! layer and the ones below).

pub mod certificates;
pub mod cli;
pub mod clock;
pub mod config;
pub mod curl;
pub mod db;
pub mod delivery;
pub mod duration;
pub mod error;
pub mod faults;
pub mod hook_secrets;
pub mod idempotency;
pub mod identity;
pub mod ingest;
pub mod jq;
pub mod ledger;
pub mod notices;
pub mod observability;
pub mod operator;
pub mod provider;
pub mod reconcile;
pub mod reload;
pub mod retention;
pub mod routes;
pub mod secret;
pub mod signature;
pub mod startup;
pub mod state;
pub mod tools;
pub mod traces;

/// The system allocator, counting each thread's live bytes so a jq evaluation's memory can
/// be bounded (see [`jq`]).
#[global_allocator]
static ALLOCATOR: jq::Counting = jq::Counting;
