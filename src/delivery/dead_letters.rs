//! Dead letters as an observer reads them: the rows a settlement just dead-lettered, and
//! how many are dead now, in all or of one destination over a span of time (for
//! operational notices).

use super::keys::DestinationKey;
use super::outbox::DEAD;
use crate::db::schema::deliveries;
use crate::db::DbConnection;
use chrono::{DateTime, Utc};
use diesel::prelude::*;

/// A dead-lettered delivery: which event, which destination, and why it gave up.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = deliveries)]
pub struct DeadLetter {
    pub id: i64,
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub destination: String,
    /// The lease of the attempt that gave up: a row requeued and dead again has a higher one.
    pub attempt: i32,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

impl DeadLetter {
    /// Its destination's key.
    pub fn destination_key(&self) -> DestinationKey {
        DestinationKey::stored(self.source.clone(), self.destination.clone())
    }

    /// The dead rows among `ids`, by id.
    pub fn find_all(conn: &mut DbConnection, ids: &[i64]) -> QueryResult<Vec<Self>> {
        deliveries::table
            .filter(deliveries::id.eq_any(ids))
            .filter(deliveries::status.eq(DEAD))
            .order(deliveries::id)
            .select(Self::as_select())
            .load(conn)
    }
}

/// The deliveries to the destination of `key` dead-lettered (settled) at or after `from` and,
/// with `until`, before it.
pub fn count_dead_between(
    conn: &mut DbConnection,
    key: &DestinationKey,
    from: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> QueryResult<i64> {
    let mut query = deliveries::table
        .filter(deliveries::source.eq(key.source()))
        .filter(deliveries::destination.eq(key.name()))
        .filter(deliveries::status.eq(DEAD))
        .filter(deliveries::settled_at.ge(from.naive_utc()))
        .into_boxed();
    if let Some(until) = until {
        query = query.filter(deliveries::settled_at.lt(until.naive_utc()));
    }
    query.count().get_result(conn)
}

/// The dead letter of the destination of `key` settled last, if any is dead.
pub fn latest_dead(
    conn: &mut DbConnection,
    key: &DestinationKey,
) -> QueryResult<Option<DeadLetter>> {
    deliveries::table
        .filter(deliveries::source.eq(key.source()))
        .filter(deliveries::destination.eq(key.name()))
        .filter(deliveries::status.eq(DEAD))
        .order((deliveries::settled_at.desc(), deliveries::id.desc()))
        .select(DeadLetter::as_select())
        .first(conn)
        .optional()
}

/// Dead deliveries of every source but `excluded`.
pub fn count_dead_except(conn: &mut DbConnection, excluded: &str) -> QueryResult<i64> {
    deliveries::table
        .filter(deliveries::status.eq(DEAD))
        .filter(deliveries::source.ne(excluded))
        .count()
        .get_result(conn)
}

/// The id of the dead delivery that comes `after` others (0-based, oldest first) among
/// every source's but `excluded`'s: while the dead letters stay over `after`, the same
/// row, whoever asks — so it names one crossing of a threshold.
pub fn nth_dead_except(
    conn: &mut DbConnection,
    excluded: &str,
    after: i64,
) -> QueryResult<Option<i64>> {
    deliveries::table
        .filter(deliveries::status.eq(DEAD))
        .filter(deliveries::source.ne(excluded))
        .order(deliveries::id)
        .offset(after)
        .select(deliveries::id)
        .first(conn)
        .optional()
}
