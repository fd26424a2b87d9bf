//! The inbox behind an axum endpoint, on sqlx.
//!
//! [`Receiver::respond`] verifies the raw body, claims the delivery and runs the handler in
//! one transaction, and answers only after the commit: `200 {"claim":"new"|"duplicate"}`,
//! `401` to a delivery that does not verify (Inlet keeps it as a dead letter for an
//! operator), `500` after a rollback (Inlet retries it).

use crate::sqlx::{process, BoxFuture, InboxDatabase};
use crate::verify::Headers;
use crate::{Claim, Force, Verified, Verifier};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use sqlx::Pool;

/// What a handler may fail with: anything, boxed (a database error, a refusal of its own).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// One endpoint's inbox: the pool, the verifier and the consumer name its claims go under.
pub struct Receiver<DB: InboxDatabase> {
    pool: Pool<DB>,
    verifier: Verifier,
    consumer: String,
}

impl<DB: InboxDatabase> Receiver<DB> {
    pub fn new(pool: Pool<DB>, verifier: Verifier, consumer: &str) -> Self {
        Self {
            pool,
            verifier,
            consumer: consumer.to_owned(),
        }
    }

    /// Verifies `body` (the raw bytes: take `Bytes`, never the `Json` extractor) and
    /// processes it exactly once: `handler` runs in the claim's transaction for a new
    /// delivery and not at all for a duplicate; the answer comes after the commit.
    pub async fn respond<F>(&self, headers: &HeaderMap, body: &[u8], handler: F) -> Response
    where
        F: for<'c> FnOnce(
            &'c mut DB::Connection,
            &'c Verified,
        ) -> BoxFuture<'c, Result<(), HandlerError>>,
    {
        let signed = Headers::from_fn(|name| headers.get(name).map(|v| v.as_bytes()));
        let delivery = match self.verifier.verify(signed, body) {
            Ok(delivery) => delivery,
            Err(reason) => {
                tracing::warn!(%reason, "inlet-inbox: a delivery did not verify (401)");
                return problem(
                    StatusCode::UNAUTHORIZED,
                    "the delivery's signature does not verify",
                );
            }
        };
        match process(&self.pool, &self.consumer, &delivery, Force::No, handler).await {
            Ok(claim) => applied(claim),
            Err(error) => {
                tracing::error!(%error, "inlet-inbox: a delivery was rolled back (500, Inlet retries it)");
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the delivery was not applied: rolled back, to be sent again",
                )
            }
        }
    }
}

fn applied(claim: Claim) -> Response {
    let body = format!(r#"{{"claim":"{}"}}"#, claim.as_str());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A `problem+json` answer naming the reason (no internals: the sender is not trusted
/// with them; the log has the cause).
fn problem(status: StatusCode, title: &str) -> Response {
    let body = format!(
        r#"{{"type":"about:blank","title":"{title}","status":{}}}"#,
        status.as_u16()
    );
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body,
    )
        .into_response()
}
