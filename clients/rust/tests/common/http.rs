//! What every adapter's endpoint must answer, asked over real HTTP: a delivery applied
//! once, its copies (fifty at once) answered `200` without the handler, a forgery `401`, a
//! handler failure `500` with nothing kept, and the retry applied.

use super::{signed, BODY};
use std::future::Future;
use std::pin::Pin;

/// Counts the application's payment rows.
pub type Count<'a> = &'a dyn Fn() -> Pin<Box<dyn Future<Output = i64> + Send>>;

/// A body the test handlers fail on, the first time each message id arrives.
pub const FAIL_ONCE: &[u8] = br#"{"type":"invoice.paid","data":{"amount":1200},"fail_once":true}"#;

/// Whether a handler should fail this delivery: its body asks, and it is the first time.
pub fn fails_once(message_id: &str, body: &[u8]) -> bool {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static FAILED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let failed = FAILED.get_or_init(Mutex::default);
    body == FAIL_ONCE
        && failed
            .lock()
            .expect("not poisoned")
            .insert(message_id.to_owned())
}

async fn post(url: &str, id: &str, body: &'static [u8]) -> (u16, String, String) {
    let mut request = reqwest::Client::new().post(url).body(body);
    for (name, value) in signed(id, body) {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("the endpoint answers");
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, kind, response.text().await.expect("a body"))
}

pub async fn exercise(url: &str, payments: Count<'_>) {
    // Ids of this endpoint's own (tests of several endpoints share the process).
    let port: String = url.chars().filter(char::is_ascii_digit).collect();
    let id = |n: &str| format!("stripe:evt_{port}_{n}");
    let (status, _, body) = post(url, &id("1"), BODY).await;
    assert_eq!((status, body.as_str()), (200, r#"{"claim":"new"}"#));
    let (status, _, body) = post(url, &id("1"), BODY).await;
    assert_eq!((status, body.as_str()), (200, r#"{"claim":"duplicate"}"#));
    assert_eq!(payments().await, 1);

    let copies: Vec<_> = (0..50)
        .map(|_| {
            let (url, id) = (url.to_owned(), id("50"));
            tokio::spawn(async move { post(&url, &id, BODY).await })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.expect("no panic"));
    }
    assert!(
        answers.iter().all(|(status, _, _)| *status == 200),
        "{answers:?}"
    );
    let new = answers
        .iter()
        .filter(|(_, _, body)| body.contains("new"))
        .count();
    assert_eq!(new, 1, "one copy of fifty ran the handler");
    assert_eq!(payments().await, 2);

    // A forgery: signed for one body, sent with another.
    let mut request = reqwest::Client::new()
        .post(url)
        .body(&br#"{"forged":true}"#[..]);
    for (name, value) in signed(&id("2"), BODY) {
        request = request.header(name, value);
    }
    let forged = request.send().await.expect("answered");
    assert_eq!(forged.status().as_u16(), 401);
    let kind = forged.headers().get("content-type").cloned();
    assert_eq!(
        kind.as_ref().and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );

    // The handler fails: 500, rolled back; Inlet's retry applies it.
    let (status, kind, body) = post(url, &id("3"), FAIL_ONCE).await;
    assert_eq!(
        (status, kind.as_str()),
        (500, "application/problem+json"),
        "{body}"
    );
    assert_eq!(
        body,
        r#"{"type":"about:blank","title":"the delivery was not applied: rolled back, to be sent again","status":500}"#,
        "no internals (the handler's error) in the answer"
    );
    assert_eq!(payments().await, 2);
    let (status, _, body) = post(url, &id("3"), FAIL_ONCE).await;
    assert_eq!((status, body.as_str()), (200, r#"{"claim":"new"}"#));
    assert_eq!(payments().await, 3);
}
