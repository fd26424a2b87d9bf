//! Fault injection for crash-atomicity tests. Without the `fault-injection` feature (every
//! release build) `Faults` is an empty struct whose checkpoints do nothing; with it, a test
//! can make the ingest transaction crash at a named instruction.

#[cfg(feature = "fault-injection")]
use std::collections::HashSet;
#[cfg(feature = "fault-injection")]
use std::sync::Mutex;

/// Crash points armed by tests.
#[derive(Debug, Default)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    crash_after_fact: Mutex<HashSet<String>>,
}

impl Faults {
    /// Checkpoint in the ingest transaction, after the fact insert and before the commit.
    #[inline]
    pub(crate) fn after_fact(&self, _event_id: &str) {
        #[cfg(feature = "fault-injection")]
        {
            let armed = self
                .crash_after_fact
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(_event_id);
            if armed {
                // A panic mid-transaction is what a crash looks like from the database:
                // the connection is discarded with the transaction open, never committed.
                panic!("injected crash after the fact insert of event {_event_id}");
            }
        }
    }

    /// Makes the next ingest of `event_id` crash after its fact insert, once.
    #[cfg(feature = "fault-injection")]
    pub fn crash_after_fact(&self, event_id: &str) {
        self.crash_after_fact
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(event_id.to_owned());
    }
}
