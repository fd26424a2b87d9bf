//! Calls to a provider's API within its limits: a timeout on every call, `429` waited out
//! as its `Retry-After` says, `5xx` and transport failures tried again with backoff, and a
//! refused credential or an unknown resource failing at once, visibly. The credential
//! goes only to the configured API's own origin (a page link elsewhere is refused) and is
//! never part of an error.

use bytes::Bytes;
use http::HeaderMap;
use std::time::Duration;

/// How long one call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a call is made before it fails (429, 5xx, no answer).
const TRIES: u32 = 5;
/// The first backoff; doubled each time, up to [`MAX_WAIT`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between two tries, whatever `Retry-After` asks: a call's tries and
/// waits together stay within a run's lease (`reconcile` renews it between calls).
const MAX_WAIT: Duration = Duration::from_secs(30);

/// Why a call to a provider's API failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("the provider's API refused the credential (HTTP {0}): check reconcile.credential and its permissions")]
    Credential(u16),
    #[error("the provider's API has no {0} (HTTP 404): check the hook, the account or reconcile.api_url")]
    NotFound(String),
    #[error("the provider's API answered HTTP {status} to {path}")]
    Refused { status: u16, path: String },
    #[error("the provider's API did not answer after {TRIES} tries: {0}")]
    Unreachable(String),
    #[error("the provider's API answered something Inlet cannot read: {0}")]
    Answer(String),
    #[error("{0}")]
    Setup(String),
}

/// A provider's API at `base`, called with one `Authorization` value.
#[derive(Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    authorization: String,
    /// Headers every call carries (GitHub's API version).
    headers: Vec<(&'static str, &'static str)>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiClient({})", self.base)
    }
}

impl ApiClient {
    /// A client of the API at `base` (no trailing slash needed) that sends
    /// `authorization` with every call.
    pub fn new(base: &str, authorization: String) -> Result<Self, ApiError> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!(
                "inlet/",
                env!("CARGO_PKG_VERSION"),
                " (reconciliation)"
            ))
            .build()
            .map_err(|e| ApiError::Setup(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            authorization,
            headers: Vec::new(),
        })
    }

    /// Calls from now on carry `authorization` (the HTTP client, its connections and TLS
    /// set-up, stay).
    pub fn set_authorization(&mut self, authorization: String) {
        self.authorization = authorization;
    }

    /// The same client, with `name: value` on every call.
    pub fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// `GET` of `target`: a path under the API's base, or a page link the API gave (which
    /// must be on the same origin).
    pub async fn get(&self, target: &str) -> Result<(HeaderMap, Bytes), ApiError> {
        self.call(reqwest::Method::GET, target).await
    }

    /// `GET` of `target`, its answer read as JSON (`what` names it in an error).
    pub async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        target: &str,
        what: &str,
    ) -> Result<(HeaderMap, T), ApiError> {
        let (headers, body) = self.get(target).await?;
        let read =
            serde_json::from_slice(&body).map_err(|e| ApiError::Answer(format!("{what}: {e}")))?;
        Ok((headers, read))
    }

    /// `POST` of `path` with no body (a resend).
    pub async fn post(&self, target: &str) -> Result<(HeaderMap, Bytes), ApiError> {
        self.call(reqwest::Method::POST, target).await
    }

    async fn call(
        &self,
        method: reqwest::Method,
        target: &str,
    ) -> Result<(HeaderMap, Bytes), ApiError> {
        let url = self.url(target)?;
        let mut tries = 0;
        loop {
            tries += 1;
            let retry = match self.once(method.clone(), &url).await {
                Ok(answer) => return answer.into_result(target),
                Err(retry) => retry,
            };
            if tries >= TRIES {
                return Err(ApiError::Unreachable(retry.why));
            }
            let why = &retry.why;
            tracing::info!(%why, tries, "the provider's API asks to wait; trying again");
            let backoff = FIRST_BACKOFF * 2u32.pow(tries - 1);
            tokio::time::sleep(retry.wait.unwrap_or(backoff).min(MAX_WAIT)).await;
        }
    }

    /// One call: its answer, or why (and how long) to wait before the next try.
    async fn once(&self, method: reqwest::Method, url: &str) -> Result<Answer, Retry> {
        let mut request = (self.http.request(method, url))
            .header("authorization", &self.authorization)
            .header("accept", "application/json");
        for (name, value) in &self.headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.map_err(|e| Retry {
            wait: None,
            why: format!("{}", e.without_url()),
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if status == 429 || status >= 500 || rate_limited(status, &headers) {
            return Err(Retry {
                wait: retry_after(&headers).or_else(|| rate_limit_reset(&headers)),
                why: format!("HTTP {status}"),
            });
        }
        let body = response.bytes().await.map_err(|e| Retry {
            wait: None,
            why: format!("{}", e.without_url()),
        })?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// `target` as a URL on this API's origin.
    fn url(&self, target: &str) -> Result<String, ApiError> {
        if target.starts_with('/') {
            return Ok(format!("{}{target}", self.base));
        }
        let origin = origin_of(&self.base);
        if origin.is_some() && origin == origin_of(target) {
            Ok(target.to_owned())
        } else {
            Err(ApiError::Answer(format!(
                "a page link leads off the API's origin ({})",
                origin.unwrap_or_default()
            )))
        }
    }
}

/// What a call was answered (not 429 nor 5xx).
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Answer {
    fn into_result(self, target: &str) -> Result<(HeaderMap, Bytes), ApiError> {
        let path = target.split('?').next().unwrap_or(target).to_owned();
        match self.status {
            200..=299 => Ok((self.headers, self.body)),
            401 | 403 => Err(ApiError::Credential(self.status)),
            404 => Err(ApiError::NotFound(path)),
            status => Err(ApiError::Refused { status, path }),
        }
    }
}

/// A call to try again: after `wait` when the API said (`Retry-After`), else a backoff.
struct Retry {
    wait: Option<Duration>,
    why: String,
}

/// `Retry-After` in seconds or as an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// A `403` that is a rate limit, not a refused credential: GitHub's primary limit
/// (`x-ratelimit-remaining: 0`) and secondary ones (`retry-after`).
fn rate_limited(status: u16, headers: &HeaderMap) -> bool {
    let remaining = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok());
    status == 403 && (remaining == Some("0") || headers.contains_key("retry-after"))
}

/// How long until a rate limit's window resets (`x-ratelimit-reset`, Unix seconds).
fn rate_limit_reset(headers: &HeaderMap) -> Option<Duration> {
    let reset: u64 = headers
        .get("x-ratelimit-reset")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(Duration::from_secs(reset).saturating_sub(now))
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    let host_end = rest.find('/').unwrap_or(rest.len());
    Some(&url[..scheme.len() + 3 + host_end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_link_must_stay_on_the_api_origin() {
        let api =
            ApiClient::new("https://api.example.com/", "Bearer x".to_owned()).expect("client");
        assert_eq!(
            api.url("/v1/events?limit=1").as_deref(),
            Ok("https://api.example.com/v1/events?limit=1")
        );
        assert!(api.url("https://api.example.com/next?c=1").is_ok());
        assert!(api.url("https://evil.example.com/next").is_err());
        assert!(api.url("https://api.example.com.evil.net/next").is_err());
    }

    #[test]
    fn a_rate_limited_403_is_waited_out_a_refused_one_is_not() {
        let mut headers = HeaderMap::new();
        assert!(!rate_limited(403, &headers));
        headers.insert("x-ratelimit-remaining", http::HeaderValue::from_static("0"));
        assert!(rate_limited(403, &headers));
        assert!(!rate_limited(401, &headers));
        let mut secondary = HeaderMap::new();
        secondary.insert("retry-after", http::HeaderValue::from_static("60"));
        assert!(rate_limited(403, &secondary));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", http::HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            "retry-after",
            http::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
    }
}
