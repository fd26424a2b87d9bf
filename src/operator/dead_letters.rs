//! Dead letters, requeued (back to pending with a fresh deadline) or discarded (set
//! aside, never sent, swept after `retention.dead_letters`), named by id or by a filter.

use super::actions::{self, DeadLetterResult, DeliveryFilter};
use super::calls::{Answered, Encode, Ground, KeyedRequest, Summary, UseCases};
use super::OperatorError;
use crate::db::DbConnection;
use crate::delivery::Destinations;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A requeue or discard as the API takes it (JSON).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterRequest {
    #[serde(default, deserialize_with = "super::as_documented::option_i64s")]
    pub ids: Option<Vec<i64>>,
    #[serde(default, deserialize_with = "super::as_documented::option_object")]
    pub filter: Option<DeadLetterFilter>,
    #[serde(default, deserialize_with = "super::as_documented::option_u32")]
    pub limit: Option<u32>,
}

/// Which dead letters: by source and destination. `status`, when given, can only say
/// `dead` (what every dead letter is; any other selected nothing it could act on).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterFilter {
    pub status: Option<String>,
    pub source: Option<String>,
    pub destination: Option<String>,
}

impl DeadLetterFilter {
    /// The delivery filter it is, checked.
    fn checked(self) -> Result<DeliveryFilter, OperatorError> {
        actions::check_one_of("status", self.status.as_deref(), &[crate::delivery::DEAD])?;
        let filter = DeliveryFilter {
            status: self.status,
            source: self.source,
            destination: self.destination,
        };
        filter.validate()?;
        Ok(filter)
    }
}

/// What an operator does to dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterAction {
    /// Back to pending, with a fresh deadline.
    Requeue,
    /// Set aside, never sent, swept after `retention.dead_letters`.
    Discard,
}

impl DeadLetterAction {
    /// The route the action is (the Idempotency-Key fingerprint covers it).
    pub fn route(self) -> &'static str {
        match self {
            Self::Requeue => "POST /admin/deliveries/requeue",
            Self::Discard => "POST /admin/deliveries/discard",
        }
    }

    /// The action's name in the audit trail.
    pub fn name(self) -> &'static str {
        match self {
            Self::Requeue => "requeue",
            Self::Discard => "discard",
        }
    }

    fn run(
        self,
        conn: &mut DbConnection,
        destinations: &Destinations,
        ids: &[i64],
        now: DateTime<Utc>,
    ) -> diesel::QueryResult<Vec<DeadLetterResult>> {
        match self {
            Self::Requeue => actions::requeue(conn, destinations, ids, now),
            Self::Discard => actions::discard(conn, ids, now),
        }
    }
}

/// A checked action on dead letters: its ids, or a filter over dead deliveries.
#[derive(Debug)]
pub struct DeadLetters {
    action: DeadLetterAction,
    selection: Selection,
}

#[derive(Debug)]
enum Selection {
    Ids(Vec<i64>),
    Filter(DeliveryFilter, i64),
}

impl DeadLetters {
    /// Checks `request`: either 1 to `max` ids, or a filter (at most `max` dead letters).
    pub fn parse(
        action: DeadLetterAction,
        request: DeadLetterRequest,
        max: u32,
    ) -> Result<Self, OperatorError> {
        let limit = super::listing::capped(request.limit, max)?;
        let selection = match (request.ids, request.filter) {
            (Some(ids), None) if !ids.is_empty() && ids.len() as u32 <= max => Selection::Ids(ids),
            (None, Some(filter)) => Selection::Filter(filter.checked()?, limit),
            _ => {
                return Err(OperatorError::Invalid(format!(
                    "send either \"ids\" (1 to {max}) or \"filter\""
                )))
            }
        };
        Ok(Self { action, selection })
    }

    pub fn action(&self) -> DeadLetterAction {
        self.action
    }
}

/// What the action did to each dead letter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterReport {
    pub results: Vec<DeadLetterResult>,
}

impl Summary for DeadLetterReport {
    /// E.g. `200: 3 dead letters (requeued 2, not_dead 1)`, `200: 1 dead letter (…)`.
    fn summary(&self, status: u16) -> String {
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for row in &self.results {
            *counts.entry(row.result.as_str()).or_default() += 1;
        }
        let counts: Vec<String> = counts.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let n = self.results.len();
        let noun = if n == 1 {
            "dead letter"
        } else {
            "dead letters"
        };
        format!("{status}: {n} {noun} ({})", counts.join(", "))
    }
}

impl<S: Ground> UseCases<S> {
    /// Requeues or discards the dead letters, once per key.
    pub async fn dead_letters(
        &self,
        keyed: KeyedRequest<'_>,
        dead: DeadLetters,
        encode: Encode<DeadLetterReport, S>,
    ) -> Result<Answered<DeadLetterReport>, OperatorError> {
        let DeadLetters { action, selection } = dead;
        let work = move |conn: &mut DbConnection, settings: &S, now| {
            let ids = match selection {
                Selection::Ids(ids) => ids,
                Selection::Filter(filter, limit) => actions::dead_matching(conn, &filter, limit)?,
            };
            let results = action.run(conn, settings.destinations(), &ids, now)?;
            Ok(DeadLetterReport { results })
        };
        self.once((action.route(), action.name()), keyed, work, encode)
            .await
    }
}
