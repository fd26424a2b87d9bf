//! Fault injection for crash-atomicity tests. Without the `fault-injection` feature (every
//! release build) `Faults` is an empty struct whose checkpoints do nothing; with it, a test
//! can make the ingest transaction crash at a named instruction or lose its COMMIT, make a
//! dispatcher abandon a delivery between sending and settling it, hold a reload in its
//! build step, read how many HTTP clients the dispatcher built, and make the audit trail's
//! inserts fail, make a bulk action's runner die mid-batch, and break signature
//! verification on purpose (the timestamp tolerance skipped), for the signature fuzzer to
//! show it catches a wrong verifier.

#[cfg(feature = "fault-injection")]
use std::collections::HashMap;
#[cfg(feature = "fault-injection")]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(feature = "fault-injection")]
use std::sync::{Condvar, Mutex};
#[cfg(feature = "fault-injection")]
use std::time::Duration;

/// The longest a held reload waits for its release: a test that fails before releasing it
/// must not leave the thread behind for good.
#[cfg(feature = "fault-injection")]
const LONGEST_HOLD: Duration = Duration::from_secs(60);

/// How a test loses a transaction's COMMIT: the connection fails after the server
/// committed it, or before the server saw it. Either way the client cannot tell which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostCommit {
    AfterCommit,
    BeforeCommit,
}

/// Crash points armed by tests.
#[derive(Debug, Default)]
pub struct Faults {
    #[cfg(feature = "fault-injection")]
    /// Event id → how the next COMMIT of a group holding it is lost.
    lost_commit: Mutex<HashMap<String, LostCommit>>,
    #[cfg(feature = "fault-injection")]
    /// Event id → how many more ingests of it crash.
    crash_after_fact: Mutex<HashMap<String, usize>>,
    #[cfg(feature = "fault-injection")]
    /// Event id → how many more sends of it the dispatcher "dies" after, before settling.
    crash_after_send: Mutex<HashMap<String, usize>>,
    #[cfg(feature = "fault-injection")]
    group_quorum: AtomicUsize,
    #[cfg(feature = "fault-injection")]
    gathered: AtomicUsize,
    #[cfg(feature = "fault-injection")]
    /// (armed, a reload waiting) and the signal that releases it.
    reload_hold: (Mutex<(bool, bool)>, Condvar),
    #[cfg(feature = "fault-injection")]
    http_clients_built: AtomicUsize,
    #[cfg(feature = "fault-injection")]
    /// Every audit insert fails while set.
    audit_fails: std::sync::atomic::AtomicBool,
    #[cfg(feature = "fault-injection")]
    /// Bulk batches until the one that crashes (0: none armed).
    bulk_crash_in: AtomicUsize,
    #[cfg(feature = "fault-injection")]
    /// Signature checks skip the timestamp tolerance while set.
    time_check_broken: std::sync::atomic::AtomicBool,
}

impl Faults {
    /// Checkpoint in signature verification: whether this instance's check is broken on
    /// purpose, any signed time accepted however far from now (every other check kept).
    #[inline]
    pub(crate) fn time_check_broken(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            self.time_check_broken.load(Ordering::SeqCst)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            false
        }
    }

    /// The timestamp tolerance a signature check applies: `configured`, or, while the
    /// check is broken on purpose, any time at all.
    pub(crate) fn tolerance(&self, configured: std::time::Duration) -> std::time::Duration {
        match self.time_check_broken() {
            true => std::time::Duration::MAX,
            false => configured,
        }
    }

    /// Breaks (or, with `false`, mends) this instance's signature check: a request signed
    /// at any time verifies, as a verifier that forgot its tolerance would. For showing
    /// that the signature fuzzer catches a wrong verifier, never for anything else.
    #[cfg(feature = "fault-injection")]
    pub fn break_time_check(&self, broken: bool) {
        self.time_check_broken.store(broken, Ordering::SeqCst);
    }

    /// Checkpoint in a bulk action's batch, after its effect and before the cursor moves:
    /// whether the runner "dies" here (its batch rolls back; it holds the lease).
    #[inline]
    pub(crate) fn bulk_batch_crashes(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            let armed = self
                .bulk_crash_in
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
            armed == Ok(1)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            false
        }
    }

    /// Makes this instance's bulk runner die in its `batch`-th batch from now (1: the
    /// next), as a process killed mid-batch would: that batch rolls back, the lease stays
    /// held until it expires, and this instance works no bulk action again.
    #[cfg(feature = "fault-injection")]
    pub fn crash_bulk_batch(&self, batch: usize) {
        self.bulk_crash_in.store(batch, Ordering::SeqCst);
    }

    /// Checkpoint before an audit row is written: whether it must fail.
    #[inline]
    pub(crate) fn audit_fails(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        {
            self.audit_fails.load(Ordering::SeqCst)
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            false
        }
    }

    /// Makes every audit insert fail (in the database) until called with `false`.
    #[cfg(feature = "fault-injection")]
    pub fn fail_audit_writes(&self, fail: bool) {
        self.audit_fails.store(fail, Ordering::SeqCst);
    }

    /// Checkpoint in the ingest transaction, after the fact insert and before the commit.
    #[inline]
    pub(crate) fn after_fact(&self, _event_id: &str) {
        #[cfg(feature = "fault-injection")]
        {
            let armed = take_one(&self.crash_after_fact, _event_id);
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
        self.crash_after_fact_times(event_id, 1);
    }

    /// Makes the next `times` ingests of `event_id` crash after its fact insert (0:
    /// none any more).
    #[cfg(feature = "fault-injection")]
    pub fn crash_after_fact_times(&self, event_id: &str, times: usize) {
        let mut crashes = self
            .crash_after_fact
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if times == 0 {
            crashes.remove(event_id);
        } else {
            crashes.insert(event_id.to_owned(), times);
        }
    }

    /// Checkpoint in the dispatcher, after an attempt and before its settlement: `true`
    /// when a test armed a crash here for `_event_id` (the dispatcher then abandons the
    /// row, which stays leased until its lease expires).
    #[inline]
    pub(crate) fn crash_after_send(&self, _event_id: &str) -> bool {
        #[cfg(feature = "fault-injection")]
        return take_one(&self.crash_after_send, _event_id);
        #[cfg(not(feature = "fault-injection"))]
        false
    }

    /// Makes the dispatcher abandon the next `times` sends of `event_id` (one per
    /// destination) after sending, before recording the outcome: a dispatcher killed
    /// between publish and settle.
    #[cfg(feature = "fault-injection")]
    pub fn crash_after_send_of(&self, event_id: &str, times: usize) {
        self.crash_after_send
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(event_id.to_owned(), times);
    }

    /// Tests only: how many webhooks the next group waits for (0: none), so that a test
    /// can put chosen requests into one transaction.
    #[inline]
    pub(crate) fn group_quorum(&self) -> usize {
        #[cfg(feature = "fault-injection")]
        return self.group_quorum.load(Ordering::SeqCst);
        #[cfg(not(feature = "fault-injection"))]
        0
    }

    /// A group of `_members` was taken: a held group is released, later groups form as
    /// usual.
    #[inline]
    pub(crate) fn group_taken(&self, _members: usize) {
        #[cfg(feature = "fault-injection")]
        if self.group_quorum.swap(0, Ordering::SeqCst) > 0 {
            self.gathered.store(_members, Ordering::SeqCst);
        }
    }

    /// Makes the next group wait until `members` webhooks are queued (at most 10 s), so
    /// they commit in one transaction.
    #[cfg(feature = "fault-injection")]
    pub fn gather_next_group(&self, members: usize) {
        self.gathered.store(0, Ordering::SeqCst);
        self.group_quorum.store(members, Ordering::SeqCst);
    }

    /// How many webhooks the group held by [`Faults::gather_next_group`] had when it was
    /// committed (0 until then).
    #[cfg(feature = "fault-injection")]
    pub fn gathered_group(&self) -> usize {
        self.gathered.load(Ordering::SeqCst)
    }
}

impl Faults {
    /// Checkpoint before a group's COMMIT: how a test armed it to be lost, when one of
    /// `_event_ids` is armed (once).
    #[inline]
    pub(crate) fn lost_commit<'a>(
        &self,
        _event_ids: impl IntoIterator<Item = &'a str>,
    ) -> Option<LostCommit> {
        #[cfg(feature = "fault-injection")]
        {
            let mut armed = self
                .lost_commit
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if armed.is_empty() {
                return None;
            }
            _event_ids.into_iter().find_map(|id| armed.remove(id))
        }
        #[cfg(not(feature = "fault-injection"))]
        None
    }

    /// Makes the next COMMIT of a group holding `event_id` lose its connection, `how`.
    #[cfg(feature = "fault-injection")]
    pub fn lose_commit(&self, event_id: &str, how: LostCommit) {
        self.lost_commit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(event_id.to_owned(), how);
    }

    /// Checkpoint in a reload, before it builds its destinations: waits while a test holds
    /// reloads there (at most a minute). Blocks the thread it runs on, as building does.
    #[inline]
    pub(crate) fn reload_builds(&self) {
        #[cfg(feature = "fault-injection")]
        {
            let (hold, released) = &self.reload_hold;
            let mut state = hold.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.0 {
                state.1 = true;
                let (mut state, _) = released
                    .wait_timeout_while(state, LONGEST_HOLD, |state| state.0)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                state.1 = false;
            }
        }
    }

    /// Makes every reload wait before building its destinations until
    /// [`Faults::release_reloads`].
    #[cfg(feature = "fault-injection")]
    pub fn hold_reloads(&self) {
        let mut state = self.reload_hold.0.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = true;
    }

    /// Whether a reload is waiting at the hold.
    #[cfg(feature = "fault-injection")]
    pub fn reload_held(&self) -> bool {
        self.reload_hold
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
    }

    /// Lets held reloads go on, and later ones pass.
    #[cfg(feature = "fault-injection")]
    pub fn release_reloads(&self) {
        let (hold, released) = &self.reload_hold;
        hold.lock().unwrap_or_else(|p| p.into_inner()).0 = false;
        released.notify_all();
    }

    /// The dispatcher built `_count` more HTTP clients.
    #[inline]
    pub(crate) fn http_clients_built(&self, _count: usize) {
        #[cfg(feature = "fault-injection")]
        self.http_clients_built.fetch_add(_count, Ordering::SeqCst);
    }

    /// How many HTTP clients the dispatcher has built so far (its destinations share them).
    #[cfg(feature = "fault-injection")]
    pub fn http_clients(&self) -> usize {
        self.http_clients_built.load(Ordering::SeqCst)
    }
}

/// Takes one armed crash of `key`, if any is left.
#[cfg(feature = "fault-injection")]
fn take_one(armed: &Mutex<HashMap<String, usize>>, key: &str) -> bool {
    let mut armed = armed
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match armed.get_mut(key) {
        Some(left) if *left > 1 => {
            *left -= 1;
            true
        }
        Some(_) => armed.remove(key).is_some(),
        None => false,
    }
}
