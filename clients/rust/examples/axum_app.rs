//! The same handler on axum and sqlx (feature `axum`), on SQLite with a `payments (body)` table.
//! `INLET_SECRETS=whsec_… cargo run -p inlet-inbox --features axum --example axum_app`
use inlet_inbox::axum::{HandlerError, Receiver};
use inlet_inbox::sqlx::{create_table, BoxFuture};
use inlet_inbox::{Verified, Verifier};
use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use tokio::net::TcpListener;

/// Runs in the claim's transaction: its writes commit with the claim, or roll back with it.
fn record_payment<'c>(tx: &'c mut SqliteConnection, delivery: &'c Verified) -> Pay<'c> {
    let insert = sqlx::query("INSERT INTO payments VALUES (?)").bind(delivery.body());
    Box::pin(async move { Ok(insert.execute(tx).await.map(drop)?) })
}
type Pay<'c> = BoxFuture<'c, Result<(), HandlerError>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = SqlitePool::connect("sqlite:payments.db?mode=rwc").await?; // waits 5 s for a lock
    create_table::<Sqlite>(&mut *pool.acquire().await?).await?;
    let verifier = Verifier::new(std::env::var("INLET_SECRETS")?.split_whitespace())?; // rotation
    let inbox = Receiver::new(pool, verifier, "payments");
    // POST /webhooks/inlet: 200 after the COMMIT (a copy: 200, not run again), 401, or 500.
    let app = inbox.router("/webhooks/inlet", record_payment);
    Ok(axum::serve(TcpListener::bind("127.0.0.1:9000").await?, app).await?)
}
