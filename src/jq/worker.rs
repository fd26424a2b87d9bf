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
use std::rc::Rc;
use std::sync::mpsc;
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
    let code = match serve_jobs() {
        Ok(()) => 0,
        Err(_) => 2,
    };
    std::process::exit(code)
}

fn serve_jobs() -> io::Result<()> {
    let (jobs, job_rx) = mpsc::channel::<(Job, Vec<u8>)>();
    let (answer_tx, answers) = mpsc::channel::<(Answer, Vec<u8>)>();
    std::thread::Builder::new()
        .name("inlet-jq-eval".to_owned())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let mut evaluator = Evaluator::new();
            for (job, payload) in job_rx {
                if answer_tx.send(evaluator.run(job, payload)).is_err() {
                    break;
                }
            }
        })?;
    let mut input = BufReader::new(io::stdin().lock());
    let mut output = BufWriter::new(io::stdout().lock());
    while let Some((job, payload)) = read_frame::<Job>(&mut input)? {
        let allowed = allowed_time(&job);
        jobs.send((job, payload))
            .map_err(|_| io::Error::other("the evaluation thread is gone"))?;
        let Ok((answer, bodies)) = answers.recv_timeout(allowed) else {
            // SAFETY: `_exit` never returns; nothing of this process needs to run after.
            unsafe { libc::_exit(TIME_EXIT) }
        };
        write_frame(&mut output, &answer, &bodies)?;
        if answer.retire {
            return Ok(());
        }
    }
    Ok(())
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
        let input = Input {
            payload: payload.into(),
            headers: job.headers,
            event_type: job.event_type,
            source: job.source,
            event_id: job.event_id,
        };
        let mut bodies = Vec::new();
        let bounds = job.bounds;
        let (results, memory) = match job.task {
            Task::Check => bounded(bounds, || check_each(&job.programs, &programs, bounds)),
            Task::Decide | Task::Transform => match run::read(&input) {
                Err(error) => (
                    (programs.iter()).map(|_| Err(error.clone())).collect(),
                    Memory::default(),
                ),
                Ok(read) => bounded(bounds, || {
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
                }),
            },
        };
        let retire = self.grown();
        (
            Answer {
                results,
                memory,
                retire,
            },
            bodies,
        )
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

    /// Whether this process holds so much more than after its first job that it should
    /// make way for a fresh one.
    fn grown(&mut self) -> bool {
        let Some(size) = address_space() else {
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

/// Runs `job` with the address space limited to what the process holds now plus the
/// memory bound and [`HEADROOM`], and the resident peak reset first: its results and
/// the memory it took.
fn bounded<T>(bounds: Bounds, job: impl FnOnce() -> T) -> (T, Memory) {
    let before = resident_size();
    reset_peak();
    let limited = address_space().map(|size| {
        let allowed = size
            .saturating_add(bounds.memory as u64)
            .saturating_add(HEADROOM as u64);
        set_address_space_limit(allowed)
    });
    let result = job();
    if limited.is_some() {
        set_address_space_limit(libc::RLIM_INFINITY);
    }
    let peak = peak_resident_size().max(before);
    (result, Memory { before, peak })
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

/// This process's address space (`/proc/self/statm`, its first field), in bytes.
fn address_space() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// This process's resident size now, in bytes (0 where `/proc` does not say).
fn resident_size() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// The most this process was resident since the last [`reset_peak`], in bytes.
fn peak_resident_size() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// Starts the resident peak again from the size now (Linux: `5` to `clear_refs`).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn status_kib(field: &str) -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}
