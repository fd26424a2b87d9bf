//! The `destination_gates` rows: read before each lease round (`delivery::lease`), locked
//! while a round leases for a limited or probing destination, and updated when attempts
//! settle.

use super::{observe, Gate, GateSettings, Health, Observed};
use crate::db::schema::destination_gates;
use crate::db::{dialect, DbConnection};
use crate::delivery::DestinationKey;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use std::collections::HashMap;

/// A gate row's destination.
pub(in crate::delivery) type Key = DestinationKey;

/// A destination and its gate settings, as the dispatcher has them.
pub type Gated = (Key, GateSettings);

/// Gate rows per insert statement (8 columns each, under SQLite's 32,766 bound
/// parameters).
const GATE_ROWS_PER_INSERT: usize = 1000;

/// A `destination_gates` row.
#[derive(Debug, Clone, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = destination_gates, treat_none_as_null = true, treat_none_as_default_value = false)]
pub(in crate::delivery) struct GateRow {
    source: String,
    destination: String,
    failures: i32,
    open_until: Option<NaiveDateTime>,
    cooldown_ms: i64,
    opened_at: Option<NaiveDateTime>,
    tokens: f64,
    tokens_at: Option<NaiveDateTime>,
}

impl GateRow {
    fn fresh(key: &Key) -> Self {
        Self {
            source: key.source().to_owned(),
            destination: key.name().to_owned(),
            failures: 0,
            open_until: None,
            cooldown_ms: 0,
            opened_at: None,
            tokens: 0.0,
            tokens_at: None,
        }
    }

    fn key(&self) -> Key {
        DestinationKey::stored(self.source.clone(), self.destination.clone())
    }

    pub(in crate::delivery) fn gate(&self) -> Gate {
        Gate {
            failures: self.failures,
            open_until: self.open_until,
            cooldown_ms: self.cooldown_ms,
            opened_at: self.opened_at,
            tokens: self.tokens,
            tokens_at: self.tokens_at,
        }
    }

    pub(in crate::delivery) fn with(mut self, gate: Gate) -> Self {
        self.failures = gate.failures;
        self.open_until = gate.open_until;
        self.cooldown_ms = gate.cooldown_ms;
        self.opened_at = gate.opened_at;
        self.tokens = gate.tokens;
        self.tokens_at = gate.tokens_at;
        self
    }
}

/// `key`'s gate in `rows`, or a fresh one when it has no row yet.
pub(in crate::delivery) fn gate_in(rows: &HashMap<Key, GateRow>, key: &Key) -> Gate {
    rows.get(key).map_or_else(Gate::default, GateRow::gate)
}

/// Every gate row, inserting those of `keys` that are missing.
pub(in crate::delivery) fn load_all(
    conn: &mut DbConnection,
    keys: &[&Key],
) -> QueryResult<HashMap<Key, GateRow>> {
    let mut rows = read_all(conn)?;
    // In key order, like every lock on these rows: two instances inserting the same rows
    // wait for each other instead of deadlocking.
    let mut missing: Vec<GateRow> = keys
        .iter()
        .filter(|key| !rows.contains_key(**key))
        .map(|key| GateRow::fresh(key))
        .collect();
    missing.sort_by_key(GateRow::key);
    missing.dedup_by_key(|row| row.key());
    if !missing.is_empty() {
        // Another instance may insert the same rows at the same moment. Many rows at a
        // time: a first start with thousands of destinations inserts them all.
        for chunk in missing.chunks(GATE_ROWS_PER_INSERT) {
            dialect!(conn, c => diesel::insert_into(destination_gates::table)
                .values(chunk)
                .on_conflict_do_nothing()
                .execute(c))?;
        }
        rows = read_all(conn)?;
    }
    Ok(rows)
}

pub(in crate::delivery) fn read_all(conn: &mut DbConnection) -> QueryResult<HashMap<Key, GateRow>> {
    let rows: Vec<GateRow> = destination_gates::table
        .select(GateRow::as_select())
        .load(conn)?;
    Ok(rows.into_iter().map(|row| (row.key(), row)).collect())
}

/// The rows of `keys`, locked until the transaction ends (PostgreSQL `FOR UPDATE`; SQLite
/// holds its write lock already). Always in key order, whoever locks: two transactions
/// locking the same rows wait for each other instead of deadlocking.
pub(in crate::delivery) fn lock(
    conn: &mut DbConnection,
    keys: &[&Key],
) -> QueryResult<HashMap<Key, GateRow>> {
    let mut ordered = keys.to_vec();
    ordered.sort();
    ordered.dedup();
    let mut rows = HashMap::new();
    for key in ordered {
        let query = || destination_gates::table.find((key.source(), key.name()));
        let row: Option<GateRow> = match conn {
            DbConnection::Postgres(c) => query()
                .select(GateRow::as_select())
                .for_update()
                .first(c)
                .optional()?,
            DbConnection::Sqlite(c) => query().select(GateRow::as_select()).first(c).optional()?,
        };
        if let Some(row) = row {
            rows.insert(row.key(), row);
        }
    }
    Ok(rows)
}

pub(in crate::delivery) fn save(conn: &mut DbConnection, row: &GateRow) -> QueryResult<()> {
    diesel::update(destination_gates::table.find((row.source.as_str(), row.destination.as_str())))
        .set(row)
        .execute(conn)?;
    Ok(())
}

/// The gates count on each statement seeing what committed before it (the in-flight
/// count after waiting for a gate's lock), whatever the server's default isolation.
pub(in crate::delivery) use crate::db::read_committed;

/// Applies finished attempts to their breakers, inside the settling transaction. A
/// healthy destination whose breaker is closed is not written; any other is locked,
/// decided and written. The transitions made, by destination.
pub(in crate::delivery) fn record_observations(
    conn: &mut DbConnection,
    observed: &[Observed],
    now: DateTime<Utc>,
) -> QueryResult<Vec<super::BreakerChange>> {
    if observed.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&Key> = observed.iter().map(|o| &o.key).collect();
    let current = load_all(conn, &keys)?;
    let stirred: Vec<&Observed> = observed
        .iter()
        .filter(|o| {
            !current.get(&o.key).is_some_and(|row| {
                row.failures == 0
                    && row.open_until.is_none()
                    && o.healths.iter().all(|h| *h == Health::Answered)
            })
        })
        .collect();
    if stirred.is_empty() {
        return Ok(Vec::new());
    }
    let mut locked = lock(conn, &stirred.iter().map(|o| &o.key).collect::<Vec<_>>())?;
    let mut transitions = Vec::new();
    for o in stirred {
        let Some(row) = locked.remove(&o.key) else {
            continue;
        };
        let mut gate = row.gate();
        for transition in observe(&mut gate, &o.healths, &o.settings, now) {
            transitions.push((o.key.clone(), transition));
        }
        save(conn, &row.with(gate))?;
    }
    Ok(transitions)
}
