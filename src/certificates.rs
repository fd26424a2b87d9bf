//! What a source verified with a certificate (Amazon SNS) needs from the network: the
//! signing certificate a message names, fetched over HTTPS from an allowed host and kept
//! for the life of the instance, and the visit that confirms a subscription.
//!
//! A confirmation is visited once per instance and URL as well: copies wait for the
//! visit in progress, a confirmed URL is remembered for as long as its message can verify
//! (the source's tolerance: a replay after it is refused before anything is visited), a
//! failed visit as a failed fetch is. A replayed confirmation is answered from memory
//! instead of queueing visits behind a slow URL.
//!
//! A certificate is public and AWS's never changes at its URL, so each instance keeps the
//! ones it fetched, by URL and trusted roots ([`MAX_CACHED`] of them), while they are
//! within their validity (one found expired is fetched again). Each URL is fetched
//! by one request at a time: the others wait for it and take what it found; at most
//! [`MAX_FETCHES`] fetches run at once. A fetch that failed is remembered — for
//! [`FAILURE_REMEMBERED`] when the host could not answer (the webhook is answered `503`
//! meanwhile, `Retry-After` what is left of it, and SNS retries it), for
//! [`REFUSAL_REMEMBERED`] when it answered that there is no such certificate or served
//! something else (no signature can then verify). Time is the instance's clock. The URLs
//! were checked by the scheme (HTTPS, an allowed host, one certificate's path) and so was
//! everything about the message that needs no certificate, before they reach here;
//! redirects are not followed, and every exchange is bounded in time and size.

use crate::clock::Clock;
use crate::secret::Secret;
use crate::signature::{check_certificate, Fetch};
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a fetch or a visit may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest certificate read (AWS's are about 2 KiB), and the most of a visit's answer.
const MAX_BYTES: usize = 16 * 1024;
/// How many certificate URLs an instance keeps.
pub const MAX_CACHED: usize = 64;
/// How long a fetch the host could not answer is remembered before its URL is asked again.
pub const FAILURE_REMEMBERED: Duration = Duration::from_secs(5);
/// How long a URL that serves no certificate is remembered as such.
pub const REFUSAL_REMEMBERED: Duration = Duration::from_secs(300);
/// How many fetches and visits run at once in an instance.
pub const MAX_FETCHES: usize = 4;

/// Why a certificate or a confirmation could not be had.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{url}: {why}")]
pub struct FetchError {
    pub url: String,
    pub why: String,
    /// The host answered, and there is no usable certificate at that URL (an answer other
    /// than 200, or not a certificate): asking again will not help.
    pub refused: bool,
    /// How long from now the failure stays remembered: asking again sooner gets it again.
    pub remembered_for: Duration,
}

impl FetchError {
    fn new(url: &str, why: String, refused: bool) -> Self {
        let mut error = Self {
            url: url.to_owned(),
            why,
            refused,
            remembered_for: Duration::ZERO,
        };
        error.remembered_for = remembered(&error);
        error
    }
}

/// What is known of one certificate or confirmation URL.
enum Slot {
    Unknown,
    /// The certificate's PEM, and the end of its validity (Unix seconds).
    Fetched {
        pem: Secret,
        until: i64,
    },
    /// A subscription confirmed by visiting the URL, remembered until then.
    Confirmed {
        until: DateTime<Utc>,
    },
    Failed {
        at: DateTime<Utc>,
        error: FetchError,
    },
}

impl Slot {
    /// The failure this slot remembers at `now`, with what is left of its memory; `None`
    /// once it is over — or when the clock was set back before it (never a longer wait
    /// than the one first told).
    fn failure(&self, now: DateTime<Utc>) -> Option<FetchError> {
        let Slot::Failed { at, error } = self else {
            return None;
        };
        let elapsed = (now - *at).to_std().ok()?;
        let left = remembered(error).checked_sub(elapsed)?;
        (!left.is_zero()).then(|| FetchError {
            remembered_for: left,
            ..error.clone()
        })
    }
}

/// A certificate URL, and the roots its fetch trusts.
type SlotKey = (Option<Arc<[u8]>>, String);

/// The certificates this instance fetched, and the HTTPS clients it fetches with (one per
/// set of extra trusted roots).
pub struct Certificates {
    slots: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<Slot>>>>,
    clients: Mutex<HashMap<Option<Arc<[u8]>>, reqwest::Client>>,
    fetches: tokio::sync::Semaphore,
}

impl Default for Certificates {
    fn default() -> Self {
        Self {
            slots: Mutex::default(),
            clients: Mutex::default(),
            fetches: tokio::sync::Semaphore::new(MAX_FETCHES),
        }
    }
}

impl Certificates {
    /// The certificate at `fetch.url` (its PEM), from this instance's cache or fetched now
    /// (and then within its validity at `clock`'s now); `source` labels the metric and the
    /// log line of a fetch.
    pub async fn certificate(
        &self,
        source: &str,
        fetch: &Fetch,
        clock: &dyn Clock,
    ) -> Result<Secret, FetchError> {
        let slot = self.slot(fetch);
        let mut slot = slot.lock().await;
        let now = clock.now();
        match &*slot {
            // A certificate that has expired since is fetched again: its URL may serve its
            // successor.
            Slot::Fetched { pem, until } if now.timestamp() <= *until => return Ok(pem.clone()),
            failed => {
                if let Some(error) = failed.failure(now) {
                    return Err(error);
                }
            }
        }
        let fetched = self.fetch_certificate(fetch, now.timestamp()).await;
        let outcome = match &fetched {
            Ok(_) => "fetched",
            Err(_) => "failed",
        };
        metrics::counter!("inlet_certificate_fetches_total", "source" => source.to_owned(), "outcome" => outcome)
            .increment(1);
        *slot = match &fetched {
            Ok((pem, until)) => {
                tracing::info!(%source, url = %fetch.url, "signing certificate fetched");
                Slot::Fetched {
                    pem: pem.clone(),
                    until: *until,
                }
            }
            Err(error) => {
                tracing::warn!(%source, url = %fetch.url, why = %error.why, refused = error.refused, "signing certificate not fetched");
                // Remembered from when the answer came, however long the fetch took.
                Slot::Failed {
                    at: clock.now(),
                    error: error.clone(),
                }
            }
        };
        fetched.map(|(pem, _)| pem)
    }

    /// Confirms a subscription: `GET fetch.url`, answered with a 2xx — once for this URL
    /// while it is remembered: confirmed for `confirmed_for` (the tolerance within which
    /// its message verifies), failed as a failed fetch is. Copies wait for the visit in
    /// progress and take its outcome; `source` labels the metric and the log line.
    pub async fn visit(
        &self,
        source: &str,
        fetch: &Fetch,
        clock: &dyn Clock,
        confirmed_for: Duration,
    ) -> Result<(), FetchError> {
        let slot = self.slot(fetch);
        let mut slot = slot.lock().await;
        match &*slot {
            Slot::Confirmed { until } if clock.now() < *until => return Ok(()),
            failed => {
                if let Some(error) = failed.failure(clock.now()) {
                    return Err(error);
                }
            }
        }
        let visited = self.get(fetch, false).await.map(drop);
        let outcome = match &visited {
            Ok(()) => "confirmed",
            Err(_) => "failed",
        };
        metrics::counter!("inlet_subscription_visits_total", "source" => source.to_owned(), "outcome" => outcome)
            .increment(1);
        let now = clock.now();
        *slot = match &visited {
            Ok(()) => Slot::Confirmed {
                until: chrono::Duration::from_std(confirmed_for)
                    .ok()
                    .and_then(|span| now.checked_add_signed(span))
                    .unwrap_or(DateTime::<Utc>::MAX_UTC),
            },
            Err(error) => {
                tracing::warn!(%source, url = %fetch.url, why = %error.why, "SubscribeURL not visited");
                Slot::Failed {
                    at: now,
                    error: error.clone(),
                }
            }
        };
        visited
    }

    /// The slot of `fetch`'s URL and roots, made when new. Past [`MAX_CACHED`] of them, the
    /// failed ones are forgotten first, then any not being fetched.
    fn slot(&self, fetch: &Fetch) -> Arc<tokio::sync::Mutex<Slot>> {
        let key = (fetch.roots.clone(), fetch.url.clone());
        let mut slots = self.slots.lock();
        if !slots.contains_key(&key) && slots.len() >= MAX_CACHED {
            // A slot being fetched is locked: kept, so its URL is never fetched twice at once.
            slots.retain(|_, slot| {
                (slot.try_lock()).map_or(true, |slot| {
                    matches!(*slot, Slot::Fetched { .. } | Slot::Confirmed { .. })
                })
            });
            let idle: Vec<SlotKey> = (slots.iter())
                .filter(|(_, slot)| slot.try_lock().is_ok())
                .map(|(key, _)| key.clone())
                .take((slots.len() + 1).saturating_sub(MAX_CACHED))
                .collect();
            for key in idle {
                slots.remove(&key);
            }
        }
        let slot = slots.entry(key);
        Arc::clone(slot.or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Unknown))))
    }

    /// The certificate at `fetch.url`, and the end of its validity.
    async fn fetch_certificate(
        &self,
        fetch: &Fetch,
        now: i64,
    ) -> Result<(Secret, i64), FetchError> {
        let body = self.get(fetch, true).await?;
        let refused = |why: String| FetchError::new(&fetch.url, why, true);
        let until = check_certificate(&body, now).map_err(refused)?;
        let pem = String::from_utf8(body).map_err(|_| refused("not text".to_owned()))?;
        Ok((Secret::new(pem), until))
    }

    /// `GET fetch.url`: the body of a 2xx answer (only a 200 for a certificate), at most
    /// [`MAX_BYTES`].
    async fn get(&self, fetch: &Fetch, only_ok: bool) -> Result<Vec<u8>, FetchError> {
        let failed = |why: String, refused: bool| FetchError::new(&fetch.url, why, refused);
        let client = self
            .client(fetch.roots.as_ref())
            .map_err(|why| failed(why, false))?;
        let _turn = (self.fetches.acquire().await)
            .map_err(|_| failed("shutting down".to_owned(), false))?;
        let mut response = (client.get(&fetch.url).send().await)
            .map_err(|e| failed(format!("no answer: {}", reqwest_reason(&e)), false))?;
        let status = response.status();
        let taken = match only_ok {
            true => status == reqwest::StatusCode::OK,
            false => status.is_success(),
        };
        if !taken {
            return Err(failed(
                format!("answered {status}"),
                !status.is_server_error(),
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = (response.chunk().await)
            .map_err(|e| failed(format!("answer cut short: {}", reqwest_reason(&e)), false))?
        {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(failed(format!("an answer over {MAX_BYTES} bytes"), true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The client that trusts the system's roots and `roots`, built once per set.
    fn client(&self, roots: Option<&Arc<[u8]>>) -> Result<reqwest::Client, String> {
        if let Some(client) = self.clients.lock().get(&roots.cloned()) {
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
        self.clients.lock().insert(roots.cloned(), client.clone());
        Ok(client)
    }
}

/// How long a failed fetch is remembered.
fn remembered(error: &FetchError) -> Duration {
    match error.refused {
        true => REFUSAL_REMEMBERED,
        false => FAILURE_REMEMBERED,
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
