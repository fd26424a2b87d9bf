//! The request path of `POST /webhooks/{source}`: identity, fingerprint, and the one
//! transaction that claims the event, records its fact and stores the answer.
//!
//! ```text
//! claim event (INSERT … ON CONFLICT DO NOTHING RETURNING)
//!   ├─ claimed:  record fact (ON CONFLICT DO NOTHING) → store answer → commit
//!   └─ conflict: read stored row → same fingerprint: stored answer
//!                                  other fingerprint: 422
//! ```

mod event;

use crate::db::{write_transaction, DbConnection};
use crate::delivery::Message;
use crate::error::{Problem, Reason};
use crate::faults::Faults;
use crate::idempotency::{self, Answer, Once};
use crate::identity::Identity;
use crate::ledger::{self, FactIdentity, NewFact};
use chrono::{DateTime, Utc};
use event::{NewEvent, STATUS_PROCESSED};
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
    pub payload: actix_web::web::Bytes,
    /// The request's content type, passed on to destinations.
    pub content_type: String,
    pub received_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Where a new fact is delivered: each destination's name and delivery deadline.
    pub destinations: Vec<(String, DateTime<Utc>)>,
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
) -> Result<Answer, Problem> {
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
    .map_err(|e| Problem::internal(format!("cannot encode the receipt: {e}")))?;
    Ok(Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body,
    })
}

/// Runs the ingest transaction for one verified webhook.
pub fn process(
    conn: &mut DbConnection,
    claim: &Claim,
    faults: &Faults,
) -> Result<(Outcome, Answer), Problem> {
    let event_id = claim.identity.event_id.as_str();
    let event = NewEvent {
        source: &claim.source,
        event_id,
        event_type: claim.identity.event_type.as_deref(),
        fingerprint: &claim.fingerprint,
        status: STATUS_PROCESSED,
        fact_kind: &claim.fact.kind,
        fact_key: &claim.fact.key,
        payload: &claim.payload,
        received_at: claim.received_at.naive_utc(),
        expires_at: claim.expires_at.naive_utc(),
        content_type: Some(&claim.content_type),
    };
    write_transaction(conn, |conn| {
        match idempotency::once(conn, &event, |conn| record_effect(conn, claim, faults))? {
            Once::Ran(outcome, answer) => Ok((outcome, answer)),
            Once::Stored(answer) => Ok((Outcome::StoredAnswer, answer)),
            Once::Mismatch { stored_fingerprint } => Err(Problem::new(
                Reason::FingerprintMismatch,
                format!(
                    "event {} was first received with a body of sha256 {stored_fingerprint}; \
                     this copy's is {}",
                    claim.identity.event_id, claim.fingerprint
                ),
            )),
            Once::Unanswered => Err(Problem::internal("the stored event has no answer")),
        }
    })
}

/// The effect of a newly claimed event: its fact, the fact's deliveries when it is new,
/// and the receipt to store.
fn record_effect(
    conn: &mut DbConnection,
    claim: &Claim,
    faults: &Faults,
) -> Result<(Outcome, Answer), Problem> {
    let event_id = claim.identity.event_id.as_str();
    let record = |conn: &mut DbConnection, fact: &FactIdentity| {
        NewFact {
            source: &claim.source,
            kind: &fact.kind,
            fact_key: &fact.key,
            first_event_id: event_id,
            created_at: claim.received_at.naive_utc(),
        }
        .record(conn)
    };
    let fact_is_new = record(conn, &claim.fact)?;
    let body_is_new = match &claim.body_fact {
        Some(body) => record(conn, body)?,
        None => true,
    };
    if fact_is_new && body_is_new {
        enqueue_deliveries(conn, claim)?;
    }
    faults.after_fact(event_id);
    if fact_is_new && body_is_new {
        let answer = receipt(claim, Outcome::Accepted, &claim.fact, event_id)?;
        return Ok((Outcome::Accepted, answer));
    }
    // The fact the ledger already held: the event's own, else its body's.
    let held = match (&claim.body_fact, fact_is_new) {
        (Some(body), true) => body,
        _ => &claim.fact,
    };
    let first = ledger::first_event_id(conn, &claim.source, held)?;
    let outcome = if first == event_id {
        Outcome::DuplicateAfterExpiry
    } else {
        Outcome::DuplicateFact
    };
    Ok((outcome, receipt(claim, outcome, held, &first)?))
}

/// One outbox row per destination of the source, in the claiming transaction.
fn enqueue_deliveries(conn: &mut DbConnection, claim: &Claim) -> diesel::QueryResult<()> {
    let message = Message {
        source: &claim.source,
        event_id: claim.identity.event_id.as_str(),
        event_type: claim.identity.event_type.as_deref(),
        payload: &claim.payload,
        content_type: &claim.content_type,
    };
    message.enqueue(conn, &claim.destinations, claim.received_at)
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
