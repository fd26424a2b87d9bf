//! Replay: events named by a list or a filter are processed again — the fact constraint
//! prevents a second effect, and each destination gets a new delivery under the fact's
//! Idempotency-Key. A preview (`dry_run`) says what it would do and changes nothing.

use super::actions::{self, EventFilter, RedeliveryResult, RedeliverySummary};
use super::calls::{Answered, Encode, Ground, KeyedRequest, Summary, UseCases};
use super::OperatorError;
use crate::db::DbConnection;
use crate::identity::EventKey;
use serde::{Deserialize, Serialize};

/// The route of a replay (the Idempotency-Key fingerprint covers it).
pub const REPLAY_ROUTE: &str = "POST /admin/replay";

/// `{"source": …, "event_id": …}`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventRef {
    pub source: String,
    pub event_id: String,
}

/// A replay as the API takes it (JSON) and the console fills it in.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    #[serde(default, deserialize_with = "super::as_documented::option_objects")]
    pub events: Option<Vec<EventRef>>,
    #[serde(default, deserialize_with = "super::as_documented::option_object")]
    pub filter: Option<EventFilter>,
    #[serde(default, deserialize_with = "super::as_documented::option_u32")]
    pub limit: Option<u32>,
    #[serde(default)]
    pub dry_run: bool,
}

/// A checked replay: its events, and whether it is a preview.
#[derive(Debug)]
pub struct Replay {
    target: ReplayTarget,
    pub dry_run: bool,
}

/// The events a replay names: a list, or a filter (at most `limit` events).
#[derive(Debug)]
enum ReplayTarget {
    Events(Vec<EventKey>),
    Filter(EventFilter, i64),
}

impl Replay {
    /// Checks `request`: either 1 to `max` events, or a filter (at most `max` events).
    pub fn parse(request: ReplayRequest, max: u32) -> Result<Self, OperatorError> {
        let limit = super::listing::capped(request.limit, max)?;
        let target = match (request.events, request.filter) {
            (Some(events), None) if !events.is_empty() && events.len() as u32 <= max => {
                for event in &events {
                    actions::check_stored_id("source", &event.source)?;
                    actions::check_stored_id("event_id", &event.event_id)?;
                }
                ReplayTarget::Events(
                    (events.into_iter())
                        .map(|e| EventKey::new(e.source, e.event_id))
                        .collect(),
                )
            }
            (None, Some(filter)) => {
                filter.validate()?;
                ReplayTarget::Filter(filter, limit)
            }
            _ => {
                return Err(OperatorError::Invalid(format!(
                    "send either \"events\" (1 to {max} {{source, event_id}}) or \"filter\""
                )))
            }
        };
        Ok(Self {
            target,
            dry_run: request.dry_run,
        })
    }
}

impl ReplayTarget {
    /// The events, and whether a filter matched more than its limit let through.
    fn items(self, conn: &mut DbConnection) -> diesel::QueryResult<(Vec<EventKey>, bool)> {
        match self {
            Self::Events(mut items) => {
                let mut seen = std::collections::HashSet::new();
                items.retain(|item| seen.insert(item.clone()));
                Ok((items, false))
            }
            Self::Filter(filter, limit) => {
                // One more than the limit says whether there were more.
                let mut items = actions::events_matching(conn, &filter, limit + 1)?;
                let truncated = items.len() as i64 > limit;
                items.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                Ok((items, truncated))
            }
        }
    }
}

/// What a replay did (or its preview would do): per event, and in sum.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayReport {
    pub dry_run: bool,
    /// A filter matched more events than its limit let through.
    pub truncated: bool,
    pub summary: RedeliverySummary,
    pub results: Vec<RedeliveryResult>,
}

impl ReplayReport {
    fn of(dry_run: bool, results: Vec<RedeliveryResult>, truncated: bool) -> Self {
        Self {
            dry_run,
            truncated,
            summary: RedeliverySummary::of(&results),
            results,
        }
    }

    /// The one event a replay named, when it was swept (its fact remains).
    pub fn only_expired(&self) -> Option<&RedeliveryResult> {
        match self.results.as_slice() {
            [only] if only.result == "expired" => Some(only),
            _ => None,
        }
    }
}

impl Summary for ReplayReport {
    /// E.g. `200: 3 events (replayed 2, expired 1), deliveries app 2`.
    fn summary(&self, status: u16) -> String {
        let counts = |map: &std::collections::BTreeMap<String, usize>| {
            map.iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let summary = &self.summary;
        let noun = if summary.events == 1 {
            "event"
        } else {
            "events"
        };
        format!(
            "{status}: {} {noun} ({}), deliveries {}{}",
            summary.events,
            counts(&summary.results),
            counts(&summary.deliveries),
            if self.truncated { ", truncated" } else { "" }
        )
    }
}

impl<S: Ground> UseCases<S> {
    /// What replaying would do, reading only (no Idempotency-Key needed).
    pub async fn preview_replay(&self, replay: Replay) -> Result<ReplayReport, OperatorError> {
        self.read(move |conn, settings| {
            let (items, truncated) = replay.target.items(conn)?;
            let results = actions::preview_redelivery(conn, settings.destinations(), &items, None)?;
            Ok(ReplayReport::of(true, results, truncated))
        })
        .await
    }

    /// The replay, once per key.
    pub async fn replay(
        &self,
        keyed: KeyedRequest<'_>,
        replay: Replay,
        encode: Encode<ReplayReport, S>,
    ) -> Result<Answered<ReplayReport>, OperatorError> {
        let work = move |conn: &mut DbConnection, settings: &S, now| {
            let (items, truncated) = replay.target.items(conn)?;
            let results = actions::redeliver(conn, settings.destinations(), &items, None, now)?;
            Ok(ReplayReport::of(false, results, truncated))
        };
        self.once((REPLAY_ROUTE, "replay"), keyed, work, encode)
            .await
    }
}
