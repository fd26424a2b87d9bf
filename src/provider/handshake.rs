//! What some providers expect besides events: a setup handshake answered directly and
//! never stored (Slack's `url_verification`, Zoom's `endpoint.url_validation`, Discord's
//! PING), and the answer an event needs in place of Inlet's receipt (a Discord
//! interaction's deferred response). A profile names the ones its provider uses.

use crate::idempotency::Answer;
use crate::secret::Secret;
use crate::signature::{zoom_url_validation_token, Verified};

fn json_answer(body: Vec<u8>) -> Answer {
    Answer {
        status: 200,
        content_type: "application/json".to_owned(),
        body,
    }
}

/// Slack's Events API `url_verification`: answer `{"challenge": …}`.
pub fn slack_url_verification(request: &Verified<'_>, _: &[Secret]) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("type")?.as_str()? != "url_verification" {
        return None;
    }
    let challenge = document.get("challenge")?.as_str()?;
    Some(json_answer(
        serde_json::json!({ "challenge": challenge })
            .to_string()
            .into_bytes(),
    ))
}

/// Discord's PING (`"type": 1`), sent when the interactions endpoint URL is saved and now
/// and then after: answer PONG, `{"type":1}`.
pub fn discord_ping(request: &Verified<'_>, _: &[Secret]) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("type")?.as_u64()? != 1 {
        return None;
    }
    Some(json_answer(br#"{"type":1}"#.to_vec()))
}

/// Discord shows the user whatever the endpoint answers within 3 seconds, and an answer
/// that is not an interaction response fails the interaction. Inlet cannot know the
/// application's reply, so it defers: application commands and modal submits get
/// `{"type":5}` (the user sees "thinking…"), message components `{"type":6}` (nothing
/// visible); the application, handed the interaction by delivery, then edits the original
/// response with the interaction's token within 15 minutes. Autocomplete cannot be
/// deferred: it gets no choices (`{"type":8,"data":{"choices":[]}}`).
pub fn discord_deferred_answer(request: &Verified<'_>) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    let body: &[u8] = match document.get("type")?.as_u64()? {
        2 | 5 => br#"{"type":5}"#,
        3 => br#"{"type":6}"#,
        4 => br#"{"type":8,"data":{"choices":[]}}"#,
        _ => return None,
    };
    Some(json_answer(body.to_vec()))
}

/// Adyen acknowledges a request only when its answer's body is `[accepted]`; anything
/// else is retried.
pub fn adyen_accepted(_: &Verified<'_>) -> Option<Answer> {
    Some(Answer {
        status: 200,
        content_type: "text/plain".to_owned(),
        body: b"[accepted]".to_vec(),
    })
}

/// SendGrid needs only a 2xx for its batch: a fixed, empty 200, the same on every retry.
pub fn sendgrid_ok(_: &Verified<'_>) -> Option<Answer> {
    Some(Answer {
        status: 200,
        content_type: "text/plain".to_owned(),
        body: Vec::new(),
    })
}

/// Zoom's `endpoint.url_validation`: answer `{"plainToken": …, "encryptedToken": …}`,
/// the token's HMAC-SHA256 (hex) under the secret token.
pub fn zoom_url_validation(request: &Verified<'_>, secrets: &[Secret]) -> Option<Answer> {
    let document: serde_json::Value = serde_json::from_slice(request.body()).ok()?;
    if document.get("event")?.as_str()? != "endpoint.url_validation" {
        return None;
    }
    let plain_token = document.get("payload")?.get("plainToken")?.as_str()?;
    let encrypted_token = zoom_url_validation_token(request, secrets, plain_token)?;
    Some(json_answer(
        serde_json::json!({
            "plainToken": plain_token,
            "encryptedToken": encrypted_token,
        })
        .to_string()
        .into_bytes(),
    ))
}
