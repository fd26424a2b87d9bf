//! The work one evaluation may do. jaq has no fuel of its own, so Inlet meters it from
//! the inside: every term jaq runs first fetches the program's look-up table from the
//! evaluation's data ([`Meter`]), and that fetch charges one step. Every
//! [`CHECK_EVERY`] steps the clock and the stack are read, and the thread's live heap on
//! every step. An
//! exhausted budget unwinds the evaluation ([`std::panic::resume_unwind`], which runs no
//! panic hook) up to [`metered`], which turns it into the [`Bound`] reached.
//!
//! What a step cannot see — one built-in making a huge value at once (`"x" * 1e12`), or
//! working long on a value the expression built itself — is bounded from outside: the
//! evaluator process's address space ([`super::worker`]) and its supervisor's clock
//! ([`super::pool`]). In an evaluator process, an allocation the address space refuses
//! ends the process at once with [`MEMORY_EXIT`] instead of Rust's abort.

use super::error::Bound;
use super::error::{EvalError, Reached};
use jaq_core::data::HasLut;
use jaq_core::DataT;
use jaq_core::Lut;
use jaq_json::Val;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Steps between two reads of the clock and the stack.
const CHECK_EVERY: u64 = 128;

/// The bounds of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bounds {
    pub steps: u64,
    #[serde(with = "millis")]
    pub time: Duration,
    pub memory: usize,
    /// Stack bytes the evaluation may use below where it started.
    pub stack: usize,
}

thread_local! {
    static STEPS_LEFT: Cell<u64> = const { Cell::new(u64::MAX) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static STACK_FLOOR: Cell<usize> = const { Cell::new(0) };
    static HEAP_CEILING: Cell<isize> = const { Cell::new(isize::MAX) };
    /// Bytes this thread has allocated minus those it has freed.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's live bytes so an evaluation's heap can be
/// bounded. One thread-local add per allocation.
pub struct Counting;

/// How an evaluator process ends when its address space refuses an allocation: the
/// memory bound, told apart from any other death by its supervisor.
pub const MEMORY_EXIT: i32 = 86;

/// Set once in an evaluator process ([`super::worker`]).
static IN_EVALUATOR: AtomicBool = AtomicBool::new(false);

/// Marks this process an evaluator: an allocation refused from now on ends it with
/// [`MEMORY_EXIT`].
pub fn become_evaluator() {
    IN_EVALUATOR.store(true, Ordering::Relaxed);
}

/// An allocation was refused. In an evaluator that is its address-space bound: exit at
/// once (`_exit` allocates nothing and runs no destructor). Elsewhere Rust's own handler
/// decides, as it always did.
fn refused(pointer: *mut u8) -> *mut u8 {
    if pointer.is_null() && IN_EVALUATOR.load(Ordering::Relaxed) {
        // SAFETY: `_exit` is async-signal-safe and never returns.
        unsafe { libc::_exit(MEMORY_EXIT) }
    }
    pointer
}

// SAFETY: every call is forwarded unchanged to `System`; the counter is a plain
// thread-local `Cell` without a destructor, so updating it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract is passed on as is.
        refused(unsafe { System.alloc(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: as above.
        refused(unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        refused(unsafe { System.realloc(ptr, layout, new_size) })
    }
}

fn count(bytes: isize) {
    // `try_with`: a thread being torn down still frees memory.
    let _ = LIVE.try_with(|live| live.set(live.get().wrapping_add(bytes)));
}

/// The evaluation's data: the look-up table, metered on every fetch.
#[derive(Clone, Copy)]
pub struct Meter<'a>(pub &'a Lut<Metered>);

/// Values are jaq's JSON values; the data is a [`Meter`].
pub struct Metered;

impl DataT for Metered {
    type V<'a> = Val;
    type Data<'a> = Meter<'a>;
}

impl<'a> HasLut<'a, Metered> for Meter<'a> {
    fn lut(&self) -> &'a Lut<Metered> {
        charge();
        self.0
    }
}

/// Charges one step of the running evaluation (no-op outside one).
pub fn charge() {
    let left = STEPS_LEFT.with(Cell::get);
    if left == 0 {
        resume_unwind(Box::new(Bound::Steps));
    }
    STEPS_LEFT.with(|steps| steps.set(left - 1));
    // The heap on every step: a string doubling in a loop outgrows any bound in a few.
    if LIVE.with(Cell::get) > HEAP_CEILING.with(Cell::get) {
        resume_unwind(Box::new(Bound::Memory));
    }
    if left.is_multiple_of(CHECK_EVERY) {
        check();
    }
}

fn check() {
    if DEADLINE
        .with(Cell::get)
        .is_some_and(|d| Instant::now() >= d)
    {
        resume_unwind(Box::new(Bound::Time));
    }
    if stack_position() < STACK_FLOOR.with(Cell::get) {
        resume_unwind(Box::new(Bound::Depth));
    }
}

/// An address near the top of this thread's stack (stacks grow down on every platform
/// Inlet builds for).
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Runs `evaluate` under `bounds`: its result, or what ran out. A panic inside jaq (a
/// bug there) is reported as [`EvalError::Crashed`] rather than taking the thread down.
pub fn metered<T>(bounds: Bounds, evaluate: impl FnOnce() -> T) -> Result<T, EvalError> {
    let start = stack_position();
    STEPS_LEFT.with(|s| s.set(bounds.steps));
    DEADLINE.with(|d| d.set(Some(Instant::now() + bounds.time)));
    STACK_FLOOR.with(|f| f.set(start.saturating_sub(bounds.stack)));
    let ceiling = LIVE.with(Cell::get).saturating_add(bounds.memory as isize);
    HEAP_CEILING.with(|h| h.set(ceiling));
    let result = catch_unwind(AssertUnwindSafe(evaluate));
    STEPS_LEFT.with(|s| s.set(u64::MAX));
    DEADLINE.with(|d| d.set(None));
    STACK_FLOOR.with(|f| f.set(0));
    HEAP_CEILING.with(|h| h.set(isize::MAX));
    result.map_err(|payload| match payload.downcast::<Bound>() {
        Ok(bound) => bounds.reached(*bound),
        Err(_) => EvalError::Crashed,
    })
}

impl Bounds {
    /// The error of `bound` reached, with its value.
    pub fn reached(&self, bound: Bound) -> EvalError {
        let limit = match bound {
            Bound::Steps => self.steps,
            Bound::Time => u64::try_from(self.time.as_millis()).unwrap_or(u64::MAX),
            Bound::Memory => self.memory as u64,
            Bound::Depth | Bound::Output => 0,
        };
        EvalError::Exhausted(Reached { bound, limit })
    }
}

/// A duration as whole milliseconds, on the wire to an evaluator.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(duration: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
