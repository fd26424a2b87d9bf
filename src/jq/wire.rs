//! What crosses the pipe between Inlet and an evaluator process: one job in, one answer
//! out, each a frame of two little-endian lengths, a JSON header and raw bytes (the
//! payload in, the transforms' bodies out) — the bytes are never re-encoded.

use super::budget::Bounds;
use super::compile::CompileError;
use super::error::EvalError;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The largest header either side reads (expressions and headers, or results).
pub const MAX_HEADER: usize = 16 << 20;
/// The largest raw part either side reads (a payload in, bodies out).
pub const MAX_BYTES: usize = 1 << 30;

/// What an evaluator is asked to do with each program of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Task {
    /// Each program as a filter: its decision on the payload.
    Decide,
    /// The one program as a transform: the body it makes of the payload.
    Transform,
    /// Each program compiled, and refused if it can only ever error (no payload).
    Check,
}

/// One job: the programs' texts (the evaluator compiles and keeps them), the bounds, and
/// what the variables hold; the payload follows the header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub task: Task,
    pub programs: Vec<String>,
    pub bounds: Bounds,
    /// A transform's body, in bytes at most.
    pub output: usize,
    pub headers: Vec<(String, String)>,
    pub event_type: Option<String>,
    pub source: String,
    pub event_id: String,
}

/// One program's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    Decision(bool),
    /// A transform's body: this many bytes of the answer's raw part.
    Body(usize),
    /// A checked program: fine, or why it is refused.
    Checked(Option<CompileError>),
}

/// The evaluator's memory during the job: its resident size when the job started and the
/// most it reached (bytes; 0 where the system does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub before: u64,
    pub peak: u64,
}

/// The answer to a job: one result per program, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answer {
    pub results: Vec<Result<Output, EvalError>>,
    pub memory: Memory,
    /// The evaluator exits after this answer (it holds more memory than it should keep).
    pub retire: bool,
}

/// Writes one frame: `header` as JSON, then `bytes`.
pub fn write_frame<T: Serialize>(out: &mut impl Write, header: &T, bytes: &[u8]) -> io::Result<()> {
    let header = serde_json::to_vec(header)?;
    let mut frame = Vec::with_capacity(8 + header.len() + bytes.len());
    frame.extend_from_slice(&length(header.len())?.to_le_bytes());
    frame.extend_from_slice(&length(bytes.len())?.to_le_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(bytes);
    out.write_all(&frame)?;
    out.flush()
}

fn length(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))
}

/// The two lengths a frame starts with, checked against the limits.
pub fn lengths(prefix: [u8; 8]) -> io::Result<(usize, usize)> {
    let [a, b, c, d, e, f, g, h] = prefix;
    let header = u32::from_le_bytes([a, b, c, d]) as usize;
    let bytes = u32::from_le_bytes([e, f, g, h]) as usize;
    if header > MAX_HEADER || bytes > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    Ok((header, bytes))
}

/// Reads one frame from a blocking reader: `None` at a clean end before its first byte.
pub fn read_frame<T: for<'de> Deserialize<'de>>(
    input: &mut impl Read,
) -> io::Result<Option<(T, Vec<u8>)>> {
    let mut prefix = [0u8; 8];
    match input.read_exact(&mut prefix) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let (header_len, bytes_len) = lengths(prefix)?;
    let mut header = vec![0u8; header_len];
    input.read_exact(&mut header)?;
    let mut bytes = vec![0u8; bytes_len];
    input.read_exact(&mut bytes)?;
    Ok(Some((parse_header(&header)?, bytes)))
}

/// A frame's header.
pub fn parse_header<T: for<'de> Deserialize<'de>>(header: &[u8]) -> io::Result<T> {
    serde_json::from_slice(header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_job_and_its_payload_cross_unchanged() {
        let job = Job {
            task: Task::Decide,
            programs: vec![".a == 1".to_owned()],
            bounds: Bounds {
                steps: 10,
                time: Duration::from_millis(100),
                memory: 1 << 20,
                stack: 1 << 20,
            },
            output: 5,
            headers: vec![("x-a".to_owned(), "b".to_owned())],
            event_type: None,
            source: "s".to_owned(),
            event_id: "e".to_owned(),
        };
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &job, b"{\"a\":1}\n\x00binary").expect("written");
        let (read, payload): (Job, Vec<u8>) = read_frame(&mut pipe.as_slice())
            .expect("read")
            .expect("a frame");
        assert_eq!(payload, b"{\"a\":1}\n\x00binary");
        assert_eq!((read.programs, read.bounds), (job.programs, job.bounds));
        assert!(read_frame::<Job>(&mut &[][..])
            .expect("clean end")
            .is_none());
    }

    #[test]
    fn a_frame_announcing_more_than_the_limits_is_refused_before_reading_it() {
        let mut prefix = [0u8; 8];
        prefix[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(lengths(prefix).is_err());
        let mut cut = Vec::new();
        write_frame(&mut cut, &"header", b"bytes").expect("written");
        cut.truncate(cut.len() - 2);
        assert!(read_frame::<String>(&mut cut.as_slice()).is_err());
    }
}
