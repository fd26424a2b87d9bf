//! The audit trail (`audit`): one row per state-changing operator action — replay,
//! requeue, discard, reload, sign-in, sign-out — and per attempt refused for lack of role:
//! who (name and role), what (action and parameters), what came of it, under which
//! Idempotency-Key and request id, from which address, when. An action writes its row in
//! its own transaction, so an action whose row cannot be written does not happen. Rows
//! are read newest first; nothing but the sweeper (after `retention.audit`) deletes one.

use super::caller::Caller;
use super::OperatorError;
use crate::db::schema::audit;
use crate::db::{write_transaction, DbConnection, DbPool};
use crate::faults::Faults;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Most bytes of a request's parameters kept in its row; longer ones are cut, marked so.
const MAX_PARAMETERS: usize = 8 * 1024;

/// How an action ended, as the trail records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (its result says what it did, a refusal of the request included).
    Done,
    /// Refused: the operator's role may not do it.
    Refused,
    /// It failed and changed nothing (a reload whose file was refused).
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        }
    }
}

/// One row to write.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub caller: &'a Caller,
    /// `replay`, `requeue`, `discard`, `reload`, `sign_in`, `sign_out`, …
    pub action: &'a str,
    pub outcome: Outcome,
    /// The request as sent (JSON).
    pub parameters: &'a [u8],
    pub result: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub at: DateTime<Utc>,
}

impl<'a> Entry<'a> {
    /// A row for an action that ran, with no Idempotency-Key.
    pub fn done(
        caller: &'a Caller,
        action: &'a str,
        parameters: &'a [u8],
        result: &'a str,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            caller,
            action,
            outcome: Outcome::Done,
            parameters,
            result,
            idempotency_key: None,
            at,
        }
    }
}

/// Writes `entry` on `conn` — inside the action's own transaction. With the fault
/// point armed, the insert fails as a broken table would, in the database itself.
pub fn record(conn: &mut DbConnection, faults: &Faults, entry: &Entry<'_>) -> QueryResult<()> {
    if faults.audit_fails() {
        diesel::sql_query("INSERT INTO audit_unwritable_by_fault_injection DEFAULT VALUES")
            .execute(conn)?;
    }
    let caller = entry.caller;
    diesel::insert_into(audit::table)
        .values((
            audit::at.eq(entry.at.naive_utc()),
            audit::operator.eq(&caller.name),
            audit::role.eq(caller.role.as_str()),
            audit::action.eq(entry.action),
            audit::outcome.eq(entry.outcome.as_str()),
            audit::parameters.eq(parameters_text(entry.parameters)),
            audit::result.eq(entry.result),
            audit::idempotency_key.eq(entry.idempotency_key),
            audit::request_id.eq(caller.request_id.as_deref()),
            audit::client.eq(caller.client.as_deref()),
            audit::surface.eq(caller.surface),
        ))
        .execute(conn)
        .map(drop)
}

/// The request as text, cut at [`MAX_PARAMETERS`] bytes (on a character boundary).
fn parameters_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= MAX_PARAMETERS {
        return text.into_owned();
    }
    let mut end = MAX_PARAMETERS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…(cut at {MAX_PARAMETERS} bytes)", &text[..end])
}

/// One row as read.
#[derive(Debug, Clone, Queryable, Selectable, Serialize)]
#[diesel(table_name = audit)]
pub struct AuditRow {
    pub id: i64,
    #[serde(with = "crate::clock::serde_rfc3339")]
    pub at: NaiveDateTime,
    pub operator: String,
    pub role: String,
    pub action: String,
    pub outcome: String,
    pub parameters: String,
    pub result: String,
    pub idempotency_key: Option<String>,
    pub request_id: Option<String>,
    pub client: Option<String>,
    pub surface: String,
}

/// What to read of the trail.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuditFilter {
    pub operator: Option<String>,
    pub action: Option<String>,
    pub outcome: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl AuditFilter {
    pub(super) fn validate(&self) -> Result<(), OperatorError> {
        super::actions::check_text("operator", self.operator.as_deref())?;
        super::actions::check_text("action", self.action.as_deref())?;
        super::actions::check_time("since", self.since)?;
        super::actions::check_time("until", self.until)?;
        let outcomes = ["done", "refused", "failed"];
        super::actions::check_one_of("outcome", self.outcome.as_deref(), &outcomes)
    }
}

/// Rows newest first: `limit` of them with ids below `before` (a page's `next_cursor`).
pub(super) fn list(
    conn: &mut DbConnection,
    filter: &AuditFilter,
    before: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<AuditRow>> {
    let mut query = audit::table
        .select(AuditRow::as_select())
        .order(audit::id.desc())
        .limit(limit)
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(audit::id.lt(before));
    }
    if let Some(operator) = &filter.operator {
        query = query.filter(audit::operator.eq(operator.clone()));
    }
    if let Some(action) = &filter.action {
        query = query.filter(audit::action.eq(action.clone()));
    }
    if let Some(outcome) = &filter.outcome {
        query = query.filter(audit::outcome.eq(outcome.clone()));
    }
    if let Some(since) = filter.since {
        query = query.filter(audit::at.ge(since.naive_utc()));
    }
    if let Some(until) = filter.until {
        query = query.filter(audit::at.lt(until.naive_utc()));
    }
    query.load(conn)
}

/// Writes the rows of an action that is not a database transaction of its own (a
/// reload): blocking, called off the executor, before the action is put in force — an
/// error means it must not be.
pub struct Recorder {
    pub(super) pool: DbPool,
    pub(super) faults: Arc<Faults>,
    pub(super) caller: Caller,
    pub(super) action: &'static str,
    /// When the action was asked for (the request's time, from the injected clock).
    pub(super) at: DateTime<Utc>,
}

impl Recorder {
    /// The recorder of a reload the process was told by `SIGHUP` to do, at `at`.
    pub fn signalled_reload(pool: DbPool, at: DateTime<Utc>) -> Self {
        Self {
            pool,
            faults: Arc::new(Faults::default()),
            caller: Caller::signal(),
            action: "reload",
            at,
        }
    }

    /// Writes the action's row now, with `outcome` and `result` (blocking).
    pub fn record(&self, outcome: Outcome, result: &str) -> Result<(), OperatorError> {
        let entry = Entry {
            outcome,
            ..Entry::done(&self.caller, self.action, b"{}", result, self.at)
        };
        let mut conn = self.pool.get()?;
        Ok(write_transaction(&mut conn, |conn| {
            record(conn, &self.faults, &entry)
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_parameters_are_cut_on_a_character_boundary() {
        assert_eq!(parameters_text(b"{\"ids\":[1]}"), "{\"ids\":[1]}");
        let long = "é".repeat(MAX_PARAMETERS);
        let cut = parameters_text(long.as_bytes());
        assert!(
            cut.len() < MAX_PARAMETERS + 40 && cut.ends_with("bytes)"),
            "{}",
            cut.len()
        );
    }
}
