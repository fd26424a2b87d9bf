//! The `destination_gates` rows: read before each lease round, locked while a round leases
//! for a limited or probing destination, and updated when attempts settle.

use super::{
    allowance, observe, ready_in, spend, Allowance, BreakerState, Gate, GateSettings, Health,
};
use crate::db::schema::{deliveries, destination_gates};
use crate::db::{dialect, write_transaction, DbConnection};
use crate::delivery::outbox::{any_due, due_among, lease_scope, take, Leased, Scope, IN_PROGRESS};
use crate::delivery::shares::Shares;
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// `(source, destination)`.
type Key = (String, String);

/// While every destination has room for this many (or the whole round), a round leases
/// all destinations together, oldest first, in one statement, up to the smallest room:
/// fewer would make rounds of a few rows each.
const LEASED_TOGETHER_AT_LEAST: i64 = 16;

/// Gate rows per insert statement (8 columns each, under SQLite's 32,766 bound
/// parameters).
const GATE_ROWS_PER_INSERT: usize = 1000;

/// A `destination_gates` row.
#[derive(Debug, Clone, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = destination_gates, treat_none_as_null = true, treat_none_as_default_value = false)]
struct GateRow {
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
            source: key.0.clone(),
            destination: key.1.clone(),
            failures: 0,
            open_until: None,
            cooldown_ms: 0,
            opened_at: None,
            tokens: 0.0,
            tokens_at: None,
        }
    }

    fn key(&self) -> Key {
        (self.source.clone(), self.destination.clone())
    }

    fn gate(&self) -> Gate {
        Gate {
            failures: self.failures,
            open_until: self.open_until,
            cooldown_ms: self.cooldown_ms,
            opened_at: self.opened_at,
            tokens: self.tokens,
            tokens_at: self.tokens_at,
        }
    }

    fn with(mut self, gate: Gate) -> Self {
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
fn gate_in(rows: &HashMap<Key, GateRow>, key: &Key) -> Gate {
    rows.get(key).map_or_else(Gate::default, GateRow::gate)
}

/// Every gate row, inserting those of `keys` that are missing.
fn load_all(conn: &mut DbConnection, keys: &[&Key]) -> QueryResult<HashMap<Key, GateRow>> {
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

fn read_all(conn: &mut DbConnection) -> QueryResult<HashMap<Key, GateRow>> {
    let rows: Vec<GateRow> = destination_gates::table
        .select(GateRow::as_select())
        .load(conn)?;
    Ok(rows.into_iter().map(|row| (row.key(), row)).collect())
}

/// The rows of `keys`, locked until the transaction ends (PostgreSQL `FOR UPDATE`; SQLite
/// holds its write lock already). Always in key order, whoever locks: two transactions
/// locking the same rows wait for each other instead of deadlocking.
fn lock(conn: &mut DbConnection, keys: &[&Key]) -> QueryResult<HashMap<Key, GateRow>> {
    let mut ordered = keys.to_vec();
    ordered.sort();
    ordered.dedup();
    let mut rows = HashMap::new();
    for (source, destination) in ordered {
        let query = || destination_gates::table.find((source.as_str(), destination.as_str()));
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

fn save(conn: &mut DbConnection, row: &GateRow) -> QueryResult<()> {
    diesel::update(destination_gates::table.find((row.source.as_str(), row.destination.as_str())))
        .set(row)
        .execute(conn)?;
    Ok(())
}

/// What one lease round took and saw.
#[derive(Debug, Default)]
pub struct Round {
    pub leased: Vec<Leased>,
    /// Each gated destination's breaker as the round found it.
    pub breakers: Vec<(Key, BreakerState)>,
    /// Destinations whose breaker was closed with no failure counted: an answer from
    /// them changes nothing, so it need not be recorded.
    pub calm: HashSet<Key>,
    /// Destinations whose probe this round leased.
    pub probes: Vec<Key>,
    /// Limited destinations' deliveries in flight across every instance.
    pub in_flight: Vec<(Key, i64)>,
    /// When a held destination may let something through again (the earliest).
    pub ready_in: Option<Duration>,
}

/// A destination and its gate settings, as the dispatcher has them.
pub type Gated = (Key, GateSettings);

/// Leases up to `limit` due deliveries at `now` until `now + lease`, as the destinations'
/// gates and this dispatcher's `shares` of its slots allow: nothing of an open breaker's
/// destination, one probe at a time of a half-open one, no more than a limited
/// destination's `max_in_flight` and bucket, and no more than a destination's room in
/// `shares`.
///
/// While nothing is held back and every destination has room for a good part of the
/// round (at least [`LEASED_TOGETHER_AT_LEAST`] rows, or all of it), every destination is
/// leased together, oldest first, as if there were no gates, up to the smallest room.
/// Otherwise the destinations that may send and have something due (found in one
/// statement per 500) are each leased on their own range of the `(source, destination,
/// status, next_attempt_at)` index — so a held backlog is never read — up to its room,
/// taking turns at the head of the round (`turn`), and a limited one in a transaction of
/// its own that locks its gate row: a statement per destination with work, not per
/// destination configured.
pub fn lease_round(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    lease: Duration,
    limit: i64,
    gated: &[Gated],
    turn: usize,
    shares: &Shares,
) -> QueryResult<Round> {
    let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
    let mut round = Round::default();
    let (held, limited) = classify(conn, now, gated, &mut round)?;
    let mut shares = shares.clone().without_held(&held);
    let together = match shares.common_room().map(i64::from) {
        None => limit,
        Some(room) if room >= limit.min(LEASED_TOGETHER_AT_LEAST) => room.min(limit),
        Some(_) => 0,
    };
    if held.is_empty() && limited.is_empty() && together > 0 {
        round.leased = lease_scope(conn, now, until, &Scope::All, together)?;
        return Ok(round);
    }
    let mut left = limit;
    for gate_of in turn_order(conn, now, gated, &held, turn)? {
        if left <= 0 {
            break;
        }
        let key = &gate_of.0;
        let allowed = shares
            .room(key)
            .map_or(left, |room| left.min(i64::from(room)));
        if allowed <= 0 {
            continue;
        }
        let leased = match limited.contains(key) {
            true => lease_limited(conn, (now, until), gate_of, allowed, &mut round)?,
            false => {
                let scope = Scope::One(key.0.clone(), key.1.clone());
                lease_scope(conn, now, until, &scope, allowed)?
            }
        };
        left -= i64::try_from(leased.len()).unwrap_or(left);
        shares.took(key, leased.len());
        round.leased.extend(leased);
    }
    Ok(round)
}

/// The destinations not `held` that have something due, in this round's order: every
/// open destination's, by key, rotated by `turn` — so who goes first does not depend on
/// which of them happen to be due.
fn turn_order<'g>(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    gated: &'g [Gated],
    held: &HashSet<Key>,
    turn: usize,
) -> QueryResult<Vec<&'g Gated>> {
    let mut order: Vec<&Gated> = gated
        .iter()
        .filter(|(key, _)| !held.contains(key))
        .collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    if !order.is_empty() {
        let start = turn % order.len();
        order.rotate_left(start);
    }
    let open: Vec<&Key> = order.iter().map(|(key, _)| key).collect();
    let due = due_among(conn, now.naive_utc(), &open)?;
    order.retain(|(key, _)| due.contains(key));
    Ok(order)
}

/// Reads the gates (unlocked) and sorts the destinations: those an open breaker holds,
/// and those leased within an allowance (limits, or a half-open breaker's probe).
fn classify(
    conn: &mut DbConnection,
    now: DateTime<Utc>,
    gated: &[Gated],
    round: &mut Round,
) -> QueryResult<(HashSet<Key>, HashSet<Key>)> {
    let gates: Vec<&Gated> = gated.iter().filter(|(_, s)| s.any()).collect();
    let (mut held, mut limited) = (HashSet::new(), HashSet::new());
    if gates.is_empty() {
        return Ok((held, limited));
    }
    let keys: Vec<&Key> = gates.iter().map(|(key, _)| key).collect();
    let rows = load_all(conn, &keys)?;
    for (key, settings) in gates {
        let gate = gate_in(&rows, key);
        let breaker = settings.breaker_of(&gate, now);
        round.breakers.push((key.clone(), breaker));
        if gate.failures == 0 && gate.open_until.is_none() {
            round.calm.insert(key.clone());
        }
        round.ready_in = earliest(round.ready_in, ready_in(&gate, settings, now));
        match breaker {
            BreakerState::Open => held.insert(key.clone()),
            BreakerState::HalfOpen => limited.insert(key.clone()),
            BreakerState::Closed if settings.limits() => limited.insert(key.clone()),
            BreakerState::Closed => false,
        };
        if settings.max_in_flight.is_some() {
            let flying = in_flight_of(conn, key, now.naive_utc())?;
            round.in_flight.push((key.clone(), flying));
        }
    }
    Ok((held, limited))
}

/// Leases up to `left` of one limited destination's due rows, in a transaction that
/// locks its gate row while it counts what is in flight, takes its allowance and spends
/// its bucket. Nothing due: no transaction, no lock.
fn lease_limited(
    conn: &mut DbConnection,
    (now, until): (DateTime<Utc>, DateTime<Utc>),
    (key, settings): &Gated,
    left: i64,
    round: &mut Round,
) -> QueryResult<Vec<Leased>> {
    let scope = Scope::One(key.0.clone(), key.1.clone());
    let span = (now.naive_utc(), until.naive_utc());
    if !any_due(conn, span.0, &scope)? {
        return Ok(Vec::new());
    }
    write_transaction(conn, |conn| {
        read_committed(conn)?;
        let Some(row) = lock(conn, &[key])?.remove(key) else {
            return Ok(Vec::new());
        };
        let gate = row.gate();
        let flying = in_flight_of(conn, key, span.0)?;
        let n = match allowance(&gate, settings, flying, now) {
            Allowance::Any => left,
            Allowance::UpTo(n) => i64::from(n).min(left),
        };
        let leased = take(conn, span, &scope, n)?;
        if leased.is_empty() {
            return Ok(leased);
        }
        if settings.breaker_of(&gate, now) == BreakerState::HalfOpen {
            round.probes.push(key.clone());
        }
        if let Some(rate) = &settings.rate {
            let mut spent = gate;
            spend(&mut spent, rate, leased.len(), now);
            save(conn, &row.with(spent))?;
        }
        Ok(leased)
    })
}

/// PostgreSQL: the gates count on each statement seeing what committed before it (the
/// in-flight count after waiting for a gate's lock), whatever the server's default
/// isolation. Must be a transaction's first statement.
pub(in crate::delivery) fn read_committed(conn: &mut DbConnection) -> QueryResult<()> {
    if let DbConnection::Postgres(c) = conn {
        diesel::sql_query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(c)?;
    }
    Ok(())
}

/// One destination's deliveries leased and not yet settled, across every instance.
fn in_flight_of(
    conn: &mut DbConnection,
    (source, destination): &Key,
    now: NaiveDateTime,
) -> QueryResult<i64> {
    deliveries::table
        .filter(deliveries::source.eq(source))
        .filter(deliveries::destination.eq(destination))
        .filter(deliveries::status.eq(IN_PROGRESS))
        .filter(deliveries::locked_until.gt(now))
        .count()
        .get_result(conn)
}

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Finished attempts for one destination's breaker, in the order they finished.
#[derive(Debug, Clone)]
pub struct Observed {
    pub key: Key,
    pub settings: super::BreakerSettings,
    pub healths: Vec<Health>,
}

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

/// A destination's gate as the admin API and the console show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateView {
    pub source: String,
    pub destination: String,
    pub breaker: &'static str,
    pub consecutive_failures: i32,
    pub open_until: Option<DateTime<Utc>>,
    pub opened_at: Option<DateTime<Utc>>,
    pub cooldown_ms: i64,
    pub in_flight: i64,
    pub max_in_flight: Option<u32>,
    pub rate: Option<f64>,
    pub rate_burst: Option<u32>,
}

/// The gates of `gated` at `now` (a destination never leased for shows a fresh gate).
pub fn gate_views(
    conn: &mut DbConnection,
    gated: &[Gated],
    now: DateTime<Utc>,
) -> QueryResult<Vec<GateView>> {
    let rows = read_all(conn)?;
    let mut views = Vec::with_capacity(gated.len());
    for (key, settings) in gated {
        let gate = gate_in(&rows, key);
        let breaker = settings.breaker_of(&gate, now);
        let in_flight = in_flight_of(conn, key, now.naive_utc())?;
        views.push(GateView {
            source: key.0.clone(),
            destination: key.1.clone(),
            breaker: breaker.as_str(),
            consecutive_failures: gate.failures,
            open_until: gate.open_until.map(|t| t.and_utc()),
            opened_at: gate.opened_at.map(|t| t.and_utc()),
            cooldown_ms: gate.cooldown_ms,
            in_flight,
            max_in_flight: settings.max_in_flight,
            rate: settings.rate.map(|r| r.per_second),
            rate_burst: settings.rate.map(|r| r.burst),
        });
    }
    Ok(views)
}
