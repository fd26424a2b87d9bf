//! A destination's `filter` and `transform` applied to an event: the filters decide, after
//! the `events` type routing, which destinations a new fact (or a replay) is enqueued for;
//! the transform makes the body a delivery sends. Every decision is counted, and every
//! error counted, logged with its event and kept among the recent ones the console shows.

use super::settings::{DestinationSettings, Destinations};
use crate::jq::{self, Decision, EvalError, Input};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::Instant;

/// Filter errors kept for the console, per instance.
const RECENT_ERRORS: usize = 200;

/// An event as filters and transforms see it.
#[derive(Debug, Clone)]
pub struct Subject {
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub payload: bytes::Bytes,
    /// The stored request headers (JSON `[[name, value], …]`); none for a transform.
    pub headers: Option<String>,
}

impl Subject {
    fn input(&self) -> Input {
        let headers = self
            .headers
            .as_deref()
            .and_then(|json| serde_json::from_str::<Vec<(String, String)>>(json).ok())
            .unwrap_or_default();
        Input {
            payload: self.payload.clone(),
            headers,
            event_type: self.event_type.clone(),
            source: self.source.clone(),
            event_id: self.event_id.clone(),
        }
    }
}

/// A filter error on one event, as the console lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FilterError {
    pub at: chrono::DateTime<chrono::Utc>,
    pub source: String,
    pub destination: String,
    pub event_id: String,
    pub reason: String,
}

static RECENT: Mutex<VecDeque<FilterError>> = Mutex::new(VecDeque::new());

/// This instance's latest filter errors, newest first; only `event_id`'s when given.
pub fn recent_filter_errors(source: Option<&str>, event_id: Option<&str>) -> Vec<FilterError> {
    let recent = RECENT.lock();
    recent
        .iter()
        .rev()
        .filter(|e| source.is_none_or(|s| e.source == s))
        .filter(|e| event_id.is_none_or(|id| e.event_id == id))
        .cloned()
        .collect()
}

/// Whether any of `source`'s destinations has a filter.
pub fn filtered(destinations: &Destinations, source: &str) -> bool {
    destinations.of(source).iter().any(|d| d.filter.is_some())
}

/// Of `routed` (destination names with anything else the caller carries), those whose
/// filter takes `subject`: all of them when none has a filter. Every filter runs in one
/// evaluation job, which reads the payload once.
pub async fn keep_filtered<T>(
    destinations: &Destinations,
    subject: &Subject,
    routed: Vec<(String, T)>,
) -> Vec<(String, T)> {
    let filter_of =
        |name: &str| (destinations.find(&subject.source, name)).and_then(|d| d.filter.clone());
    let programs: Vec<jq::Program> = routed
        .iter()
        .filter_map(|(name, _)| filter_of(name))
        .collect();
    if programs.is_empty() {
        return routed;
    }
    let started = Instant::now();
    let mut decisions = jq::decide_each(programs, subject.input(), &destinations.jq)
        .await
        .into_iter();
    record_duration("filter", started);
    let mut kept = Vec::with_capacity(routed.len());
    for (name, carried) in routed {
        let takes = match filter_of(&name) {
            None => true,
            Some(_) => {
                let decision = decisions.next().unwrap_or(Err(EvalError::Timeout));
                settle(subject, &name, decision)
            }
        };
        if takes {
            kept.push((name, carried));
        }
    }
    kept
}

/// What `destination`'s filter decides for `subject` (`Ok(true)` without a filter), for a
/// caller on a blocking thread; counted and logged like at ingest.
pub fn decide_blocking(
    destinations: &Destinations,
    destination: &DestinationSettings,
    subject: &Subject,
) -> Decision {
    let Some(filter) = destination.filter.as_ref() else {
        return Ok(true);
    };
    let started = Instant::now();
    let decision = jq::decide_blocking(filter, subject.input(), &destinations.jq);
    record_duration("filter", started);
    settle(subject, &destination.name, decision.clone());
    decision
}

/// Counts, logs and keeps a decision; whether the event is enqueued.
fn settle(subject: &Subject, destination: &str, decision: Decision) -> bool {
    let source = subject.source.clone();
    match decision {
        Ok(true) => true,
        Ok(false) => {
            metrics::counter!("inlet_filter_skipped_total", "source" => source, "destination" => destination.to_owned())
                .increment(1);
            false
        }
        Err(error) => {
            let reason = error_reason(&error);
            metrics::counter!("inlet_filter_errors_total", "source" => source, "destination" => destination.to_owned(), "reason" => reason)
                .increment(1);
            tracing::warn!(
                source = %subject.source,
                destination,
                event_id = %subject.event_id,
                error = %error,
                "filter failed: the event is not enqueued for this destination"
            );
            keep(FilterError {
                at: chrono::Utc::now(),
                source: subject.source.clone(),
                destination: destination.to_owned(),
                event_id: subject.event_id.clone(),
                reason: error.to_string(),
            });
            false
        }
    }
}

/// One evaluation job's time, queueing included: an event's filters together, or one
/// transform.
fn record_duration(role: &'static str, started: Instant) {
    metrics::histogram!("inlet_jq_evaluation_seconds", "role" => role)
        .record(started.elapsed().as_secs_f64());
}

fn keep(error: FilterError) {
    let mut recent = RECENT.lock();
    if recent.len() == RECENT_ERRORS {
        recent.pop_front();
    }
    recent.push_back(error);
}

/// The metric label of an evaluation error.
pub fn error_reason(error: &EvalError) -> &'static str {
    match error {
        EvalError::NotJson => "not_json",
        EvalError::Expression(_) => "expression",
        EvalError::Exhausted(_) | EvalError::TooLarge(..) => "bound",
        EvalError::Timeout => "timeout",
        EvalError::Crashed => "crashed",
    }
}

/// The body `transform` makes of `subject` (no `$headers`: a delivery may outlive its
/// event's row), counted by outcome.
pub async fn transformed(
    limits: &jq::Limits,
    destination: &str,
    transform: &jq::Program,
    subject: &Subject,
) -> Result<Vec<u8>, EvalError> {
    let started = Instant::now();
    let result = jq::transform(transform, subject.input(), limits).await;
    record_duration("transform", started);
    if let Err(error) = &result {
        metrics::counter!("inlet_transform_errors_total", "source" => subject.source.clone(), "destination" => destination.to_owned(), "reason" => error_reason(error))
            .increment(1);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::settings::{validate_destinations, DestinationFile};
    use proptest::prelude::*;

    /// `a` and `c` without a filter, `b` and `d` the same with `filter = "true"`; `c` and
    /// `d` take `x.*` types only.
    fn destinations() -> Destinations {
        let file = |name: &str, events: Option<&str>, filter: Option<&str>| {
            let mut table = serde_json::json!({
                "url": format!("http://127.0.0.1:9/{name}"),
                "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "name": name,
            });
            if let Some(events) = events {
                table["events"] = serde_json::json!([events]);
            }
            if let Some(filter) = filter {
                table["filter"] = serde_json::json!(filter);
            }
            serde_json::from_value::<DestinationFile>(table).expect("a destination table")
        };
        let files = vec![
            file("a", None, None),
            file("b", None, Some("true")),
            file("c", Some("x.*"), None),
            file("d", Some("x.*"), Some("true")),
        ];
        let mut destinations = Destinations::default();
        let list = validate_destinations("sources[0]", files, true).expect("valid");
        destinations.insert("src", list);
        destinations
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z\\\\\"é ]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// A filter `true` routes exactly as no filter does, whatever the payload and type.
        #[test]
        fn a_filter_true_equals_no_filter(
            payload in json_value(),
            event_type in prop::option::of(prop_oneof![Just("x.created"), Just("y.deleted"), Just("x")]),
        ) {
            let destinations = destinations();
            let subject = Subject {
                source: "src".to_owned(),
                event_id: "evt".to_owned(),
                event_type: event_type.map(str::to_owned),
                payload: bytes::Bytes::from(payload.to_string()),
                headers: Some("[]".to_owned()),
            };
            let routed: Vec<(String, ())> = destinations
                .routed("src", event_type)
                .map(|d| (d.name.clone(), ()))
                .collect();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
            let kept = runtime.block_on(keep_filtered(&destinations, &subject, routed.clone()));
            prop_assert_eq!(&kept, &routed);
            let names: Vec<&str> = kept.iter().map(|(n, _)| n.as_str()).collect();
            prop_assert_eq!(names.contains(&"a"), names.contains(&"b"));
            prop_assert_eq!(names.contains(&"c"), names.contains(&"d"));
        }
    }
}
