//! Each destination's gate as the operator API and the console show it: its breaker,
//! limits and the deliveries in flight across every instance.

use super::gates::{gate_in, read_all, Gated};
use super::outbox::in_flight_of;
use crate::db::DbConnection;
use chrono::{DateTime, Utc};
use diesel::QueryResult;

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
            source: key.source().to_owned(),
            destination: key.name().to_owned(),
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
