//! Finds out at startup whether `database.url` reaches PostgreSQL through a pooler that
//! hands one server connection to many clients between transactions (PgBouncer's
//! `pool_mode = transaction`), so an instance not configured for one refuses to start
//! instead of running another client's prepared statement.

use super::{with_connect_timeout, DatabaseSettings, DatabaseTarget, Pooler};
use diesel::connection::{CacheSize, SimpleConnection};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Nullable, Text};

/// The custom setting the probe writes into its own session.
const PROBE: &str = "inlet.session_probe";

/// Why Inlet will not run on these settings.
#[derive(Debug, thiserror::Error)]
pub enum PoolerError {
    #[error(
        "database.url reaches PostgreSQL through a pooler that shares server connections \
         between clients' transactions (PgBouncer pool_mode = transaction): set \
         database.pooler = \"transaction\" so that Inlet keeps nothing on a server \
         connection between transactions"
    )]
    Unconfigured,
    #[error("cannot probe the connection for a pooler: {0}")]
    Probe(String),
}

/// `Ok` when the settings fit what is between Inlet and PostgreSQL.
pub fn check_pooler(settings: &DatabaseSettings) -> Result<(), PoolerError> {
    let DatabaseTarget::Postgres(url) = &settings.target else {
        return Ok(());
    };
    if settings.pooler == Pooler::Transaction {
        return Ok(());
    }
    let url = with_connect_timeout(url, settings.connect_timeout);
    match sessions_are_shared(&url) {
        Ok(false) => Ok(()),
        Ok(true) => Err(PoolerError::Unconfigured),
        Err(error) => Err(PoolerError::Probe(error.to_string())),
    }
}

/// Two client connections: the first writes a value into its session; if the second
/// reads it, or the first no longer does, their statements ran on shared server
/// connections. A pooler reuses the server connection it used last, so the second sees
/// the value at once; a few rounds make a pooler with spare connections show too.
fn sessions_are_shared(url: &str) -> anyhow::Result<bool> {
    let (mut first, mut second) = (probe_connection(url)?, probe_connection(url)?);
    let token = format!(
        "{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    );
    first.batch_execute(&format!("SELECT set_config('{PROBE}', '{token}', false)"))?;
    let shared = (|| -> QueryResult<bool> {
        for _ in 0..4 {
            if setting(&mut second)?.as_deref() == Some(token.as_str())
                || setting(&mut first)?.as_deref() != Some(token.as_str())
            {
                return Ok(true);
            }
        }
        Ok(false)
    })();
    // Leave no value behind on a server connection someone else gets next.
    let cleared = first.batch_execute(&format!("SELECT set_config('{PROBE}', '', false)"));
    Ok(shared.and_then(|shared| cleared.map(|()| shared))?)
}

fn probe_connection(url: &str) -> anyhow::Result<PgConnection> {
    let mut conn = PgConnection::establish(url)?;
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    Ok(conn)
}

fn setting(conn: &mut PgConnection) -> QueryResult<Option<String>> {
    diesel::select(diesel::dsl::sql::<Nullable<Text>>(&format!(
        "current_setting('{PROBE}', true)"
    )))
    .get_result(conn)
}
