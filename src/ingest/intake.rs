//! The request path from verification to the answer: a webhook's bytes are verified
//! against its source's secrets, a setup handshake is answered, a verified request becomes
//! a [`Claim`] (its identity, its facts, its stored copy and its outbox rows), the claim
//! is committed with its group, and what follows a commit is done; a provider's setup
//! (its validation, handshake, certificate and subscription: `setup.rs`) comes first for
//! the few providers that have one. The HTTP edge only reads the body and speaks HTTP
//! around [`Intake::receive`]: one call in, one result out.

use super::setup::SetUp;
use super::stored_headers::stored_headers;
use super::told::Told;
use super::{Claim, Committer, IngestError, Intake, Outcome, Received, Refusal, Webhook};
use crate::delivery::filters::{self, Subject};
use crate::identity::{Identity, IdentityError};
use crate::jq::Lane;
use crate::ledger::{FactIdentity, BODY_KIND};
use crate::signature::{Headers, Items, Keys, SignatureError, Unverified, Verified};
use crate::traces::{Attribute, Incoming};
use bytes::Bytes;
use std::time::{Instant, SystemTime};

/// Where a claim's fact goes: whether any destination takes its type, and whether the
/// source has destinations at all (a fact none takes is counted as unrouted).
#[derive(Debug, Clone, Copy)]
pub(super) struct Routing {
    routed: bool,
    has_destinations: bool,
}

impl Intake<'_> {
    /// Sets up `webhook`'s source (its provider's validation, handshake or keys), verifies
    /// it, answers a handshake or claims its event with its group, and does what follows:
    /// a subscription confirmed, a copy refused for its body told of.
    /// `incoming` is the request's span: started once the signature is checked (under the
    /// sender's trace only if it verified), each step's span under it.
    pub async fn receive(
        &self,
        committer: &Committer,
        webhook: Webhook<'_>,
        incoming: &mut Incoming,
    ) -> Result<Received, Refusal> {
        let source = match self.set_up(&webhook).await? {
            SetUp::Answered(received) => return Ok(received),
            SetUp::VerifyAs(source) => source,
        };
        let intake = Intake {
            source: &source,
            ..*self
        };
        let received = intake.verify_and_claim(committer, &webhook, incoming).await;
        match received {
            Err(Refusal::Ingest(IngestError::FingerprintMismatch(mismatch))) => {
                let source = source.name.as_str();
                let headers = webhook.headers;
                let told = Told::FingerprintMismatch {
                    source,
                    mismatch: &mismatch,
                    headers,
                };
                self.tell(told).await;
                Err(IngestError::FingerprintMismatch(mismatch).into())
            }
            Ok(received) => {
                if let Some(visit) = &received.visit {
                    intake.confirm(visit).await?;
                }
                Ok(received)
            }
            Err(refusal) => Err(refusal),
        }
    }

    /// Verifies `webhook` with the source's keys, answers a handshake, or claims its event
    /// with its group; then does what follows a commit.
    async fn verify_and_claim(
        &self,
        committer: &Committer,
        webhook: &Webhook<'_>,
        incoming: &mut Incoming,
    ) -> Result<Received, Refusal> {
        let seen = Instant::now();
        let source = self.source;
        let started = incoming.now();
        let verified = self.verify(webhook);
        incoming.start(verified.is_ok());
        let refused = verified.as_ref().err().map(|e| e as &dyn std::fmt::Display);
        self.step(incoming, "verify", started, refused);
        let verified = verified?;
        if let Some(received) = self.handshake(&verified)? {
            return Ok(received);
        }
        let batch = source.provider.scheme().batch();
        if let Some(items) = batch.and_then(|batch| batch.items(&verified, self.keys())) {
            let batch = Batch {
                request: verified,
                items: items?,
            };
            return self
                .receive_batch(committer, batch, webhook, incoming)
                .await;
        }
        let started = incoming.now();
        let trace_parent = incoming.span().trace_parent();
        let claimed = self.claim(&verified, webhook, webhook.body.clone(), trace_parent);
        let refused = claimed.as_ref().err().map(|e| e as &dyn std::fmt::Display);
        self.step(incoming, "identify", started, refused);
        let (mut claim, mut routing) = claimed?;
        if !claim.destinations.is_empty() && filters::filtered(self.destinations, &claim.source) {
            let started = incoming.now();
            self.filter(&mut claim, &mut routing).await;
            self.step(incoming, "filter", started, None);
        }
        let event_id = claim.identity.event_id.to_string();
        let ingested = committer.commit(claim).await;
        metrics::histogram!("inlet_ingest_duration_seconds", "source" => source.name.as_str().to_owned())
            .record(seen.elapsed().as_secs_f64());
        let (outcome, answer) = ingested?;
        if outcome == Outcome::Accepted {
            self.after_accepted(routing);
        }
        Ok(Received {
            outcome,
            event_id: Some(event_id),
            ..Received::handshake(answer)
        })
    }

    /// A batch's items, each claimed as an event of its own (its bytes its payload), all
    /// committed in one transaction: every item is stored or none is. The request gets the
    /// provider's fixed answer once every item has its verdict, the same on every retry
    /// (each item then answered from its stored copy); an item whose id was first received
    /// with another body answers the request 422, as a lone webhook would be.
    async fn receive_batch(
        &self,
        committer: &Committer,
        batch: Batch<'_>,
        webhook: &Webhook<'_>,
        incoming: &mut Incoming,
    ) -> Result<Received, Refusal> {
        let seen = Instant::now();
        let answer = self
            .source
            .provider
            .event_answer(&batch.request)
            .ok_or_else(|| {
                IngestError::Internal("a batch provider has no fixed answer".to_owned())
            })?;
        let dropped = batch.items.refused.len();
        let (claims, routings) = self.claim_items(&batch, webhook, incoming).await?;
        let event_ids: Vec<String> = (claims.iter())
            .map(|claim| claim.identity.event_id.to_string())
            .collect();
        let verdicts = committer.commit_batch(claims).await;
        metrics::histogram!("inlet_ingest_duration_seconds", "source" => self.source.name.as_str().to_owned())
            .record(seen.elapsed().as_secs_f64());
        let mut items = Vec::new();
        let mut refusal = None;
        for ((event_id, routing), verdict) in event_ids.into_iter().zip(routings).zip(verdicts?) {
            match verdict {
                Ok((outcome, _)) => {
                    if outcome == Outcome::Accepted {
                        self.after_accepted(routing);
                    }
                    items.push((event_id, outcome));
                }
                Err(error) => refusal = refusal.or(Some(error)),
            }
        }
        if let Some(error) = refusal {
            return Err(error.into());
        }
        Ok(Received {
            outcome: Outcome::of_batch(&items),
            items,
            dropped,
            ..Received::handshake(answer)
        })
    }

    /// Each item of a batch as a claim of its own (its bytes its payload), filtered: all of
    /// them, or the first item's refusal.
    async fn claim_items(
        &self,
        batch: &Batch<'_>,
        webhook: &Webhook<'_>,
        incoming: &mut Incoming,
    ) -> Result<(Vec<Claim>, Vec<Routing>), Refusal> {
        let started = incoming.now();
        let trace_parent = incoming.span().trace_parent();
        for refusal in &batch.items.refused {
            tracing::warn!(source = %self.source.name.as_str(), %refusal, "a batch item dropped: it does not authenticate");
        }
        let claimed: Result<Vec<_>, IdentityError> = (batch.items.verified.iter())
            .map(|(item, stored)| {
                let payload = match stored {
                    Some(bytes) => Bytes::copy_from_slice(bytes),
                    None => part_of(webhook.body, item.body()),
                };
                self.claim(item, webhook, payload, trace_parent.clone())
            })
            .collect();
        let refused = claimed.as_ref().err().map(|e| e as &dyn std::fmt::Display);
        self.step(incoming, "identify", started, refused);
        let mut claims = Vec::new();
        let mut routings = Vec::new();
        for (mut claim, mut routing) in claimed? {
            if !claim.destinations.is_empty() && filters::filtered(self.destinations, &claim.source)
            {
                self.filter(&mut claim, &mut routing).await;
            }
            claims.push(claim);
            routings.push(routing);
        }
        Ok((claims, routings))
    }

    /// A verified request that is part of the provider's setup protocol: its answer, and
    /// the URL it asks to visit first (SNS's `SubscribeURL`), if any. Never stored.
    fn handshake(&self, verified: &Verified<'_>) -> Result<Option<Received>, Refusal> {
        let provider = &self.source.provider;
        let Some(answer) = provider.handshake(verified, &self.source.secrets) else {
            return Ok(None);
        };
        let certified = provider.scheme().certified();
        let visit = certified
            .and_then(|c| c.subscription(verified))
            .transpose()?;
        Ok(Some(Received {
            visit,
            ..Received::handshake(answer)
        }))
    }

    /// A finished step of the request, as a span under the request's (tracing on).
    fn step(
        &self,
        incoming: &mut Incoming,
        name: &'static str,
        started: Option<SystemTime>,
        error: Option<&dyn std::fmt::Display>,
    ) {
        let source = self.source;
        incoming.step(name, started, error, || {
            vec![
                Attribute::new("inlet.source", source.name.as_str().to_owned()),
                Attribute::new("inlet.provider", source.provider.name()),
            ]
        });
    }

    /// The source's secrets and tolerance, now.
    fn keys(&self) -> Keys<'_> {
        Keys {
            secrets: &self.source.secrets,
            tolerance: self.source.tolerance,
            now: self.now,
        }
    }

    /// The signature over the raw bytes, against every secret of the source.
    fn verify<'r>(&self, webhook: &Webhook<'r>) -> Result<Verified<'r>, SignatureError> {
        let keys = Keys {
            tolerance: self.faults.tolerance(self.source.tolerance),
            ..self.keys()
        };
        let unverified = Unverified::new(webhook.headers, webhook.body);
        self.source.provider.scheme().verify(unverified, keys)
    }

    /// What a verified request claims: its event, its fact (and, for a source keyed on
    /// what was signed, the body's), the stored copy of the request and the outbox rows of
    /// the destinations whose `events` filter takes its type.
    pub(super) fn claim(
        &self,
        verified: &Verified<'_>,
        webhook: &Webhook<'_>,
        payload: Bytes,
        trace_parent: Option<String>,
    ) -> Result<(Claim, Routing), IdentityError> {
        let source = self.source;
        let identity = Identity::locate(verified, &source.locators)?;
        let fact = FactIdentity::of_event(
            &source.fact_rules,
            identity.event_type.as_deref(),
            &identity.event_id,
            identity.document.as_ref(),
            identity.fact_key.as_ref(),
        )?;
        // What was signed (the body, or its canonical reading), or the provider's canonical
        // form of the event where its legitimate copies differ in their bytes.
        let document = identity.document.as_ref();
        let (fingerprint, earlier_fingerprint) = source.provider.fingerprint(verified, document);
        let name = source.name.as_str();
        let destinations =
            (self.destinations).routes(name, identity.event_type.as_deref(), self.now);
        let routing = Routing {
            routed: !destinations.is_empty(),
            has_destinations: !self.destinations.of(name).is_empty(),
        };
        let body_fact = (source.keys_body_fact && fact.kind != BODY_KIND).then(|| FactIdentity {
            kind: BODY_KIND.to_owned(),
            key: fingerprint.clone(),
        });
        let claim = Claim {
            source: name.to_owned(),
            identity,
            fact,
            body_fact,
            fingerprint,
            content_type: content_type(webhook.headers),
            headers: stored_headers(
                webhook.headers,
                source.provider.credential_header(),
                &source.secrets,
            ),
            received_at: self.now,
            expires_at: self.now + self.retention,
            destinations,
            answer: source.provider.event_answer(verified),
            payload,
            trace_parent,
            arrival: None,
            earlier_fingerprint,
        };
        Ok((claim, routing))
    }

    /// Drops the destinations whose `filter` does not take the claim's event, and marks
    /// those whose filter could not decide (counted and logged; their rows are written
    /// failed, never skipped); the type routing already chose the candidates.
    pub(super) async fn filter(&self, claim: &mut Claim, routing: &mut Routing) {
        let subject = Subject {
            source: claim.source.clone(),
            event_id: claim.identity.event_id.to_string(),
            event_type: claim.identity.event_type.clone(),
            payload: claim.payload.clone(),
            headers: Some(claim.headers.clone()),
        };
        let routed = std::mem::take(&mut claim.destinations);
        claim.destinations =
            filters::keep_filtered(self.destinations, &subject, routed, Lane::Live).await;
        routing.routed = !claim.destinations.is_empty();
    }

    /// After a new fact committed: wake the dispatcher when it has outbox rows, or count it
    /// as unrouted when the source has destinations but none takes its type.
    pub(super) fn after_accepted(&self, routing: Routing) {
        if routing.routed {
            if let Some(waker) = self.waker {
                waker.notify_one();
            }
        } else if routing.has_destinations {
            metrics::counter!("inlet_unrouted_facts_total", "source" => self.source.name.as_str().to_owned())
                .increment(1);
        }
    }
}

/// A verified batch request and its items.
struct Batch<'r> {
    request: Verified<'r>,
    items: Items<'r>,
}

/// `part` (a slice of `whole`'s bytes) as a view of the shared buffer, without a copy.
fn part_of(whole: &Bytes, part: &[u8]) -> Bytes {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    match start.checked_add(part.len()) {
        Some(end) if start <= whole.len() && end <= whole.len() => whole.slice(start..end),
        // Not a part of it after all: a copy of its own.
        _ => Bytes::copy_from_slice(part),
    }
}

/// The request's content type, passed on to destinations (JSON when it names none).
fn content_type(headers: &dyn Headers) -> String {
    headers
        .first("content-type")
        .and_then(|value| std::str::from_utf8(value).ok())
        .unwrap_or("application/json")
        .to_owned()
}
