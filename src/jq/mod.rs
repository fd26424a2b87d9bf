//! jq expressions, evaluated by jaq: a destination's `filter` (which events it receives)
//! and `transform` (the body it is sent). An expression is compiled once, at load and on
//! reload ([`compile`]); it is evaluated on one of a few dedicated threads under bounds on
//! its steps, time, memory and stack ([`Limits`]), and its caller never waits longer than
//! the time bound and a margin. Nothing here knows about sources or deliveries.

mod budget;
mod compile;
mod pool;
mod run;

pub use budget::Counting;
pub use compile::{CompileError, Program, GLOBALS};
pub use run::{is_json, Decision, EvalError, Input};

use budget::{Bounds, Failure};
use pool::Pool;
use std::sync::OnceLock;
use std::time::Duration;

pub const DEFAULT_THREADS: usize = 2;
pub const DEFAULT_TIME: &str = "100ms";
pub const DEFAULT_STEPS: u64 = 200_000;
pub const DEFAULT_MEMORY: usize = 64 << 20;
pub const DEFAULT_OUTPUT: usize = 1 << 20;

/// How long a caller waits beyond the time bound: the evaluator thread may be queued
/// behind others, and a bound is noticed only at its next check.
const MARGIN: Duration = Duration::from_secs(1);

/// The bounds of every evaluation (`[jq]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Evaluator threads (read once, when the first expression is evaluated).
    pub threads: usize,
    pub time: Duration,
    pub steps: u64,
    pub memory: usize,
    /// A transform's body, in bytes.
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            threads: DEFAULT_THREADS,
            time: Duration::from_millis(100),
            steps: DEFAULT_STEPS,
            memory: DEFAULT_MEMORY,
            output: DEFAULT_OUTPUT,
        }
    }
}

impl Limits {
    fn bounds(&self) -> Bounds {
        Bounds {
            steps: self.steps,
            time: self.time,
            memory: self.memory,
            stack: pool::METERED_STACK_BYTES,
        }
    }

    fn wait(&self) -> Duration {
        self.time + MARGIN
    }
}

static POOL: OnceLock<Pool> = OnceLock::new();

fn pool(limits: &Limits) -> &'static Pool {
    POOL.get_or_init(|| Pool::new(limits.threads))
}

/// Compiles `text`, refusing an expression that can only ever error: one that reads
/// neither its input nor a variable (so its result is the same for every event) and
/// errors, or the bare `error`.
pub fn compile(text: &str) -> Result<Program, CompileError> {
    let program = compile::compile(text)?;
    if let Some(message) = constant_error(&program) {
        return Err(CompileError {
            line: 1,
            column: 1,
            message: format!("can only ever error: {message}"),
        });
    }
    Ok(program)
}

fn constant_error(program: &Program) -> Option<String> {
    let code = compile::code_only(program.text());
    if code.trim() == "error" {
        return Some("error always raises its input".to_owned());
    }
    if code.contains(['.', '$']) || code.contains("input") {
        return None;
    }
    let bounds = Bounds {
        steps: 10_000,
        time: Duration::from_millis(50),
        memory: 1 << 20,
        stack: 256 << 10,
    };
    let input = Input {
        payload: bytes::Bytes::from_static(b"null"),
        ..Input::default()
    };
    match run::outputs(program, &input, bounds) {
        Err(EvalError::Expression(message)) => Some(message),
        _ => None,
    }
}

/// What `program`, a filter, decides for `input`.
pub async fn decide(program: &Program, input: Input, limits: &Limits) -> Decision {
    let mut decisions = decide_each(vec![program.clone()], input, limits).await;
    decisions.pop().unwrap_or(Err(EvalError::Timeout))
}

/// What each of `programs`, filters, decides for `input`: one evaluation job that reads
/// the payload once.
pub async fn decide_each(programs: Vec<Program>, input: Input, limits: &Limits) -> Vec<Decision> {
    let count = programs.len();
    let job = move |bounds, _| decisions(&programs, &input, bounds);
    let answer = evaluate(limits, count, job).await;
    answer.unwrap_or_else(|| vec![Err(EvalError::Timeout); count])
}

/// [`decide`] for a caller on a blocking thread.
pub fn decide_blocking(program: &Program, input: Input, limits: &Limits) -> Decision {
    let program = program.clone();
    let job = move |bounds, _| settle(run::decide(&program, &input, bounds));
    evaluate_blocking(limits, job).unwrap_or(Err(EvalError::Timeout))
}

/// The body `program`, a transform, makes of `input`.
pub async fn transform(
    program: &Program,
    input: Input,
    limits: &Limits,
) -> Result<Vec<u8>, EvalError> {
    let program = program.clone();
    let job = move |bounds, max| settle(run::transform(&program, &input, bounds, max));
    let answer = evaluate(limits, 1, job).await;
    answer.unwrap_or(Err(EvalError::Timeout))
}

/// [`transform`] for a caller on a blocking thread.
pub fn transform_blocking(
    program: &Program,
    input: Input,
    limits: &Limits,
) -> Result<Vec<u8>, EvalError> {
    let program = program.clone();
    let job = move |bounds, max| settle(run::transform(&program, &input, bounds, max));
    evaluate_blocking(limits, job).unwrap_or(Err(EvalError::Timeout))
}

fn decisions(programs: &[Program], input: &Input, bounds: Bounds) -> Vec<Decision> {
    let decisions = run::decide_each(programs, input, bounds);
    decisions.into_iter().map(settle).collect()
}

/// Runs `job` (`evaluations` of them, one after another) on an evaluator thread with the
/// bounds and output size of `limits`: its answer, or `None` when the caller stopped
/// waiting.
async fn evaluate<T: Send + 'static>(
    limits: &Limits,
    evaluations: usize,
    job: impl FnOnce(Bounds, usize) -> T + Send + 'static,
) -> Option<T> {
    let (bounds, max) = (limits.bounds(), limits.output);
    let wait = limits.time * evaluations.max(1) as u32 + MARGIN;
    pool(limits).run(wait, move || job(bounds, max)).await
}

/// [`evaluate`] of one evaluation, for a caller on a blocking thread.
fn evaluate_blocking<T: Send + 'static>(
    limits: &Limits,
    job: impl FnOnce(Bounds, usize) -> T + Send + 'static,
) -> Option<T> {
    let (bounds, max) = (limits.bounds(), limits.output);
    pool(limits).run_blocking(limits.wait(), move || job(bounds, max))
}

/// Counts an exhausted bound, and retires the thread after one that may have left many
/// pages behind.
fn settle<T>(result: Result<T, EvalError>) -> Result<T, EvalError> {
    if let Err(EvalError::Exhausted(bound)) = &result {
        metrics::counter!("inlet_jq_exhausted_total", "bound" => *bound).increment(1);
        if matches!(*bound, "memory" | "depth") {
            pool::retire_after_this();
        }
    }
    result
}

impl From<Failure> for EvalError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Exhausted(what) => Self::Exhausted(what.as_str()),
            Failure::Crashed => Self::Crashed,
        }
    }
}

#[cfg(test)]
mod tests;
