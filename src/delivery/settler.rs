//! Settles finished deliveries in groups. A sender hands its settlement over and waits;
//! whatever is queued when the previous write returns is written together, in one
//! statement ([`settle_all`]), each row still fenced on its own lease. There is no timer:
//! a lone settlement is written at once, and under load a group is whatever finished
//! while the previous write was in flight.

use super::gates::{by_destination, BreakerChange, Observation};
use super::guard::lock;
use super::outbox::{settle_observed, AttemptLog, Fence, Settlement};
use super::watch::SettleWatcher;
use crate::clock::Clock;
use crate::db::{on_connection, DbPool};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Most settlements written by one statement (nine bound values each).
const MAX_GROUP: usize = 512;

/// One settlement waiting for its group's write, and who waits for the answer.
struct Queued {
    fence: Fence,
    settlement: Settlement,
    /// The attempt that led to it, recorded with it.
    log: Option<AttemptLog>,
    /// The attempt's bearing on its destination's breaker, applied with it.
    observed: Option<Observation>,
    answer: oneshot::Sender<Option<bool>>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Queued>,
    /// A writer task is running and will take `waiting` when its write returns.
    writing: bool,
}

/// The group writer of one dispatcher.
pub(super) struct Settler {
    pool: DbPool,
    clock: Arc<dyn Clock>,
    /// Told, in each settling transaction, which breakers changed and which rows died.
    watcher: Option<Arc<dyn SettleWatcher>>,
    queue: Mutex<Queue>,
}

impl Settler {
    pub(super) fn new(
        pool: DbPool,
        clock: Arc<dyn Clock>,
        watcher: Option<Arc<dyn SettleWatcher>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool,
            clock,
            watcher,
            queue: Mutex::new(Queue::default()),
        })
    }

    /// Records `settlement` under `fence` (and the attempt `log`, when one was made, and
    /// its bearing on the breaker) with whatever else is waiting: `Some(true)` when it was recorded, `Some(false)` when the
    /// lease was lost, `None` when the database could not record the group (the lease will
    /// expire).
    pub(super) async fn settle(
        self: &Arc<Self>,
        fence: Fence,
        settlement: Settlement,
        log: Option<AttemptLog>,
        observed: Option<Observation>,
    ) -> Option<bool> {
        let (answer, answered) = oneshot::channel();
        let start_writer = {
            let mut queue = lock(&self.queue);
            queue.waiting.push(Queued {
                fence,
                settlement,
                log,
                observed,
                answer,
            });
            !std::mem::replace(&mut queue.writing, true)
        };
        if start_writer {
            tokio::spawn(self.clone().write_groups());
        }
        answered.await.ok().flatten()
    }

    /// Writes groups until nothing is waiting.
    async fn write_groups(self: Arc<Self>) {
        loop {
            let group: Vec<Queued> = {
                let mut queue = lock(&self.queue);
                if queue.waiting.is_empty() {
                    queue.writing = false;
                    return;
                }
                let take = queue.waiting.len().min(MAX_GROUP);
                queue.waiting.drain(..take).collect()
            };
            self.write(group).await;
        }
    }

    async fn write(&self, mut group: Vec<Queued>) {
        let logs: Vec<AttemptLog> = group.iter().filter_map(|queued| queued.log).collect();
        let observed = by_destination(group.iter_mut().filter_map(|q| q.observed.take()));
        let (rows, answers): (Vec<(Fence, Settlement)>, Vec<_>) = group
            .into_iter()
            .map(|queued| ((queued.fence, queued.settlement), queued.answer))
            .unzip();
        let size = rows.len();
        let now = self.clock.now();
        let watcher = self.watcher.clone();
        let written = on_connection(&self.pool, move |conn| {
            settle_observed(conn, &rows, &logs, &observed, now, watcher.as_deref())
                .map_err(anyhow::Error::from)
        })
        .await;
        let kept = match written {
            Ok(settled) => {
                report_transitions(&settled.transitions);
                settled.after_commit.run();
                settled.kept.into_iter().map(Some).collect()
            }
            Err(error) => {
                tracing::warn!(deliveries = size, %error, "cannot record the delivery outcomes; their leases will expire and they will be sent again");
                vec![None; size]
            }
        };
        for (answer, kept) in answers.into_iter().zip(kept) {
            // A sender that stopped waiting (shutdown) needs no answer.
            let _ = answer.send(kept);
        }
    }
}

/// Counts and logs the breakers a group opened or closed.
fn report_transitions(transitions: &[BreakerChange]) {
    for (key, transition) in transitions {
        let (source, destination) = (key.source(), key.name());
        let to = transition.to();
        metrics::counter!("inlet_breaker_transitions_total", "source" => source.to_owned(), "destination" => destination.to_owned(), "to" => to.as_str())
            .increment(1);
        metrics::gauge!("inlet_breaker_state", "source" => source.to_owned(), "destination" => destination.to_owned())
            .set(to.gauge());
        match to {
            super::BreakerState::Open => {
                tracing::warn!(%source, %destination, "circuit breaker opened: its deliveries wait for the cool-down")
            }
            _ => tracing::info!(%source, %destination, "circuit breaker closed"),
        }
    }
}
