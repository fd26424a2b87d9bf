//! The library side of the command line: `inlet sign` and `inlet send` (sign a body the
//! way a provider would, post it to a running Inlet) and the operator commands (a client
//! of the admin API that retries with one Idempotency-Key, and the requests it sends).

use crate::config::Settings;
use crate::idempotency::REPLAYED_HEADER;
use crate::identity::Locator;
use crate::provider::SourceSettings;
use crate::secret::Secret;
use crate::signature::EventToSign;
use crate::signature::ToSign;
use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};

/// The headers `source`'s provider would send for `body` at `now`, signed with
/// `private_key` when given (schemes that verify with public keys), else with the source's
/// first secret. Where the source reads the event id or type from a header, the sample
/// event's id and type are sent in it.
pub fn signed_headers(
    settings: &Settings,
    source: &str,
    body: &[u8],
    now: DateTime<Utc>,
    event: &EventToSign,
    private_key: Option<&Secret>,
) -> anyhow::Result<Vec<(String, String)>> {
    let source = settings
        .source(source)
        .ok_or_else(|| anyhow!("no source named '{source}' in the configuration"))?;
    let signer = signing_secret(source, private_key)?;
    Ok(signed_headers_with(source, signer, body, now, event))
}

/// What signs for `source`: the private key given (checked), or else the source's first
/// secret, unless that is a public key, which only verifies.
pub fn signing_secret<'a>(
    source: &'a SourceSettings,
    private_key: Option<&'a Secret>,
) -> anyhow::Result<&'a Secret> {
    let scheme = source.provider.scheme();
    if source.provider.verifies_with_certificate() {
        return Err(anyhow!(
            "source {} ({}) cannot be signed here: AWS signs SNS messages with its own \
             certificate's key; publish to the topic instead",
            source.name,
            source.provider.name()
        ));
    }
    if let Some(key) = private_key.filter(|_| handshake_without_secrets(source)) {
        // The secret the source's handshake stored (Asana): the configuration has none.
        return Ok(key);
    }
    if let Some(key) = private_key {
        scheme.check_private_key(key).map_err(|m| {
            anyhow!(
                "the private key cannot sign for source {} ({}): {m}",
                source.name,
                source.provider.name()
            )
        })?;
        return Ok(key);
    }
    match source.secrets.first() {
        Some(secret) if scheme.signs_with(secret) => Ok(secret),
        Some(_) => Err(anyhow!(
            "source {} verifies with a public key, which cannot sign: give the private key \
             with --private-key or INLET_SIGNING_KEY (a value, env:NAME or file:PATH)",
            source.name
        )),
        None if handshake_without_secrets(source) => Err(anyhow!(
            "source {} takes its secret from a handshake and its configuration gives none: \
             give the secret the handshake stored with --private-key or INLET_SIGNING_KEY",
            source.name
        )),
        None => Err(anyhow!("source {} has no secret", source.name)),
    }
}

/// `body` as `source`'s provider would send it: signed inside, for a scheme that signs
/// there (Adyen's items), else as it is (the signature travels in headers).
pub fn signed_body(
    settings: &Settings,
    source: &str,
    body: Vec<u8>,
    private_key: Option<&Secret>,
) -> anyhow::Result<Vec<u8>> {
    let source = settings
        .source(source)
        .ok_or_else(|| anyhow!("no source named '{source}' in the configuration"))?;
    let signer = signing_secret(source, private_key)?;
    match source.provider.scheme().sign_body(&body, signer) {
        None => Ok(body),
        Some(signed) => {
            signed.map_err(|m| anyhow!("cannot sign the body for {}: {m}", source.name))
        }
    }
}

/// A source whose secret its provider's handshake establishes, none configured.
fn handshake_without_secrets(source: &SourceSettings) -> bool {
    source.provider.secret_by_handshake().is_some() && source.secrets.is_empty()
}

/// [`signed_headers`] for a source at hand, signed with its first secret.
pub fn signed_headers_for(
    source: &SourceSettings,
    body: &[u8],
    now: DateTime<Utc>,
    event: &EventToSign,
) -> Vec<(String, String)> {
    // Validation guarantees at least one secret per source.
    let Some(secret) = source.secrets.first() else {
        return Vec::new();
    };
    signed_headers_with(source, secret, body, now, event)
}

/// [`signed_headers`] for a source at hand, signed with `signer` (a secret of the source's
/// kind, or a private key for schemes that verify with public keys).
pub fn signed_headers_with(
    source: &SourceSettings,
    signer: &Secret,
    body: &[u8],
    now: DateTime<Utc>,
    event: &EventToSign,
) -> Vec<(String, String)> {
    let mut headers = source
        .provider
        .scheme()
        .sign(ToSign::new(body, signer, now, event));
    let located = [
        (Some(&source.locators.event_id), &event.id),
        (source.locators.event_type.as_ref(), &event.event_type),
    ];
    for (locator, value) in located {
        if let Some(Locator::Header(names)) = locator {
            let present = headers
                .iter()
                .any(|(h, _)| names.iter().any(|n| n.eq_ignore_ascii_case(h)));
            if !present {
                headers.push((names[0].clone(), value.clone()));
            }
        }
    }
    headers
}

/// A fresh sample event id: unique per call (time, process and a counter).
pub fn sample_event_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let now = Utc::now();
    format!(
        "inlet-{}-{}-{}",
        now.timestamp_nanos_opt().unwrap_or_default(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The webhook URL of `source` on the configured listener.
pub fn default_url(settings: &Settings, source: &str) -> String {
    format!("{}/webhooks/{source}", listener_url(settings))
}

/// This configuration's listener as a base URL (`http://host:port`): a wildcard address
/// (`0.0.0.0`, `[::]`) is reached on the loopback of the same family.
pub fn listener_url(settings: &Settings) -> String {
    base_url(&settings.server.bind)
}

/// Where this configuration serves the operator API: `admin.bind`, else the listener.
pub fn operator_url(settings: &Settings) -> String {
    match &settings.admin.bind {
        Some(bind) => base_url(bind),
        None => listener_url(settings),
    }
}

/// `bind` as a base URL; a wildcard address on the loopback of its family.
fn base_url(bind: &str) -> String {
    let address = match (bind.strip_prefix("0.0.0.0:"), bind.strip_prefix("[::]:")) {
        (Some(port), _) => format!("127.0.0.1:{port}"),
        (_, Some(port)) => format!("[::1]:{port}"),
        _ => bind.to_owned(),
    };
    format!("http://{address}")
}

/// How long `inlet healthcheck` waits for `/readyz` (a container's check has its own
/// timeout too; this one makes the command exit with a reason before it).
const HEALTHCHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How much of the answer `inlet healthcheck` reads (a `/readyz` answer is far shorter).
const HEALTHCHECK_BODY_BYTES: usize = 64 * 1024;

/// `inlet healthcheck`: `GET {base}/readyz`; `Ok` with the answer's first line when it is
/// `200`, else why not (unreachable, or the status and the reason it gave). Needs no
/// shell tools, so a distroless image's `HEALTHCHECK` can run it.
pub async fn healthcheck(base: &str) -> anyhow::Result<String> {
    let url = format!("{}/readyz", base.trim_end_matches('/'));
    // Straight to the listener: no proxy from the environment, no redirect followed.
    let client = reqwest::Client::builder()
        .timeout(HEALTHCHECK_TIMEOUT)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("cannot build the HTTP client")?;
    let mut response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url} failed"))?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= HEALTHCHECK_BODY_BYTES {
            break;
        }
    }
    let body = String::from_utf8_lossy(&bytes);
    // At most 200 characters of the first line, without control characters: what
    // answers at --url may be anything.
    let summary: String = body
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    match status {
        200 => Ok(format!("{url}: 200 {summary}")),
        _ => Err(anyhow!("{url}: {status} {summary}")),
    }
}

/// What Inlet answered to `inlet send`.
#[derive(Debug)]
pub struct SendReply {
    pub status: u16,
    /// The `Idempotent-Replayed` header, when the answer is a stored one.
    pub replayed: Option<String>,
    pub body: String,
}

impl std::fmt::Display for SendReply {
    /// The status, the `Idempotent-Replayed` header when present, then the body: one line
    /// each, as `inlet send` prints them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.status)?;
        if let Some(replayed) = &self.replayed {
            writeln!(f, "{REPLAYED_HEADER}: {replayed}")?;
        }
        write!(f, "{}", self.body)
    }
}

/// Posts a signed body; returns the status, the replay header and the response body.
pub async fn send(
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> anyhow::Result<SendReply> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(name.as_str(), value);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {url} failed"))?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get(REPLAYED_HEADER)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let body = response.text().await.context("cannot read the response")?;
    Ok(SendReply {
        status,
        replayed,
        body,
    })
}

/// A client of the operator API, for the `inlet events|replay|deadletters` commands.
pub struct AdminClient {
    base: String,
    token: String,
    client: reqwest::Client,
}

/// How many times a mutating call is tried (same Idempotency-Key every time).
const ADMIN_ATTEMPTS: u32 = 3;

impl AdminClient {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()
                .context("cannot build the HTTP client")?,
        })
    }

    /// `GET path`; returns the status and body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let response = self
            .client
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("GET {url} failed"))?;
        let status = response.status().as_u16();
        Ok((
            status,
            response.text().await.context("cannot read the response")?,
        ))
    }

    /// `POST path` with a JSON body and one Idempotency-Key for this invocation, retried
    /// on connection errors, 409 and 5xx with the same key: the call takes effect once.
    pub async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> anyhow::Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let key = format!("inlet-cli-{}", sample_event_id());
        let mut last_error = None;
        for attempt in 1..=ADMIN_ATTEMPTS {
            let sent = self
                .client
                .post(&url)
                .bearer_auth(&self.token)
                .header("Idempotency-Key", &key)
                .header("Content-Type", "application/json")
                .body(body.to_string())
                .send()
                .await;
            match sent {
                Ok(response)
                    if !(response.status().is_server_error()
                        || response.status().as_u16() == 409) =>
                {
                    let status = response.status().as_u16();
                    return Ok((
                        status,
                        response.text().await.context("cannot read the response")?,
                    ));
                }
                Ok(response) => last_error = Some(format!("HTTP {}", response.status())),
                Err(error) => last_error = Some(error.to_string()),
            }
            if attempt < ADMIN_ATTEMPTS {
                tokio::time::sleep(std::time::Duration::from_secs(u64::from(attempt))).await;
            }
        }
        Err(anyhow!(
            "POST {url} failed {ADMIN_ATTEMPTS} times (Idempotency-Key {key}): {}",
            last_error.unwrap_or_default()
        ))
    }
}

/// `inlet bulk status ID`: the action as the API shows it; with `wait`, a progress line
/// every second until it is no longer running, then the action. Exit 1 when it failed.
pub async fn follow_bulk(client: &AdminClient, id: i64, wait: bool) -> anyhow::Result<()> {
    loop {
        let (status, body) = client.get(&format!("/admin/bulk/{id}")).await?;
        let action: serde_json::Value =
            serde_json::from_str(&body).map_err(|_| anyhow!("HTTP {status}: {body}"))?;
        if status != 200 {
            anyhow::bail!("HTTP {status}: {body}");
        }
        let running = action["status"] == "running";
        if !wait || !running {
            println!("{}", serde_json::to_string_pretty(&action)?);
            return match action["status"].as_str() {
                Some("failed") => Err(anyhow!("bulk action {id} failed")),
                _ => Ok(()),
            };
        }
        eprintln!(
            "bulk action {id}: {} of {} processed",
            action["processed"], action["matched"]
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Which events `inlet replay` names: `SOURCE/EVENT_ID`s, a filter object, or all.
pub struct ReplaySelection {
    pub events: Vec<String>,
    /// The filter flags as a JSON object (empty when none was given).
    pub filter: serde_json::Value,
    pub all: bool,
}

/// The body of `POST /admin/replay` for a selection; refuses to select nothing by
/// accident, since a replay with no selector would touch every stored event.
pub fn replay_body(
    selection: ReplaySelection,
    limit: Option<u32>,
    dry_run: bool,
) -> anyhow::Result<serde_json::Value> {
    let no_filter = selection.filter.as_object().is_none_or(|f| f.is_empty());
    if selection.events.is_empty() && no_filter && !selection.all {
        return Err(anyhow!(
            "choose events with --event SOURCE/EVENT_ID or the filter flags (--source, --type, \
             --status, --since, --until), or pass --all to replay every stored event"
        ));
    }
    let mut body = if selection.events.is_empty() {
        serde_json::json!({ "filter": selection.filter })
    } else {
        let events = selection
            .events
            .iter()
            .map(|e| {
                let (source, event_id) = e
                    .split_once('/')
                    .ok_or_else(|| anyhow!("--event is SOURCE/EVENT_ID, not {e}"))?;
                Ok(serde_json::json!({ "source": source, "event_id": event_id }))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        serde_json::json!({ "events": events })
    };
    if let Some(limit) = limit {
        body["limit"] = limit.into();
    }
    if dry_run {
        body["dry_run"] = true.into();
    }
    Ok(body)
}

/// The operator API path of one event (both parts percent-encoded).
pub fn event_path(source: &str, event_id: &str) -> String {
    let encode = |part: &str| form_urlencoded::byte_serialize(part.as_bytes()).collect::<String>();
    format!("/admin/events/{}/{}", encode(source), encode(event_id))
}

/// A query string from optional parameters (values percent-encoded).
pub fn query_string(params: &[(&str, Option<String>)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    let query = query.finish();
    if query.is_empty() {
        query
    } else {
        format!("?{query}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listener_is_probed_on_the_loopback_of_its_family() {
        for (bind, url) in [
            ("0.0.0.0:8080", "http://127.0.0.1:8080"),
            ("[::]:9090", "http://[::1]:9090"),
            ("10.0.0.5:80", "http://10.0.0.5:80"),
        ] {
            let settings = Settings::from_toml(&format!(
                "[server]\nbind = \"{bind}\"\n[[sources]]\nname = \"stripe\"\n\
                 scheme = \"stripe\"\nsecrets = [\"whsec_listener_test_0123456789abcdefgh\"]\n"
            ))
            .expect("a valid configuration");
            assert_eq!(listener_url(&settings), url);
        }
    }
}
