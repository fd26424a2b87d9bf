//! A destination's `filter` and `transform` applied to an event: the filters decide, after
//! the `events` type routing, which destinations a new fact (or a replay) is enqueued for;
//! the transform makes the body a delivery sends. Every decision is counted, and every
//! error counted, logged with its event and kept among the recent ones the console shows.

use super::outbox::Route;
use super::settings::{DestinationSettings, Destinations};
use crate::jq::{self, Decision, EvalError, Input, Lane};
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

/// Of `routes` (the destinations whose `events` take the fact), those whose filter takes
/// `subject` — all of them when none has a filter — and those whose filter could not
/// decide, marked so (never dropped: see [`Route::undecided`]). Every filter runs in one
/// job on `lane`, which reads the payload once.
pub async fn keep_filtered(
    destinations: &Destinations,
    subject: &Subject,
    routes: Vec<Route>,
    lane: Lane,
) -> Vec<Route> {
    let filter_of = |route: &Route| {
        (destinations.find(&subject.source, &route.destination)).and_then(|d| d.filter.clone())
    };
    let programs: Vec<jq::Program> = routes.iter().filter_map(filter_of).collect();
    if programs.is_empty() {
        return routes;
    }
    let started = Instant::now();
    let decisions = jq::decide_each(&programs, subject.input(), &destinations.jq, lane).await;
    record_duration("filter", started);
    let mut decisions = decisions.into_iter();
    let mut kept = Vec::with_capacity(routes.len());
    for route in routes {
        let decision = match filter_of(&route) {
            None => Ok(true),
            Some(_) => decisions.next().unwrap_or(Err(EvalError::Crashed)),
        };
        kept.extend(settle(subject, route, decision));
    }
    kept
}

/// What `destination`'s filter decides for `subject` as a route (`taken` as it is without
/// a filter), for a caller on a blocking thread: `None` when the filter does not take it.
/// Counted and logged like at ingest.
pub fn route_blocking(
    destinations: &Destinations,
    destination: &DestinationSettings,
    subject: &Subject,
    route: Route,
    lane: Lane,
) -> (Option<Route>, Decision) {
    let Some(filter) = destination.filter.as_ref() else {
        return (Some(route), Ok(true));
    };
    let started = Instant::now();
    let input = subject.input();
    let decision =
        jq::decide_each_blocking(std::slice::from_ref(filter), &input, &destinations.jq, lane)
            .pop()
            .unwrap_or(Err(EvalError::Crashed));
    record_duration("filter", started);
    (settle(subject, route, decision.clone()), decision)
}

/// The filter of a delivery it could not decide when it was enqueued, evaluated when the
/// delivery is leased; counted and logged like at ingest.
pub async fn decide_late(
    limits: &jq::Limits,
    destination: &str,
    filter: &jq::Program,
    subject: &Subject,
) -> Decision {
    let started = Instant::now();
    let decision = jq::decide(filter, subject.input(), limits, Lane::Live).await;
    record_duration("filter", started);
    match &decision {
        Ok(true) => {}
        Ok(false) => skipped(&subject.source, destination),
        Err(error) => failed(subject, destination, error),
    }
    decision
}

/// The route a decision leaves: taken, dropped when the filter does not take the event
/// (or the payload is not JSON, which no filter reads), or marked undecided on any other
/// error. Counted, and an error logged and kept.
fn settle(subject: &Subject, route: Route, decision: Decision) -> Option<Route> {
    match decision {
        Ok(true) => Some(route),
        Ok(false) => {
            skipped(&subject.source, &route.destination);
            None
        }
        Err(error) => {
            failed(subject, &route.destination, &error);
            (error != EvalError::NotJson).then_some(Route {
                undecided: Some(error),
                ..route
            })
        }
    }
}

fn skipped(source: &str, destination: &str) {
    metrics::counter!("inlet_filter_skipped_total", "source" => source.to_owned(), "destination" => destination.to_owned())
        .increment(1);
}

/// Counts, logs and keeps a filter's error on `subject`.
fn failed(subject: &Subject, destination: &str, error: &EvalError) {
    let reason = error_reason(error);
    metrics::counter!("inlet_filter_errors_total", "source" => subject.source.clone(), "destination" => destination.to_owned(), "reason" => reason)
        .increment(1);
    let what = match error {
        EvalError::NotJson => "the payload is not JSON: not taken by this filtered destination",
        _ if error.is_transient() => "filter not evaluated: the delivery waits, pending, for its filter",
        _ => "filter failed: the delivery is recorded dead with the reason; requeue it once the filter is fixed",
    };
    tracing::warn!(
        source = %subject.source,
        destination,
        event_id = %subject.event_id,
        error = %error,
        "{what}"
    );
    keep(FilterError {
        at: chrono::Utc::now(),
        source: subject.source.clone(),
        destination: destination.to_owned(),
        event_id: subject.event_id.clone(),
        reason: error.to_string(),
    });
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
        EvalError::Crashed => "crashed",
        EvalError::Saturated => "saturated",
        EvalError::Unavailable(_) => "unavailable",
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
    let result = jq::transform(transform, subject.input(), limits, Lane::Live).await;
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
            let at = chrono::DateTime::UNIX_EPOCH;
            let routed: Vec<Route> = destinations
                .routed("src", event_type)
                .map(|d| Route::taken(d.name.clone(), at))
                .collect();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
            let kept = runtime.block_on(keep_filtered(&destinations, &subject, routed.clone(), Lane::Live));
            prop_assert_eq!(&kept, &routed);
            let names: Vec<&str> = kept.iter().map(|r| r.destination.as_str()).collect();
            prop_assert_eq!(names.contains(&"a"), names.contains(&"b"));
            prop_assert_eq!(names.contains(&"c"), names.contains(&"d"));
        }
    }
}
