//! Paddle Billing's record: `GET /notifications` (kept 90 days) with `from`/`to` on when
//! the event occurred, `per_page` ≤ 200 and the next page's URL in
//! `meta.pagination.next`; those of the notification destination that points at Inlet
//! (a replay goes to its notification's own destination). A missing event is replayed (`POST /notifications/{id}/replay`): Paddle sends it again, signed,
//! as a new notification under the same `event_id` Inlet keys on.

use super::{parse_time, ApiClient, ApiError, Listed, Page, ProviderRecord, Recovery, Window};
use crate::secret::Secret;
use async_trait::async_trait;
use chrono::SecondsFormat;
use serde::Deserialize;

/// The most notifications Paddle serves per page.
const PER_PAGE: u32 = 200;

/// Paddle's notifications API, with its key.
#[derive(Debug, Clone)]
pub struct PaddleNotifications {
    url: String,
    key: Secret,
    /// The notification destination that points at Inlet (`notification_setting_id`):
    /// a replay goes to its notification's own destination.
    setting: String,
}

#[derive(Deserialize)]
struct List {
    data: Vec<Notification>,
    meta: Meta,
}

#[derive(Deserialize)]
struct Meta {
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    next: Option<String>,
    has_more: bool,
}

#[derive(Deserialize)]
struct Notification {
    id: String,
    occurred_at: String,
    status: String,
    /// `event` for the event's own notification, `replay` for a replay of one.
    origin: String,
    payload: Payload,
}

impl Notification {
    /// Whether Paddle replays it: an event's own notification that was delivered or
    /// failed for good (one still being retried is left to Paddle's own retries).
    fn replayable(&self) -> bool {
        self.origin == "event" && matches!(self.status.as_str(), "delivered" | "failed")
    }
}

#[derive(Deserialize)]
struct Payload {
    event_id: String,
}

impl PaddleNotifications {
    pub fn new(url: String, key: Secret, setting: String) -> Self {
        Self { url, key, setting }
    }

    pub fn client(&self) -> Result<ApiClient, ApiError> {
        ApiClient::new(&self.url, format!("Bearer {}", self.key.expose()))
    }

    fn first_page(&self, window: Window) -> String {
        let time =
            |at: chrono::DateTime<chrono::Utc>| at.to_rfc3339_opts(SecondsFormat::Secs, true);
        let mut query = form_urlencoded::Serializer::new(String::new());
        query
            .append_pair("per_page", &PER_PAGE.to_string())
            .append_pair("from", &time(window.from))
            .append_pair("to", &time(window.to));
        query.append_pair("notification_setting_id", &self.setting);
        format!("/notifications?{}", query.finish())
    }
}

#[async_trait]
impl ProviderRecord for PaddleNotifications {
    async fn page(
        &self,
        api: &ApiClient,
        window: Window,
        cursor: Option<&str>,
    ) -> Result<Page, ApiError> {
        let first = self.first_page(window);
        let target = cursor.unwrap_or(&first);
        let (_, list): (_, List) = api.get_json(target, "a notifications list").await?;
        let mut page = Page {
            entries: list.data.len(),
            next: (list.meta.pagination.has_more)
                .then_some(list.meta.pagination.next)
                .flatten(),
            ..Page::default()
        };
        // A replay's notification is of an event whose own notification is listed too.
        for notification in list.data.into_iter().filter(|n| n.origin == "event") {
            let occurred_at = parse_time(&notification.occurred_at)?;
            if window.holds(occurred_at) {
                page.listed.push(Listed {
                    resend_id: notification.replayable().then(|| notification.id.clone()),
                    event_id: notification.payload.event_id,
                    occurred_at,
                    event: None,
                    refused: None,
                });
            }
        }
        Ok(page)
    }

    fn recovery(&self) -> Recovery {
        Recovery::Resend
    }

    async fn resend(&self, api: &ApiClient, listed: &Listed) -> Result<(), ApiError> {
        let id = listed.resend_id.as_deref().unwrap_or_default();
        let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
        api.post(&format!("/notifications/{id}/replay"))
            .await
            .map(drop)
    }
}
