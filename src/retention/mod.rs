//! Retention that outlives every replay: the startup audit, and the sweeper that deletes
//! expired dedupe records in small batches. Facts are never swept.

mod audit;
mod settings;
mod sweeper;

pub use audit::{AuditLine, RetentionAudit};
pub use settings::{RetentionFile, RetentionSettings};
pub use sweeper::{SweepReport, Sweeper, SweeperHealth};
