//! Reconciliation's tables: `reconcile_sources` (each source's run lease, and where its
//! next scheduled run starts) and `reconcile_runs` (one row per run, its cursor and counts
//! committed after every page), and the join with `events` that finds what is missing.

use crate::db::dialect;
use crate::db::schema::{events, reconcile_runs, reconcile_sources};
use crate::db::DbConnection;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

pub const REQUESTED: &str = "requested";
pub const RUNNING: &str = "running";
pub const OK: &str = "ok";
pub const FAILED: &str = "failed";

/// How long a run holds its source between renewals (after each page, and within a page
/// every [`RENEW_EVERY`]); a holder that stops answering loses it. Longer than one call to
/// the provider's API can take with its tries and waits.
pub const LEASE: chrono::Duration = chrono::Duration::minutes(5);

/// How often a run renews its lease within a page.
pub const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The most missing ids a run's row keeps (its counts go on).
const MISSING_IDS_KEPT: usize = 1_000;

/// A run, as stored.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = reconcile_runs)]
pub struct RunRow {
    pub id: i64,
    pub source: String,
    pub trigger: String,
    pub mode: String,
    pub status: String,
    pub window_from: NaiveDateTime,
    pub window_to: NaiveDateTime,
    pub cursor: Option<String>,
    pub listed: i64,
    pub missing: i64,
    pub recovered: i64,
    pub errors: i64,
    pub missing_ids: String,
    pub error: Option<String>,
    pub requested_by: Option<String>,
    pub started_at: NaiveDateTime,
    pub finished_at: Option<NaiveDateTime>,
}

/// A run, as the API and the console show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    pub id: i64,
    pub source: String,
    pub trigger: String,
    pub mode: String,
    pub status: String,
    pub window_from: DateTime<Utc>,
    pub window_to: DateTime<Utc>,
    pub listed: i64,
    pub missing: i64,
    pub recovered: i64,
    pub errors: i64,
    /// The event ids it found missing (the first thousand).
    pub missing_ids: Vec<String>,
    pub error: Option<String>,
    pub requested_by: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl RunRow {
    /// The event ids it found missing (the first thousand).
    pub fn missing_ids(&self) -> Vec<String> {
        serde_json::from_str(&self.missing_ids).unwrap_or_default()
    }

    pub fn view(&self) -> RunView {
        RunView {
            id: self.id,
            source: self.source.clone(),
            trigger: self.trigger.clone(),
            mode: self.mode.clone(),
            status: self.status.clone(),
            window_from: self.window_from.and_utc(),
            window_to: self.window_to.and_utc(),
            listed: self.listed,
            missing: self.missing,
            recovered: self.recovered,
            errors: self.errors,
            missing_ids: self.missing_ids(),
            error: self.error.clone(),
            requested_by: self.requested_by.clone(),
            started_at: self.started_at.and_utc(),
            finished_at: self.finished_at.map(|at| at.and_utc()),
        }
    }
}

/// A run about to start (or to be asked for).
#[derive(Debug, Insertable)]
#[diesel(table_name = reconcile_runs)]
pub struct NewRun<'a> {
    pub source: &'a str,
    pub trigger: &'a str,
    pub mode: &'a str,
    pub status: &'a str,
    pub window_from: NaiveDateTime,
    pub window_to: NaiveDateTime,
    pub requested_by: Option<&'a str>,
    pub started_at: NaiveDateTime,
}

/// What a run has done so far, committed after each page.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    pub cursor: Option<String>,
    pub listed: i64,
    pub missing: i64,
    pub recovered: i64,
    pub errors: i64,
    pub missing_ids: Vec<String>,
}

impl Progress {
    /// Where `row` had got to.
    pub fn of(row: &RunRow) -> Self {
        Self {
            cursor: row.cursor.clone(),
            listed: row.listed,
            missing: row.missing,
            recovered: row.recovered,
            errors: row.errors,
            missing_ids: row.missing_ids(),
        }
    }

    pub fn found_missing(&mut self, event_id: &str) {
        self.missing += 1;
        if self.missing_ids.len() < MISSING_IDS_KEPT {
            self.missing_ids.push(event_id.to_owned());
        }
    }
}

pub fn insert_run(conn: &mut DbConnection, run: NewRun<'_>) -> QueryResult<RunRow> {
    dialect!(conn, c => diesel::insert_into(reconcile_runs::table)
        .values(run)
        .returning(RunRow::as_returning())
        .get_result(c))
}

/// Takes `source`'s lease for `holder` until `now + LEASE`, when nobody else holds it.
pub fn take_lease(
    conn: &mut DbConnection,
    source: &str,
    holder: &str,
    now: DateTime<Utc>,
) -> QueryResult<bool> {
    dialect!(conn, c => diesel::insert_into(reconcile_sources::table)
        .values(reconcile_sources::source.eq(source))
        .on_conflict_do_nothing()
        .execute(c))?;
    let now = now.naive_utc();
    let free = reconcile_sources::locked_until
        .is_null()
        .or(reconcile_sources::locked_until.lt(now))
        .or(reconcile_sources::lease_holder.eq(holder));
    let taken = diesel::update(reconcile_sources::table.find(source).filter(free))
        .set((
            reconcile_sources::lease_holder.eq(holder),
            reconcile_sources::locked_until.eq(now + LEASE),
        ))
        .execute(conn)?;
    Ok(taken == 1)
}

/// Gives `source`'s lease back, if `holder` holds it.
pub fn release_lease(conn: &mut DbConnection, source: &str, holder: &str) -> QueryResult<()> {
    diesel::update(
        reconcile_sources::table
            .find(source)
            .filter(reconcile_sources::lease_holder.eq(holder)),
    )
    .set(reconcile_sources::locked_until.eq(None::<NaiveDateTime>))
    .execute(conn)
    .map(drop)
}

/// Where `source`'s next scheduled run starts, and when its last run succeeded.
pub fn source_state(
    conn: &mut DbConnection,
    source: &str,
) -> QueryResult<(Option<NaiveDateTime>, Option<NaiveDateTime>)> {
    let state = reconcile_sources::table
        .find(source)
        .select((
            reconcile_sources::checked_until,
            reconcile_sources::last_success_at,
        ))
        .first(conn)
        .optional()?;
    Ok(state.unwrap_or((None, None)))
}

/// The oldest run of `source` in `status`.
pub fn oldest_run(
    conn: &mut DbConnection,
    source: &str,
    status: &str,
) -> QueryResult<Option<RunRow>> {
    reconcile_runs::table
        .filter(reconcile_runs::source.eq(source))
        .filter(reconcile_runs::status.eq(status))
        .order(reconcile_runs::id)
        .select(RunRow::as_select())
        .first(conn)
        .optional()
}

/// `source`'s runs, newest first.
pub fn runs(conn: &mut DbConnection, source: &str, limit: i64) -> QueryResult<Vec<RunRow>> {
    reconcile_runs::table
        .filter(reconcile_runs::source.eq(source))
        .order(reconcile_runs::id.desc())
        .limit(limit)
        .select(RunRow::as_select())
        .load(conn)
}

/// Marks run `id` as running from `now` (a requested run, or one resumed).
pub fn start_run(
    conn: &mut DbConnection,
    id: i64,
    window: (NaiveDateTime, NaiveDateTime),
) -> QueryResult<()> {
    diesel::update(reconcile_runs::table.find(id))
        .set((
            reconcile_runs::status.eq(RUNNING),
            reconcile_runs::window_from.eq(window.0),
            reconcile_runs::window_to.eq(window.1),
        ))
        .execute(conn)
        .map(drop)
}

/// Writes run `id`'s progress and renews its source's lease (the caller's transaction
/// holds both): false when `holder` no longer holds the lease (another instance took the
/// run over).
pub fn save_progress(
    conn: &mut DbConnection,
    run: (i64, &str),
    holder: &str,
    progress: &Progress,
    now: DateTime<Utc>,
) -> QueryResult<bool> {
    let (id, source) = run;
    let ids = serde_json::to_string(&progress.missing_ids).unwrap_or_else(|_| "[]".to_owned());
    let now = now.naive_utc();
    {
        let renewed = diesel::update(
            reconcile_sources::table
                .find(source)
                .filter(reconcile_sources::lease_holder.eq(holder)),
        )
        .set(reconcile_sources::locked_until.eq(now + LEASE))
        .execute(conn)?;
        if renewed == 0 {
            return Ok(false);
        }
        diesel::update(reconcile_runs::table.find(id))
            .set((
                reconcile_runs::cursor.eq(progress.cursor.as_deref()),
                reconcile_runs::listed.eq(progress.listed),
                reconcile_runs::missing.eq(progress.missing),
                reconcile_runs::recovered.eq(progress.recovered),
                reconcile_runs::errors.eq(progress.errors),
                reconcile_runs::missing_ids.eq(&ids),
            ))
            .execute(conn)?;
        Ok(true)
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Ending<'a> {
    pub status: &'a str,
    pub error: Option<&'a str>,
    /// The window of a recover run that found nothing missing: the source's mark may move
    /// to its end.
    pub mark: Option<Mark>,
}

/// A window found whole, and whether it starts at the lookback's start.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    pub from: NaiveDateTime,
    pub to: NaiveDateTime,
    pub from_lookback: bool,
}

/// Ends run `id` of `source` (while `holder` holds its lease), moves its source's mark as
/// `ending` says and gives the lease back (in the caller's transaction).
pub fn finish_run(
    conn: &mut DbConnection,
    run: (i64, &str),
    holder: &str,
    ending: &Ending<'_>,
    now: DateTime<Utc>,
) -> QueryResult<()> {
    let (id, source) = run;
    let now = now.naive_utc();
    diesel::update(reconcile_runs::table.find(id))
        .set((
            reconcile_runs::status.eq(ending.status),
            reconcile_runs::error.eq(ending.error),
            reconcile_runs::finished_at.eq(Some(now)),
        ))
        .execute(conn)?;
    let state = reconcile_sources::table.find(source);
    if ending.status == OK {
        diesel::update(state)
            .set(reconcile_sources::last_success_at.eq(Some(now)))
            .execute(conn)?;
    }
    if let Some(mark) = ending.mark {
        advance_mark(conn, source, mark)?;
    }
    release_lease(conn, source, holder)
}

/// Moves `source`'s mark to the end of a window found whole — only when the window
/// continues it (starts at or before the mark, or at the lookback's start when there is
/// none), never backwards: a run over the last hour must not carry the mark past older
/// events no run has seen.
fn advance_mark(conn: &mut DbConnection, source: &str, mark: Mark) -> QueryResult<()> {
    let (checked_until, _) = source_state(conn, source)?;
    let continues = match checked_until {
        Some(checked) => mark.from <= checked && checked < mark.to,
        None => mark.from_lookback,
    };
    if continues {
        diesel::update(reconcile_sources::table.find(source))
            .set(reconcile_sources::checked_until.eq(Some(mark.to)))
            .execute(conn)?;
    }
    Ok(())
}

/// Run `id`, if it exists.
pub fn run(conn: &mut DbConnection, id: i64) -> QueryResult<Option<RunRow>> {
    reconcile_runs::table
        .find(id)
        .select(RunRow::as_select())
        .first(conn)
        .optional()
}

/// Which of `ids` `source` has claimed.
pub fn claimed(
    conn: &mut DbConnection,
    source: &str,
    ids: &[&str],
) -> QueryResult<HashSet<String>> {
    let found: Vec<String> = events::table
        .filter(events::source.eq(source))
        .filter(events::event_id.eq_any(ids))
        .select(events::event_id)
        .load(conn)?;
    Ok(found.into_iter().collect())
}

/// The runs that failed since `since`, oldest first.
pub fn failed_since(conn: &mut DbConnection, since: DateTime<Utc>) -> QueryResult<Vec<RunRow>> {
    reconcile_runs::table
        .filter(reconcile_runs::status.eq(FAILED))
        .filter(reconcile_runs::finished_at.ge(since.naive_utc()))
        .order(reconcile_runs::id)
        .limit(100)
        .select(RunRow::as_select())
        .load(conn)
}
