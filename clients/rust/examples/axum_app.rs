//! The same handler on axum and sqlx (feature `axum`), on SQLite with a `payments (body)` table.
//! `INLET_SECRETS=whsec_… cargo run -p inlet-inbox --features axum --example axum_app`
use axum::{body::Bytes, extract::State, http::HeaderMap, response::Response, routing::post, Router};
use inlet_inbox::axum::{HandlerError, Receiver};
use inlet_inbox::{sqlx::create_table, sqlx::BoxFuture, Verified, Verifier};
use sqlx::{Sqlite, SqliteConnection, SqlitePool};
use std::sync::Arc;

fn record_payment<'c>(tx: &'c mut SqliteConnection, delivery: &'c Verified) -> BoxFuture<'c, Result<(), HandlerError>> {
    let insert = sqlx::query("INSERT INTO payments (body) VALUES (?)").bind(&delivery.body);
    Box::pin(async move { Ok(insert.execute(tx).await.map(drop)?) }) // in the claim's transaction
}

async fn receive(State(inbox): State<Arc<Receiver<Sqlite>>>, headers: HeaderMap, body: Bytes) -> Response {
    inbox.respond(&headers, &body, record_payment).await // 200 after the COMMIT, 401, or 500
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = SqlitePool::connect("sqlite:payments.db?mode=rwc").await?; // sqlx waits 5 s for a lock
    create_table::<Sqlite>(&mut *pool.acquire().await?).await?;
    let verifier = Verifier::new(std::env::var("INLET_SECRETS")?.split_whitespace())?; // all in rotation
    let inbox = Arc::new(Receiver::new(pool, verifier, "payments"));
    let app = Router::new().route("/webhooks/inlet", post(receive)).with_state(inbox);
    Ok(axum::serve(tokio::net::TcpListener::bind("127.0.0.1:9000").await?, app).await?)
}
