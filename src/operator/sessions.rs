//! Console sessions in the database (`console_sessions`), so that every Inlet instance
//! sharing it agrees on which are open: a session is opened at sign-in, closed at
//! sign-out — on every instance at once, a copied cookie included — and its row deleted
//! once it has expired anyway (at the next sign-in or sign-out, on any instance, and by
//! the sweeper), or once its operator is no longer configured (at a reload or a start
//! without them).
//!
//! A row is keyed by the sha256 of the session id the cookie carries, never the id itself:
//! reading the table does not give anyone a session. Signing in and out writes its audit
//! row in the same transaction. The key cookies are signed with is a server secret
//! (`server_secrets`), generated once and shared by every instance.

use super::audit::{self, Entry};
use crate::db::schema::{console_sessions, server_secrets};
use crate::db::{write_transaction, DbConnection};
use crate::faults::Faults;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use sha2::{Digest, Sha256};

/// A session's key in `console_sessions`: the hex sha256 of the id its cookie carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey(String);

impl SessionKey {
    pub fn of(session_id: &str) -> Self {
        Self(hex::encode(Sha256::digest(session_id.as_bytes())))
    }
}

/// Records a session signed in at `now`, open until `expires_at`, with its audit row
/// (`entry`) in the same transaction; sweeps the sessions that have expired.
pub fn open(
    conn: &mut DbConnection,
    key: &SessionKey,
    expires_at: NaiveDateTime,
    (faults, entry): (&Faults, &Entry<'_>),
) -> QueryResult<()> {
    let now = entry.at.naive_utc();
    write_transaction(conn, |conn| {
        sweep_expired(conn, now)?;
        audit::record(conn, faults, entry)?;
        diesel::insert_into(console_sessions::table)
            .values((
                console_sessions::id.eq(&key.0),
                console_sessions::created_at.eq(now),
                console_sessions::expires_at.eq(expires_at),
                console_sessions::operator.eq(&entry.caller.name),
            ))
            .execute(conn)
            .map(drop)
    })
}

/// Whether the session is open at `now`: signed in, not signed out, not expired.
pub fn is_open(conn: &mut DbConnection, key: &SessionKey, now: NaiveDateTime) -> QueryResult<bool> {
    let found = console_sessions::table
        .filter(console_sessions::id.eq(&key.0))
        .filter(console_sessions::revoked_at.is_null())
        .filter(console_sessions::expires_at.gt(now))
        .select(console_sessions::id)
        .first::<String>(conn)
        .optional()?;
    Ok(found.is_some())
}

/// Closes the session (signing out) for every instance, with its audit row (`entry`) in
/// the same transaction; sweeps the sessions that have expired. Whether it was open.
pub fn close(
    conn: &mut DbConnection,
    key: &SessionKey,
    (faults, entry): (&Faults, &Entry<'_>),
) -> QueryResult<bool> {
    let now = entry.at.naive_utc();
    write_transaction(conn, |conn| {
        let closed = diesel::update(
            console_sessions::table
                .filter(console_sessions::id.eq(&key.0))
                .filter(console_sessions::revoked_at.is_null()),
        )
        .set(console_sessions::revoked_at.eq(now))
        .execute(conn)?;
        if closed > 0 {
            // Once per session: a second sign-out (a double click) closes nothing.
            audit::record(conn, faults, entry)?;
        }
        sweep_expired(conn, now)?;
        Ok(closed > 0)
    })
}

/// Deletes the rows of sessions that expired by `now`, signed out or not: their cookies
/// are refused by their own expiry. Rows are added one per sign-in, so each sweep is
/// small.
fn sweep_expired(conn: &mut DbConnection, now: NaiveDateTime) -> QueryResult<usize> {
    diesel::delete(console_sessions::table.filter(console_sessions::expires_at.le(now)))
        .execute(conn)
}

/// Deletes the rows of sessions opened by operators not among `configured` (removed from
/// the configuration: their cookies are refused already, their rows go now). Rows older
/// than the operator column are left to expire.
pub fn end_unconfigured(conn: &mut DbConnection, configured: &[String]) -> QueryResult<usize> {
    write_transaction(conn, |conn| {
        diesel::delete(
            console_sessions::table
                .filter(console_sessions::operator.is_not_null())
                .filter(console_sessions::operator.ne_all(configured)),
        )
        .execute(conn)
    })
}

/// [`end_unconfigured`] for the operators of `accounts` (a start, a reload); blocking,
/// and only logged when it fails.
pub fn end_sessions_of_removed_operators(pool: &crate::db::DbPool, accounts: &[super::Account]) {
    let names: Vec<String> = accounts.iter().map(|a| a.name.clone()).collect();
    let ended = (pool.get().map_err(|e| e.to_string()))
        .and_then(|mut conn| end_unconfigured(&mut conn, &names).map_err(|e| e.to_string()));
    match ended {
        Ok(0) => {}
        Ok(rows) => tracing::info!(
            rows,
            "console sessions of operators no longer configured ended"
        ),
        Err(error) => {
            tracing::warn!(%error, "cannot end the console sessions of removed operators")
        }
    }
}

/// The server secret `name`: the one stored, or else `generated` stored now — the first
/// instance to store one wins, and every instance reads the winner's.
pub fn server_secret(
    conn: &mut DbConnection,
    name: &str,
    generated: &str,
    now: NaiveDateTime,
) -> QueryResult<String> {
    write_transaction(conn, |conn| stored_secret(conn, name, generated, now))
}

fn stored_secret(
    conn: &mut DbConnection,
    name: &str,
    generated: &str,
    now: NaiveDateTime,
) -> QueryResult<String> {
    let row = (
        server_secrets::name.eq(name),
        server_secrets::value.eq(generated),
        server_secrets::created_at.eq(now),
    );
    crate::db::dialect!(conn, c => diesel::insert_into(server_secrets::table)
        .values(row)
        .on_conflict_do_nothing()
        .execute(c))?;
    server_secrets::table
        .filter(server_secrets::name.eq(name))
        .select(server_secrets::value)
        .first(conn)
}
