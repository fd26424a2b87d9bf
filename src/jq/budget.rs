//! The work one evaluation may do. jaq has no fuel of its own, so Inlet meters it from
//! the inside: every term jaq runs first fetches the program's look-up table from the
//! evaluation's data ([`Meter`]), and that fetch charges one step. Every
//! [`CHECK_EVERY`] steps the clock and the stack are read, and the thread's live heap on
//! every step. An
//! exhausted budget unwinds the evaluation ([`std::panic::resume_unwind`], which runs no
//! panic hook) up to [`metered`], which turns it into an [`Exhausted`] reason.
//!
//! What a step cannot see — one built-in working on a value the expression built itself
//! (`tojson` of a huge array) — is bounded by the memory and the steps it took to build
//! that value, by the evaluator thread's large stack, and by the caller's timeout.

use jaq_core::data::HasLut;
use jaq_core::DataT;
use jaq_core::Lut;
use jaq_json::Val;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// Steps between two reads of the clock and the stack.
const CHECK_EVERY: u64 = 128;

/// What ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    Steps,
    Time,
    Memory,
    Depth,
}

impl Exhausted {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Steps => "steps",
            Self::Time => "time",
            Self::Memory => "memory",
            Self::Depth => "depth",
        }
    }
}

/// The bounds of one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub steps: u64,
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

// SAFETY: every call is forwarded unchanged to `System`; the counter is a plain
// thread-local `Cell` without a destructor, so updating it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
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
        resume_unwind(Box::new(Exhausted::Steps));
    }
    STEPS_LEFT.with(|steps| steps.set(left - 1));
    // The heap on every step: a string doubling in a loop outgrows any bound in a few.
    if LIVE.with(Cell::get) > HEAP_CEILING.with(Cell::get) {
        resume_unwind(Box::new(Exhausted::Memory));
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
        resume_unwind(Box::new(Exhausted::Time));
    }
    if stack_position() < STACK_FLOOR.with(Cell::get) {
        resume_unwind(Box::new(Exhausted::Depth));
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
/// bug there) is reported as [`Failure::Crashed`] rather than taking the thread down.
pub fn metered<T>(bounds: Bounds, evaluate: impl FnOnce() -> T) -> Result<T, Failure> {
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
    result.map_err(|payload| match payload.downcast::<Exhausted>() {
        Ok(exhausted) => Failure::Exhausted(*exhausted),
        Err(_) => Failure::Crashed,
    })
}

/// Why an evaluation has no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Exhausted(Exhausted),
    Crashed,
}
