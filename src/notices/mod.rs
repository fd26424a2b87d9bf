//! Operational notices: Inlet's own events — a breaker opened or closed, a delivery
//! dead-lettered, dead letters over a threshold, a reload refused, a fingerprint
//! mismatch, the sweeper stalled — sent to the `[notices]` destination.
//!
//! A notice is an ordinary event of the reserved source `inlet` (which no `[[sources]]`
//! may name and no request can post to), delivered by an ordinary destination of it,
//! `notices`: signing, retries, breaker, outbox, dead letters, the console and the
//! operator API work on notices as on any event. Each notice has a deterministic event id
//! naming the occurrence, and is claimed with its fact and outbox row in one transaction
//! — the transaction of the change itself where there is one — so an occurrence observed
//! twice, or by several instances, is one notice, delivered exactly once. Nothing about
//! the notices destination's own breaker or dead letters is ever told, nor the dead letters
//! of an event that was itself a notice sent back to Inlet (every notice's delivery
//! carries `Inlet-Source: inlet`); a notices URL that reaches Inlet's own listeners is
//! refused; and one destination's dead letters are told once per window, with their
//! count: notices never loop.

mod checks;
mod intake;
mod listeners;
mod notice;
mod notifier;
mod settings;
mod store;
mod tally;

pub use checks::Checks;
pub use intake::IntakeNotices;
pub use listeners::refuse_own_listeners;
pub use notice::{Notice, Tally};
pub use notifier::{start_notice_counters, Notices};
pub use settings::{
    is_notice_delivery, Format, NoticeSettings, NoticeType, NoticesFile, DEFAULT_CHECK_INTERVAL,
    DEFAULT_DEAD_LETTER_THRESHOLD, DEFAULT_WINDOW, DESTINATION, MARKER_HEADER, SLACK_TRANSFORM,
    SOURCE,
};
