//! The inbox behind an actix-web endpoint, on diesel through an r2d2 pool.
//!
//! [`Receiver::respond`] verifies the raw body, then on the blocking pool claims the
//! delivery and runs the handler in one transaction, and answers only after the commit:
//! `200 {"claim":"new"|"duplicate"}`, `401` to a delivery that does not verify (Inlet keeps
//! it as a dead letter for an operator), `500` after a rollback (Inlet retries it).

use crate::answer::Answer;
use crate::diesel::{process, InboxConnection};
use crate::verify::Headers;
use crate::{Claim, Force, Verified, Verifier};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};

/// The largest body the endpoint reads: Inlet's default `server.max_body_bytes` (actix-web's
/// own default, 256 KiB, would refuse a larger event `413` on every attempt).
pub const MAX_BODY: usize = 1024 * 1024;

/// What a handler may fail with: anything, boxed (a database error, a refusal of its own).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// One endpoint's inbox: the pool, the verifier and the consumer name its claims go under.
pub struct Receiver<C: R2D2Connection + 'static> {
    pool: Pool<ConnectionManager<C>>,
    verifier: Verifier,
    consumer: String,
}

impl<C: R2D2Connection + 'static> Clone for Receiver<C> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            verifier: self.verifier.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

impl<C> Receiver<C>
where
    C: InboxConnection + R2D2Connection + 'static,
{
    pub fn new(pool: Pool<ConnectionManager<C>>, verifier: Verifier, consumer: &str) -> Self {
        Self {
            pool,
            verifier,
            consumer: consumer.to_owned(),
        }
    }

    /// The endpoint at `path`: `POST` only, bodies up to [`MAX_BODY`], each delivery through
    /// [`Receiver::respond`] with `handler`.
    /// `App::new().service(receiver.resource("/webhooks/inlet", record_payment))`.
    pub fn resource<F>(&self, path: &str, handler: F) -> actix_web::Resource
    where
        F: Fn(&mut C, &Verified) -> Result<(), HandlerError> + Clone + Send + 'static,
    {
        let receiver = self.clone();
        let take = move |request: HttpRequest, body: web::Bytes| {
            let (receiver, handler) = (receiver.clone(), handler.clone());
            async move { receiver.respond(&request, &body, handler).await }
        };
        web::resource(path)
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .route(web::post().to(take))
    }

    /// Verifies `body` (the raw bytes: take `web::Bytes`, never a parsed JSON extractor)
    /// and processes it exactly once: `handler` runs in the claim's transaction for a new
    /// delivery and not at all for a duplicate; the answer comes after the commit.
    pub async fn respond<F>(&self, request: &HttpRequest, body: &[u8], handler: F) -> HttpResponse
    where
        F: FnOnce(&mut C, &Verified) -> Result<(), HandlerError> + Send + 'static,
    {
        let headers = Headers::from_fn(|name| request.headers().get(name).map(|v| v.as_bytes()));
        let answer = match self.verifier.verify(headers, body) {
            Err(reason) => Answer::unverified(&reason),
            Ok(delivery) => {
                let receiver = self.clone();
                match web::block(move || receiver.process(&delivery, handler)).await {
                    Ok(outcome) => Answer::processed(outcome),
                    Err(error) => Answer::processed(Err::<Claim, _>(error)),
                }
            }
        };
        let status =
            StatusCode::from_u16(answer.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        HttpResponse::build(status)
            .content_type(answer.content_type())
            .body(answer.body())
    }

    /// The claim and the handler in one transaction on a pooled connection (blocking).
    fn process<F>(&self, delivery: &Verified, handler: F) -> Result<Claim, HandlerError>
    where
        F: FnOnce(&mut C, &Verified) -> Result<(), HandlerError>,
    {
        let mut conn = self.pool.get()?;
        process(
            &mut *conn,
            &self.consumer,
            delivery,
            Force::No,
            |tx, delivery| handler(tx, delivery),
        )
    }
}
