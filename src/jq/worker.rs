//! The evaluator process (`inlet jq-worker`, started by [`super::pool`], never by hand):
//! reads jobs from its standard input and writes answers to its standard output, one at a
//! time. Its main thread only moves frames and keeps time; the evaluation runs on a
//! thread with a large stack, under the meter of [`super::budget`] and, around each job,
//! an address-space limit (`RLIMIT_AS`) of the memory the process holds when the job
//! starts plus the memory bound and [`HEADROOM`]: an allocation past it — one built-in
//! making a terabyte string — ends the process ([`MEMORY_EXIT`]) instead of reaching
//! Inlet. A job that outlives its time ends it too ([`TIME_EXIT`]). Either way the
//! supervisor answers the bound that was hit and starts a fresh process.

use super::budget::{self, Bounds};
use super::compile::{self, CompileError, Compiled};
use super::error::EvalError;
use super::run::{self, Input};
use super::wire::{read_frame, write_frame, Answer, Job, Memory, Output, Task};
use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::time::Duration;

/// How an evaluator process ends when a job outlives its time.
pub const TIME_EXIT: i32 = 87;

/// Address space a job may take beyond its memory bound: the allocator's own pages and
/// what a built-in allocates between two steps of the meter.
pub const HEADROOM: usize = 16 << 20;

/// The evaluation thread's stack: deep enough for jaq's recursive built-ins and for its
/// parser on a deeply nested expression. Only the pages touched are ever resident.
pub const STACK_BYTES: usize = 256 << 20;

/// The share of the stack an evaluation's own recursion may use; the rest is headroom for
/// built-ins that recurse without being metered.
pub const METERED_STACK_BYTES: usize = 160 << 20;

/// Beyond the time bound of its programs, how long a job may take (compiling a program
/// it has not seen, reading the payload) before the process ends it.
pub const GRACE: Duration = Duration::from_millis(500);

/// Programs kept compiled; all are dropped when one more would pass this.
const KEPT_PROGRAMS: usize = 256;

/// An evaluator holding this much more address space than after its first job exits
/// after answering, so a fresh one starts from its own small size.
const RETIRE_GROWTH: u64 = 128 << 20;

/// The evaluator process: serves jobs until its standard input ends.
pub fn serve() -> ! {
    budget::become_evaluator();
    // Bounds unwind without the hook; a panic inside jaq is answered as `Crashed`, never
    // printed (its message may quote the payload).
    std::panic::set_hook(Box::new(|_| {}));
    // SAFETY: the handler only calls `_exit`, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGALRM, on_alarm as *const () as libc::sighandler_t) };
    // The jobs run on a thread with a large stack (the main thread's is the system's).
    let served = std::thread::Builder::new()
        .name("inlet-jq-eval".to_owned())
        .stack_size(STACK_BYTES)
        .spawn(serve_jobs)
        .map(|thread| thread.join());
    let code = match served {
        Ok(Ok(Ok(()))) => 0,
        _ => 2,
    };
    std::process::exit(code)
}

/// A job outlived its time: the process ends at once, whatever it was running.
extern "C" fn on_alarm(_: libc::c_int) {
    // SAFETY: `_exit` never returns and is async-signal-safe.
    unsafe { libc::_exit(TIME_EXIT) }
}

fn serve_jobs() -> io::Result<()> {
    let mut evaluator = Evaluator::new();
    let mut input = BufReader::new(io::stdin().lock());
    let mut output = BufWriter::new(io::stdout().lock());
    while let Some((job, payload)) = read_frame::<Job>(&mut input)? {
        set_alarm(allowed_time(&job));
        let (answer, bodies) = evaluator.run(job, payload);
        set_alarm(Duration::ZERO);
        write_frame(&mut output, &answer, &bodies)?;
        if answer.retire {
            return Ok(());
        }
    }
    Ok(())
}

/// Arms the process's real-time alarm for `after` (zero: disarms it).
fn set_alarm(after: Duration) {
    let value = libc::timeval {
        tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(after.subsec_micros()),
    };
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: value,
    };
    // SAFETY: a valid itimerval, read only; the old value is not asked for.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
}

/// How long a job may take in all: each program's time bound, and the grace.
pub fn allowed_time(job: &Job) -> Duration {
    let programs = u32::try_from(job.programs.len().max(1)).unwrap_or(u32::MAX);
    job.bounds
        .time
        .saturating_mul(programs)
        .saturating_add(GRACE)
}

/// The evaluation thread's state: the programs it compiled, and its size after its first
/// job.
struct Evaluator {
    compiled: HashMap<String, Rc<Result<Compiled, CompileError>>>,
    settled_size: Option<u64>,
}

impl Evaluator {
    fn new() -> Self {
        Self {
            compiled: HashMap::new(),
            settled_size: None,
        }
    }

    fn run(&mut self, job: Job, payload: Vec<u8>) -> (Answer, Vec<u8>) {
        let programs: Vec<_> = job.programs.iter().map(|t| self.program(t)).collect();
        let mut bodies = Vec::new();
        let bounds = job.bounds;
        let (results, measured) = match job.task {
            Task::Check => bounded(bounds, || check_each(&job.programs, &programs, bounds)),
            Task::Decide | Task::Transform => evaluate_each(&job, payload, &programs, &mut bodies),
        };
        let retire = self.grown(measured.size);
        let memory = measured.shown;
        let answer = Answer {
            results,
            memory,
            retire,
        };
        (answer, bodies)
    }

    /// `text` compiled, once until the cache is full.
    fn program(&mut self, text: &str) -> Rc<Result<Compiled, CompileError>> {
        if let Some(kept) = self.compiled.get(text) {
            return kept.clone();
        }
        if self.compiled.len() >= KEPT_PROGRAMS {
            self.compiled.clear();
        }
        let program = Rc::new(compile::compile(text));
        self.compiled.insert(text.to_owned(), program.clone());
        program
    }

    /// Whether this process, holding `size` of address space when its latest job started,
    /// holds so much more than at its first job's that it should make way for a fresh one.
    fn grown(&mut self, size: Option<u64>) -> bool {
        let Some(size) = size else {
            return false;
        };
        match self.settled_size {
            None => {
                self.settled_size = Some(size);
                false
            }
            Some(settled) => size > settled.saturating_add(RETIRE_GROWTH),
        }
    }
}

/// Each program on the payload, as a filter or (its body appended to `bodies`) as a
/// transform, under the job's bounds.
fn evaluate_each(
    job: &Job,
    payload: Vec<u8>,
    programs: &[Rc<Result<Compiled, CompileError>>],
    bodies: &mut Vec<u8>,
) -> (Vec<Result<Output, EvalError>>, Measured) {
    let input = Input {
        payload: payload.into(),
        headers: job.headers.clone(),
        event_type: job.event_type.clone(),
        source: job.source.clone(),
        event_id: job.event_id.clone(),
    };
    let read = match run::read(&input) {
        Ok(read) => read,
        Err(error) => {
            let unread = Measured {
                shown: Memory::default(),
                size: None,
            };
            return (
                programs.iter().map(|_| Err(error.clone())).collect(),
                unread,
            );
        }
    };
    let bounds = job.bounds;
    bounded(bounds, || {
        let each = |program: &Rc<Result<Compiled, CompileError>>| {
            let program = compiled(program)?;
            match job.task {
                Task::Transform => {
                    let body = run::transform(program, &read, bounds, job.output)?;
                    bodies.extend_from_slice(&body);
                    Ok(Output::Body(body.len()))
                }
                _ => run::decide(program, &read, bounds).map(Output::Decision),
            }
        };
        programs.iter().map(each).collect()
    })
}

fn compiled(program: &Result<Compiled, CompileError>) -> Result<&Compiled, EvalError> {
    program
        .as_ref()
        .map_err(|e| EvalError::Expression(format!("does not compile: {e}")))
}

/// Each program compiled, and refused when it reads neither its input nor a variable
/// and errors (its result is the same for every event), or is the bare `error`.
fn check_each(
    texts: &[String],
    programs: &[Rc<Result<Compiled, CompileError>>],
    bounds: Bounds,
) -> Vec<Result<Output, EvalError>> {
    let refused = |message: String| CompileError {
        line: 1,
        column: 1,
        message: format!("can only ever error: {message}"),
    };
    (texts.iter().zip(programs))
        .map(|(text, program)| match program.as_ref() {
            Err(error) => Ok(Output::Checked(Some(error.clone()))),
            Ok(compiled) => {
                let code = compile::code_only(text);
                let constant_error = if code.trim() == "error" {
                    Some("error always raises its input".to_owned())
                } else if code.contains(['.', '$']) || code.contains("input") {
                    None
                } else {
                    run::constant_error(compiled, bounds)
                };
                Ok(Output::Checked(constant_error.map(refused)))
            }
        })
        .collect()
}

/// What [`bounded`] measured: the memory an answer shows, and the address space the job
/// started with.
struct Measured {
    shown: Memory,
    size: Option<u64>,
}

/// Runs `job` with the address space limited to what the process holds now plus the
/// memory bound and [`HEADROOM`], and the resident peak reset first: its results and
/// the memory it took.
fn bounded<T>(bounds: Bounds, job: impl FnOnce() -> T) -> (T, Measured) {
    let (size, before) = sizes().unzip();
    reset_peak();
    let limited = size.map(|size| {
        let allowed = size
            .saturating_add(bounds.memory as u64)
            .saturating_add(HEADROOM as u64);
        set_address_space_limit(allowed)
    });
    let result = job();
    if limited.is_some() {
        set_address_space_limit(libc::RLIM_INFINITY);
    }
    let before = before.unwrap_or(0);
    let peak = peak_resident_size().max(before);
    (
        result,
        Measured {
            shown: Memory { before, peak },
            size,
        },
    )
}

/// Sets the soft `RLIMIT_AS` (the hard one stays as it is; the soft one may not pass it).
fn set_address_space_limit(bytes: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 {
        return false;
    }
    limit.rlim_cur = bytes.min(limit.rlim_max);
    // SAFETY: as above, read only.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 }
}

/// This process's address space and resident size now, in bytes (`/proc/self/statm`,
/// its first two fields: one read).
fn sizes() -> Option<(u64, u64)> {
    let mut text = [0u8; 128];
    let read = PROC.with(|proc| proc.statm.as_ref()?.read_at(&mut text, 0).ok())?;
    let statm = std::str::from_utf8(&text[..read]).ok()?;
    let mut pages = statm.split_whitespace().map(|n| n.parse::<u64>().ok());
    let (size, resident) = (pages.next()??, pages.next()??);
    let page = page_size();
    Some((size * page, resident * page))
}

/// `/proc/self/statm` and `/proc/self/clear_refs`, opened once: every job reads and
/// writes them (a path walk per job cost more than the rest of the measuring).
struct Proc {
    statm: Option<std::fs::File>,
    clear_refs: Option<std::fs::File>,
}

thread_local! {
    static PROC: Proc = Proc {
        statm: std::fs::File::open("/proc/self/statm").ok(),
        clear_refs: std::fs::OpenOptions::new().write(true).open("/proc/self/clear_refs").ok(),
    };
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// The most this process was resident since the last [`reset_peak`], in bytes (the
/// kernel's high-water mark, which `getrusage` reads while no thread has exited).
fn peak_resident_size() -> u64 {
    // SAFETY: zeroed rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}

/// Starts the resident peak again from the size now (Linux: `5` to `clear_refs`).
fn reset_peak() {
    PROC.with(|proc| {
        if let Some(file) = &proc.clear_refs {
            let _ = file.write_at(b"5", 0);
        }
    });
}
