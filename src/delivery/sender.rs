//! One delivery attempt: POST the original payload bytes to the destination with a stable
//! `Idempotency-Key`, Inlet's headers, and Inlet's own Standard Webhooks signature made
//! with the destination's secret.

use super::headers::delivery_headers;
use super::outbox::Leased;
use super::policy::{classify_status, parse_retry_after, Verdict};
use super::DestinationSettings;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::time::Duration;

/// What came back from one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptResult {
    /// The destination's status, when it answered.
    pub status: Option<u16>,
    pub verdict: Verdict,
    /// What to keep as `last_error` when it was not delivered.
    pub error: Option<String>,
}

/// A client for one destination alone, with a TLS connector of its own (tools and tests;
/// the dispatcher's destinations share theirs through [`Clients`]).
pub fn client_for(destination: &DestinationSettings) -> reqwest::Result<reqwest::Client> {
    client_builder(destination.connect_timeout).build()
}

/// What every delivery client has: the connect timeout, no redirects (a 3xx is the
/// destination's answer) and Inlet's user agent. The total timeout is set on each request
/// ([`attempt`]), so that destinations with different timeouts can share a client.
fn client_builder(connect_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("inlet/", env!("CARGO_PKG_VERSION")))
}

/// The TLS connector every delivery client uses. Building one loads the system
/// certificate store (measured: about 0.1 s and 0.9 MB each), so there is one per
/// dispatcher, never one per destination.
pub fn tls_connector() -> anyhow::Result<native_tls::TlsConnector> {
    native_tls::TlsConnector::new()
        .map_err(|error| anyhow::anyhow!("cannot set up TLS for delivery: {error}"))
}

/// The HTTP clients of a set of destinations: one per connect timeout, the only setting
/// a client holds, all on one TLS connector. A client is a connection pool, so
/// destinations on one host also share their idle connections.
pub struct Clients<'a> {
    tls: &'a native_tls::TlsConnector,
    by_connect_timeout: HashMap<Duration, reqwest::Client>,
    built: usize,
}

impl<'a> Clients<'a> {
    /// No client yet; `tls` is the connector each new one uses.
    pub fn new(tls: &'a native_tls::TlsConnector) -> Self {
        Self {
            tls,
            by_connect_timeout: HashMap::new(),
            built: 0,
        }
    }

    /// Shares `client`, which connects within `connect_timeout`, instead of building one.
    pub fn reuse(&mut self, connect_timeout: Duration, client: &reqwest::Client) {
        self.by_connect_timeout
            .entry(connect_timeout)
            .or_insert_with(|| client.clone());
    }

    /// The client for `destination`, built on first use.
    pub fn client_for(
        &mut self,
        destination: &DestinationSettings,
    ) -> reqwest::Result<reqwest::Client> {
        let timeout = destination.connect_timeout;
        if let Some(client) = self.by_connect_timeout.get(&timeout) {
            return Ok(client.clone());
        }
        let client = client_builder(timeout)
            .tls_backend_preconfigured(self.tls.clone())
            .build()?;
        self.built += 1;
        self.by_connect_timeout.insert(timeout, client.clone());
        Ok(client)
    }

    /// How many clients were built (not reused).
    pub fn built(&self) -> usize {
        self.built
    }
}

/// Sends one attempt and classifies the outcome; `trace_parent` is the attempt's span.
pub async fn attempt(
    client: &reqwest::Client,
    destination: &DestinationSettings,
    delivery: &Leased,
    now: DateTime<Utc>,
    trace_parent: Option<&str>,
) -> AttemptResult {
    let mut request = client
        .post(&destination.url)
        .timeout(destination.timeout)
        .body(delivery.body().to_vec());
    for (name, value) in delivery_headers(destination, delivery, now, trace_parent) {
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
        Ok(response) => answered(response, now).await,
        Err(error) => unanswered(error, destination),
    }
}

/// What the destination's answer means.
async fn answered(response: reqwest::Response, now: DateTime<Utc>) -> AttemptResult {
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

/// No answer (a timeout, a refused connection…): transient, retried. The error says what
/// happened, where, and its whole chain of causes — a refused connection, a failed DNS
/// lookup, a TLS failure and a timeout read differently.
fn unanswered(error: reqwest::Error, destination: &DestinationSettings) -> AttemptResult {
    // Destination URLs may carry tokens: never store or log them (the address is the
    // host and port alone).
    let error = error.without_url();
    let what = match kind_of(&error) {
        "timed out" if error.is_connect() => {
            format!("connect timed out after {:?}", destination.connect_timeout)
        }
        "timed out" => format!("timed out after {:?}", destination.timeout),
        kind => kind.to_owned(),
    };
    AttemptResult {
        status: None,
        verdict: Verdict::Retry { retry_after: None },
        error: Some(format!(
            "{what} ({}): {}",
            address_of(&destination.url),
            error_chain(&error)
        )),
    }
}

/// What kind of failure an unanswered request is, from its causes.
fn kind_of(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        return "timed out";
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused",
                std::io::ErrorKind::ConnectionReset => return "connection reset",
                std::io::ErrorKind::TimedOut => return "timed out",
                _ => {}
            }
        }
        if current.downcast_ref::<native_tls::Error>().is_some() {
            return "TLS failed";
        }
        if current.to_string().starts_with("dns error") {
            return "DNS lookup failed";
        }
        cause = current.source();
    }
    if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    }
}

/// An error and each of its causes, `: `-separated, a cause that repeats its parent's
/// text left out.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cause = Some(error);
    while let Some(current) = cause {
        let text = current.to_string();
        if !parts.iter().any(|seen| seen.contains(&text)) {
            parts.push(text);
        }
        cause = current.source();
    }
    parts.join(": ")
}

/// Where a URL points, as `host:port`: never its user info, path or query.
pub(crate) fn address_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => {
            let host = url.host_str().unwrap_or("?");
            match url.port_or_known_default() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            }
        }
        Err(_) => "an unparsable URL".to_owned(),
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

#[cfg(test)]
mod tests {
    use super::address_of;

    #[test]
    fn the_address_names_host_and_port_and_nothing_else() {
        assert_eq!(
            address_of("https://user:pw@hooks.example.com/T0/B1/secret?x=1"),
            "hooks.example.com:443"
        );
        assert_eq!(address_of("http://127.0.0.1:9/events"), "127.0.0.1:9");
        assert_eq!(address_of("http://[::1]:8080/"), "[::1]:8080");
    }
}
