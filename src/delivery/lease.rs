//! A lease round: the due deliveries this dispatcher takes now, as the destinations'
//! gates (`gates`) and its shares of the slots allow, leased from the outbox (`outbox`).
//! Above both: the gates know nothing of leasing, the outbox nothing of gates.

use super::gates::{
    allowance, gate_in, load_all, lock, read_committed, ready_in, save, spend, Allowance,
    BreakerState, Gated, Key,
};
use super::outbox::{any_due, due_among, in_flight_of, lease_scope, take, Leased, Scope};
use super::shares::Shares;
use crate::db::{write_transaction, DbConnection};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use std::collections::HashSet;
use std::time::Duration;

/// While every destination has room for this many (or the whole round), a round leases
/// all destinations together, oldest first, in one statement, up to the smallest room:
/// fewer would make rounds of a few rows each.
const LEASED_TOGETHER_AT_LEAST: i64 = 16;

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
                let scope = Scope::One(key.clone());
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
    let scope = Scope::One(key.clone());
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

fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
