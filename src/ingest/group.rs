//! One transaction for a group of verified webhooks, in set-based statements:
//!
//! ```text
//! claim every event      one INSERT … ON CONFLICT DO NOTHING RETURNING (with the answer
//!                        a new fact gets, so storing it costs no second write)
//! conflicts              one read of the stored rows → stored answer or 422
//! facts of the claimed   one INSERT … ON CONFLICT DO NOTHING RETURNING
//! outbox rows            one multi-row INSERT, for the facts that are new
//! other answers          an UPDATE per claimed event whose fact was already held (rare)
//! ```
//!
//! Inside a group the same rules hold as between groups: the first copy of an event id
//! claims it and the later ones get its answer (or 422 for another body); the first event
//! of a fact records it and later ones are `duplicate_fact`. Keys are written in sorted
//! order, so concurrent groups on PostgreSQL take their locks in one order.

use super::event::{self, NewEvent, STATUS_PROCESSED};
use super::{receipt, Arrival, Claim, IngestError, Mismatch, Outcome};
use crate::db::{set_local_lock_timeout, write_transaction_losing, DbConnection, StoreError};
use crate::delivery::{Message, NewDelivery};
use crate::faults::Faults;
use crate::idempotency::{self, Answer, Once, StoredCall};
use crate::identity::EventKey;
use crate::ledger::{self, FactIdentity, LedgerKey, NewFact};
use std::collections::{BTreeMap, HashMap, HashSet};

/// What the ingest transaction made of one webhook: its outcome and answer, or why it
/// failed (not to be confused with a delivery's `delivery::Verdict`).
pub type Ingested = Result<(Outcome, Answer), IngestError>;

/// Runs the ingest transaction for one verified webhook alone: a group of one.
pub fn process(conn: &mut DbConnection, claim: &Claim, faults: &Faults) -> Ingested {
    let mut verdicts = process_group(conn, &[claim], faults, None)?;
    verdicts.pop().unwrap_or_else(|| {
        Err(IngestError::Internal(
            "a group of one gave no verdict".to_owned(),
        ))
    })
}

/// Runs one transaction for `claims`: a verdict for each, in order. An error fails the
/// whole group, and then nothing of it is stored — or, when its COMMIT is in doubt, perhaps
/// all of it: every member is then answered 503, and each retry finds out. `lock_wait` shortens, for this
/// transaction, how long PostgreSQL waits on a key another transaction holds.
pub fn process_group(
    conn: &mut DbConnection,
    claims: &[&Claim],
    faults: &Faults,
    lock_wait: Option<std::time::Duration>,
) -> Result<Vec<Ingested>, IngestError> {
    let lost = faults.lost_commit(claims.iter().map(|claim| claim.identity.event_id.as_str()));
    write_transaction_losing(conn, lost, |conn| {
        if let Some(wait) = lock_wait {
            set_local_lock_timeout(conn, wait)?;
        }
        run(conn, claims, faults)
    })
}

fn run(
    conn: &mut DbConnection,
    claims: &[&Claim],
    faults: &Faults,
) -> Result<Vec<Ingested>, IngestError> {
    let leaders = idempotency::leaders(claims.iter().map(|claim| key_of(claim)));
    let accepted = claims
        .iter()
        .map(|claim| {
            let event_id = claim.identity.event_id.as_str();
            receipt(claim, Outcome::Accepted, &claim.fact, event_id)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let claimed = claim_events(conn, claims, &leaders, &accepted)?;
    let firsts: Vec<usize> = (0..claims.len())
        .filter(|&i| leaders[i].is_none())
        .collect();
    let (owned, held): (Vec<usize>, Vec<usize>) = firsts
        .into_iter()
        .partition(|&i| claimed.contains_key(&key_of(claims[i])));
    let stored = stored_calls(conn, claims, &held)?;
    let effects = record_effects(conn, claims, &owned, &accepted, faults)?;
    for (&i, (outcome, answer)) in &effects {
        if *outcome != Outcome::Accepted {
            event::store_answer(conn, claimed[&key_of(claims[i])], answer)?;
        }
    }
    Ok((0..claims.len())
        .map(|i| verdict(claims, &leaders, &effects, &stored, i))
        .collect())
}

fn key_of(claim: &Claim) -> EventKey {
    EventKey::new(claim.source.as_str(), claim.identity.event_id.as_str())
}

/// Claims the first copy of every event id, in one statement, keys sorted.
fn claim_events(
    conn: &mut DbConnection,
    claims: &[&Claim],
    leaders: &[Option<usize>],
    accepted: &[Answer],
) -> Result<HashMap<EventKey, i64>, IngestError> {
    let mut order: Vec<usize> = (0..claims.len())
        .filter(|&i| leaders[i].is_none())
        .collect();
    order.sort_by_key(|&i| key_of(claims[i]));
    let rows: Vec<NewEvent<'_>> = order
        .iter()
        .map(|&i| new_event(claims[i], &accepted[i]))
        .collect();
    Ok(event::claim_all(conn, &rows)?)
}

fn new_event<'a>(claim: &'a Claim, answer: &'a Answer) -> NewEvent<'a> {
    NewEvent {
        source: &claim.source,
        event_id: claim.identity.event_id.as_str(),
        event_type: claim.identity.event_type.as_deref(),
        fingerprint: &claim.fingerprint,
        status: STATUS_PROCESSED,
        fact_kind: &claim.fact.kind,
        fact_key: &claim.fact.key,
        payload: &claim.payload,
        received_at: claim.received_at.naive_utc(),
        expires_at: claim.expires_at.naive_utc(),
        content_type: Some(&claim.content_type),
        headers: Some(&claim.headers),
        response_status: Some(i32::from(answer.status)),
        response_content_type: Some(&answer.content_type),
        response_body: Some(&answer.body),
        trace_parent: claim.trace_parent.as_deref(),
        arrival: claim.arrival.map(Arrival::as_stored),
    }
}

/// The stored calls holding the events claimed before this group.
fn stored_calls(
    conn: &mut DbConnection,
    claims: &[&Claim],
    held: &[usize],
) -> Result<HashMap<EventKey, StoredCall>, IngestError> {
    if held.is_empty() {
        return Ok(HashMap::new());
    }
    let keys: Vec<EventKey> = held.iter().map(|&i| key_of(claims[i])).collect();
    Ok(event::stored_calls(conn, &keys.iter().collect::<Vec<_>>())?)
}

fn fact_row(claim: &Claim, fact: &FactIdentity) -> LedgerKey {
    LedgerKey {
        source: claim.source.clone(),
        fact: fact.clone(),
    }
}

/// The effects of the events this group claimed (`owned`, in arrival order): their facts
/// in one statement, the outbox rows of the facts that are new, and each one's answer.
fn record_effects(
    conn: &mut DbConnection,
    claims: &[&Claim],
    owned: &[usize],
    accepted: &[Answer],
    faults: &Faults,
) -> Result<HashMap<usize, (Outcome, Answer)>, IngestError> {
    let ledger = Recorded::record(conn, claims, owned)?;
    let mut effects = HashMap::new();
    let mut deliveries = Vec::new();
    for &i in owned {
        let claim = claims[i];
        let fact_is_new = ledger.new_for(claims, i, &claim.fact);
        let body_is_new =
            (claim.body_fact.as_ref()).is_none_or(|body| ledger.new_for(claims, i, body));
        if fact_is_new && body_is_new {
            deliveries.extend(message(claim).rows(&claim.destinations, claim.received_at));
            effects.insert(i, (Outcome::Accepted, accepted[i].clone()));
            continue;
        }
        // The fact the ledger already held: the event's own, else its body's.
        let held = match (&claim.body_fact, fact_is_new) {
            (Some(body), true) => body,
            _ => &claim.fact,
        };
        effects.insert(i, ledger.duplicate(conn, claims, i, held)?);
    }
    NewDelivery::enqueue_all(conn, &deliveries)?;
    for &i in owned {
        faults.after_fact(claims[i].identity.event_id.as_str());
    }
    Ok(effects)
}

/// A group's facts after their one insert: which claimed event named each first, and
/// which of them the ledger did not hold before.
struct Recorded {
    first: BTreeMap<LedgerKey, usize>,
    inserted: HashSet<LedgerKey>,
}

impl Recorded {
    fn record(
        conn: &mut DbConnection,
        claims: &[&Claim],
        owned: &[usize],
    ) -> Result<Self, IngestError> {
        let mut first: BTreeMap<LedgerKey, usize> = BTreeMap::new();
        for &i in owned {
            let claim = claims[i];
            for fact in std::iter::once(&claim.fact).chain(&claim.body_fact) {
                first.entry(fact_row(claim, fact)).or_insert(i);
            }
        }
        let facts: Vec<NewFact<'_>> = first
            .iter()
            .map(|(row, &i)| NewFact {
                source: &row.source,
                kind: &row.fact.kind,
                fact_key: &row.fact.key,
                first_event_id: claims[i].identity.event_id.as_str(),
                created_at: claims[i].received_at.naive_utc(),
            })
            .collect();
        let inserted = ledger::record_all(conn, &facts)?;
        Ok(Self { first, inserted })
    }

    /// Whether claim `i` recorded `fact`: new in the ledger, and named by `i` first.
    fn new_for(&self, claims: &[&Claim], i: usize, fact: &FactIdentity) -> bool {
        let row = fact_row(claims[i], fact);
        self.inserted.contains(&row) && self.first.get(&row) == Some(&i)
    }

    /// The answer of claim `i`, whose `held` fact was recorded by another event: in this
    /// group, or before it (then read from the ledger).
    fn duplicate(
        &self,
        conn: &mut DbConnection,
        claims: &[&Claim],
        i: usize,
        held: &FactIdentity,
    ) -> Result<(Outcome, Answer), IngestError> {
        let claim = claims[i];
        let row = fact_row(claim, held);
        let first_event_id = match self.first.get(&row) {
            Some(&j) if self.inserted.contains(&row) => claims[j].identity.event_id.to_string(),
            _ => ledger::first_event_id(conn, &claim.source, held)?,
        };
        let outcome = if first_event_id == claim.identity.event_id.as_str() {
            Outcome::DuplicateAfterExpiry
        } else {
            Outcome::DuplicateFact
        };
        Ok((outcome, receipt(claim, outcome, held, &first_event_id)?))
    }
}

fn message(claim: &Claim) -> Message<'_> {
    Message {
        source: &claim.source,
        event_id: claim.identity.event_id.as_str(),
        event_type: claim.identity.event_type.as_deref(),
        content_type: &claim.content_type,
        trace_parent: claim.trace_parent.as_deref(),
    }
}

/// The verdict of claim `i`: its own effect when it claimed its event, otherwise what a
/// copy gets from the call that holds the key — an earlier copy in this group, or the row
/// stored before.
fn verdict(
    claims: &[&Claim],
    leaders: &[Option<usize>],
    effects: &HashMap<usize, (Outcome, Answer)>,
    stored: &HashMap<EventKey, StoredCall>,
    i: usize,
) -> Ingested {
    let claim = claims[i];
    let holder = leaders[i].unwrap_or(i);
    let call = match effects.get(&holder) {
        Some(effect) if holder == i => return Ok(effect.clone()),
        Some((_, answer)) => StoredCall {
            fingerprint: claims[holder].fingerprint.clone(),
            answer: Some(answer.clone()),
        },
        None => stored.get(&key_of(claim)).cloned().ok_or_else(|| {
            // The row that refused the claim was swept before it could be read.
            IngestError::Store(StoreError::Contended(
                "the event's record changed while it was read; retry".to_owned(),
            ))
        })?,
    };
    // A row stored before the provider's fingerprint became a canonical reading holds
    // the raw body's digest: a copy of it is the same event.
    let fingerprint = match &claim.earlier_fingerprint {
        Some(earlier) if *earlier == call.fingerprint => earlier,
        _ => &claim.fingerprint,
    };
    match idempotency::copy_of::<()>(call, fingerprint) {
        Once::Stored(answer) => Ok((Outcome::StoredAnswer, answer)),
        Once::Mismatch { stored_fingerprint } => Err(IngestError::FingerprintMismatch(Mismatch {
            event_id: claim.identity.event_id.to_string(),
            stored: stored_fingerprint,
            received: claim.fingerprint.clone(),
        })),
        Once::Ran(..) | Once::Unanswered => Err(IngestError::Internal(
            "the stored event has no answer".to_owned(),
        )),
    }
}
