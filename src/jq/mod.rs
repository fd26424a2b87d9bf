//! jq expressions, evaluated by jaq: a destination's `filter` (which events it receives)
//! and `transform` (the body it is sent). Nothing of jaq runs in this process: an
//! expression is checked ([`compile`]) and evaluated in separate evaluator processes
//! ([`pool`], [`worker`]) under bounds on its steps, time, memory and stack ([`Limits`])
//! that the evaluated code cannot escape — an address-space limit and a clock outside it.
//! Here an expression is its text, checked once. Nothing here knows about sources or
//! deliveries.

mod budget;
mod compile;
mod error;
mod pool;
mod run;
mod wire;
pub mod worker;

pub use budget::Counting;
pub use compile::CompileError;
pub use error::{Bound, EvalError, Reached};
pub use pool::Lane;
pub use run::{is_json, Decision, Input};

use budget::Bounds;
use parking_lot::Mutex;
use pool::Pool;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use wire::{Job, Output, Task};

pub const DEFAULT_WORKERS: usize = 2;
pub const DEFAULT_OPERATOR_WORKERS: usize = 1;
pub const DEFAULT_TIME: &str = "100ms";
pub const DEFAULT_STEPS: u64 = 200_000;
pub const DEFAULT_MEMORY: usize = 64 << 20;
pub const DEFAULT_OUTPUT: usize = 1 << 20;

/// The longest expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 64 << 10;

/// How long a job waits for a free evaluator of its lane beyond its time bound before it
/// is answered [`EvalError::Saturated`].
const QUEUE_MARGIN: Duration = Duration::from_secs(1);

/// How long checking an expression waits for a free tools evaluator (operators may keep
/// them busy; a check is short).
const CHECK_QUEUE: Duration = Duration::from_secs(10);

/// Why an expression is not a [`Program`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// It does not compile, or can only ever error: the expression's own fault.
    #[error("{0}")]
    Refused(CompileError),
    /// It could not be checked now (no evaluator free, or none could start).
    #[error("could not be checked now: {0}")]
    Unchecked(EvalError),
}

/// The bounds of every evaluation (`[jq]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Evaluator processes for deliveries (read once, when the first job runs).
    pub workers: usize,
    /// Evaluator processes for operators' tools (read once, likewise).
    pub operator_workers: usize,
    pub time: Duration,
    pub steps: u64,
    pub memory: usize,
    /// A transform's body, in bytes.
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            workers: DEFAULT_WORKERS,
            operator_workers: DEFAULT_OPERATOR_WORKERS,
            time: Duration::from_millis(100),
            steps: DEFAULT_STEPS,
            memory: DEFAULT_MEMORY,
            output: DEFAULT_OUTPUT,
        }
    }
}

impl Limits {
    /// The bounds of one evaluation. Its own recursion may use as much stack as heap (at
    /// most [`worker::METERED_STACK_BYTES`]): both are resident memory.
    fn bounds(&self) -> Bounds {
        Bounds {
            steps: self.steps,
            time: self.time,
            memory: self.memory,
            stack: self.memory.min(worker::METERED_STACK_BYTES),
        }
    }
}

/// A checked expression: it compiles, and it does not always error. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Program {
    text: Arc<str>,
}

impl Program {
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// The executable the evaluator processes run (`inlet`, started as `inlet jq-worker`):
/// the `inlet` binary sets its own; tests set the one cargo built. Only the first call
/// counts.
pub fn set_worker_program(path: PathBuf) {
    let _ = PROGRAM.set(path);
}

/// The program set, else `INLET_JQ_WORKER`, else an `inlet` one folder above the running
/// executable — where cargo puts the binary beside the test programs it builds (the
/// `inlet` binary itself always sets its own).
fn worker_program() -> Result<PathBuf, String> {
    if let Some(path) = PROGRAM.get() {
        return Ok(path.clone());
    }
    if let Some(path) = std::env::var_os("INLET_JQ_WORKER") {
        return Ok(PathBuf::from(path));
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        let built = exe.parent()?.parent()?.join("inlet");
        built.is_file().then_some(built)
    });
    beside.ok_or_else(|| "no evaluator program: set INLET_JQ_WORKER to the inlet binary".to_owned())
}

static POOLS: OnceLock<[Pool; 2]> = OnceLock::new();

fn pool(limits: &Limits, lane: Lane) -> &'static Pool {
    let [live, tools] = POOLS.get_or_init(|| {
        let program = worker_program();
        [
            Pool::new(Lane::Live, program.clone(), limits.workers),
            Pool::new(Lane::Tools, program, limits.operator_workers),
        ]
    });
    match lane {
        Lane::Live => live,
        Lane::Tools => tools,
    }
}

/// Expressions already checked, by text: each distinct one is compiled once per process,
/// however many destinations share it and however often the configuration reloads.
static CHECKED: Mutex<Option<Checked>> = Mutex::new(None);

/// Each checked text, and whether it is refused.
type Checked = HashMap<Arc<str>, Result<(), CompileError>>;

/// The most checked texts remembered.
const CHECKED_KEPT: usize = 100_000;

/// Checks `text` in a tools evaluator (blocking): its position and reason when it does
/// not compile or can only ever error (it reads neither its input nor a variable and
/// errors, or is the bare `error`). Each distinct text is checked once.
pub fn compile(text: &str) -> Result<Program, CheckError> {
    if text.len() > MAX_EXPRESSION_BYTES {
        return Err(CheckError::Refused(CompileError {
            line: 1,
            column: 1,
            message: format!("longer than {MAX_EXPRESSION_BYTES} bytes"),
        }));
    }
    if let Some(known) = CHECKED.lock().as_ref().and_then(|c| c.get(text)) {
        return (known.clone())
            .map(|()| Program { text: text.into() })
            .map_err(CheckError::Refused);
    }
    let text: Arc<str> = text.into();
    let checked = check(&text).map_err(CheckError::Unchecked)?;
    let mut cache = CHECKED.lock();
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= CHECKED_KEPT {
        cache.clear();
    }
    cache.insert(text.clone(), checked.clone());
    checked
        .map(|()| Program { text })
        .map_err(CheckError::Refused)
}

/// One check in a tools evaluator: `Ok(Err(_))` is the expression's own refusal (kept);
/// `Err(_)` that it could not be checked now (not kept).
fn check(text: &Arc<str>) -> Result<Result<(), CompileError>, EvalError> {
    let limits = Limits {
        steps: 10_000,
        time: Duration::from_millis(50),
        memory: 1 << 20,
        ..Limits::default()
    };
    let job = job(
        Task::Check,
        vec![text.to_string()],
        &Input::default(),
        &limits,
    );
    let answer = worker::allowed_time(&job);
    match pool(&limits, Lane::Tools).run(&job, &[], CHECK_QUEUE, answer) {
        Ok((answer, _)) => match answer.results.into_iter().next() {
            Some(Ok(Output::Checked(None))) => Ok(Ok(())),
            Some(Ok(Output::Checked(Some(refused)))) => Ok(Err(refused)),
            _ => Err(EvalError::Crashed),
        },
        // Its compiler ran out of stack: the expression nests too deep.
        Err(pool::Ended::Died) => Ok(Err(CompileError {
            line: 1,
            column: 1,
            message: "too deeply nested to compile".to_owned(),
        })),
        // Its constant evaluation reached the check's own small bounds: it does not
        // error at once, and an event's evaluation has larger ones.
        Err(pool::Ended::Memory | pool::Ended::Time) => Ok(Ok(())),
        Err(ended) => Err(ended.error(&job.bounds)),
    }
}

fn job(task: Task, programs: Vec<String>, input: &Input, limits: &Limits) -> Job {
    Job {
        task,
        programs,
        bounds: limits.bounds(),
        output: limits.output,
        headers: input.headers.clone(),
        event_type: input.event_type.clone(),
        source: input.source.clone(),
        event_id: input.event_id.clone(),
    }
}

/// What `program`, a filter, decides for `input`.
pub async fn decide(program: &Program, input: Input, limits: &Limits, lane: Lane) -> Decision {
    let mut decisions = decide_each(std::slice::from_ref(program), input, limits, lane).await;
    decisions.pop().unwrap_or(Err(EvalError::Crashed))
}

/// What each of `programs`, filters, decides for `input`: one job that reads the payload
/// once.
pub async fn decide_each(
    programs: &[Program],
    input: Input,
    limits: &Limits,
    lane: Lane,
) -> Vec<Decision> {
    if programs.is_empty() {
        return Vec::new();
    }
    let job = decide_job(programs, &input, limits);
    let answered = run_async(limits, lane, &job, &input.payload).await;
    decisions(programs.len(), answered)
}

/// [`decide_each`] for a caller on a blocking thread.
pub fn decide_each_blocking(
    programs: &[Program],
    input: &Input,
    limits: &Limits,
    lane: Lane,
) -> Vec<Decision> {
    if programs.is_empty() {
        return Vec::new();
    }
    let job = decide_job(programs, input, limits);
    decisions(
        programs.len(),
        run_blocking(limits, lane, &job, &input.payload),
    )
}

fn decide_job(programs: &[Program], input: &Input, limits: &Limits) -> Job {
    let texts = programs.iter().map(|p| p.text.to_string()).collect();
    job(Task::Decide, texts, input, limits)
}

/// One decision per program (`count` of them) from a decide job's answer.
fn decisions(count: usize, answered: Result<pool::Answered, EvalError>) -> Vec<Decision> {
    let mut decisions: Vec<Decision> = match answered {
        Err(error) => vec![Err(error); count],
        Ok((answer, _)) => (answer.results.into_iter())
            .map(|result| match counted(result)? {
                Output::Decision(takes) => Ok(takes),
                _ => Err(EvalError::Crashed),
            })
            .collect(),
    };
    decisions.resize(count, Err(EvalError::Crashed));
    decisions
}

/// The body `program`, a transform, makes of `input`.
pub async fn transform(
    program: &Program,
    input: Input,
    limits: &Limits,
    lane: Lane,
) -> Result<Vec<u8>, EvalError> {
    let (program, limits) = (program.clone(), *limits);
    let job = move || transform_blocking(&program, &input, &limits, lane);
    let body = tokio::task::spawn_blocking(job).await;
    body.unwrap_or(Err(EvalError::Crashed))
}

/// [`transform`] for a caller on a blocking thread.
pub fn transform_blocking(
    program: &Program,
    input: &Input,
    limits: &Limits,
    lane: Lane,
) -> Result<Vec<u8>, EvalError> {
    let job = job(
        Task::Transform,
        vec![program.text.to_string()],
        input,
        limits,
    );
    let (answer, mut bodies) = run_blocking(limits, lane, &job, &input.payload)?;
    match answer.results.into_iter().next().map(counted) {
        Some(Ok(Output::Body(length))) if length <= bodies.len() => {
            bodies.truncate(length);
            Ok(bodies)
        }
        Some(Err(error)) => Err(error),
        _ => Err(EvalError::Crashed),
    }
}

/// Runs `job` on `lane`: the evaluator's answer, or why there is none (a bound its
/// process hit, a full lane, no process).
fn run_blocking(
    limits: &Limits,
    lane: Lane,
    job: &Job,
    payload: &[u8],
) -> Result<pool::Answered, EvalError> {
    run_on(pool(limits, lane), limits, job, payload)
}

/// Runs `job` on a process of `pool`.
fn run_on(
    pool: &Pool,
    limits: &Limits,
    job: &Job,
    payload: &[u8],
) -> Result<pool::Answered, EvalError> {
    let queue = limits.time + QUEUE_MARGIN;
    let answer = worker::allowed_time(job);
    settled(job, pool.run(job, payload, queue, answer))
}

/// [`run_blocking`] for an async caller: it awaits, blocking no thread.
async fn run_async(
    limits: &Limits,
    lane: Lane,
    job: &Job,
    payload: &[u8],
) -> Result<pool::Answered, EvalError> {
    let queue = limits.time + QUEUE_MARGIN;
    let answer = worker::allowed_time(job);
    let ran = pool(limits, lane)
        .run_async(job, payload, queue, answer)
        .await;
    settled(job, ran)
}

/// A job's answer with its memory recorded, or its end as the error it is, counted.
fn settled(
    job: &Job,
    ran: Result<pool::Answered, pool::Ended>,
) -> Result<pool::Answered, EvalError> {
    match ran {
        Ok(answered) => {
            record_memory(answered.0.memory);
            Ok(answered)
        }
        Err(ended) => counted(Err(ended.error(&job.bounds))),
    }
}

/// Counts a result that reached a bound.
fn counted<T>(result: Result<T, EvalError>) -> Result<T, EvalError> {
    if let Err(error) = &result {
        if let Some(bound) = error.bound() {
            metrics::counter!("inlet_jq_exhausted_total", "bound" => bound.as_str()).increment(1);
        }
    }
    result
}

/// The most one evaluation grew its evaluator's resident memory, so far.
static GROWN: AtomicU64 = AtomicU64::new(0);

fn record_memory(memory: wire::Memory) {
    let grown = memory.peak.saturating_sub(memory.before);
    let most = GROWN.fetch_max(grown, Ordering::Relaxed).max(grown);
    metrics::gauge!("inlet_jq_evaluation_peak_bytes").set(most as f64);
}

#[cfg(test)]
mod tests;
