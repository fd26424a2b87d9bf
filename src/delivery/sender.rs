//! One delivery attempt: POST the original payload bytes to the destination with a stable
//! `Idempotency-Key`, Inlet's headers, and Inlet's own Standard Webhooks signature made
//! with the destination's secret.

use super::headers::delivery_headers;
use super::outbox::Leased;
use super::policy::{classify_status, parse_retry_after, Verdict};
use super::DestinationSettings;
use chrono::{DateTime, Utc};

/// What came back from one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptResult {
    /// The destination's status, when it answered.
    pub status: Option<u16>,
    pub verdict: Verdict,
    /// What to keep as `last_error` when it was not delivered.
    pub error: Option<String>,
}

/// An HTTP client for one destination (connect timeout and total timeout from its
/// settings; redirects are not followed: a 3xx is the destination's answer).
pub fn client_for(destination: &DestinationSettings) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(destination.connect_timeout)
        .timeout(destination.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("inlet/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Sends one attempt and classifies the outcome.
pub async fn attempt(
    client: &reqwest::Client,
    destination: &DestinationSettings,
    delivery: &Leased,
    now: DateTime<Utc>,
) -> AttemptResult {
    let mut request = client.post(&destination.url).body(delivery.payload.clone());
    for (name, value) in delivery_headers(destination, delivery, now) {
        request = request.header(name, value);
    }
    // A request that cannot be built (a stored value no header can carry) will never be:
    // a dead letter at once, with the reason, rather than retries until the deadline.
    let request = match request.build() {
        Ok(request) => request,
        Err(error) => {
            return AttemptResult {
                status: None,
                verdict: Verdict::Dead,
                error: Some(format!(
                    "the request cannot be built: {}",
                    error.without_url()
                )),
            }
        }
    };
    match client.execute(request).await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, now));
            let verdict = classify_status(status, retry_after);
            let error = match verdict {
                Verdict::Delivered => None,
                _ => {
                    // Keep the start of the answer: it usually says why.
                    let excerpt = answer_excerpt(response).await;
                    Some(format!("HTTP {status}: {excerpt}"))
                }
            };
            AttemptResult {
                status: Some(status),
                verdict,
                error,
            }
        }
        Err(error) => {
            // Destination URLs may carry tokens: never store or log them.
            let error = error.without_url();
            let kind = if error.is_timeout() {
                "timed out"
            } else if error.is_connect() {
                "connection failed"
            } else {
                "request failed"
            };
            AttemptResult {
                status: None,
                verdict: Verdict::Retry { retry_after: None },
                error: Some(format!("{kind}: {error}")),
            }
        }
    }
}

/// The first 200 characters of an answer, reading no more than 1 KiB of it.
async fn answer_excerpt(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < 1024 {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            _ => break,
        }
    }
    bytes.truncate(1024);
    String::from_utf8_lossy(&bytes).chars().take(200).collect()
}
