//! Stripe's record: `GET /v1/events` (kept 30 days), newest first, `limit` ≤ 100,
//! `starting_after` the last id of the page before, `has_more`; `created[gte]`/`[lte]`
//! bound the window and `delivery_success=false` keeps what Stripe has not delivered to
//! every endpoint. Stripe has no resend call: a missing event is claimed as its API
//! serves it, trusted by the authenticated call.

use super::{parse_unix, ApiClient, ApiError, Listed, Page, ProviderRecord, Recovery, Window};
use crate::secret::Secret;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The most events Stripe serves per page.
const LIMIT: u32 = 100;

/// Stripe's events API, with its key.
#[derive(Debug, Clone)]
pub struct StripeEvents {
    url: String,
    key: Secret,
    /// Only these event types (`types[]`), when set.
    types: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct List {
    data: Vec<Box<RawValue>>,
    has_more: bool,
}

#[derive(Deserialize)]
struct Event {
    id: String,
    created: i64,
}

impl StripeEvents {
    pub fn new(url: String, key: Secret, types: Option<Vec<String>>) -> Self {
        Self { url, key, types }
    }

    pub fn client(&self) -> Result<ApiClient, ApiError> {
        ApiClient::new(&self.url, format!("Bearer {}", self.key.expose()))
    }

    fn query(&self, window: Window, cursor: Option<&str>) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("limit", &LIMIT.to_string())
            .append_pair("delivery_success", "false")
            .append_pair("created[gte]", &window.from.timestamp().to_string())
            // `lte` is inclusive: the last whole second before the window's end.
            .append_pair("created[lte]", &(window.to.timestamp() - 1).to_string());
        for kind in self.types.iter().flatten() {
            query.append_pair("types[]", kind);
        }
        if let Some(after) = cursor {
            query.append_pair("starting_after", after);
        }
        format!("/v1/events?{}", query.finish())
    }
}

#[async_trait]
impl ProviderRecord for StripeEvents {
    async fn page(
        &self,
        api: &ApiClient,
        window: Window,
        cursor: Option<&str>,
    ) -> Result<Page, ApiError> {
        let target = self.query(window, cursor);
        let (_, list): (_, List) = api.get_json(&target, "an events list").await?;
        let mut page = Page {
            entries: list.data.len(),
            ..Page::default()
        };
        for raw in list.data {
            let event: Event = serde_json::from_str(raw.get())
                .map_err(|e| ApiError::Answer(format!("an event: {e}")))?;
            page.next = Some(event.id.clone());
            page.listed.push(Listed {
                occurred_at: parse_unix(event.created)?,
                event_id: event.id,
                resend_id: None,
                event: Some(bytes::Bytes::copy_from_slice(raw.get().as_bytes())),
                refused: None,
            });
        }
        if !list.has_more {
            page.next = None;
        }
        page.listed
            .retain(|listed| window.holds(listed.occurred_at));
        Ok(page)
    }

    fn recovery(&self) -> Recovery {
        Recovery::Fetch
    }

    async fn resend(&self, _: &ApiClient, listed: &Listed) -> Result<(), ApiError> {
        Err(ApiError::Setup(format!(
            "Stripe cannot resend event {}: it is recovered as fetched",
            listed.event_id
        )))
    }
}
