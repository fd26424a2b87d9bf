//! A provider's own record of the events it sent — Stripe's events, GitHub's hook
//! deliveries, Paddle's notifications — read through its API, behind one small trait
//! ([`ProviderRecord`]): list a window page by page, and ask for one event again where
//! the provider can resend. Reconciliation (the use case above) joins that record with the
//! events Inlet claimed, on the provider's event id.

mod client;
mod github;
mod paddle;
mod settings;
mod stripe;

pub use client::{ApiClient, ApiError};
pub use settings::{window_of, ReconcileFile, ReconcileMode, Reconciliation, RecordApi};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

/// What a run asks the provider for: events from `from` (inclusive) to `to` (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn holds(&self, at: DateTime<Utc>) -> bool {
        self.from <= at && at < self.to
    }
}

/// One event of the provider's record.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The id Inlet keys the event on (Stripe's event id, GitHub's delivery guid, Paddle's
    /// `event_id`).
    pub event_id: String,
    pub occurred_at: DateTime<Utc>,
    /// What to name when asking for it again (GitHub's delivery id, Paddle's
    /// notification id); `None` where the provider cannot resend.
    pub resend_id: Option<String>,
    /// The event itself, where the record serves it and it is recovered by fetching it
    /// (Stripe).
    pub event: Option<Bytes>,
    /// The status Inlet answered the provider's last resend of it, when that was a refusal
    /// (4xx): another resend would be refused alike (GitHub).
    pub refused: Option<u16>,
}

/// One page of the record.
#[derive(Debug, Default)]
pub struct Page {
    /// The page's events within the window (the provider filters, or they are filtered).
    pub listed: Vec<Listed>,
    /// How many entries the page held, before any filtering.
    pub entries: usize,
    /// Where the next page starts; `None` at the end of the window.
    pub next: Option<String>,
}

/// How a provider's missing event is recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// The provider is asked to send it again: it arrives signed, by the ordinary path.
    Resend,
    /// The provider cannot resend: the event as its API serves it is claimed.
    Fetch,
}

/// A provider's record of events, through its API.
#[async_trait]
pub trait ProviderRecord: Send + Sync {
    /// The page of `window` that starts at `cursor` (the first one without).
    async fn page(
        &self,
        api: &ApiClient,
        window: Window,
        cursor: Option<&str>,
    ) -> Result<Page, ApiError>;

    /// How a missing event is recovered.
    fn recovery(&self) -> Recovery;

    /// Asks the provider to send `listed` again ([`Recovery::Resend`] only).
    async fn resend(&self, api: &ApiClient, listed: &Listed) -> Result<(), ApiError>;
}

/// An RFC 3339 time as the providers write it.
fn parse_time(text: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| ApiError::Answer(format!("cannot read the time {text:?}: {e}")))
}

/// Unix seconds as a time.
fn parse_unix(seconds: i64) -> Result<DateTime<Utc>, ApiError> {
    DateTime::from_timestamp(seconds, 0)
        .ok_or_else(|| ApiError::Answer(format!("{seconds} is not a time")))
}
