//! The README's handler (actix-web, diesel, PostgreSQL; a table `payments (body jsonb)`).
//! `DATABASE_URL=… INLET_SECRETS=whsec_… cargo run -p inlet-inbox --example actix_app`
use actix_web::{App, HttpServer};
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::{sql_query, sql_types::Text, PgConnection, RunQueryDsl};
use inlet_inbox::actix::{HandlerError, Receiver};
use inlet_inbox::{diesel::create_table, Verified, Verifier};

fn record_payment(tx: &mut PgConnection, delivery: &Verified) -> Result<(), HandlerError> {
    let body = std::str::from_utf8(delivery.body())?; // runs in the claim's transaction
    let insert = sql_query("INSERT INTO payments VALUES ($1::jsonb)").bind::<Text, _>(body);
    insert.execute(tx)?;
    Ok(())
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let pool = Pool::new(ConnectionManager::<PgConnection>::new(url))?;
    create_table(&mut *pool.get()?)?;
    let verifier = Verifier::new(std::env::var("INLET_SECRETS")?.split_whitespace())?; // rotation
    let inbox = Receiver::new(pool, verifier, "payments");
    // POST /webhooks/inlet: 200 after the COMMIT (a copy: 200, not run again), 401, or 500.
    let app = move || App::new().service(inbox.resource("/webhooks/inlet", record_payment));
    Ok(HttpServer::new(app).bind("127.0.0.1:9000")?.run().await?)
}
