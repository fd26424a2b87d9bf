//! The library side of `inlet sign` and `inlet send`: sign a body the way a provider would,
//! and post it to a running Inlet.

use crate::config::{Settings, SourceSettings};
use crate::ingest::Locator;
use crate::signature::SampleEvent;
use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};

/// The headers `source`'s provider would send for `body` at `now`, signed with the
/// source's first secret. Where the source reads the event id or type from a header, the
/// sample event's id and type are sent in it.
pub fn signed_headers(
    settings: &Settings,
    source: &str,
    body: &[u8],
    now: DateTime<Utc>,
    event: &SampleEvent,
) -> anyhow::Result<Vec<(String, String)>> {
    let source = settings
        .source(source)
        .ok_or_else(|| anyhow!("no source named '{source}' in the configuration"))?;
    Ok(signed_headers_for(source, body, now, event))
}

/// [`signed_headers`] for a source at hand.
pub fn signed_headers_for(
    source: &SourceSettings,
    body: &[u8],
    now: DateTime<Utc>,
    event: &SampleEvent,
) -> Vec<(String, String)> {
    // Validation guarantees at least one secret per source.
    let Some(secret) = source.secrets.first() else {
        return Vec::new();
    };
    let mut headers = source.scheme.scheme().sign(body, secret, now, event);
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
    headers: &[(String, String)],
    body: Vec<u8>,
) -> anyhow::Result<(u16, String)> {
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
    let text = response.text().await.context("cannot read the response")?;
    Ok((status, text))
}
