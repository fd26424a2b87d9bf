//! What the intake tells an operator while it receives webhooks: a copy refused for its
//! body, a secret a handshake established or could not. The intake says what happened;
//! whoever watches (the notices, when `[notices]` is configured) decides whether and how it
//! is told — the intake knows nothing of how notices are written.

use super::Mismatch;
use crate::signature::Headers;
use chrono::{DateTime, Utc};

/// Something the intake saw that an operator is told of.
#[derive(Debug, Clone, Copy)]
pub enum Told<'a> {
    /// A copy of `source`'s event arrived with another body (answered 422); `headers` are
    /// the copy's, so that a notice's own delivery is never told of again.
    FingerprintMismatch {
        source: &'a str,
        mismatch: &'a Mismatch,
        headers: &'a dyn Headers,
    },
    /// A handshake stored `source`'s secret `at`.
    HookSecretEstablished { source: &'a str, at: DateTime<Utc> },
    /// A handshake offered `source` another secret than the one it holds since
    /// `held_since`: refused `at`, nothing changed.
    HookSecretRefused {
        source: &'a str,
        held_since: DateTime<Utc>,
        at: DateTime<Utc>,
    },
}

/// Who is told what the intake saw, before the webhook is answered.
#[async_trait::async_trait]
pub trait IntakeWatcher: Send + Sync {
    async fn tell(&self, told: Told<'_>);
}
