//! What some providers expect besides events: a setup handshake answered directly and
//! never stored (Slack's `url_verification`, Zoom's `endpoint.url_validation`, Discord's
//! PING, Dropbox's unsigned `GET ?challenge=`), and the answer an event needs in place of
//! Inlet's receipt (a Discord interaction's deferred response). A profile names the ones
//! its provider uses.

use crate::idempotency::Answer;
use crate::secret::Secret;
use crate::signature::{sns_kind, zoom_url_validation_token, SnsKind, Verified};

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

/// Microsoft Graph takes a notification as delivered when it is answered `202 Accepted`
/// (any 2xx), with no body.
pub fn graph_accepted(_: &Verified<'_>) -> Option<Answer> {
    Some(Answer {
        status: 202,
        content_type: "text/plain".to_owned(),
        body: Vec::new(),
    })
}

/// SendGrid and HubSpot need only a 2xx for a batch: a fixed, empty 200, the same on every
/// retry.
pub fn batch_ok(_: &Verified<'_>) -> Option<Answer> {
    Some(Answer {
        status: 200,
        content_type: "text/plain".to_owned(),
        body: Vec::new(),
    })
}

/// Amazon SNS's setup messages, answered and never stored: a `SubscriptionConfirmation`
/// once its `SubscribeURL` has been visited (the intake visits it first, and answers `503`
/// when it could not), an `UnsubscribeConfirmation` as is — nothing visited, a warning
/// logged, since the topic no longer sends here.
pub fn sns_confirmation(request: &Verified<'_>, _: &[Secret]) -> Option<Answer> {
    let body: &[u8] = match sns_kind(request)? {
        SnsKind::Notification => return None,
        SnsKind::SubscriptionConfirmation => br#"{"subscription":"confirmed"}"#,
        SnsKind::UnsubscribeConfirmation => {
            tracing::warn!("an SNS UnsubscribeConfirmation: the topic no longer sends to this source (nothing visited, nothing stored)");
            br#"{"subscription":"unsubscribed"}"#
        }
    };
    Some(json_answer(body.to_vec()))
}

/// The longest validation token echoed back. Graph's are sentences of a few dozen
/// characters; the bound keeps an unauthenticated request from making Inlet echo much.
pub const MAX_VALIDATION_TOKEN_CHARS: usize = 1024;

/// Microsoft Graph validates a subscription's URL with `POST <url>?validationToken=…` and
/// no notification: answered `200` with the token, decoded, as a `text/plain` body (the edge
/// adds `X-Content-Type-Options: nosniff`). Unauthenticated, and the token is whoever sends
/// it's choice: only a lone `validationToken` of 1 to [`MAX_VALIDATION_TOKEN_CHARS`]
/// printable ASCII characters (spaces allowed) is echoed, anything else refused with the
/// reason in words. `None` when the query names no `validationToken` (a notification).
pub fn graph_validation(query: &str) -> Option<Result<Answer, String>> {
    let mut tokens = form_urlencoded::parse(query.as_bytes())
        .filter(|(name, _)| name == "validationToken")
        .map(|(_, value)| value);
    let token = tokens.next()?;
    if tokens.next().is_some() {
        return Some(Err("validationToken is given more than once".to_owned()));
    }
    let length = token.chars().count();
    if length == 0 || length > MAX_VALIDATION_TOKEN_CHARS {
        return Some(Err(format!(
            "validationToken must have 1 to {MAX_VALIDATION_TOKEN_CHARS} characters, not {length}"
        )));
    }
    if !token.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
        return Some(Err(
            "validationToken must be printable ASCII, without control characters".to_owned(),
        ));
    }
    Some(Ok(Answer {
        status: 200,
        content_type: "text/plain".to_owned(),
        body: token.into_owned().into_bytes(),
    }))
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

/// The longest challenge echoed back. Dropbox's are short random strings (its example is
/// `abc123`); the bound keeps an unsigned request from making Inlet echo anything large.
pub const MAX_CHALLENGE_CHARS: usize = 256;

/// Dropbox's verification request, `GET <url>?challenge=<value>`: answered `200` with the
/// value as a `text/plain` body (Dropbox's webhook docs; the edge adds
/// `X-Content-Type-Options: nosniff`, as they ask, against reflected XSS). The request is
/// unsigned and the value chosen by whoever sends it, so only a lone `challenge` of 1 to
/// [`MAX_CHALLENGE_CHARS`] printable ASCII characters (no space, no control character) is
/// echoed; anything else is refused with the reason in words. `query` is the URL's query
/// string, percent-encoded as sent.
pub fn dropbox_challenge(query: &str) -> Result<Answer, String> {
    let mut challenges = form_urlencoded::parse(query.as_bytes())
        .filter(|(name, _)| name == "challenge")
        .map(|(_, value)| value);
    let challenge = challenges.next().ok_or(
        "a GET is Dropbox's verification request: it needs ?challenge=<value> \
         (notifications are POSTed)",
    )?;
    if challenges.next().is_some() {
        return Err("challenge is given more than once".to_owned());
    }
    // Percent-decoding replaces bytes that are not UTF-8 with U+FFFD: refused below too.
    let length = challenge.chars().count();
    if length == 0 || length > MAX_CHALLENGE_CHARS {
        return Err(format!(
            "challenge must have 1 to {MAX_CHALLENGE_CHARS} characters, not {length}"
        ));
    }
    if !challenge.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "challenge must be printable ASCII, without spaces or control \
                    characters"
                .to_owned(),
        );
    }
    Ok(Answer {
        status: 200,
        content_type: "text/plain".to_owned(),
        body: challenge.into_owned().into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_validation_tokens_are_echoed_decoded_when_printable() {
        let echoed = |query: &str| graph_validation(query).map(|a| a.map(|a| a.body));
        assert_eq!(echoed("x=1"), None);
        assert_eq!(
            echoed("validationToken=Validation%3A%20Testing%20client"),
            Some(Ok(b"Validation: Testing client".to_vec()))
        );
        let longest = "t".repeat(MAX_VALIDATION_TOKEN_CHARS);
        assert!(matches!(
            echoed(&format!("validationToken={longest}")),
            Some(Ok(_))
        ));
        let too_long = format!("validationToken={longest}t");
        for query in [
            "validationToken=",
            "validationToken=a&validationToken=b",
            too_long.as_str(),
            "validationToken=a%0Ab",
            "validationToken=a%00",
            "validationToken=%C3%A9",
            "validationToken=%FF",
        ] {
            assert!(matches!(echoed(query), Some(Err(_))), "{query}");
        }
    }

    #[test]
    fn dropbox_challenges_are_echoed_when_short_and_printable() {
        let answer = dropbox_challenge("challenge=abc123").expect("echoed");
        assert_eq!(
            (answer.status, answer.content_type.as_str(), answer.body),
            (200, "text/plain", b"abc123".to_vec())
        );
        // Percent-encoded as sent; other parameters are ignored.
        let answer = dropbox_challenge("x=1&challenge=a%2Bb%3D").expect("echoed");
        assert_eq!(answer.body, b"a+b=");
        let longest = "c".repeat(MAX_CHALLENGE_CHARS);
        assert!(dropbox_challenge(&format!("challenge={longest}")).is_ok());
    }

    #[test]
    fn dropbox_challenges_that_could_harm_are_refused() {
        let too_long = format!("challenge={}", "c".repeat(MAX_CHALLENGE_CHARS + 1));
        for query in [
            "",
            "other=1",
            "challenge=",
            "challenge=a&challenge=b",
            too_long.as_str(),
            "challenge=a%0Ab",
            "challenge=a%00",
            "challenge=a+b",
            "challenge=%3Cscript%3E%C3%A9",
            "challenge=%FF",
            "challenge=%7F",
        ] {
            assert!(dropbox_challenge(query).is_err(), "{query:?}");
        }
    }
}
