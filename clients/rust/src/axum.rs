//! The inbox behind an axum endpoint, on sqlx.
//!
//! [`Receiver::respond`] verifies the raw body, claims the delivery and runs the handler in
//! one transaction, and answers only after the commit: `200 {"claim":"new"|"duplicate"}`,
//! `401` to a delivery that does not verify (Inlet keeps it as a dead letter for an
//! operator), `500` after a rollback (Inlet retries it).

use crate::answer::Answer;
use crate::sqlx::{process, BoxFuture, InboxDatabase};
use crate::verify::Headers;
use crate::{Force, Verified, Verifier};
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use sqlx::Pool;
use std::sync::Arc;

/// The largest body the endpoint reads: Inlet's default `server.max_body_bytes`.
pub const MAX_BODY: usize = 1024 * 1024;

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

    /// A router with the endpoint at `path`: `POST` only, bodies up to [`MAX_BODY`], each
    /// delivery through [`Receiver::respond`] with `handler`.
    pub fn router<F>(self, path: &str, handler: F) -> Router
    where
        F: for<'c> Fn(
                &'c mut DB::Connection,
                &'c Verified,
            ) -> BoxFuture<'c, Result<(), HandlerError>>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        let receiver = Arc::new(self);
        let take = move |headers: HeaderMap, body: Bytes| {
            let (receiver, handler) = (receiver.clone(), handler.clone());
            async move { receiver.respond(&headers, &body, handler).await }
        };
        Router::new()
            .route(path, post(take))
            .layer(DefaultBodyLimit::max(MAX_BODY))
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
        let answer = match self.verifier.verify(signed, body) {
            Err(reason) => Answer::unverified(&reason),
            Ok(delivery) => {
                let outcome = process(&self.pool, &self.consumer, &delivery, Force::No, handler);
                Answer::processed(outcome.await)
            }
        };
        let status =
            StatusCode::from_u16(answer.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            [(header::CONTENT_TYPE, answer.content_type())],
            answer.body(),
        )
            .into_response()
    }
}
