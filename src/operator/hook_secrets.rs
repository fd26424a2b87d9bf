//! The operator's side of secrets established by a handshake (Asana's): which sources
//! hold one and since when (never the value), and clearing one so that the source's next
//! handshake — a new webhook's — is taken. A clear is a mutating call like the others:
//! once per Idempotency-Key, written to the audit trail in the same transaction.

use super::calls::{Answered, Encode, Ground, KeyedRequest, Summary, UseCases};
use super::OperatorError;
use crate::hook_secrets;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// `POST /admin/hook-secrets/clear`'s route, as its Idempotency-Key fingerprint covers it.
pub const CLEAR_HOOK_SECRET_ROUTE: &str = "POST /admin/hook-secrets/clear";

/// The body of a clear: the source whose secret goes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearHookSecretRequest {
    pub source: String,
}

/// What a clear did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HookSecretCleared {
    pub source: String,
    /// Whether the source held a secret (a second clear finds none).
    pub cleared: bool,
    /// When the secret cleared had been established.
    pub established_at: Option<DateTime<Utc>>,
}

impl Summary for HookSecretCleared {
    /// E.g. `200: source asana's hook secret cleared`, `200: source asana held none`.
    fn summary(&self, status: u16) -> String {
        match self.cleared {
            true => format!("{status}: source {}'s hook secret cleared", self.source),
            false => format!("{status}: source {} held no hook secret", self.source),
        }
    }
}

/// A source's established secret, as shown: when, never what.
#[derive(Debug, Clone, Serialize)]
pub struct HookSecretView {
    pub source: String,
    pub established_at: DateTime<Utc>,
}

impl<S: Ground> UseCases<S> {
    /// Every source holding a secret established by a handshake, by name.
    pub async fn hook_secrets(&self) -> Result<Vec<HookSecretView>, OperatorError> {
        self.read(|conn, _| {
            let rows = hook_secrets::established(conn)?;
            Ok(rows
                .into_iter()
                .map(|(source, at)| HookSecretView {
                    source,
                    established_at: at.and_utc(),
                })
                .collect())
        })
        .await
    }

    /// Clears `source`'s established secret, once per key. The edge checks first that
    /// the source is one whose secret a handshake establishes.
    pub async fn clear_hook_secret(
        &self,
        keyed: KeyedRequest<'_>,
        source: String,
        encode: Encode<HookSecretCleared, S>,
    ) -> Result<Answered<HookSecretCleared>, OperatorError> {
        let work = move |conn: &mut crate::db::DbConnection, _: &S, _| {
            let established = hook_secrets::clear(conn, &source)?;
            Ok(HookSecretCleared {
                cleared: established.is_some(),
                established_at: established.map(|at| at.and_utc()),
                source,
            })
        };
        self.once(
            (CLEAR_HOOK_SECRET_ROUTE, "clear_hook_secret"),
            keyed,
            work,
            encode,
        )
        .await
    }
}
