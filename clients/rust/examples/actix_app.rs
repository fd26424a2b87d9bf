//! The README's whole handler: actix-web and diesel on PostgreSQL, with a `payments (body jsonb)`
//! table. `DATABASE_URL=postgres://… INLET_SECRETS=whsec_… cargo run -p inlet-inbox --example actix_app`
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::{sql_query, sql_types::Text, PgConnection, RunQueryDsl};
use inlet_inbox::{actix::HandlerError, actix::Receiver, diesel::create_table, Verified, Verifier};

fn record_payment(tx: &mut PgConnection, delivery: &Verified) -> Result<(), HandlerError> {
    let body = String::from_utf8(delivery.body.clone())?; // runs in the claim's transaction
    sql_query("INSERT INTO payments (body) VALUES ($1::jsonb)").bind::<Text, _>(body).execute(tx)?;
    Ok(())
}

async fn receive(inbox: web::Data<Receiver<PgConnection>>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    inbox.respond(&request, &body, record_payment).await // 200 after the COMMIT, 401, or 500
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pool = Pool::new(ConnectionManager::<PgConnection>::new(std::env::var("DATABASE_URL")?))?;
    create_table(&mut *pool.get()?)?;
    let verifier = Verifier::new(std::env::var("INLET_SECRETS")?.split_whitespace())?; // all in rotation
    let inbox = web::Data::new(Receiver::new(pool, verifier, "payments"));
    let app = move || App::new().app_data(inbox.clone()).route("/webhooks/inlet", web::post().to(receive));
    Ok(HttpServer::new(app).bind("127.0.0.1:9000")?.run().await?)
}
