//! `GET /healthz` (the process answers; never touches the database), `GET /readyz` (the
//! database takes a write within a short timeout, its migrations are current, and the
//! sweeper has succeeded within three intervals; broker destinations are listed, each
//! `ok` or `degraded`, without making the service unready), and `GET /metrics`.

use crate::db::{pending_migrations, write_transaction, DbConnection};
use crate::delivery::{count_by_status, BrokerState, DEAD, IN_PROGRESS, PENDING};
use crate::routes::Problem;
use crate::state::AppState;
use actix_web::{web, HttpResponse, ResponseError};
use diesel::connection::SimpleConnection;
use std::time::Duration;

/// How long `/readyz` and the `/metrics` gauges wait for the database.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

/// Runs `work` on a pooled connection off the executor, giving up after `READY_TIMEOUT`.
async fn with_timeout<T: Send + 'static>(
    state: &AppState,
    work: impl FnOnce(&mut DbConnection) -> Result<T, Problem> + Send + 'static,
) -> Result<T, Problem> {
    let task = crate::db::on_connection(&state.pool, work);
    match tokio::time::timeout(READY_TIMEOUT, task).await {
        Ok(result) => result,
        Err(_) => Err(Problem::unavailable(format!(
            "the database did not answer within {}s",
            READY_TIMEOUT.as_secs()
        ))),
    }
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let mut failing = Vec::new();
    match with_timeout(&state, check_database).await {
        Ok(Some(migrations)) => failing.push(migrations),
        Ok(None) => {}
        Err(problem) => {
            // The full error is for the log; /readyz is open to anyone.
            tracing::warn!(detail = %problem.detail, "readiness: the database check failed");
            failing.push("database: unavailable".to_owned());
        }
    }
    if let Some(stalled) = state
        .sweeper
        .as_ref()
        .and_then(|s| s.stalled_for(state.clock.now()))
    {
        failing.push(format!(
            "sweeper: no successful sweep for {}s (more than three sweep intervals)",
            stalled.num_seconds()
        ));
    }
    if failing.is_empty() {
        let mut ready = serde_json::json!({ "status": "ready", "database": "ok" });
        if let Some(brokers) = broker_states(&state) {
            ready["destinations"] = brokers;
        }
        return HttpResponse::Ok().json(ready);
    }
    let detail = failing.join("; ");
    tracing::warn!(%detail, "not ready");
    Problem::unavailable(detail).error_response()
}

/// Each broker destination (`source/destination`) and its state: `ok`, `not connected
/// yet`, or `degraded: <why>`. A degraded broker leaves the service ready: webhooks are
/// still accepted, and that destination's deliveries wait in the outbox.
fn broker_states(state: &AppState) -> Option<serde_json::Value> {
    let states = state.brokers.as_ref()?.states();
    if states.is_empty() {
        return None;
    }
    let mut degraded = 0;
    let map: serde_json::Map<String, serde_json::Value> = states
        .into_iter()
        .map(|(name, broker)| {
            let text = match broker {
                BrokerState::Up => "ok".to_owned(),
                BrokerState::NotConnected => "not connected yet".to_owned(),
                BrokerState::Degraded(why) => {
                    degraded += 1;
                    format!("degraded: {why}")
                }
            };
            (name, serde_json::Value::String(text))
        })
        .collect();
    if degraded > 0 {
        tracing::warn!(degraded, "readiness: broker destinations degraded");
    }
    Some(serde_json::Value::Object(map))
}

/// Ingest needs to write: on SQLite take (and release) the write lock, which a stuck
/// writer or an external lock holder would block; on PostgreSQL a round trip. Returns the
/// migration problem, if any.
fn check_database(conn: &mut DbConnection) -> Result<Option<String>, Problem> {
    match conn {
        DbConnection::Sqlite(_) => write_transaction(conn, |_| Ok::<(), Problem>(()))?,
        DbConnection::Postgres(c) => c.batch_execute("SELECT 1")?,
    }
    let pending = pending_migrations(conn).map_err(|e| Problem::unavailable(e.to_string()))?;
    Ok((pending > 0).then(|| format!("migrations: {pending} not applied (run `inlet migrate`)")))
}

/// Prometheus text. The outbox and pool gauges are read at scrape time; when the database
/// does not answer they keep their last values and the scrape still succeeds.
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let pool_state = state.pool.state();
    let idle = f64::from(pool_state.idle_connections);
    metrics::gauge!("inlet_db_pool_connections", "state" => "idle").set(idle);
    metrics::gauge!("inlet_db_pool_connections", "state" => "in_use")
        .set(f64::from(pool_state.connections) - idle);
    let counts = with_timeout(&state, |conn| {
        let pending = count_by_status(conn, PENDING)? + count_by_status(conn, IN_PROGRESS)?;
        Ok((pending, count_by_status(conn, DEAD)?))
    })
    .await;
    match counts {
        Ok((pending, dead)) => {
            metrics::gauge!("inlet_outbox_pending").set(pending as f64);
            metrics::gauge!("inlet_dead_letters").set(dead as f64);
        }
        Err(problem) => tracing::debug!(detail = %problem.detail, "outbox gauges not refreshed"),
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(crate::observability::prometheus().render())
}
