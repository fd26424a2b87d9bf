//! The actix-web adapter over real HTTP, on SQLite and PostgreSQL (diesel, r2d2).
#![cfg(feature = "actix-web")]

mod common;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use common::backends::{count, record_payment, Backend, HandlerError};
use common::http::{exercise, fails_once};
use inlet_inbox::actix::Receiver;
use inlet_inbox::Verified;
use std::net::SocketAddr;
use std::sync::mpsc;

/// The handler: fails a `fail_once` delivery the first time, records a payment otherwise.
fn handle<C: Backend>(conn: &mut C, delivery: &Verified) -> Result<(), HandlerError> {
    record_payment(conn, delivery)?;
    match fails_once(delivery.message_id(), delivery.body()) {
        true => Err("the ledger is down".into()),
        false => Ok(()),
    }
}

async fn receive<C: Backend>(
    receiver: web::Data<Receiver<C>>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    receiver.respond(&request, &body, handle::<C>).await
}

/// Serves the receiver on a port of its own, on an actix system in its own thread.
fn serve<C: Backend>(receiver: Receiver<C>) -> SocketAddr {
    let (address_tx, address) = mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let receiver = web::Data::new(receiver);
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(receiver.clone())
                    .route("/webhooks/inlet", web::post().to(receive::<C>))
            })
            .workers(2)
            .bind("127.0.0.1:0")
            .expect("a port");
            address_tx.send(server.addrs()[0]).expect("the test waits");
            server.run().await
        })
    });
    address.recv().expect("the server started")
}

fn an_actix_endpoint_applies_each_delivery_once<C: Backend>() {
    let (_db, pool) = C::open("actix");
    let address = serve(Receiver::new(pool.clone(), common::verifier(), "payments"));
    let url = format!("http://{address}/webhooks/inlet");
    let payments = move || {
        let pool = pool.clone();
        Box::pin(async move { count(&pool, "payments") }) as _
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(exercise(&url, &payments));
}

#[test]
fn sqlite() {
    an_actix_endpoint_applies_each_delivery_once::<diesel::SqliteConnection>();
}

#[test]
fn postgres() {
    an_actix_endpoint_applies_each_delivery_once::<diesel::PgConnection>();
}
