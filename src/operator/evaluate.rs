//! Trying a filter or transform before deploying it: a destination's own expressions, or
//! ones given in the request, run against a stored event — read only, nothing counted as
//! an ingest decision, nothing enqueued. Evaluations run on the tools' evaluators, never
//! on those of live deliveries, and each operator runs one at a time
//! ([`MAX_PER_OPERATOR`]).

use super::caller::Caller;
use super::calls::{Ground, UseCases};
use super::OperatorError;
use crate::db::schema::events;
use crate::delivery::filters::error_reason;
use crate::delivery::DestinationSettings;
use crate::jq::{self, Input, Lane, Program};
use diesel::prelude::*;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// Evaluations one operator may run at once, on every surface together; one more is
/// refused (`429 too_many_evaluations`) until the first ends.
pub const MAX_PER_OPERATOR: usize = 1;

/// Evaluations running, by operator.
static RUNNING: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

/// One operator's running evaluation: counted while it lives.
struct Running(String);

impl Running {
    fn start(caller: &Caller) -> Result<Self, OperatorError> {
        let mut running = RUNNING.lock();
        let count = running
            .get_or_insert_with(HashMap::new)
            .entry(caller.name.clone())
            .or_default();
        if *count >= MAX_PER_OPERATOR {
            metrics::counter!("inlet_evaluations_refused_total", "reason" => "busy").increment(1);
            return Err(OperatorError::Busy(format!(
                "operator {} already runs {MAX_PER_OPERATOR} evaluation(s); try again when it ends",
                caller.name
            )));
        }
        *count += 1;
        running_gauge(&caller.name, *count);
        Ok(Self(caller.name.clone()))
    }
}

/// `inlet_operator_evaluations_running{operator}`.
fn running_gauge(operator: &str, count: usize) {
    metrics::gauge!("inlet_operator_evaluations_running", "operator" => operator.to_owned())
        .set(count as f64);
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = RUNNING.lock();
        if let Some(counts) = running.as_mut() {
            if let Some(count) = counts.get_mut(&self.0) {
                *count = count.saturating_sub(1);
                running_gauge(&self.0, *count);
                if *count == 0 {
                    counts.remove(&self.0);
                }
            }
        }
    }
}

/// `POST /admin/evaluate`: the event, and optionally one destination and expressions that
/// replace its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    pub source: String,
    pub event_id: String,
    pub destination: Option<String>,
    pub filter: Option<String>,
    pub transform: Option<String>,
}

/// What each destination's filter and transform make of the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub destinations: Vec<DestinationEvaluation>,
}

/// One destination (or, without one, the expressions given alone).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DestinationEvaluation {
    pub destination: Option<String>,
    /// Whether its `events` type routing takes the event's type (true without a
    /// destination).
    pub events_match: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<ExpressionResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<ExpressionResult>,
    /// Whether a webhook of this event would be enqueued for it now.
    pub enqueued: bool,
}

/// One expression's result: a filter's decision or a transform's body, or its error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExpressionResult {
    pub expression: String,
    /// A filter's `enqueue` or `skip`, or `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// A transform's output (the delivered body, as JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The bound the evaluation reached, when that is why it failed: `steps`, `time`,
    /// `memory`, `depth` or `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
}

/// The stored event an evaluation reads.
struct Stored {
    event_type: Option<String>,
    payload: Vec<u8>,
    headers: Option<String>,
}

/// The expressions to run for one destination.
struct Plan {
    destination: Option<String>,
    events_match: bool,
    filter: Option<Program>,
    transform: Option<Program>,
}

impl<S: Ground> UseCases<S> {
    /// Runs the filters and transforms `request` names against its stored event, for
    /// `caller` (one evaluation at a time each).
    pub async fn evaluate(
        &self,
        caller: &Caller,
        request: EvaluateRequest,
    ) -> Result<Evaluation, OperatorError> {
        super::actions::check_text("source", Some(&request.source))?;
        super::actions::check_text("event_id", Some(&request.event_id))?;
        let _running = Running::start(caller)?;
        let texts = (request.filter.clone(), request.transform.clone());
        let (filter, transform) = tokio::task::spawn_blocking(move || {
            Ok::<_, OperatorError>((given(&texts.0, "filter")?, given(&texts.1, "transform")?))
        })
        .await
        .map_err(|e| OperatorError::Internal(e.to_string()))??;
        let stored = self
            .stored_event(&request.source, &request.event_id)
            .await?;
        let plans = self.plans(&request, &stored, filter, transform)?;
        let input = Input {
            payload: bytes::Bytes::from(stored.payload),
            headers: stored
                .headers
                .as_deref()
                .and_then(|h| serde_json::from_str(h).ok())
                .unwrap_or_default(),
            event_type: stored.event_type.clone(),
            source: request.source.clone(),
            event_id: request.event_id.clone(),
        };
        let limits = self.settings.destinations().jq;
        let mut destinations = Vec::with_capacity(plans.len());
        for plan in plans {
            destinations.push(run(plan, &input, &limits).await);
        }
        Ok(Evaluation {
            source: request.source,
            event_id: request.event_id,
            event_type: stored.event_type,
            destinations,
        })
    }

    async fn stored_event(&self, source: &str, event_id: &str) -> Result<Stored, OperatorError> {
        let (s, e) = (source.to_owned(), event_id.to_owned());
        let row = self
            .read(move |c, _| {
                Ok(events::table
                    .filter(events::source.eq(&s))
                    .filter(events::event_id.eq(&e))
                    .select((events::event_type, events::payload, events::headers))
                    .first::<(Option<String>, Vec<u8>, Option<String>)>(c)
                    .optional()?)
            })
            .await?;
        let Some((event_type, payload, headers)) = row else {
            return Err(OperatorError::UnknownEvent(format!(
                "no stored event {source}/{event_id}: it never arrived or was swept"
            )));
        };
        Ok(Stored {
            event_type,
            payload,
            headers,
        })
    }

    /// The destination named (or every destination of the source, or none when only
    /// expressions are given), each with the expressions to run.
    fn plans(
        &self,
        request: &EvaluateRequest,
        stored: &Stored,
        filter: Option<Program>,
        transform: Option<Program>,
    ) -> Result<Vec<Plan>, OperatorError> {
        let all = self.settings.destinations();
        let chosen: Vec<&DestinationSettings> = match &request.destination {
            Some(name) => vec![all.find(&request.source, name).ok_or_else(|| {
                OperatorError::Invalid(format!(
                    "source '{}' has no destination '{name}'",
                    request.source
                ))
            })?],
            None if filter.is_some() || transform.is_some() => Vec::new(),
            None => all.of(&request.source).iter().collect(),
        };
        if chosen.is_empty() {
            return Ok(vec![Plan {
                destination: None,
                events_match: true,
                filter,
                transform,
            }]);
        }
        let event_type = stored.event_type.as_deref();
        Ok(chosen
            .into_iter()
            .map(|d| Plan {
                destination: Some(d.name.clone()),
                events_match: d.events.matches(event_type),
                filter: filter.clone().or_else(|| d.filter.clone()),
                transform: transform.clone().or_else(|| d.transform.clone()),
            })
            .collect())
    }
}

/// An expression from the request, compiled (a mistake is the caller's, with its position).
fn given(text: &Option<String>, what: &str) -> Result<Option<Program>, OperatorError> {
    text.as_deref()
        .map(|text| {
            jq::compile(text).map_err(|e| match e {
                jq::CheckError::Refused(e) => OperatorError::Invalid(format!("{what}: {e}")),
                jq::CheckError::Unchecked(e) => OperatorError::Busy(format!("{what}: {e}")),
            })
        })
        .transpose()
}

async fn run(plan: Plan, input: &Input, limits: &jq::Limits) -> DestinationEvaluation {
    let filter = match &plan.filter {
        Some(program) => Some(jq::decide(program, input.clone(), limits, Lane::Tools).await),
        None => None,
    };
    let takes = plan.events_match && filter.as_ref().is_none_or(|d| *d == Ok(true));
    let transform = match &plan.transform {
        Some(program) => {
            let input = input_for_transform(input);
            Some(jq::transform(program, input, limits, Lane::Tools).await)
        }
        None => None,
    };
    DestinationEvaluation {
        destination: plan.destination,
        events_match: plan.events_match,
        filter: plan.filter.as_ref().zip(filter).map(|(p, decision)| {
            let (decision, error) = match decision {
                Ok(true) => ("enqueue", None),
                Ok(false) => ("skip", None),
                Err(e) => ("error", Some(e)),
            };
            ExpressionResult {
                decision: Some(decision.to_owned()),
                ..outcome(p, None, error)
            }
        }),
        transform: plan
            .transform
            .as_ref()
            .zip(transform)
            .map(|(p, body)| match body {
                Ok(body) => outcome(p, serde_json::from_slice(&body).ok(), None),
                Err(e) => outcome(p, None, Some(e)),
            }),
        enqueued: takes,
    }
}

/// A transform reads no `$headers` (it runs when a delivery is sent, perhaps after its
/// event's row was swept).
fn input_for_transform(input: &Input) -> Input {
    Input {
        headers: Vec::new(),
        ..input.clone()
    }
}

fn outcome(
    program: &Program,
    body: Option<Value>,
    error: Option<jq::EvalError>,
) -> ExpressionResult {
    ExpressionResult {
        expression: program.text().to_owned(),
        decision: None,
        body,
        reason: error.as_ref().map(|e| error_reason(e).to_owned()),
        bound: error
            .as_ref()
            .and_then(jq::EvalError::bound)
            .map(|b| b.as_str().to_owned()),
        error: error.map(|e| e.to_string()),
    }
}
