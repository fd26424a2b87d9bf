//! The claim-or-stored-answer protocol, one copy for every idempotent call: a webhook
//! (keyed on the provider's event id, in `events`) and a mutating operator call (keyed on
//! its `Idempotency-Key`, in `operator_requests`).
//!
//! Inside the caller's transaction the key is claimed with `INSERT … ON CONFLICT DO
//! NOTHING RETURNING`. The winner runs its work and stores the answer on the claimed row in
//! the same transaction; everyone else gets the stored answer when their fingerprint is the
//! one stored, or a mismatch ([`copy_of`]). A concurrent claim of the same key waits on the
//! unique index (PostgreSQL) or the write lock (SQLite), then sees the committed answer.
//!
//! [`once`] runs the protocol for one call (operator calls). Webhooks run it for a whole
//! group of claims in one transaction (`ingest::group`): the same steps as set-based
//! statements, with [`leaders`] deciding which copy of a key inside the group claims it
//! and [`copy_of`] answering every other copy.

mod operator_keys;

pub use operator_keys::{
    content_type_of, delete_expired as delete_expired_operator_keys, OperatorKey,
};

use crate::db::DbConnection;
use diesel::QueryResult;

/// The response header that marks a stored answer given to a copy of a call.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// An answer given once and replayed byte for byte to every copy of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// What holds a key: a claimed call's fingerprint and, once it completed, its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCall {
    pub fingerprint: String,
    pub answer: Option<Answer>,
}

/// Where one kind of key lives.
pub trait KeyStore {
    /// What this call's request is (sha256 of it): a copy with another is a mismatch.
    fn fingerprint(&self) -> &str;
    /// Claims the key: `Some(row id)` when this call owns it, `None` when it was claimed
    /// before (a concurrent, uncommitted claim has been waited for).
    fn claim(&self, conn: &mut DbConnection) -> QueryResult<Option<i64>>;
    /// The call that holds the key.
    fn stored(&self, conn: &mut DbConnection) -> QueryResult<StoredCall>;
    /// Stores the answer on the claimed row.
    fn store(&self, conn: &mut DbConnection, row: i64, answer: &Answer) -> QueryResult<()>;
}

/// How an idempotent call ended.
#[derive(Debug)]
pub enum Once<T> {
    /// This call won the key: its work ran and its answer is stored.
    Ran(T, Answer),
    /// An earlier call with the same fingerprint completed: its answer.
    Stored(Answer),
    /// The key was used for a different request (another fingerprint): nothing ran.
    Mismatch { stored_fingerprint: String },
    /// The key's row has no answer, which the single transaction never leaves behind.
    Unanswered,
}

/// Claims `store`'s key in the caller's transaction; the winner runs `work` and stores its
/// answer, everyone else gets the stored call's answer or a mismatch.
pub fn once<T, E: From<diesel::result::Error>>(
    conn: &mut DbConnection,
    store: &impl KeyStore,
    work: impl FnOnce(&mut DbConnection) -> Result<(T, Answer), E>,
) -> Result<Once<T>, E> {
    if let Some(row) = store.claim(conn)? {
        let (value, answer) = work(conn)?;
        store.store(conn, row, &answer)?;
        return Ok(Once::Ran(value, answer));
    }
    Ok(copy_of(store.stored(conn)?, store.fingerprint()))
}

/// What a copy of a call gets from the call that holds its key: the stored answer when
/// its fingerprint is the stored one, a mismatch otherwise.
pub fn copy_of<T>(stored: StoredCall, fingerprint: &str) -> Once<T> {
    if stored.fingerprint != fingerprint {
        return Once::Mismatch {
            stored_fingerprint: stored.fingerprint,
        };
    }
    stored.answer.map_or(Once::Unanswered, Once::Stored)
}

/// For each call of a group, in order, the index of the earlier call with the same key
/// (`None` for the first call of each key: the one that claims it).
pub fn leaders<K: Eq + std::hash::Hash>(keys: impl IntoIterator<Item = K>) -> Vec<Option<usize>> {
    let mut first = std::collections::HashMap::new();
    keys.into_iter()
        .enumerate()
        .map(|(index, key)| match first.entry(key) {
            std::collections::hash_map::Entry::Occupied(leader) => Some(*leader.get()),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(index);
                None
            }
        })
        .collect()
}
