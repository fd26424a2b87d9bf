//! What a source verified with a certificate (Amazon SNS) needs from the network: the
//! signing certificate a message names, fetched over HTTPS from an allowed host and kept
//! for the life of the instance, and the visit that confirms a subscription.
//!
//! A certificate is public and AWS's never changes at its URL, so each instance keeps the
//! ones it fetched, by URL ([`MAX_CACHED`] of them). Each URL is fetched by one request at a
//! time: the others wait for it and take what it found. A fetch that failed is remembered
//! for [`FAILURE_REMEMBERED`], so a host that is down is not asked again by every waiting
//! request; the webhook is answered `503` meanwhile and SNS retries it. The URLs were
//! checked by the scheme (HTTPS, an allowed host) before they reach here; redirects are not
//! followed, and every exchange is bounded in time and size.

use crate::secret::Secret;
use crate::signature::{check_certificate, Fetch};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a fetch or a visit may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest certificate read (AWS's are about 2 KiB), and the most of a visit's answer.
const MAX_BYTES: usize = 16 * 1024;
/// How many certificate URLs an instance keeps.
pub const MAX_CACHED: usize = 64;
/// How long a failed fetch is remembered before its URL is asked again.
pub const FAILURE_REMEMBERED: Duration = Duration::from_secs(5);

/// Why a certificate or a confirmation could not be had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{url}: {why}")]
pub struct FetchError {
    pub url: String,
    pub why: String,
}

/// What is known of one certificate URL.
enum Slot {
    Unknown,
    Fetched(Secret),
    Failed { at: Instant, why: String },
}

/// The certificates this instance fetched, and the HTTPS clients it fetches with (one per
/// set of extra trusted roots).
#[derive(Default)]
pub struct Certificates {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
    clients: Mutex<HashMap<Option<Arc<[u8]>>, reqwest::Client>>,
}

impl Certificates {
    /// The certificate at `fetch.url` (its PEM), from this instance's cache or fetched now;
    /// `source` labels the metric and the log line of a fetch.
    pub async fn certificate(&self, source: &str, fetch: &Fetch) -> Result<Secret, FetchError> {
        let slot = self.slot(&fetch.url);
        let mut slot = slot.lock().await;
        match &*slot {
            Slot::Fetched(pem) => return Ok(pem.clone()),
            Slot::Failed { at, why } if at.elapsed() < FAILURE_REMEMBERED => {
                return Err(FetchError {
                    url: fetch.url.clone(),
                    why: format!("{why} (a moment ago; asked again after a few seconds)"),
                })
            }
            _ => {}
        }
        let fetched = self.fetch_certificate(fetch).await;
        let outcome = match &fetched {
            Ok(_) => "fetched",
            Err(_) => "failed",
        };
        metrics::counter!("inlet_certificate_fetches_total", "source" => source.to_owned(), "outcome" => outcome)
            .increment(1);
        *slot = match &fetched {
            Ok(pem) => {
                tracing::info!(%source, url = %fetch.url, "signing certificate fetched");
                Slot::Fetched(pem.clone())
            }
            Err(error) => {
                tracing::warn!(%source, url = %fetch.url, why = %error.why, "signing certificate not fetched");
                Slot::Failed {
                    at: Instant::now(),
                    why: error.why.clone(),
                }
            }
        };
        fetched
    }

    /// Confirms a subscription: `GET fetch.url`, answered with a 2xx.
    pub async fn visit(&self, fetch: &Fetch) -> Result<(), FetchError> {
        self.get(fetch).await.map(drop)
    }

    /// The slot of `url`, made when new. Past [`MAX_CACHED`] URLs, the failed ones are
    /// forgotten first, then all of them.
    fn slot(&self, url: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock();
        if !slots.contains_key(url) && slots.len() >= MAX_CACHED {
            slots.retain(|_, slot| {
                slot.try_lock()
                    .is_ok_and(|slot| matches!(*slot, Slot::Fetched(_)))
            });
            if slots.len() >= MAX_CACHED {
                slots.clear();
            }
        }
        let slot = slots.entry(url.to_owned());
        Arc::clone(slot.or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Unknown))))
    }

    async fn fetch_certificate(&self, fetch: &Fetch) -> Result<Secret, FetchError> {
        let body = self.get(fetch).await?;
        let failed = |why: String| FetchError {
            url: fetch.url.clone(),
            why,
        };
        check_certificate(&body, chrono::Utc::now().timestamp()).map_err(failed)?;
        let pem = String::from_utf8(body).map_err(|_| failed("not text".to_owned()))?;
        Ok(Secret::new(pem))
    }

    /// `GET fetch.url`: the body of a 2xx answer, at most [`MAX_BYTES`].
    async fn get(&self, fetch: &Fetch) -> Result<Vec<u8>, FetchError> {
        let failed = |why: String| FetchError {
            url: fetch.url.clone(),
            why,
        };
        let client = self.client(fetch.roots.as_ref()).map_err(failed)?;
        let mut response = (client.get(&fetch.url).send().await)
            .map_err(|e| failed(format!("no answer: {}", reqwest_reason(&e))))?;
        if !response.status().is_success() {
            return Err(failed(format!("answered {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = (response.chunk().await)
            .map_err(|e| failed(format!("answer cut short: {}", reqwest_reason(&e))))?
        {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(failed(format!("an answer over {MAX_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The client that trusts the system's roots and `roots`, built once per set.
    fn client(&self, roots: Option<&Arc<[u8]>>) -> Result<reqwest::Client, String> {
        let mut clients = self.clients.lock();
        if let Some(client) = clients.get(&roots.cloned()) {
            return Ok(client.clone());
        }
        let mut builder = reqwest::Client::builder()
            .https_only(true)
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = roots {
            let trusted =
                reqwest::Certificate::from_pem_bundle(pem).map_err(|e| format!("ca_file: {e}"))?;
            for root in trusted {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder
            .build()
            .map_err(|e| format!("no HTTPS client: {e}"))?;
        clients.insert(roots.cloned(), client.clone());
        Ok(client)
    }
}

/// What went wrong with an exchange, with its causes (TLS, connection), for the log.
fn reqwest_reason(error: &reqwest::Error) -> String {
    let mut reason = match error.is_timeout() {
        true => "timed out".to_owned(),
        false => error.to_string(),
    };
    let mut cause = std::error::Error::source(error);
    while let Some(error) = cause {
        reason.push_str(&format!(": {error}"));
        cause = error.source();
    }
    reason
}
