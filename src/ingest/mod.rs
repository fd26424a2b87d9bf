//! The request path of `POST /webhooks/{source}` once its body is read: verification,
//! the claim ([`Intake`]), and the transaction that claims the event, records its fact,
//! writes its outbox rows and stores its answer — run for a whole group of webhooks at
//! once by the [`Committer`].
//!
//! ```text
//! claim event (INSERT … ON CONFLICT DO NOTHING RETURNING)
//!   ├─ claimed:  record fact (ON CONFLICT DO NOTHING) → outbox rows if new → answer
//!   └─ conflict: read stored row → same fingerprint: stored answer
//!                                  other fingerprint: 422
//! ```

mod committer;
mod event;
mod group;
mod intake;
mod recover;
mod setup;
mod stored_headers;
mod told;
mod webhook;

pub use committer::Committer;
pub use event::{claim_all, NewEvent, STATUS_PROCESSED};
pub use group::{process, process_group, Ingested};
pub use stored_headers::{read_stored_headers, REDACTED};
pub use told::{IntakeWatcher, Told};
pub use webhook::{Intake, Received, Refusal, SetupRefusal, Webhook};

use crate::db::StoreError;
use crate::delivery::Route;
use crate::idempotency::Answer;
use crate::identity::Identity;
use crate::ledger::FactIdentity;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// `sha256(raw body)` in hex: a copy with the same id and another body is refused.
pub fn fingerprint(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// Everything the transaction needs, computed before it starts.
#[derive(Debug, Clone)]
pub struct Claim {
    pub source: String,
    pub identity: Identity,
    pub fact: FactIdentity,
    /// The signed body's own fact, recorded beside `fact` where the event id (and so the
    /// type) is unsigned and `fact` is keyed otherwise: a captured body re-sent under a
    /// fresh id and another type then still finds its fact.
    pub body_fact: Option<FactIdentity>,
    pub fingerprint: String,
    pub payload: bytes::Bytes,
    /// The request's content type, passed on to destinations.
    pub content_type: String,
    /// The request headers as received, credentials redacted: JSON `[[name, value], …]`.
    pub headers: String,
    pub received_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Where a new fact is delivered: each destination's name and delivery deadline,
    /// and whether its filter decided.
    pub destinations: Vec<Route>,
    /// The provider's own answer in place of Inlet's receipt (a Discord interaction's
    /// deferred response), stored and replayed like it.
    pub answer: Option<Answer>,
    /// The W3C `traceparent` of the span that received it (tracing on): stored with the
    /// event and its outbox rows, and the parent of its commit's spans.
    pub trace_parent: Option<String>,
    /// How it arrived: `None` for a webhook.
    pub arrival: Option<Arrival>,
    /// The raw body's sha256 where `fingerprint` is the digest of a canonical reading of
    /// it (Stripe, Paddle): rows stored before that reading hold this one, and a copy of
    /// them is still the same event.
    pub earlier_fingerprint: Option<String>,
}

/// How an event arrived other than as a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Fetched from its provider's own record by a reconciliation run: trusted by the
    /// authenticated API call that fetched it, not by a signature.
    Recovered,
}

impl Arrival {
    /// As the `events.arrival` column holds it.
    pub fn as_stored(self) -> &'static str {
        match self {
            Self::Recovered => "recovered",
        }
    }
}

/// Why the ingest transaction gave a webhook no answer of its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// The event id was first received with another body.
    #[error("{0}")]
    FingerprintMismatch(Mismatch),
    /// The database: unavailable, contended, or refusing.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A failure inside Inlet.
    #[error("{0}")]
    Internal(String),
}

/// An event id first received with a body of `stored` fingerprint, now with `received`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub event_id: String,
    pub stored: String,
    pub received: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "event {} was first received with a body of sha256 {}; this copy's is {}",
            self.event_id, self.stored, self.received
        )
    }
}

impl IngestError {
    /// A failure of Inlet or its database rather than of the webhook or its conditions.
    pub fn is_internal(&self) -> bool {
        matches!(self, Self::Internal(_) | Self::Store(StoreError::Failed(_)))
    }
}

impl From<diesel::result::Error> for IngestError {
    fn from(error: diesel::result::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<crate::db::CommitInDoubt> for IngestError {
    fn from(error: crate::db::CommitInDoubt) -> Self {
        Self::Store(error.into())
    }
}

impl From<r2d2::Error> for IngestError {
    fn from(error: r2d2::Error) -> Self {
        Self::Store(error.into())
    }
}

impl From<tokio::task::JoinError> for IngestError {
    fn from(error: tokio::task::JoinError) -> Self {
        Self::Store(error.into())
    }
}

/// What became of a webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A new event of a new fact: the effect happened now.
    Accepted,
    /// A new event id for a fact the ledger already holds: no second effect.
    DuplicateFact,
    /// A copy of an event whose dedupe record had expired: its fact (permanent) was
    /// recorded under this very event id, so it has no second effect.
    DuplicateAfterExpiry,
    /// A copy of an event already processed: its stored answer (counted as `replayed`).
    StoredAnswer,
    /// Part of a provider's setup protocol (Slack `url_verification`): answered, not stored.
    Handshake,
}

impl Outcome {
    /// A batch request's outcome, from its items': `accepted` when any item was a new
    /// fact, else `duplicate_fact` when any was a duplicate of one, else `replayed`.
    pub fn of_batch(items: &[(String, Outcome)]) -> Outcome {
        let any = |wanted: &[Outcome]| items.iter().any(|(_, o)| wanted.contains(o));
        if any(&[Outcome::Accepted]) {
            Outcome::Accepted
        } else if any(&[Outcome::DuplicateFact, Outcome::DuplicateAfterExpiry]) {
            Outcome::DuplicateFact
        } else {
            Outcome::StoredAnswer
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::DuplicateFact => "duplicate_fact",
            Outcome::DuplicateAfterExpiry => "duplicate_after_expiry",
            Outcome::StoredAnswer => "replayed",
            Outcome::Handshake => "handshake",
        }
    }
}

/// The answer body for a processed event (stored and replayed byte-for-byte).
#[derive(Serialize)]
struct Receipt<'a> {
    outcome: &'static str,
    source: &'a str,
    event_id: &'a str,
    event_type: Option<&'a str>,
    fact: FactReceipt<'a>,
}

#[derive(Serialize)]
struct FactReceipt<'a> {
    kind: &'a str,
    key: &'a str,
    first_event_id: &'a str,
}

fn receipt(
    claim: &Claim,
    outcome: Outcome,
    fact: &FactIdentity,
    first_event_id: &str,
) -> Result<Answer, IngestError> {
    if let Some(answer) = &claim.answer {
        return Ok(answer.clone());
    }
    let body = serde_json::to_vec(&Receipt {
        outcome: outcome.as_str(),
        source: &claim.source,
        event_id: claim.identity.event_id.as_str(),
        event_type: claim.identity.event_type.as_deref(),
        fact: FactReceipt {
            kind: &fact.kind,
            key: &fact.key,
            first_event_id,
        },
    })
    .map_err(|e| IngestError::Internal(format!("cannot encode the receipt: {e}")))?;
    Ok(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_sha256_hex() {
        assert_eq!(
            fingerprint(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
