//! Why a publish onto a bus did not count as delivered, and whether its connection is
//! still usable.

use super::super::policy::Verdict;

/// Why a publish did not count as delivered.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) verdict: Verdict,
    pub(super) error: String,
    /// The connection is unusable: open a new one for the next attempt.
    pub(super) broken: bool,
}

impl Failure {
    pub(super) fn transient(error: String) -> Self {
        Self {
            verdict: Verdict::Retry { retry_after: None },
            error,
            broken: false,
        }
    }

    pub(super) fn broken(error: String) -> Self {
        Self {
            broken: true,
            ..Self::transient(error)
        }
    }

    pub(super) fn dead(error: String) -> Self {
        Self {
            verdict: Verdict::Dead,
            error,
            broken: false,
        }
    }
}
