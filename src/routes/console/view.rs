//! The console's page frame and the small pieces every page uses. Everything that came
//! from the network (ids, headers, payloads) goes through maud's escaping.

use super::session::{Session, PATH};
use crate::delivery::{BreakerState, GateView};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use chrono::NaiveDateTime;
use maud::{html, Markup, DOCTYPE};

/// The sections in the navigation: (path under `/console`, label).
const SECTIONS: [(&str, &str); 6] = [
    ("", "Overview"),
    ("/events", "Events"),
    ("/deliveries", "Deliveries"),
    ("/bulk", "Bulk"),
    ("/sources", "Sources"),
    ("/audit", "Audit"),
];

/// An HTML response with `status`.
pub fn page_response(status: u16, markup: Markup) -> HttpResponse {
    HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

/// A whole page: head, navigation (with sign-out), `title` and `body`.
pub fn layout(session: Option<&Session>, current: &str, title: &str, body: Markup) -> Markup {
    layout_refreshing(session, (current, title), body, None)
}

/// [`layout`], reloaded by the browser every `refresh` seconds when given (no script:
/// `<meta http-equiv="refresh">`).
pub fn layout_refreshing(
    session: Option<&Session>,
    (current, title): (&str, &str),
    body: Markup,
    refresh: Option<u32>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                @if let Some(seconds) = refresh { meta http-equiv="refresh" content=(seconds); }
                title { (title) " · Inlet" }
                link rel="stylesheet" href={ (PATH) "/console.css" };
            }
            body {
                header.top {
                    a.brand href=(PATH) { "Inlet" }
                    @if let Some(session) = session {
                        nav {
                            @for (path, label) in SECTIONS {
                                a href={ (PATH) (path) }
                                    class=[(path == current).then_some("current")] { (label) }
                            }
                        }
                        form.signout method="post" action={ (PATH) "/logout" } {
                            span.who { (session.name) " · " (session.role.as_str()) }
                            (csrf_field(session))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden field every state-changing form carries.
pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// The sign-in page, with a message after a refused attempt.
pub fn login(next: &str, message: Option<&str>) -> Markup {
    let body = html! {
        @if let Some(message) = message {
            p.notice.bad role="alert" { (message) }
        }
        form.card.signin method="post" action={ (PATH) "/login" } {
            input type="hidden" name="next" value=(next);
            label for="token" { "Operator token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            button type="submit" { "Sign in" }
            p.hint { "The token configured as operator.token. It is checked once; the console then keeps a signed session cookie." }
        }
    };
    layout(None, "", "Sign in", body)
}

/// A page for a refusal or an error.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    let title = status.canonical_reason().unwrap_or("Error");
    layout(
        None,
        "",
        title,
        html! {
            p.notice.bad role="alert" { (message) }
            p { a href=(PATH) { "Back to the console" } }
        },
    )
}

/// A UTC time field in the console's one form (`2026-12-04 05:00`), not the browser's
/// locale-dependent date picker.
pub fn time_field(label: &str, name: &str, value: &str) -> Markup {
    html! {
        label { (label)
            input type="text" name=(name) value=(value) placeholder="YYYY-MM-DD HH:MM (UTC)"
                pattern=r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?" inputmode="numeric";
        }
    }
}

/// Every time the console shows, in one form: a `<time>` element holding
/// `2026-11-30 23:05:59 UTC` (machine-readable in `datetime`), then how long ago it was
/// (or how far ahead), e.g. `2026-11-30 23:05:59 UTC · 4 min ago`.
pub fn time(at: NaiveDateTime) -> Markup {
    time_at(at, chrono::Utc::now().naive_utc())
}

/// [`time`], relative to `now`.
pub fn time_at(at: NaiveDateTime, now: NaiveDateTime) -> Markup {
    html! {
        time datetime=(at.format("%Y-%m-%dT%H:%M:%SZ").to_string()) { (absolute(at)) }
        span.ago { " · " (relative(at, now)) }
    }
}

/// `2026-11-30 23:05:59 UTC`: no fraction of a second on screen.
pub fn absolute(at: NaiveDateTime) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// `just now`, `45 s ago`, `4 min ago`, `3 h ago`, `2 d ago`, or `in 5 min` ahead.
fn relative(at: NaiveDateTime, now: NaiveDateTime) -> String {
    let secs = (now - at).num_seconds();
    let span = secs.unsigned_abs();
    let amount = match span {
        0..=4 => return "just now".to_owned(),
        5..=59 => format!("{span} s"),
        60..=3_599 => format!("{} min", span / 60),
        3_600..=172_799 => format!("{} h", span / 3_600),
        _ => format!("{} d", span / 86_400),
    };
    if secs >= 0 {
        format!("{amount} ago")
    } else {
        format!("in {amount}")
    }
}

/// An outcome or status as a coloured label.
pub fn badge(text: &str) -> Markup {
    let tone = match text {
        "accepted"
        | "delivered"
        | "closed"
        | "done"
        | "enqueue"
        | "matches"
        | "window covers resends" => "good",
        "duplicate_fact" | "replayed" | "pending" | "in_progress" | "requeued" | "retry"
        | "running" => "calm",
        "dead" | "expired" | "failed" | "refused" | "error" | "window too short" => "bad",
        _ => "plain",
    };
    html! { span class={ "badge " (tone) } { (text) } }
}

/// A destination's circuit breaker: its state as a badge, until when an open one holds
/// deliveries back, and its consecutive failures. An open breaker says "open" as well as
/// being red.
pub fn breaker(gate: &GateView) -> Markup {
    let failures = gate.consecutive_failures;
    let open = gate.breaker == BreakerState::Open.as_str();
    html! {
        @if open {
            span.badge.bad.open { "open" }
            @if let Some(until) = gate.open_until { " until " (time(until.naive_utc())) }
        } @else if gate.breaker == BreakerState::HalfOpen.as_str() {
            span.badge.calm { "half-open" } " probe due"
        } @else if failures > 0 {
            span.badge.calm { "closed" }
        } @else {
            span.badge.good { "closed" }
        }
        @if failures > 0 {
            " · " span.failing { (failures) @if failures == 1 { " failure" } @else { " failures" } }
        }
    }
}

/// The class of a table row for a destination whose breaker is open, or that is failing
/// with its breaker still closed, so it stands out.
pub fn breaker_row(gate: Option<&GateView>) -> Option<&'static str> {
    let gate = gate?;
    if gate.breaker == BreakerState::Open.as_str() {
        Some("breaker-open")
    } else if gate.consecutive_failures > 0 {
        Some("failing")
    } else {
        None
    }
}

/// A payload or answer body: pretty JSON when it is JSON, the text when it is text, and a
/// size and hex preview otherwise. Always escaped.
pub fn payload(bytes: &[u8]) -> Markup {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) {
        let pretty = serde_json::to_string_pretty(&value).unwrap_or_default();
        return html! { pre.payload { (pretty) } };
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => html! { pre.payload { (text) } },
        Err(_) => {
            let preview = hex::encode(&bytes[..bytes.len().min(256)]);
            html! {
                p.hint { (bytes.len()) " bytes, not text; the first " (bytes.len().min(256)) " in hex:" }
                pre.payload { (preview) }
            }
        }
    }
}

/// A link to an event's page.
pub fn event_link(source: &str, event_id: &str) -> Markup {
    html! { a href=(event_href(source, event_id)) { (event_id) } }
}

pub fn event_href(source: &str, event_id: &str) -> String {
    format!("{PATH}/events/{}/{}", segment(source), segment(event_id))
}

/// A path segment, percent-encoded.
fn segment(text: &str) -> String {
    percent_encode(text, |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// A query value, percent-encoded.
pub fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

fn percent_encode(text: &str, keep: impl Fn(u8) -> bool) -> String {
    text.bytes()
        .map(|b| {
            if keep(b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A fresh Idempotency-Key for one rendering of a form: a double click or a re-submit
/// sends the same key, and the action happens once.
pub fn form_key() -> Result<String, super::error::ConsoleError> {
    Ok(format!(
        "console-{}",
        hex::encode(super::session::random_bytes::<16>()?)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_text_is_escaped_and_links_are_encoded() {
        let markup = payload(b"<script>alert(1)</script>").into_string();
        assert!(markup.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!markup.contains("<script>"));
        let json = payload(br#"{"a":"<img src=x onerror=alert(1)>"}"#).into_string();
        assert!(json.contains("&lt;img"), "{json}");
        assert_eq!(
            event_href("stripe", "evt/1?x=<y>"),
            "/console/events/stripe/evt%2F1%3Fx%3D%3Cy%3E"
        );
        let binary = payload(&[0xff, 0xfe, 0x00]).into_string();
        assert!(binary.contains("3 bytes, not text"));
    }

    fn gate(breaker: &'static str, failures: i32) -> GateView {
        GateView {
            source: "stripe".to_owned(),
            destination: "app".to_owned(),
            breaker,
            consecutive_failures: failures,
            open_until: chrono::DateTime::from_timestamp(1_800_000_000, 0),
            opened_at: None,
            cooldown_ms: 600_000,
            in_flight: 0,
            max_in_flight: None,
            rate: None,
            rate_burst: None,
        }
    }

    #[test]
    fn a_time_is_one_element_in_one_form_with_how_long_ago() {
        let at = chrono::NaiveDate::from_ymd_opt(2026, 12, 4)
            .and_then(|d| d.and_hms_micro_opt(5, 0, 7, 123_456))
            .expect("a time");
        let shown = time_at(at, at + chrono::Duration::minutes(4)).into_string();
        assert_eq!(
            shown,
            r#"<time datetime="2026-12-04T05:00:07Z">2026-12-04 05:00:07 UTC</time><span class="ago"> · 4 min ago</span>"#
        );
        let ahead = time_at(at, at - chrono::Duration::seconds(30)).into_string();
        assert!(ahead.ends_with(" · in 30 s</span>"), "{ahead}");
    }

    #[test]
    fn an_open_breaker_says_open_until_when_and_stands_out() {
        let open = breaker(&gate("open", 2)).into_string();
        assert!(open.contains(r#"class="badge bad open">open<"#), "{open}");
        assert!(
            open.contains(
                "until <time datetime=\"2027-01-15T08:00:00Z\">2027-01-15 08:00:00 UTC</time>"
            ),
            "{open}"
        );
        assert!(
            open.ends_with(" · <span class=\"failing\">2 failures</span>"),
            "{open}"
        );
        assert_eq!(breaker_row(Some(&gate("open", 2))), Some("breaker-open"));
        assert_eq!(
            breaker(&gate("half_open", 1)).into_string(),
            r#"<span class="badge calm">half-open</span> probe due · <span class="failing">1 failure</span>"#
        );
        assert_eq!(breaker_row(Some(&gate("half_open", 1))), Some("failing"));
        let failing = breaker(&gate("closed", 4)).into_string();
        assert!(
            failing.starts_with(r#"<span class="badge calm">closed</span>"#),
            "{failing}"
        );
        assert_eq!(breaker_row(Some(&gate("closed", 4))), Some("failing"));
        let closed = breaker(&gate("closed", 0)).into_string();
        assert_eq!(closed, r#"<span class="badge good">closed</span>"#);
    }
}
