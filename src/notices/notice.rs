//! One notice: its type, its deterministic event id (the same occurrence observed twice,
//! or by two instances, has one id, so it is written once) and its canonical JSON body —
//! names, ids, numbers and a sentence; never a secret nor a webhook's payload.

use super::settings::NoticeType;
use crate::delivery::DeadLetter;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

/// Characters of a fingerprint (sha256 hex) kept in an event id.
const SHORT_DIGEST: usize = 16;

/// How many dead letters of one destination a `delivery.dead_lettered` notice stands for
/// (one notice per destination per window: [`super::tally`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The start of the window the notice is written in.
    pub window_start: DateTime<Utc>,
    /// Since when it counts: the start of the destination's previous notice's window.
    pub since: DateTime<Utc>,
    /// The dead letters it stands for, the one it describes included.
    pub dead_letters: i64,
    /// Of those, how many are of its own window: the next notice counts the window's rest.
    pub in_window: i64,
}

/// A notice about to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub kind: NoticeType,
    /// The event id under source `inlet`: deterministic for the occurrence.
    pub id: String,
    pub at: DateTime<Utc>,
    /// One human sentence.
    pub summary: String,
    /// The type's own fields.
    pub fields: Map<String, Value>,
}

/// `at` as the notices write it: RFC 3339, UTC, milliseconds.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn short(digest: &str) -> &str {
    digest.get(..SHORT_DIGEST).unwrap_or(digest)
}

impl Notice {
    /// The body stored and delivered: `type`, `id`, `at`, `summary` and the type's fields,
    /// one JSON object (keys in alphabetical order).
    pub fn body(&self) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("type".into(), self.kind.as_str().into());
        body.insert("id".into(), self.id.clone().into());
        body.insert("at".into(), time(self.at).into());
        body.insert("summary".into(), self.summary.clone().into());
        body.extend(self.fields.clone());
        Value::Object(body).to_string().into_bytes()
    }

    /// `source`'s `destination` breaker opened at `at` (an outage begins).
    pub fn breaker_opened(source: &str, destination: &str, at: DateTime<Utc>) -> Self {
        let what = "opened: its deliveries wait until a probe gets an answer";
        Self::breaker(NoticeType::BreakerOpened, what, (source, destination), at)
    }

    /// `source`'s `destination` breaker closed at `at` (a probe got an answer).
    pub fn breaker_closed(source: &str, destination: &str, at: DateTime<Utc>) -> Self {
        let what = "closed: deliveries flow again";
        Self::breaker(NoticeType::BreakerClosed, what, (source, destination), at)
    }

    /// A breaker's transition of `kind`: keyed on the destination and the moment (one
    /// transaction makes a transition, under the lock of the breaker's row).
    fn breaker(
        kind: NoticeType,
        what: &str,
        (source, destination): (&str, &str),
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            kind,
            id: format!("{}:{source}/{destination}:{}", kind.as_str(), time(at)),
            at,
            summary: format!(
                "The circuit breaker of destination {destination} (source {source}) {what}."
            ),
            fields: object(json!({"source": source, "destination": destination})),
        }
    }

    /// The id of `source`'s `destination`'s dead-letter notice of the window starting at
    /// `window_start`: one per destination per window, whoever writes it. The pair is
    /// named as `source~destination` when both are plain names, else by the SHA-256 of
    /// both (a destination's default name is its URL's `host:port/path`, and an id must
    /// stay one segment of an admin URL and name one pair only).
    pub fn dead_lettered_id(
        source: &str,
        destination: &str,
        window_start: DateTime<Utc>,
    ) -> String {
        let plain = |name: &str| {
            (1..=60).contains(&name.len())
                && (name.bytes())
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        };
        let pair = match plain(source) && plain(destination) {
            true => format!("{source}~{destination}"),
            false => {
                let both = format!("{source}\n{destination}");
                format!("sha256:{}", crate::ingest::fingerprint(both.as_bytes()))
            }
        };
        format!("delivery.dead_lettered:{pair}:{}", time(window_start))
    }

    /// Deliveries to one destination gave up: `latest` the last of them, `tally` how many
    /// this notice stands for.
    pub fn dead_lettered(latest: &DeadLetter, tally: Tally, at: DateTime<Utc>) -> Self {
        let attempts = format!(
            "{} attempt{}",
            latest.attempt,
            if latest.attempt == 1 { "" } else { "s" }
        );
        let (source, destination) = (&latest.source, &latest.destination);
        let summary = match tally.dead_letters {
            ..=1 => format!(
                "Delivery {} of event {} (source {source}) to destination {destination} was \
                 dead-lettered after {attempts}.",
                latest.id, latest.event_id,
            ),
            count => format!(
                "{count} more dead letters of destination {destination} (source {source}) \
                 since {}; the latest: delivery {} of event {}, after {attempts}.",
                time(tally.since),
                latest.id,
                latest.event_id,
            ),
        };
        Self {
            kind: NoticeType::DeliveryDeadLettered,
            id: Self::dead_lettered_id(source, destination, tally.window_start),
            at,
            summary,
            fields: object(json!({
                "source": source,
                "destination": destination,
                "event_id": latest.event_id,
                "event_type": latest.event_type,
                "delivery_id": latest.id,
                "attempts": latest.attempt,
                "last_status": latest.last_status,
                "last_error": latest.last_error.as_deref().map(error_kind),
                "dead_letters": tally.dead_letters,
                "in_window": tally.in_window,
                "since": time(tally.since),
                "window_start": time(tally.window_start),
            })),
        }
    }

    /// `count` dead letters, more than `threshold`; `crossing` is the dead row that passed
    /// it (the same while they stay over it: one notice per crossing).
    pub fn over_threshold(threshold: u32, count: i64, crossing: i64, at: DateTime<Utc>) -> Self {
        Self {
            kind: NoticeType::DeadLettersOverThreshold,
            id: format!("dead_letters.over_threshold:{crossing}"),
            at,
            summary: format!(
                "{count} deliveries are dead-lettered, more than the threshold of {threshold}."
            ),
            fields: object(json!({
                "dead_letters": count,
                "threshold": threshold,
                "crossing_delivery_id": crossing,
            })),
        }
    }

    /// A configuration reload was refused at `at`, for `key`: `reason`. `digest` names
    /// what was refused (the file read and the reason): the same refusal is told once.
    pub fn reload_refused(key: &str, reason: &str, digest: &str, at: DateTime<Utc>) -> Self {
        let reason = first_line(reason);
        Self {
            kind: NoticeType::ReloadRefused,
            id: format!("config.reload_refused:{}", short(digest)),
            at,
            summary: format!(
                "A configuration reload was refused ({key}: {reason}); the running \
                 configuration is unchanged."
            ),
            fields: object(json!({"key": key, "reason": reason})),
        }
    }

    /// `source`'s event `event_id`, first received with a body of fingerprint `stored`,
    /// came again with `received`: told once per event id, however many other bodies come
    /// (a sender holding a static credential cannot flood the notices).
    pub fn fingerprint_mismatch(
        source: &str,
        event_id: &str,
        stored: &str,
        received: &str,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            kind: NoticeType::FingerprintMismatch,
            id: format!("event.fingerprint_mismatch:{source}:{}", id_part(event_id)),
            at,
            summary: format!(
                "Event {event_id} of source {source} arrived again with a different body \
                 and was refused (422)."
            ),
            fields: object(json!({
                "source": source,
                "event_id": event_id,
                "stored_fingerprint": stored,
                "received_fingerprint": received,
            })),
        }
    }

    /// `source` took a secret from a handshake at `established` (an Asana webhook's
    /// creation): told once per secret, so that a secret nobody expected is seen.
    pub fn hook_secret_established(source: &str, established: DateTime<Utc>) -> Self {
        Self {
            kind: NoticeType::HookSecretEstablished,
            id: format!("hook_secret.established:{source}:{}", time(established)),
            at: established,
            summary: format!(
                "Source {source} now holds a secret established by a handshake (a webhook \
                 was created for it). If nobody just created one, clear it and look at what \
                 the source received."
            ),
            fields: object(json!({ "source": source, "established_at": time(established) })),
        }
    }

    /// A handshake offering another secret to `source`, which holds one since `held_since`,
    /// was refused at `at`: told once per held secret, however many handshakes follow.
    pub fn hook_secret_refused(source: &str, held_since: DateTime<Utc>, at: DateTime<Utc>) -> Self {
        Self {
            kind: NoticeType::HookSecretRefused,
            id: format!("hook_secret.refused:{source}:{}", time(held_since)),
            at,
            summary: format!(
                "A handshake offering another secret to source {source}, which holds one \
                 since {}, was refused (409): a new webhook's creation failed, or someone \
                 tried to plant a secret. To create a new webhook, clear the secret first.",
                time(held_since)
            ),
            fields: object(json!({ "source": source, "held_since": time(held_since) })),
        }
    }

    /// This instance's sweeper has not succeeded since `since` (more than three sweep
    /// intervals before `at`).
    pub fn sweeper_stalled(since: DateTime<Utc>, at: DateTime<Utc>) -> Self {
        let stalled = (at - since).num_seconds();
        Self {
            kind: NoticeType::SweeperStalled,
            id: format!("sweeper.stalled:{}", since.timestamp()),
            at,
            summary: format!(
                "The sweeper has not succeeded for {stalled}s (since {}): expired rows \
                 are not being deleted.",
                time(since)
            ),
            fields: object(json!({
                "last_success": time(since),
                "stalled_seconds": stalled,
            })),
        }
    }

    /// Reconciliation run `run` of `source` failed at `at` with `error` (its first line):
    /// what the provider sent and Inlet never received is not being recovered.
    pub fn reconcile_failed(run: i64, source: &str, error: &str, at: DateTime<Utc>) -> Self {
        let error = first_line(error);
        Self {
            kind: NoticeType::ReconcileFailed,
            id: format!("reconcile.failed:{run}"),
            at,
            summary: format!(
                "Reconciliation run {run} of source {source} failed: {error}. Events the \
                 provider sent and Inlet never received are not being recovered until a run \
                 succeeds."
            ),
            fields: object(json!({ "source": source, "run": run, "error": error })),
        }
    }
}

/// The kind of a stored delivery error, without what follows it: `HTTP 503` of
/// `HTTP 503: {the answer's start}`, `connection refused` of `connection refused
/// (host:port): {causes}`. The answer may echo the payload, the address is internal.
fn error_kind(error: &str) -> &str {
    error.split([':', '(']).next().unwrap_or_default().trim()
}

/// A refusal's reason as a notice carries it: its first line, at most 200 characters. A
/// TOML parse error goes on to quote the offending line, which may hold a secret.
fn first_line(reason: &str) -> String {
    reason
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(200)
        .collect()
}

/// An event id (or a source and destination) as a notice id quotes it: itself up to 128
/// bytes, else its SHA-256 (the notice id stays within the 255 bytes an event id may have).
fn id_part(event_id: &str) -> String {
    match event_id.len() {
        0..=128 => event_id.to_owned(),
        _ => format!("sha256:{}", crate::ingest::fingerprint(event_id.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    #[test]
    fn ids_name_the_occurrence_not_the_observation() {
        let a = Notice::fingerprint_mismatch("stripe", "evt_1", "aa", &"b".repeat(64), at(0));
        let b = Notice::fingerprint_mismatch("stripe", "evt_1", "aa", &"c".repeat(64), at(9));
        assert_eq!(a.id, b.id, "one notice per event id, whatever the bodies");
        assert_eq!(a.id, "event.fingerprint_mismatch:stripe:evt_1");
        let long = Notice::fingerprint_mismatch("stripe", &"e".repeat(255), "aa", "bb", at(0));
        assert!(long.id.len() <= 255, "{}", long.id);
        assert!(long.id.contains(":sha256:"), "{}", long.id);
        let opened = Notice::breaker_opened("stripe", "app", at(0));
        assert_eq!(
            opened.id,
            "breaker.opened:stripe/app:2027-01-15T08:00:00.000Z"
        );
        assert_ne!(opened.id, Notice::breaker_opened("stripe", "app", at(1)).id);
        assert_eq!(
            Notice::sweeper_stalled(at(0), at(600)).id,
            Notice::sweeper_stalled(at(0), at(900)).id
        );
    }

    #[test]
    fn a_destinations_dead_letter_notice_is_named_by_it_and_its_window() {
        let id = |source, destination| Notice::dead_lettered_id(source, destination, at(0));
        assert_eq!(
            id("stripe", "app"),
            "delivery.dead_lettered:stripe~app:2027-01-15T08:00:00.000Z"
        );
        // One segment of an admin URL, one pair only.
        let by_url = id("stripe", "127.0.0.1:9000/events");
        assert!(
            !by_url.contains('/') && by_url.contains(":sha256:"),
            "{by_url}"
        );
        assert_ne!(id("a~b", "c"), id("a", "b~c"));
        assert!(id("s", &"d".repeat(128)).len() <= 255);
    }

    #[test]
    fn a_notice_carries_no_answer_text_and_no_quoted_line() {
        assert_eq!(error_kind("HTTP 400: {\"card\":\"4242\"}"), "HTTP 400");
        assert_eq!(
            error_kind("connection refused (10.0.0.7:443): tcp connect error"),
            "connection refused"
        );
        let refused = Notice::reload_refused(
            "config",
            "TOML parse error at line 3, column 10\n3 | secret = whsec_leaked\n",
            "d",
            at(0),
        );
        assert!(!refused.body().windows(6).any(|w| w == b"leaked"));
    }

    #[test]
    fn the_body_leads_with_type_id_time_and_summary() {
        let notice = Notice::over_threshold(100, 101, 42, at(0));
        let body: Value = serde_json::from_slice(&notice.body()).unwrap_or_default();
        assert_eq!(body["type"], "dead_letters.over_threshold");
        assert_eq!(body["id"], "dead_letters.over_threshold:42");
        assert_eq!(body["at"], "2027-01-15T08:00:00.000Z");
        assert_eq!(body["dead_letters"], 101);
        assert!(body["summary"].as_str().unwrap_or_default().contains("101"));
    }
}
