//! Black-box tests: a real Inlet on port 0, a real database (SQLite file and PostgreSQL),
//! HTTP like a provider sends it. Every test runs once per backend.

mod asana;
mod availability;
mod batches;
mod braintree;
mod bulk;
mod bus;
mod cli;
mod console;
mod contract;
mod delivery;
mod docs_reference;
mod dropbox;
mod ed25519;
mod exactly_once;
mod filters;
mod gates;
mod groups;
#[path = "../helpers/mod.rs"]
mod helpers;
mod hostile;
mod hubspot;
mod in_doubt;
mod ingest;
mod jq_hostile;
mod lifecycle;
mod notices;
mod observability;
mod operator;
mod operators;
mod payloads;
mod plain_hmac;
mod pooler;
mod providers;
mod quickstart;
mod reconcile;
mod reload;
mod replay;
mod retention;
mod routing;
mod schemes;
mod sendgrid;
mod sns;
mod surface;
mod traces;
mod twilio;
