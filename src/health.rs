//! `GET /healthz` (the process answers) and `GET /readyz` (the database takes a write
//! within a short timeout and its migrations are current).

use crate::db::{pending_migrations, write_transaction, DbConnection};
use crate::error::Problem;
use crate::startup::AppState;
use actix_web::{web, HttpResponse, ResponseError};
use diesel::connection::SimpleConnection;
use std::time::Duration;

/// How long `/readyz` waits for the database before answering 503.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let pool = state.pool.clone();
    let check = web::block(move || -> Result<(), Problem> {
        let mut conn = pool.get()?;
        check_database(&mut conn)
    });
    let result = match tokio::time::timeout(READY_TIMEOUT, check).await {
        Ok(Ok(result)) => result,
        Ok(Err(blocking)) => Err(Problem::from(blocking)),
        Err(_) => Err(Problem::unavailable(format!(
            "the database did not answer within {}s",
            READY_TIMEOUT.as_secs()
        ))),
    };
    match result {
        Ok(()) => {
            HttpResponse::Ok().json(serde_json::json!({ "status": "ready", "database": "ok" }))
        }
        Err(problem) => {
            tracing::warn!(detail = %problem.detail, "not ready");
            // Whatever went wrong, the answer to "can I send traffic here" is no.
            Problem::unavailable(problem.detail).error_response()
        }
    }
}

/// Ingest needs to write: on SQLite take (and release) the write lock, which a stuck
/// writer or an external lock holder would block; on PostgreSQL a round trip.
fn check_database(conn: &mut DbConnection) -> Result<(), Problem> {
    match conn {
        DbConnection::Sqlite(_) => write_transaction(conn, |_| Ok::<(), Problem>(()))?,
        DbConnection::Postgres(c) => c.batch_execute("SELECT 1")?,
    }
    let pending = pending_migrations(conn).map_err(|e| Problem::unavailable(e.to_string()))?;
    if pending > 0 {
        return Err(Problem::unavailable(format!(
            "{pending} migration(s) not applied: run `inlet migrate`"
        )));
    }
    Ok(())
}
