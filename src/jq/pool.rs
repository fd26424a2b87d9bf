//! The evaluator processes and their supervisor. Expressions never run inside the process
//! that receives webhooks: each job goes to one of a few `inlet jq-worker` processes
//! ([`super::worker`]) over a pipe, and the caller waits at most the job's time. A process
//! that dies — its address-space bound refused an allocation, it outlived its time, or
//! anything else — is replaced by a fresh one, and its death is answered as the bound it
//! hit. Two lanes of processes: the live one (filters at ingest, transforms and late
//! filters in the dispatcher) and the tools' one (an operator's evaluation, a replay's
//! filters, checking expressions), so no operator can take the capacity live deliveries
//! need.

use super::budget::MEMORY_EXIT;
use super::error::{Bound, EvalError};
use super::wire::{self, Answer, Job};
use super::worker::TIME_EXIT;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which processes a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Deliveries: filters at ingest, transforms and late filters in the dispatcher.
    Live,
    /// Operators' tools: evaluations they ask for, replays, checking expressions.
    Tools,
}

impl Lane {
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Live => "live",
            Lane::Tools => "tools",
        }
    }
}

/// Beyond the time a job may take in the evaluator (see [`super::worker::allowed_time`]),
/// how long its supervisor waits before it ends the process itself.
const BACKSTOP: Duration = Duration::from_secs(1);

/// A lane's evaluator processes: a queue of jobs, and one driver thread per process that
/// takes the next job, speaks to its process over the pipes, and hands the answer back —
/// callers never block a thread of their own on a process (an async caller awaits, a
/// blocking one waits on a channel).
pub struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    lane: Lane,
    program: Result<PathBuf, String>,
    queue: Mutex<Queue>,
    queued: Condvar,
    /// The most memory one of its processes was resident with, so far (bytes).
    peak: AtomicU64,
}

struct Queue {
    jobs: VecDeque<Queued>,
    /// The pool is gone: its drivers end once the queue is empty.
    closed: bool,
}

/// A job waiting for a driver.
struct Queued {
    frame: Vec<u8>,
    /// Past this, nothing is evaluated: the job is answered `Saturated`.
    start_by: Instant,
    /// How long its answer may take once sent.
    answer: Duration,
    reply: Reply,
}

/// Where a job's result goes: an async caller's or a blocking caller's channel.
enum Reply {
    Awaited(tokio::sync::oneshot::Sender<Result<Answered, Ended>>),
    Waited(std::sync::mpsc::SyncSender<Result<Answered, Ended>>),
}

impl Reply {
    fn send(self, result: Result<Answered, Ended>) {
        // A caller that stopped waiting has dropped its end: nothing to tell.
        match self {
            Reply::Awaited(sender) => drop(sender.send(result)),
            Reply::Waited(sender) => drop(sender.send(result)),
        }
    }
}

/// A job's answer and the raw bytes after it.
pub type Answered = (Answer, Vec<u8>);

impl Pool {
    /// A lane of `size` processes of `program` (`Err`: why there is none), each started
    /// when its driver first has a job.
    pub fn new(lane: Lane, program: Result<PathBuf, String>, size: usize) -> Self {
        let shared = Arc::new(Shared {
            lane,
            program,
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                closed: false,
            }),
            queued: Condvar::new(),
            peak: AtomicU64::new(0),
        });
        for _ in 0..size.max(1) {
            let driver = shared.clone();
            let started = std::thread::Builder::new()
                .name(format!("inlet-jq-{}", lane.as_str()))
                .spawn(move || driver.drive());
            if let Err(error) = started {
                tracing::error!(%error, "could not start a jq driver thread");
            }
        }
        Self { shared }
    }

    /// The most memory one of this lane's processes was resident with, so far (bytes):
    /// from each answer, and from the kernel for each process that died.
    #[cfg(test)]
    pub fn peak_rss(&self) -> u64 {
        self.shared.peak.load(Ordering::Relaxed)
    }

    /// Runs `job` on a process of this lane, waiting at most `queue` for one to take it
    /// and `answer` for its answer. Blocking: call it where blocking is allowed.
    pub fn run(
        &self,
        job: &Job,
        payload: &[u8],
        queue: Duration,
        answer: Duration,
    ) -> Result<Answered, Ended> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.enqueue(job, payload, (queue, answer), Reply::Waited(sender))?;
        receiver
            .recv_timeout(queue + answer + BACKSTOP * 2)
            .unwrap_or(Err(Ended::Time))
    }

    /// [`Pool::run`] for an async caller: it awaits the answer, blocking no thread.
    pub async fn run_async(
        &self,
        job: &Job,
        payload: &[u8],
        queue: Duration,
        answer: Duration,
    ) -> Result<Answered, Ended> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.enqueue(job, payload, (queue, answer), Reply::Awaited(sender))?;
        match tokio::time::timeout(queue + answer + BACKSTOP * 2, receiver).await {
            Ok(Ok(result)) => result,
            _ => Err(Ended::Time),
        }
    }

    fn enqueue(
        &self,
        job: &Job,
        payload: &[u8],
        (queue, answer): (Duration, Duration),
        reply: Reply,
    ) -> Result<(), Ended> {
        let mut frame = Vec::with_capacity(payload.len() + 512);
        wire::write_frame(&mut frame, job, payload)
            .map_err(|e| Ended::Unavailable(e.to_string()))?;
        let queued = Queued {
            frame,
            start_by: Instant::now() + queue,
            answer,
            reply,
        };
        self.shared.queue.lock().jobs.push_back(queued);
        self.shared.queued.notify_one();
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.queued.notify_all();
    }
}

impl Shared {
    /// A driver: takes the next job, runs it on its process (started, or started again,
    /// when needed), answers it; until the pool is gone.
    fn drive(self: Arc<Self>) {
        let mut worker: Option<Worker> = None;
        while let Some(job) = self.next_job() {
            if Instant::now() > job.start_by {
                metrics::counter!("inlet_jq_saturated_total", "lane" => self.lane.as_str())
                    .increment(1);
                job.reply.send(Err(Ended::Saturated));
                continue;
            }
            let result = self.run_on(&mut worker, &job);
            job.reply.send(result);
        }
    }

    /// The next job, waiting for one; `None` once the pool is gone and nothing is left.
    fn next_job(&self) -> Option<Queued> {
        let mut queue = self.queue.lock();
        loop {
            if let Some(job) = queue.jobs.pop_front() {
                return Some(job);
            }
            if queue.closed {
                return None;
            }
            self.queued.wait(&mut queue);
        }
    }

    /// `job` on `worker`, started first if there is none; the worker is dropped when its
    /// process ended or retired.
    fn run_on(&self, worker: &mut Option<Worker>, job: &Queued) -> Result<Answered, Ended> {
        if worker.is_none() {
            *worker = Some(self.start().map_err(Ended::Unavailable)?);
        }
        let Some(running) = worker.as_mut() else {
            return Err(Ended::Died);
        };
        match running.call(&job.frame, Instant::now() + job.answer + BACKSTOP) {
            Ok(answered) => {
                self.record_peak(answered.0.memory.peak);
                if answered.0.retire {
                    *worker = None;
                    self.exited("retired");
                }
                Ok(answered)
            }
            Err((ended, peak)) => {
                self.record_peak(peak);
                *worker = None;
                self.exited(ended.reason());
                Err(ended)
            }
        }
    }

    fn exited(&self, reason: &'static str) {
        metrics::counter!("inlet_jq_worker_exits_total", "lane" => self.lane.as_str(), "reason" => reason)
            .increment(1);
    }

    fn record_peak(&self, bytes: u64) {
        self.peak.fetch_max(bytes, Ordering::Relaxed);
        record_peak(bytes);
    }

    fn start(&self) -> Result<Worker, String> {
        let program = self.program.as_ref().map_err(Clone::clone)?;
        let worker = Worker::spawn(program).map_err(|e| format!("{}: {e}", program.display()))?;
        metrics::counter!("inlet_jq_workers_started_total", "lane" => self.lane.as_str())
            .increment(1);
        Ok(worker)
    }
}

/// Why a job has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// No process was free in time.
    Saturated,
    /// No process could be started, or spoken to.
    Unavailable(String),
    /// The process refused an allocation past its address-space bound.
    Memory,
    /// The process outlived its time (it ended itself, or its supervisor ended it).
    Time,
    /// The process died otherwise.
    Died,
}

impl Ended {
    fn reason(&self) -> &'static str {
        match self {
            Ended::Saturated => "saturated",
            Ended::Unavailable(_) => "unavailable",
            Ended::Memory => "memory",
            Ended::Time => "time",
            Ended::Died => "died",
        }
    }

    /// The evaluation error this end is, for a job under `bounds`.
    pub fn error(self, bounds: &super::budget::Bounds) -> EvalError {
        match self {
            Ended::Saturated => EvalError::Saturated,
            Ended::Unavailable(why) => EvalError::Unavailable(why),
            Ended::Memory => bounds.reached(Bound::Memory),
            Ended::Time => bounds.reached(Bound::Time),
            Ended::Died => EvalError::Crashed,
        }
    }
}

/// One evaluator process and its pipes.
struct Worker {
    child: Child,
    input: ChildStdin,
    output: ChildStdout,
}

impl Worker {
    fn spawn(program: &PathBuf) -> io::Result<Self> {
        let mut child = Command::new(program)
            .arg("jq-worker")
            // One malloc arena, and large blocks mapped and unmapped on their own: what an
            // evaluation frees goes back to the system, so the address space a job starts
            // from stays what the process really holds.
            .env("MALLOC_ARENA_MAX", "1")
            .env("MALLOC_MMAP_THRESHOLD_", "131072")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("no pipes to the evaluator"));
        };
        Ok(Self {
            child,
            input,
            output,
        })
    }

    /// Sends `frame` and reads the answer until `deadline`; on any failure the process is
    /// ended and reaped, and its end told.
    fn call(&mut self, frame: &[u8], deadline: Instant) -> Result<Answered, (Ended, u64)> {
        let answered = (self.input.write_all(frame))
            .and_then(|()| self.input.flush())
            .map_err(|_| None)
            .and_then(|()| self.read_answer(deadline));
        answered.map_err(|late| self.end(late == Some(Late)))
    }

    /// The answer frame, read as it arrives until `deadline`.
    fn read_answer(&mut self, deadline: Instant) -> Result<Answered, Option<Late>> {
        let mut prefix = [0u8; 8];
        self.read_until(&mut prefix, deadline)?;
        let (header_len, bytes_len) = wire::lengths(prefix).map_err(|_| None)?;
        let mut header = vec![0u8; header_len];
        self.read_until(&mut header, deadline)?;
        let mut bytes = vec![0u8; bytes_len];
        self.read_until(&mut bytes, deadline)?;
        let answer: Answer = wire::parse_header(&header).map_err(|_| None)?;
        Ok((answer, bytes))
    }

    /// Fills `buffer` from the process's output, waiting at most until `deadline`.
    fn read_until(&mut self, buffer: &mut [u8], deadline: Instant) -> Result<(), Option<Late>> {
        let mut filled = 0;
        while filled < buffer.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !readable(&self.output, left) {
                return Err(Some(Late));
            }
            match self.output.read(&mut buffer[filled..]) {
                Ok(0) => return Err(None),
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(None),
            }
        }
        Ok(())
    }

    /// Ends the process (killed if `late`, else reaped as it ended): how it ended, and the
    /// most memory it was resident with.
    fn end(&mut self, late: bool) -> (Ended, u64) {
        if late {
            let _ = self.child.kill();
        }
        let (status, peak) = reap(&self.child);
        let ended = match status {
            Some(_) if late => Ended::Time,
            Some(status) => ended_by(status),
            None => Ended::Died,
        };
        (ended, peak)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A process that retired, or dropped with its pool: end it if it still runs, and
        // reap it (a reaped one answers an error here, and that is all).
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for `child` to end: its exit status, and the most memory it was ever resident
/// with (bytes; the kernel's `ru_maxrss`), which no answer of a dead process can tell.
fn reap(child: &Child) -> (Option<ExitStatus>, u64) {
    let pid = i32::try_from(child.id()).unwrap_or(0);
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers for the call; `pid` is this process's own child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            let peak = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
            return (Some(ExitStatus::from_raw(status)), peak);
        }
        if reaped < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return (None, 0);
    }
}

/// The supervisor's deadline passed before the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Late;

/// How a process's exit status reads.
fn ended_by(status: ExitStatus) -> Ended {
    match status.code() {
        Some(MEMORY_EXIT) => Ended::Memory,
        Some(TIME_EXIT) => Ended::Time,
        _ => Ended::Died,
    }
}

/// Whether `output` has bytes (or its end) to read within `wait`.
fn readable(output: &ChildStdout, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: output.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = i32::try_from(wait.as_millis().max(1)).unwrap_or(i32::MAX);
    loop {
        // SAFETY: one valid pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return ready > 0;
        }
    }
}

/// The most memory any evaluator process was resident with, so far.
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Records an evaluator's resident peak (`inlet_jq_evaluator_peak_rss_bytes`).
fn record_peak(bytes: u64) {
    let most = PEAK.fetch_max(bytes, Ordering::Relaxed).max(bytes);
    metrics::gauge!("inlet_jq_evaluator_peak_rss_bytes").set(most as f64);
}
