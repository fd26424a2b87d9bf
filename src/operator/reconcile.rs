//! The operator's side of reconciliation: a source's runs, newest first, and asking for a
//! run now — a mutating call like the others (once per Idempotency-Key, audited in the
//! same transaction). The run itself is made by whichever instance's schedule takes it.

use super::calls::{Answered, Encode, Ground, KeyedRequest, Summary, UseCases};
use super::OperatorError;
use crate::provider::record::Reconciliation;
use crate::reconcile::{ask, store, RunRequest, RunView, Trigger};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `POST /admin/reconcile`'s route, as its Idempotency-Key fingerprint covers it.
pub const RECONCILE_ROUTE: &str = "POST /admin/reconcile";

/// The body of `POST /admin/reconcile`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileCall {
    pub source: String,
    /// Look back this far (`2d`) instead of from where the last clean run ended.
    pub since: Option<String>,
    /// List what is missing; change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A run asked for: `requested` until a schedule takes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileAsked {
    pub run: RunView,
}

impl Summary for ReconcileAsked {
    /// E.g. `202: reconciliation run 7 of source stripe asked for (report)`.
    fn summary(&self, status: u16) -> String {
        let run = &self.run;
        format!(
            "{status}: reconciliation run {} of source {} asked for ({})",
            run.id, run.source, run.mode
        )
    }
}

impl<S: Ground> UseCases<S> {
    /// `source`'s runs, newest first.
    pub async fn reconcile_runs(
        &self,
        source: String,
        limit: i64,
    ) -> Result<Vec<RunView>, OperatorError> {
        self.read(move |conn, _| {
            let rows = store::runs(conn, &source, limit)?;
            Ok(rows.iter().map(store::RunRow::view).collect())
        })
        .await
    }

    /// Asks for a run of `call.source` (whose reconciliation the edge found), once per key.
    pub async fn ask_reconcile(
        &self,
        keyed: KeyedRequest<'_>,
        (call, since): (ReconcileCall, Option<Duration>),
        reconciliation: Reconciliation,
        encode: Encode<ReconcileAsked, S>,
    ) -> Result<Answered<ReconcileAsked>, OperatorError> {
        let operator = keyed.caller.name.clone();
        let request = RunRequest {
            source: call.source,
            trigger: Trigger::Api,
            since,
            dry_run: call.dry_run,
        };
        let work = move |conn: &mut crate::db::DbConnection, _: &S, now| {
            let row = ask(conn, &request, &reconciliation, &operator, now)?;
            Ok(ReconcileAsked { run: row.view() })
        };
        self.once((RECONCILE_ROUTE, "reconcile"), keyed, work, encode)
            .await
    }
}
