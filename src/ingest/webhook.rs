//! What the intake takes and gives: the settings and services a webhook is received under
//! ([`Intake`]), the webhook itself, what it was answered, and why it was refused.

use super::told::IntakeWatcher;
use super::{IngestError, Outcome};
use crate::certificates::Certificates;
use crate::clock::Clock;
use crate::db::{DbPool, StoreError};
use crate::delivery::Destinations;
use crate::faults::Faults;
use crate::idempotency::Answer;
use crate::identity::IdentityError;
use crate::provider::SourceSettings;
use crate::signature::{Fetch, Headers, SignatureError};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio::sync::Notify;

/// Everything a webhook of one source is received under: one settings snapshot, read
/// once per request by the edge, and the services its provider's setup uses.
#[derive(Clone, Copy)]
pub struct Intake<'a> {
    pub source: &'a SourceSettings,
    pub destinations: &'a Destinations,
    /// How long an event's payload and answer are kept (`retention.events`).
    pub retention: Duration,
    pub now: DateTime<Utc>,
    /// Wakes this instance's dispatcher when a new fact has deliveries.
    pub waker: Option<&'a Notify>,
    /// This instance's fault injection (nothing without the `fault-injection` feature).
    pub faults: &'a Faults,
    /// The database a handshake stores its secret in.
    pub pool: &'a DbPool,
    /// The certificates fetched for sources verified with one (SNS), and the subscriptions
    /// confirmed.
    pub certificates: &'a Certificates,
    pub clock: &'a dyn Clock,
    /// Told what the intake sees (the notices, when configured).
    pub watcher: Option<&'a dyn IntakeWatcher>,
}

/// A webhook as received: its headers, its raw body (a shared buffer: the claim keeps it
/// without a copy) and its URL's query (where a provider's validation puts its token).
pub struct Webhook<'r> {
    pub headers: &'r dyn Headers,
    pub body: &'r Bytes,
    pub query: &'r str,
}

/// What a webhook was answered: its outcome, its event id (none for a handshake or a
/// batch) and the answer itself; for a batch, each item's event id and outcome.
#[derive(Debug)]
pub struct Received {
    pub outcome: Outcome,
    pub event_id: Option<String>,
    pub answer: Answer,
    pub items: Vec<(String, Outcome)>,
    /// How many of a batch's items were dropped: they did not authenticate (Graph).
    pub dropped: usize,
    /// A header the answer echoes (the secret a handshake offered, once stored).
    pub echo: Option<(&'static str, String)>,
    /// For a handshake that confirms a subscription by a visit (SNS's
    /// `SubscriptionConfirmation`): the URL to visit before the answer is sent.
    pub(super) visit: Option<Fetch>,
}

impl Received {
    /// A provider's setup request, answered and never stored (and the base of every other
    /// answer).
    pub fn handshake(answer: Answer) -> Self {
        Self {
            outcome: Outcome::Handshake,
            event_id: None,
            answer,
            items: Vec::new(),
            dropped: 0,
            echo: None,
            visit: None,
        }
    }
}

/// Why a webhook was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error(transparent)]
    Setup(#[from] SetupRefusal),
}

impl From<StoreError> for Refusal {
    fn from(error: StoreError) -> Self {
        Self::Setup(error.into())
    }
}

/// Why a provider's setup refused a request: nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum SetupRefusal {
    /// The provider's validation request is not one its protocol allows.
    #[error("{0}")]
    InvalidChallenge(String),
    /// A handshake offered a secret that cannot be one.
    #[error("{0}")]
    MalformedSecret(String),
    /// A handshake offered another secret than the one the source holds (or configures).
    #[error("{0}")]
    HookSecretHeld(String),
    /// The source has no secret to verify with, or its certificate URL serves none.
    #[error("{0}")]
    NoKey(String),
    /// The certificate could not be fetched: asking again after `retry_after` may help.
    #[error("{detail}")]
    CertificateUnavailable {
        detail: String,
        retry_after: Duration,
    },
    /// The subscription could not be confirmed: the provider sends it again later.
    #[error("{detail}")]
    SubscriptionUnconfirmed {
        detail: String,
        retry_after: Duration,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}
