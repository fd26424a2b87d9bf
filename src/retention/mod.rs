//! Retention that outlives every replay: the startup check, and the sweeper that deletes
//! expired dedupe records in small batches. Facts are never swept.

mod check;
mod settings;
mod sweeper;

pub use check::{CheckLine, RetentionCheck};
pub use settings::{RetentionFile, RetentionSettings};
pub use sweeper::{SweepReport, Sweeper, SweeperHealth};
