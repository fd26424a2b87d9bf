//! What an evaluation can end with, shared by the evaluator process and its supervisor:
//! [`EvalError`], and the [`Bound`] it reached with its value.

use serde::{Deserialize, Serialize};

/// Why an evaluation produced no usable result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum EvalError {
    /// The payload is not one JSON document.
    #[error("the payload is not JSON")]
    NotJson,
    /// jq's own error, or an output of the wrong kind or number.
    #[error("{0}")]
    Expression(String),
    /// A bound was reached: which one, and its value.
    #[error("{0} reached")]
    Exhausted(Reached),
    /// The output is larger than allowed.
    #[error("its output is {0} bytes, more than the {1} allowed")]
    TooLarge(usize, usize),
    /// The evaluator process died of something else than a bound (a bug in jaq).
    #[error("the jq evaluator failed")]
    Crashed,
    /// Every evaluator of its lane stayed busy while the caller could wait: nothing was
    /// evaluated, and the same evaluation may well succeed later.
    #[error("every jq evaluator was busy")]
    Saturated,
    /// No evaluator process could be started.
    #[error("no jq evaluator could be started: {0}")]
    Unavailable(String),
}

impl EvalError {
    /// Whether the same evaluation may succeed later, unchanged: nothing was evaluated.
    /// Every other error is the expression's on this input, and comes back every time.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Saturated | Self::Unavailable(_))
    }

    /// The bound reached, if that is why.
    pub fn bound(&self) -> Option<Bound> {
        match self {
            Self::Exhausted(reached) => Some(reached.bound),
            Self::TooLarge(..) => Some(Bound::Output),
            _ => None,
        }
    }
}

/// A bound of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    Steps,
    Time,
    Memory,
    Depth,
    Output,
}

impl Bound {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Steps => "steps",
            Self::Time => "time",
            Self::Memory => "memory",
            Self::Depth => "depth",
            Self::Output => "output",
        }
    }
}

/// A bound reached, with its configured value (steps, milliseconds or bytes; none for
/// the depth, which is the evaluator's stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reached {
    pub bound: Bound,
    pub limit: u64,
}

impl std::fmt::Display for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limit = self.limit;
        match self.bound {
            Bound::Steps => write!(f, "step bound {limit} steps"),
            Bound::Time => write!(f, "time bound {limit} ms"),
            Bound::Memory if limit.is_multiple_of(1 << 20) => {
                write!(f, "memory bound {} MiB", limit >> 20)
            }
            Bound::Memory => write!(f, "memory bound {limit} bytes"),
            Bound::Depth => f.write_str("depth bound"),
            Bound::Output => write!(f, "output bound {limit} bytes"),
        }
    }
}
