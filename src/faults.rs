//! Fault injection for crash-atomicity tests. Every build has it, so the tests and an
//! ordinary build share their compiled artifacts; nothing but the library's API arms it
//! (no setting, variable or request can), so `inlet` itself never does, and each
//! checkpoint of an unarmed instance reads one flag and goes on. Armed, a test can make
//! the ingest transaction crash at a named instruction or lose its COMMIT, make a
//! dispatcher abandon a delivery between sending and settling it, hold a reload in its
//! build step, read how many HTTP clients the dispatcher built, and make the audit trail's
//! inserts fail, make a bulk action's runner die mid-batch, and break signature
//! verification on purpose (the timestamp tolerance skipped), for the signature fuzzer to
//! show it catches a wrong verifier.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The longest a held reload waits for its release: a test that fails before releasing it
/// must not leave the thread behind for good.
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
    /// Set by every arming call: an unarmed instance's checkpoints read this alone.
    armed: AtomicBool,
    /// Event id → how the next COMMIT of a group holding it is lost.
    lost_commit: Mutex<HashMap<String, LostCommit>>,
    /// Event id → how many more ingests of it crash.
    crash_after_fact: Mutex<HashMap<String, usize>>,
    /// Event id → how many more sends of it the dispatcher "dies" after, before settling.
    crash_after_send: Mutex<HashMap<String, usize>>,
    group_quorum: AtomicUsize,
    gathered: AtomicUsize,
    /// (armed, a reload waiting) and the signal that releases it.
    reload_hold: (Mutex<(bool, bool)>, Condvar),
    http_clients_built: AtomicUsize,
    /// Every audit insert fails while set.
    audit_fails: AtomicBool,
    /// Bulk batches until the one that crashes (0: none armed).
    bulk_crash_in: AtomicUsize,
    /// Signature checks skip the timestamp tolerance while set.
    time_check_broken: AtomicBool,
}

impl Faults {
    /// Whether a test armed anything on this instance.
    #[inline]
    fn armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// Marks this instance armed (every arming call does).
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Checkpoint in signature verification: whether this instance's check is broken on
    /// purpose, any signed time accepted however far from now (every other check kept).
    #[inline]
    pub(crate) fn time_check_broken(&self) -> bool {
        self.armed() && self.time_check_broken.load(Ordering::SeqCst)
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
    pub fn break_time_check(&self, broken: bool) {
        self.arm();
        self.time_check_broken.store(broken, Ordering::SeqCst);
    }

    /// Checkpoint in a bulk action's batch, after its effect and before the cursor moves:
    /// whether the runner "dies" here (its batch rolls back; it holds the lease).
    #[inline]
    pub(crate) fn bulk_batch_crashes(&self) -> bool {
        if !self.armed() {
            return false;
        }
        let armed = (self.bulk_crash_in)
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        armed == Ok(1)
    }

    /// Makes this instance's bulk runner die in its `batch`-th batch from now (1: the
    /// next), as a process killed mid-batch would: that batch rolls back, the lease stays
    /// held until it expires, and this instance works no bulk action again.
    pub fn crash_bulk_batch(&self, batch: usize) {
        self.arm();
        self.bulk_crash_in.store(batch, Ordering::SeqCst);
    }

    /// Checkpoint before an audit row is written: whether it must fail.
    #[inline]
    pub(crate) fn audit_fails(&self) -> bool {
        self.armed() && self.audit_fails.load(Ordering::SeqCst)
    }

    /// Makes every audit insert fail (in the database) until called with `false`.
    pub fn fail_audit_writes(&self, fail: bool) {
        self.arm();
        self.audit_fails.store(fail, Ordering::SeqCst);
    }

    /// Checkpoint in the ingest transaction, after the fact insert and before the commit.
    #[inline]
    pub(crate) fn after_fact(&self, event_id: &str) {
        if self.armed() && take_one(&self.crash_after_fact, event_id) {
            // A panic mid-transaction is what a crash looks like from the database: the
            // connection is discarded with the transaction open, never committed.
            panic!("injected crash after the fact insert of event {event_id}");
        }
    }

    /// Makes the next ingest of `event_id` crash after its fact insert, once.
    pub fn crash_after_fact(&self, event_id: &str) {
        self.crash_after_fact_times(event_id, 1);
    }

    /// Makes the next `times` ingests of `event_id` crash after its fact insert (0:
    /// none any more).
    pub fn crash_after_fact_times(&self, event_id: &str, times: usize) {
        self.arm();
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
    pub(crate) fn crash_after_send(&self, event_id: &str) -> bool {
        self.armed() && take_one(&self.crash_after_send, event_id)
    }

    /// Makes the dispatcher abandon the next `times` sends of `event_id` (one per
    /// destination) after sending, before recording the outcome: a dispatcher killed
    /// between publish and settle.
    pub fn crash_after_send_of(&self, event_id: &str, times: usize) {
        self.arm();
        self.crash_after_send
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(event_id.to_owned(), times);
    }

    /// Tests only: how many webhooks the next group waits for (0: none), so that a test
    /// can put chosen requests into one transaction.
    #[inline]
    pub(crate) fn group_quorum(&self) -> usize {
        match self.armed() {
            true => self.group_quorum.load(Ordering::SeqCst),
            false => 0,
        }
    }

    /// A group of `_members` was taken: a held group is released, later groups form as
    /// usual.
    #[inline]
    pub(crate) fn group_taken(&self, members: usize) {
        if self.armed() && self.group_quorum.swap(0, Ordering::SeqCst) > 0 {
            self.gathered.store(members, Ordering::SeqCst);
        }
    }

    /// Makes the next group wait until `members` webhooks are queued (at most 10 s), so
    /// they commit in one transaction.
    pub fn gather_next_group(&self, members: usize) {
        self.arm();
        self.gathered.store(0, Ordering::SeqCst);
        self.group_quorum.store(members, Ordering::SeqCst);
    }

    /// How many webhooks the group held by [`Faults::gather_next_group`] had when it was
    /// committed (0 until then).
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
        event_ids: impl IntoIterator<Item = &'a str>,
    ) -> Option<LostCommit> {
        if !self.armed() {
            return None;
        }
        let mut armed = (self.lost_commit)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if armed.is_empty() {
            return None;
        }
        event_ids.into_iter().find_map(|id| armed.remove(id))
    }

    /// Makes the next COMMIT of a group holding `event_id` lose its connection, `how`.
    pub fn lose_commit(&self, event_id: &str, how: LostCommit) {
        self.arm();
        self.lost_commit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(event_id.to_owned(), how);
    }

    /// Checkpoint in a reload, before it builds its destinations: waits while a test holds
    /// reloads there (at most a minute). Blocks the thread it runs on, as building does.
    #[inline]
    pub(crate) fn reload_builds(&self) {
        if self.armed() {
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
    pub fn hold_reloads(&self) {
        self.arm();
        let mut state = self.reload_hold.0.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = true;
    }

    /// Whether a reload is waiting at the hold.
    pub fn reload_held(&self) -> bool {
        self.reload_hold
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
    }

    /// Lets held reloads go on, and later ones pass.
    pub fn release_reloads(&self) {
        let (hold, released) = &self.reload_hold;
        hold.lock().unwrap_or_else(|p| p.into_inner()).0 = false;
        released.notify_all();
    }

    /// The dispatcher built `_count` more HTTP clients.
    #[inline]
    pub(crate) fn http_clients_built(&self, count: usize) {
        self.http_clients_built.fetch_add(count, Ordering::SeqCst);
    }

    /// How many HTTP clients the dispatcher has built so far (its destinations share them).
    pub fn http_clients(&self) -> usize {
        self.http_clients_built.load(Ordering::SeqCst)
    }
}

/// Takes one armed crash of `key`, if any is left.
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
