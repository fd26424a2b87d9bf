//! GitHub: `X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(body)>`, keyed with the
//! webhook secret's bytes. No timestamp is signed. Event id: `X-GitHub-Delivery` (kept on
//! redelivery); event type: `X-GitHub-Event`.

use super::{
    any_matches, header_locator, hmac_sha256, Keys, SampleEvent, Scheme, SignatureError,
    Unverified, Verified,
};
use crate::config::Secret;
use crate::ingest::Locators;
use chrono::{DateTime, Utc};

const HEADER: &str = "X-Hub-Signature-256";
const PREFIX: &str = "sha256=";

#[derive(Debug)]
pub struct Github;

impl Scheme for Github {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let value = request
            .header(HEADER)
            .ok_or_else(|| SignatureError::Missing(HEADER.to_owned()))?;
        let hex_digest = value
            .strip_prefix(PREFIX.as_bytes())
            .ok_or_else(|| SignatureError::malformed(HEADER, "it does not start with sha256="))?;
        let tag = hex::decode(hex_digest)
            .ok()
            .filter(|tag| tag.len() == 32)
            .ok_or_else(|| SignatureError::malformed(HEADER, "not 64 hex digits after sha256="))?;
        let secrets = keys.secrets.iter().map(|s| s.expose().as_bytes());
        if !any_matches(secrets, &[request.body], &[tag]) {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
        }
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        body: &[u8],
        secret: &Secret,
        _now: DateTime<Utc>,
        event: &SampleEvent,
    ) -> Vec<(String, String)> {
        let tag = hmac_sha256(secret.expose().as_bytes(), &[body]);
        vec![
            (HEADER.to_owned(), format!("{PREFIX}{}", hex::encode(tag))),
            ("X-GitHub-Delivery".to_owned(), event.id.clone()),
            ("X-GitHub-Event".to_owned(), event.event_type.clone()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn locators(&self) -> Locators {
        Locators {
            event_id: header_locator("X-GitHub-Delivery"),
            event_type: Some(header_locator("X-GitHub-Event")),
            fact_key: None,
        }
    }

    fn replay_horizon(&self) -> Option<(std::time::Duration, &'static str)> {
        Some((
            super::days(3),
            "GitHub redelivers for 3 days (7 on Enterprise Server: set replay_horizon = \"7d\")",
        ))
    }

    fn signs_timestamp(&self) -> bool {
        false
    }
}
