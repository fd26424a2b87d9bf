//! The library side of `inlet sign` and `inlet send`: sign a body the way a provider would,
//! and post it to a running Inlet.

use crate::config::Settings;
use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};

/// The headers `source`'s provider would send for `body` at `now`, signed with the
/// source's first secret.
pub fn signed_headers(
    settings: &Settings,
    source: &str,
    body: &[u8],
    now: DateTime<Utc>,
) -> anyhow::Result<Vec<(&'static str, String)>> {
    let source = settings
        .source(source)
        .ok_or_else(|| anyhow!("no source named '{source}' in the configuration"))?;
    let secret = source
        .secrets
        .first()
        .ok_or_else(|| anyhow!("source '{}' has no secret", source.name))?;
    Ok(source.scheme.scheme().sign(body, secret, now))
}

/// The webhook URL of `source` on the configured listener.
pub fn default_url(settings: &Settings, source: &str) -> String {
    let bind = &settings.server.bind;
    let address = match bind.strip_prefix("0.0.0.0:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => bind.clone(),
    };
    format!("http://{address}/webhooks/{source}")
}

/// Posts a signed body; returns the status and the response body.
pub async fn send(
    url: &str,
    headers: &[(&'static str, String)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("cannot build the HTTP client")?;
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {url} failed"))?;
    let status = response.status().as_u16();
    let text = response.text().await.context("cannot read the response")?;
    Ok((status, text))
}
