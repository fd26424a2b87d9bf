//! What both operator surfaces — the API (`admin.rs`) and the console (`console/`) — need
//! to call the operator's use cases: the request's [`UseCases`], its [`Caller`], the role
//! refusal that is written to the audit trail, and the encoding of the answers stored
//! under an Idempotency-Key (keys are the operator's, shared by both surfaces, so both
//! store an answer the same way). Both import this; neither imports the other.

use super::{Problem, Reason, RequestId};
use crate::config::Settings;
use crate::idempotency::Answer;
use crate::operator::{
    json_answer, Account, BulkCreated, Caller, DeadLetterReport, OperatorError, ReplayReport, Role,
    UseCases,
};
use crate::state::AppState;
use actix_web::{HttpMessage, HttpRequest};
use serde_json::{json, Value};
use std::sync::Arc;

/// The use cases under the request's settings snapshot.
pub fn calls(state: &AppState, settings: &Arc<Settings>) -> UseCases<Settings> {
    UseCases {
        pool: state.pool.clone(),
        settings: settings.clone(),
        now: state.clock.now(),
        waker: state.dispatcher_waker.clone(),
        faults: state.faults.clone(),
    }
}

/// `account` calling through `surface` (`api`, `console`) in `request`: with the request's
/// id and the client's address, as the audit trail records them.
pub fn caller_of(account: &Account, surface: &'static str, request: &HttpRequest) -> Caller {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .map(|id| id.0.clone());
    let client = request.peer_addr().map(|peer| peer.ip().to_string());
    Caller::new(account, surface, request_id, client)
}

/// Refuses `caller` `action` for lack of the `needed` role: `403`, counted, logged and
/// written to the audit trail (a failure to write it is logged; the answer is the same).
pub async fn forbidden<T>(
    state: &AppState,
    settings: &Arc<Settings>,
    caller: &Caller,
    action: &'static str,
    parameters: &Value,
    needed: Role,
) -> Result<T, Problem> {
    metrics::counter!("inlet_operator_forbidden_total", "surface" => caller.surface, "action" => action)
        .increment(1);
    tracing::warn!(operator = %caller.name, role = caller.role.as_str(), action, "operator action refused: role");
    let bytes = parameters.to_string().into_bytes();
    if let Err(error) = calls(state, settings)
        .refused(caller, action, bytes, needed)
        .await
    {
        tracing::error!(%error, action, "cannot write the audit row of a refusal");
    }
    Err(Problem::new(
        Reason::Forbidden,
        format!(
            "{action} needs the {} role; operator {} has the {} role",
            needed.as_str(),
            caller.name,
            caller.role.as_str()
        ),
    ))
}

/// `value` as an answer's body.
pub fn to_json(value: &Value) -> Result<Vec<u8>, OperatorError> {
    serde_json::to_vec(value)
        .map_err(|e| OperatorError::Internal(format!("cannot encode the answer: {e}")))
}

/// A replay's (or its preview's) answer, as stored and sent: `410` when it named one
/// event that was swept, else the results with their summary and whether a filter was cut
/// at its limit.
pub fn replay_answer(report: &ReplayReport, settings: &Settings) -> Result<Answer, OperatorError> {
    if let Some(only) = report.only_expired() {
        let window = settings.retention.events;
        let problem = Problem::new(
            Reason::Expired,
            format!(
                "event {}/{} was swept after the retention window ({window}); its fact \
                 remains, so it can no longer be replayed",
                only.source, only.event_id
            ),
        );
        return Ok(json_answer(410, problem.body()));
    }
    let body = to_json(&json!({
        "dry_run": report.dry_run,
        "truncated": report.truncated,
        "summary": report.summary,
        "results": report.results,
    }))?;
    Ok(json_answer(200, body))
}

/// A requeue's or discard's answer: each dead letter's result.
pub fn dead_letter_answer(
    report: &DeadLetterReport,
    _: &Settings,
) -> Result<Answer, OperatorError> {
    Ok(json_answer(
        200,
        to_json(&json!({ "results": report.results }))?,
    ))
}

/// A bulk action's creation, as stored and sent: `202` with the new action.
pub fn bulk_answer(created: &BulkCreated, _: &Settings) -> Result<Answer, OperatorError> {
    Ok(json_answer(
        202,
        to_json(&json!({ "action": created.action }))?,
    ))
}
