//! The chaos suite: campaigns against real `inlet serve` processes and real databases
//! that try to make Inlet lose an acknowledged event, apply a fact twice, drop a delivery
//! or accept a request nobody signed. Each prints its figures.
//!
//! The campaigns are `#[ignore]`d, so a plain `cargo test` builds and lints them but does
//! not spend minutes on them (it runs only the oracle's own check); `.ci/run` runs them
//! on their own: `cargo test --test chaos -- --include-ignored --test-threads=1
//! --nocapture`. CI mode is bounded to a few minutes; longer runs with
//! `INLET_CHAOS_ROUNDS` (kill and outage rounds), `INLET_CHAOS_FANOUT_EVENTS` (events fanned
//! out to three instances), `INLET_CHAOS_FUZZ_CASES` (fuzzed requests per backend) and
//! `INLET_CHAOS_FAILOVER_ROUNDS` (each PostgreSQL failover scenario, on a Patroni cluster
//! of the test's own: `scripts/patroni-cluster`);
//! `INLET_CHAOS_SEED` replays a run's random choices, and `INLET_CHAOS_FUZZ_SHOW="Either
//! accepted"` (a verdict and an outcome as the fuzzer's figures name them) prints each
//! such request.

#[path = "../helpers/mod.rs"]
mod helpers;

/// One ignored `#[tokio::test]` per backend for each listed `async fn(Backend)`.
#[macro_export]
macro_rules! chaos_on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "chaos suite: cargo test --test chaos -- --include-ignored"]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "chaos suite: cargo test --test chaos -- --include-ignored"]
                async fn $name() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            )*
        }
    };
}

mod cluster;
mod failover;
mod fanout;
mod fuzz;
mod hostile;
mod kill;
mod load;
mod onto_bus;
mod oracle;
mod outage;
mod private_postgres;
mod reconcile;
mod support;
