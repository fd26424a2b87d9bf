//! Secrets a provider establishes by a handshake rather than an operator configures
//! (Asana's `X-Hook-Secret`): stored in the database (`hook_secrets`), one per source, so
//! that every instance verifies with the one the handshake stored.
//!
//! A handshake is unauthenticated by nature, so it is taken only while its source holds
//! no secret: the row is inserted with `ON CONFLICT DO NOTHING` on the source's primary
//! key — of handshakes racing on any number of instances exactly one is stored — and a
//! later handshake offering another secret changes nothing (the edge refuses it, so the
//! provider's webhook creation fails rather than silently holding a different secret).
//! Only an operator's [`clear`] makes room for a new webhook. Every request reads the row
//! again: no cache can go stale, and a cleared secret stops verifying on every instance
//! at once. The value is never logged, shown or returned outside this module's callers.

use crate::db::schema::hook_secrets;
use crate::db::{
    on_connection, read_committed, write_transaction, DbConnection, DbPool, StoreError,
};
use crate::secret::{secrets_equal, Secret};
use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::prelude::*;

/// What a handshake did to its source's stored secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The source held none: the offered secret is stored now.
    Established,
    /// The source already holds this very secret (a handshake sent again after its answer
    /// was lost): nothing changed.
    Same,
    /// The source holds another secret, established then: nothing changed.
    Held(DateTime<Utc>),
}

/// Stores `offered` as `source`'s secret unless it holds one already (then compares, in
/// constant time).
pub async fn take(
    pool: &DbPool,
    source: &str,
    offered: Secret,
    now: DateTime<Utc>,
) -> Result<Taken, StoreError> {
    let source = source.to_owned();
    on_connection(pool, move |conn| {
        write_transaction(conn, |conn| {
            take_on(conn, &source, &offered, now.naive_utc())
        })
    })
    .await
}

fn take_on(
    conn: &mut DbConnection,
    source: &str,
    offered: &Secret,
    now: NaiveDateTime,
) -> Result<Taken, StoreError> {
    // The loser of a race waits on the winner's row, then reads it: at READ COMMITTED
    // whatever the server's default isolation (at REPEATABLE READ the insert would fail
    // to serialize, and the read not see the row).
    read_committed(conn)?;
    let row = (
        hook_secrets::source.eq(source),
        hook_secrets::secret.eq(offered.expose()),
        hook_secrets::established_at.eq(now),
    );
    let inserted = crate::db::dialect!(conn, c => diesel::insert_into(hook_secrets::table)
        .values(row)
        .on_conflict_do_nothing()
        .execute(c))?;
    if inserted == 1 {
        return Ok(Taken::Established);
    }
    let held: Option<(String, NaiveDateTime)> = hook_secrets::table
        .filter(hook_secrets::source.eq(source))
        .select((hook_secrets::secret, hook_secrets::established_at))
        .first(conn)
        .optional()?;
    Ok(match held {
        Some((held, _)) if secrets_equal(offered.expose().as_bytes(), held.as_bytes()) => {
            Taken::Same
        }
        Some((_, at)) => Taken::Held(at.and_utc()),
        // Cleared between the insert and the read: not this handshake's to take.
        None => Taken::Held(now.and_utc()),
    })
}

/// The secret `source`'s handshake stored, if any.
pub async fn stored(pool: &DbPool, source: &str) -> Result<Option<Secret>, StoreError> {
    let source = source.to_owned();
    on_connection(pool, move |conn| Ok(stored_on(conn, &source)?)).await
}

fn stored_on(conn: &mut DbConnection, source: &str) -> QueryResult<Option<Secret>> {
    let secret: Option<String> = hook_secrets::table
        .filter(hook_secrets::source.eq(source))
        .select(hook_secrets::secret)
        .first(conn)
        .optional()?;
    Ok(secret.map(Secret::new))
}

/// When each source's secret was established, by source name (never the value).
pub fn established(conn: &mut DbConnection) -> QueryResult<Vec<(String, NaiveDateTime)>> {
    hook_secrets::table
        .select((hook_secrets::source, hook_secrets::established_at))
        .order(hook_secrets::source.asc())
        .load(conn)
}

/// Removes `source`'s secret, so that its next handshake is taken; when it held one, when
/// that was established. Runs in the caller's transaction.
pub fn clear(conn: &mut DbConnection, source: &str) -> QueryResult<Option<NaiveDateTime>> {
    let established: Option<NaiveDateTime> = hook_secrets::table
        .filter(hook_secrets::source.eq(source))
        .select(hook_secrets::established_at)
        .first(conn)
        .optional()?;
    diesel::delete(hook_secrets::table.filter(hook_secrets::source.eq(source))).execute(conn)?;
    Ok(established)
}
