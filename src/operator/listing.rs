//! What an operator reads: events and deliveries a page at a time, one event whole, and
//! every destination's breaker and limits.

use super::actions::{
    self, DeliveryFilter, DeliverySummary, EventFilter, EventLookup, EventSummary, StoredEvent,
};
use super::calls::{Ground, UseCases};
use super::views;
use super::OperatorError;
use crate::db::DbConnection;
use crate::delivery::GateView;
use diesel::QueryResult;

/// Rows per page by default, and at most.
pub const DEFAULT_PAGE: i64 = 100;
pub const MAX_PAGE: i64 = 500;

/// One page of a listing: rows after `cursor` (an id), `limit` of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Page {
    cursor: Option<i64>,
    limit: i64,
}

impl Page {
    pub(super) fn of(cursor: Option<i64>, limit: Option<i64>) -> Result<Self, OperatorError> {
        match limit.unwrap_or(DEFAULT_PAGE) {
            limit @ 1..=MAX_PAGE => Ok(Self { cursor, limit }),
            _ => Err(OperatorError::Invalid(format!("limit is 1 to {MAX_PAGE}"))),
        }
    }
}

/// A request's `limit` on how many rows it selects: 1 or more (the document's minimum),
/// capped at `max`; `max` when absent.
pub(super) fn capped(limit: Option<u32>, max: u32) -> Result<i64, OperatorError> {
    match limit {
        Some(0) => Err(OperatorError::Invalid("limit is 1 or more".to_owned())),
        limit => Ok(i64::from(limit.unwrap_or(max).min(max))),
    }
}

/// A page of rows, and the cursor of the next: the last id of a full page, none after a
/// short one. Ids only grow, so paging never shows a row twice.
#[derive(Debug)]
pub struct Listing<T> {
    pub rows: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<S: Ground> UseCases<S> {
    /// Events in id order, `limit` (at most [`MAX_PAGE`]) after `cursor`; the filter is
    /// checked before any query runs.
    pub async fn list_events(
        &self,
        filter: EventFilter,
        cursor: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Listing<EventSummary>, OperatorError> {
        filter.validate()?;
        let page = Page::of(cursor, limit)?;
        self.page(
            page,
            |e: &EventSummary| e.id,
            move |c, cursor, limit| actions::list_events(c, &filter, cursor, limit),
        )
        .await
    }

    /// Deliveries in id order (`status = dead` for the dead letters).
    pub async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        cursor: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Listing<DeliverySummary>, OperatorError> {
        filter.validate()?;
        let page = Page::of(cursor, limit)?;
        self.page(
            page,
            |d: &DeliverySummary| d.id,
            move |c, cursor, limit| actions::list_deliveries(c, &filter, cursor, limit),
        )
        .await
    }

    pub(super) async fn page<T: Send + 'static>(
        &self,
        page: Page,
        id: fn(&T) -> i64,
        fetch: impl FnOnce(&mut DbConnection, Option<i64>, i64) -> QueryResult<Vec<T>> + Send + 'static,
    ) -> Result<Listing<T>, OperatorError> {
        let Page { cursor, limit } = page;
        let rows = self.read(move |c, _| Ok(fetch(c, cursor, limit)?)).await?;
        let next_cursor = (rows.len() as i64 == limit)
            .then(|| rows.last().map(|row| id(row).to_string()))
            .flatten();
        Ok(Listing { rows, next_cursor })
    }

    /// Everything about one event: metadata, payload, stored answer, its fact and its
    /// deliveries. `Expired` when its row was swept (its fact remains), `UnknownEvent`
    /// when it never arrived.
    pub async fn show_event(
        &self,
        source: &str,
        event_id: &str,
    ) -> Result<StoredEvent, OperatorError> {
        Ok(self.look_up_event(source, event_id, None).await?.0)
    }

    /// [`Self::show_event`], with every stored event that carried its fact, oldest first
    /// (at most `limit`): the console's event page.
    pub async fn event_with_its_fact(
        &self,
        source: &str,
        event_id: &str,
        limit: i64,
    ) -> Result<(StoredEvent, Vec<EventSummary>), OperatorError> {
        self.look_up_event(source, event_id, Some(limit)).await
    }

    /// One event and, when `carried` is a limit, the events that carried its fact, in one
    /// read.
    async fn look_up_event(
        &self,
        source: &str,
        event_id: &str,
        carried: Option<i64>,
    ) -> Result<(StoredEvent, Vec<EventSummary>), OperatorError> {
        actions::check_stored_id("source", source)?;
        actions::check_stored_id("event_id", event_id)?;
        let (s, e) = (source.to_owned(), event_id.to_owned());
        let (shown, siblings) = self
            .read(move |c, _| {
                let shown = actions::show_event(c, &s, &e)?;
                let siblings = match (&shown, carried) {
                    (EventLookup::Stored(stored), Some(limit)) => {
                        let fact = (&stored.event.fact_kind, &stored.event.fact_key);
                        views::events_of_fact(c, &s, fact.0, fact.1, limit)?
                    }
                    _ => Vec::new(),
                };
                Ok((shown, siblings))
            })
            .await?;
        let window = self.settings.retention().events;
        match shown {
            EventLookup::Stored(event) => Ok((*event, siblings)),
            EventLookup::Swept(fact) => Err(OperatorError::Expired(format!(
                "event {source}/{event_id} was swept after the retention window ({window}); \
                 its fact {}:{} remains in the ledger",
                fact.kind, fact.key
            ))),
            EventLookup::Unknown => Err(OperatorError::UnknownEvent(format!(
                "no event {source}/{event_id} has been received"
            ))),
        }
    }

    /// Every destination's circuit breaker and limits, as every instance shares them.
    pub async fn destinations(&self) -> Result<Vec<GateView>, OperatorError> {
        let gated = self.settings.destinations().gated();
        let now = self.now;
        self.read(move |c, _| Ok(crate::delivery::gate_views(c, &gated, now)?))
            .await
    }
}
