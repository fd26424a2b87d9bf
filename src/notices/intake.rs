//! The notices as the intake's watcher: what it saw while receiving webhooks (a copy
//! refused for its body, a secret a handshake established or could not) written as
//! notices, before the webhook is answered, once per occurrence.

use super::{is_notice_delivery, Notice, Notices};
use crate::db::DbPool;
use crate::ingest::{IntakeWatcher, Told};

/// The notices, writing on `pool`'s connections.
pub struct IntakeNotices<'a> {
    pub notices: &'a Notices,
    pub pool: &'a DbPool,
}

#[async_trait::async_trait]
impl IntakeWatcher for IntakeNotices<'_> {
    async fn tell(&self, told: Told<'_>) {
        let notice = match told {
            // A notice sent back to Inlet is never told of: notices never loop.
            Told::FingerprintMismatch { headers, .. } if is_notice_delivery(headers.all()) => {
                return;
            }
            Told::FingerprintMismatch {
                source, mismatch, ..
            } => Notice::fingerprint_mismatch(
                source,
                &mismatch.event_id,
                &mismatch.stored,
                &mismatch.received,
                self.notices.now(),
            ),
            Told::HookSecretEstablished { source, at } => {
                Notice::hook_secret_established(source, at)
            }
            Told::HookSecretRefused {
                source,
                held_since,
                at,
            } => Notice::hook_secret_refused(source, held_since, at),
        };
        self.notices.send_from(self.pool, vec![notice]).await;
    }
}
