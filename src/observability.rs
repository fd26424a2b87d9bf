//! Logging setup. `INLET_LOG` (or `RUST_LOG`) sets the filter, `info` by default. Payloads
//! and secrets are never logged: handlers log sources, event ids, outcomes and reasons.

use tracing_subscriber::EnvFilter;

pub fn init_logging() {
    let filter = EnvFilter::try_from_env("INLET_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // A second call (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}
