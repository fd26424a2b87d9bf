//! The operator's use cases, one call each, shared by the admin API and the console (the
//! CLI calls the API): typed requests in, typed results out. [`UseCases`] holds what one
//! request runs under — the pool, one settings snapshot, the time — and every mutating
//! call runs inside its Idempotency-Key's transaction ([`UseCases::once`]): a retry, a double
//! click or a re-submitted form gets the stored answer, byte for byte.

use super::audit::{self, Entry};
use super::caller::Caller;
use super::OperatorError;
use crate::db::{read_committed, write_transaction, DbConnection, DbPool};
use crate::delivery::Destinations;
use crate::faults::Faults;
use crate::idempotency::{self, Answer, Once, OperatorKey};
use crate::retention::RetentionSettings;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tokio::sync::Notify;

/// What the use cases read of the settings in force. The configuration module implements
/// it for its snapshot, so that one call sees one snapshot throughout.
pub trait Ground: Send + Sync + 'static {
    fn destinations(&self) -> &Destinations;
    fn retention(&self) -> &RetentionSettings;
    /// The most events a replay, or dead letters a requeue, takes at once.
    fn max_replay(&self) -> u32;
}

/// An `Idempotency-Key`: 1 to 255 printable characters, from the API or a console form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(key: &str) -> Result<Self, OperatorError> {
        Self::from_header(key.as_bytes())
    }

    /// A header's raw value as a key.
    pub fn from_header(key: &[u8]) -> Result<Self, OperatorError> {
        let printable = key.iter().all(u8::is_ascii_graphic);
        match std::str::from_utf8(key) {
            Ok(text) if !text.is_empty() && text.len() <= 255 && printable => {
                Ok(Self(text.to_owned()))
            }
            _ => Err(OperatorError::Invalid(
                "an Idempotency-Key is 1 to 255 printable characters".to_owned(),
            )),
        }
    }

    /// The key a mutating call cannot do without.
    pub fn required(key: Option<Self>) -> Result<Self, OperatorError> {
        key.ok_or_else(|| {
            OperatorError::KeyMissing("mutating calls need an Idempotency-Key header".to_owned())
        })
    }
}

/// A mutating call's key: who calls, under which key, and the bytes of the request the
/// key's fingerprint covers (the API's body as sent; the console's request as it encodes
/// it), so that one key cannot be reused for another request.
pub struct KeyedRequest<'a> {
    pub caller: Caller,
    pub key: IdempotencyKey,
    pub request: &'a [u8],
}

/// What a call answered: its answer as stored (what the API sends, byte for byte),
/// whether that is the stored answer of an earlier call with the same key, and its
/// result — the call's own, or the stored answer's when it reads as one.
#[derive(Debug)]
pub struct Answered<T> {
    pub answer: Answer,
    pub replayed: bool,
    pub result: Option<T>,
}

impl<T: DeserializeOwned> Answered<T> {
    fn ran(result: T, answer: Answer) -> Self {
        Self {
            answer,
            replayed: false,
            result: Some(result),
        }
    }

    fn stored(answer: Answer) -> Self {
        let result = (answer.status < 400)
            .then(|| serde_json::from_slice(&answer.body).ok())
            .flatten();
        Self {
            answer,
            replayed: true,
            result,
        }
    }
}

/// What the audit trail says a call did, given the status it answered.
pub trait Summary {
    fn summary(&self, status: u16) -> String;
}

/// How a result is stored and answered: the edge's encoding (a status and a body).
pub type Encode<T, S> = fn(&T, &S) -> Result<Answer, OperatorError>;

/// The operator's use cases for one request.
pub struct UseCases<S> {
    pub pool: DbPool,
    /// The request's one settings snapshot.
    pub settings: Arc<S>,
    pub now: DateTime<Utc>,
    /// Wakes this instance's dispatcher when a call enqueued deliveries.
    pub waker: Option<Arc<Notify>>,
    /// Armed faults (tests): the audit insert's.
    pub faults: Arc<Faults>,
}

impl<S: Ground> UseCases<S> {
    /// Runs `work` on a pooled connection off the executor, with the snapshot.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut DbConnection, &S) -> Result<T, OperatorError> + Send + 'static,
    ) -> Result<T, OperatorError> {
        let settings = self.settings.clone();
        crate::db::on_connection(&self.pool, move |conn| work(conn, &settings)).await
    }

    /// Claims the key, runs `work`, stores its encoded answer and writes the audit row of
    /// `action` in one transaction; or answers a retry with the stored answer, byte for
    /// byte (and writes no second row). Validation happens before this, so a refused
    /// request stores nothing and a corrected retry with the same key works. The
    /// fingerprint covers `route` (`"POST /admin/replay"`) and the request.
    pub(super) async fn once<T>(
        &self,
        (route, action): (&str, &'static str),
        keyed: KeyedRequest<'_>,
        work: impl FnOnce(&mut DbConnection, &S, DateTime<Utc>) -> Result<T, OperatorError>
            + Send
            + 'static,
        encode: Encode<T, S>,
    ) -> Result<Answered<T>, OperatorError>
    where
        T: DeserializeOwned + Summary + Send + 'static,
    {
        let fingerprint = hex::encode(Sha256::digest(
            [route.as_bytes(), b"\n", keyed.request].concat(),
        ));
        let (now, expires_at) = (
            self.now,
            self.now + self.settings.retention().operator_keys.0,
        );
        let (caller, key, parameters) = (keyed.caller, keyed.key, keyed.request.to_vec());
        let faults = self.faults.clone();
        let called = self
            .read(move |conn, settings| {
                write_transaction(conn, |conn| {
                    // Each statement sees what committed before it (a replay's event
                    // locks against a sweep), whatever the server's default isolation.
                    read_committed(conn)?;
                    let operator_key = OperatorKey {
                        caller: &caller.scope,
                        idempotency_key: &key.0,
                        fingerprint: &fingerprint,
                        created_at: now.naive_utc(),
                        expires_at: expires_at.naive_utc(),
                    };
                    let call = idempotency::once(conn, &operator_key, |conn| {
                        let result = work(conn, settings, now)?;
                        let answer = encode(&result, settings)?;
                        let summary = result.summary(answer.status);
                        let done = Entry::done(&caller, action, &parameters, &summary, now);
                        let entry = Entry {
                            idempotency_key: Some(&key.0),
                            ..done
                        };
                        audit::record(conn, &faults, &entry)?;
                        Ok::<_, OperatorError>((result, answer))
                    })?;
                    answered(call)
                })
            })
            .await?;
        if !called.replayed {
            // A replay or requeue enqueued work: send it now rather than at the next poll.
            if let Some(waker) = &self.waker {
                waker.notify_one();
            }
        }
        Ok(called)
    }
}

fn answered<T: DeserializeOwned>(call: Once<T>) -> Result<Answered<T>, OperatorError> {
    match call {
        Once::Ran(result, answer) => Ok(Answered::ran(result, answer)),
        Once::Stored(answer) => Ok(Answered::stored(answer)),
        Once::Mismatch { .. } => Err(OperatorError::KeyReused(
            "this Idempotency-Key was used for a different request".to_owned(),
        )),
        Once::Unanswered => Err(OperatorError::Internal(
            "the stored call has no response".to_owned(),
        )),
    }
}

/// A JSON answer with `status` (`application/problem+json` from 400 on).
pub fn json_answer(status: u16, body: Vec<u8>) -> Answer {
    Answer {
        status,
        content_type: idempotency::content_type_of(status).to_owned(),
        body,
    }
}
