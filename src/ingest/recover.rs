//! The one path into the ledger for an event recovered from its provider's own record
//! (reconciliation): trusted by the authenticated API call that fetched it rather than by
//! a signature, and then claimed exactly as a webhook is — its event, its fact and its
//! outbox rows in one transaction, the UNIQUE constraints deciding against a late copy
//! racing it — and marked as recovered.

use super::{Arrival, Committer, Intake, Outcome, Refusal, Webhook};
use crate::delivery::filters;
use crate::signature::Unverified;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};

impl Intake<'_> {
    /// Claims `event` (the provider's JSON of it, as its API served it) and commits it with
    /// its group: its outcome (`Accepted` when it was missing; a stored answer when a copy
    /// arrived meanwhile).
    pub async fn recover(&self, committer: &Committer, event: Bytes) -> Result<Outcome, Refusal> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let webhook = Webhook {
            headers: &headers,
            body: &event,
            query: "",
        };
        let verified = Unverified::new(&headers, &event).fetched_from_provider_api();
        let (mut claim, mut routing) = self.claim(&verified, &webhook, event.clone(), None)?;
        claim.arrival = Some(Arrival::Recovered);
        if !claim.destinations.is_empty() && filters::filtered(self.destinations, &claim.source) {
            self.filter(&mut claim, &mut routing).await;
        }
        let (outcome, _) = committer.commit(claim).await?;
        if outcome == Outcome::Accepted {
            self.after_accepted(routing);
        }
        Ok(outcome)
    }
}
