//! Facts to the user's application: the transactional outbox and its dispatcher.
//!
//! The ingest transaction writes one `deliveries` row per destination when a fact is new.
//! The dispatcher leases due rows (bumping the fencing token), POSTs them — or publishes
//! them to NATS JetStream or RabbitMQ and waits for the broker's confirmation — and settles
//! each — delivered, rescheduled with full-jitter backoff, or dead — only while it still
//! holds the lease. Delivery is at least once to the application, with an
//! `Idempotency-Key` that is the same on every attempt and replay: exactly once for an
//! application that honours it.

mod bus;
mod dead_letters;
mod destination;
mod dispatcher;
mod failing;
pub mod filters;
mod gate_view;
mod gates;
mod guard;
mod headers;
mod keys;
mod lease;
mod outbox;
mod policy;
mod sender;
mod settings;
mod settler;
mod shares;
mod target;
mod watch;

pub use settings::{
    validate_destinations, DeliveryFile, DeliverySettings, DestinationFile, DestinationSettings,
    Destinations, JqFile,
};

pub use bus::{BrokerHealth, BrokerState};
pub use dead_letters::{
    count_dead_between, count_dead_except, latest_dead, nth_dead_except, DeadLetter,
};
pub use gate_view::{gate_views, GateView};
pub use gates::{
    BreakerSettings, BreakerState, GateSettings, RateLimit, DEFAULT_BREAKER_COOLDOWN,
    DEFAULT_BREAKER_COOLDOWN_CAP, DEFAULT_BREAKER_FAILURES,
};
pub use headers::delivery_headers;
pub use keys::{DestinationKey, DestinationName};
pub use outbox::{
    count_by_status, filter_error, lease_due, settle_all, settle_observed, AttemptLog, Fence,
    Leased, Message, NewDelivery, Route, SettledGroup, Settlement, DEAD, DELIVERED, DISCARDED,
    IN_PROGRESS, NOT_TAKEN, PENDING,
};
pub use policy::{classify_status, parse_retry_after, RetryBudget, RetryPolicy, Verdict};
pub use sender::{attempt, client_for, AttemptResult};
pub use target::{
    DestinationKind, Template, DEFAULT_AMQP_EXCHANGE, DEFAULT_AMQP_ROUTING_KEY,
    DEFAULT_NATS_SUBJECT,
};

pub use destination::same_destination;
pub use dispatcher::{Dispatcher, Report, Settled};
pub use gates::{BreakerChange, Transition};
pub use watch::{AfterCommit, SettleWatcher, SettledChanges};
