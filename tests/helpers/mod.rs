//! Test harness: every test gets a real Inlet on port 0 backed by its own fresh database —
//! an SQLite file or a new PostgreSQL database — and talks to it over HTTP like a provider.
//! Shared by the `api`, `chaos` and `outage` test binaries (each uses part of it), one
//! file per concern.
//!
//! `INLET_TEST_POSTGRES_URL` names the PostgreSQL server used to create test databases
//! (default `postgres://postgres@127.0.0.1:5432/postgres`). A PostgreSQL test fails, never
//! skips, when that server is unreachable.
#![allow(dead_code)]

mod app;
mod application;
mod client;
mod config;
pub mod contract;
mod database;
mod otlp;
mod process;
pub mod provider_apis;
mod signing;
mod sns;
mod wait;

// Each binary uses part of the harness, so some re-exports go unused in each.
#[allow(unused_imports)]
pub use app::*;
#[allow(unused_imports)]
pub use application::*;
#[allow(unused_imports)]
pub use client::*;
#[allow(unused_imports)]
pub use config::*;
#[allow(unused_imports)]
pub use database::*;
#[allow(unused_imports)]
pub use otlp::*;
#[allow(unused_imports)]
pub use process::*;
#[allow(unused_imports)]
pub use provider_apis::*;
#[allow(unused_imports)]
pub use signing::*;
#[allow(unused_imports)]
pub use sns::*;
#[allow(unused_imports)]
pub use wait::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates one `#[tokio::test]` per backend for each listed `async fn(Backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            )*
        }
    };
}
