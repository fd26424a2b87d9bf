//! The audit trail's use cases: reading it a page at a time, recording a refusal, and the
//! recorder of an action that is not a transaction of its own (a reload).

use super::audit::{list, record, AuditFilter, AuditRow, Entry, Outcome, Recorder};
use super::caller::Caller;
use super::calls::{Ground, UseCases};
use super::listing::{Listing, Page};
use super::OperatorError;
use crate::db::write_transaction;

impl<S: Ground> UseCases<S> {
    /// The recorder of `caller`'s reload.
    pub fn reload_recorder(&self, caller: Caller) -> Recorder {
        Recorder {
            pool: self.pool.clone(),
            faults: self.faults.clone(),
            caller,
            action: "reload",
            at: self.now,
        }
    }

    /// The audit trail, newest first, `limit` (at most [`super::MAX_PAGE`]) before
    /// `cursor`; the filter is checked before any query runs.
    pub async fn audit_trail(
        &self,
        filter: AuditFilter,
        cursor: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Listing<AuditRow>, OperatorError> {
        filter.validate()?;
        let page = Page::of(cursor, limit)?;
        self.page(
            page,
            |row: &AuditRow| row.id,
            move |c, before, limit| list(c, &filter, before, limit),
        )
        .await
    }

    /// Records that `caller` was refused `action` for lack of role (its own transaction:
    /// nothing else happened).
    pub async fn refused(
        &self,
        caller: &Caller,
        action: &'static str,
        parameters: Vec<u8>,
        needed: super::Role,
    ) -> Result<(), OperatorError> {
        let (caller, faults, at) = (caller.clone(), self.faults.clone(), self.now);
        let result = format!("needs the {} role", needed.as_str());
        self.read(move |conn, _| {
            let entry = Entry {
                outcome: Outcome::Refused,
                ..Entry::done(&caller, action, &parameters, &result, at)
            };
            Ok(write_transaction(conn, |conn| {
                record(conn, &faults, &entry)
            })?)
        })
        .await
    }
}
