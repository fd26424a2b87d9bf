//! The dispatcher: leases due outbox rows (bumping the fencing token), sends each — a
//! POST, or a publish confirmed by NATS JetStream or RabbitMQ — within its destination's
//! breaker, limits and fair share of the slots, and settles it while it still holds the
//! lease. Destinations are built once and kept across reloads while their settings stay
//! the same.

use super::destination::{prepare, probe, Destination, DestinationMap, Transport};
use super::failing::FailureLog;
use super::gates::{self, Health, Observation};
use super::guard::lock;
use super::lease;
use super::sender::tls_connector;
use super::settler::Settler;
use super::shares::Shares;
use super::watch::SettleWatcher;
use super::{
    settle_all, AttemptLog, AttemptResult, BreakerState, BrokerHealth, DeliverySettings,
    Destinations, Fence, Leased, Settlement, Verdict,
};
use crate::clock::Clock;
use crate::db::DbPool;
use crate::delivery::DestinationKey;
use crate::faults::Faults;
use crate::traces::{self, Traces};
use chrono::{DateTime, Utc};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;

/// How one leased delivery ended, for reports and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settled {
    Delivered,
    Retrying,
    Dead,
    /// Never sent: its filter, evaluated when it was leased, does not take it.
    Discarded,
    /// Given back unsent, for later, spending no attempt.
    Parked,
    /// Another dispatcher took the row over after this lease expired.
    LeaseLost,
    /// The database could not record the outcome; the lease will expire and the row
    /// will be sent again.
    Unrecorded,
}

impl Settled {
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Delivered => "delivered",
            Settled::Retrying => "retrying",
            Settled::Dead => "dead",
            Settled::Discarded => "discarded",
            Settled::Parked => "parked",
            Settled::LeaseLost => "lease_lost",
            Settled::Unrecorded => "unrecorded",
        }
    }
}

/// Counts of what a dispatch round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report(pub HashMap<Settled, u64>);

impl Report {
    pub fn count(&self, settled: Settled) -> u64 {
        self.0.get(&settled).copied().unwrap_or(0)
    }

    /// Counts a finished delivery task. A task that panicked (a bug: its row waits for
    /// its lease to expire) fails a `once` round, and is logged by a running dispatcher.
    fn tally(
        &mut self,
        done: Result<Settled, tokio::task::JoinError>,
        once: bool,
    ) -> anyhow::Result<()> {
        match done {
            Ok(settled) => *self.0.entry(settled).or_default() += 1,
            Err(error) if once => return Err(error.into()),
            Err(error) => tracing::error!(%error, "a delivery task failed"),
        }
        Ok(())
    }
}

/// Sends outbox rows to their destinations.
pub struct Dispatcher {
    pool: DbPool,
    clock: Arc<dyn Clock>,
    /// By (source, name). A reload swaps the map; a delivery in flight holds its own `Arc`.
    destinations: RwLock<DestinationMap>,
    lease: Duration,
    batch: u32,
    concurrency: u32,
    poll_interval: Duration,
    grace: Duration,
    wake: Arc<Notify>,
    random: Mutex<fastrand::Rng>,
    /// Rows leased and not yet settled, so that shutdown can give them back.
    in_flight: Mutex<HashMap<i64, Fence>>,
    /// Of those, how many wait for each destination's answer: its part of the slots
    /// (see [`Shares`]).
    flying: Mutex<HashMap<DestinationKey, u32>>,
    /// Destinations the last lease round found calm (breaker closed, no failure counted):
    /// their answers are not recorded, so a healthy destination's settlements read no gate.
    calm: Mutex<std::collections::HashSet<DestinationKey>>,
    /// Lease rounds so far: which destination goes first when they are leased one by one.
    turns: std::sync::atomic::AtomicUsize,
    settler: Arc<Settler>,
    brokers: Arc<BrokerHealth>,
    faults: Arc<Faults>,
    /// The one TLS connector (certificate store) of every HTTP destination's client.
    tls: native_tls::TlsConnector,
    /// HTTP clients built at startup, for tests ([`Faults::http_clients`]).
    clients_at_start: usize,
    /// A span per attempt (tracing on).
    traces: Traces,
    /// Destinations seen failing: a log line when one starts and one when it recovers.
    failing: FailureLog,
}

/// How an attempt bears on its destination's breaker: an answer (delivered, or refused
/// for good) shows it up; no answer, a timeout, 408, 429 and 5xx count as failures. A 409
/// (an earlier attempt with the same key still running) and a request that could not be
/// built say nothing of its health.
fn health_of(result: &AttemptResult) -> Option<Health> {
    match (result.verdict, result.status) {
        (Verdict::Delivered, _) | (Verdict::Dead, Some(_)) => Some(Health::Answered),
        (Verdict::Dead, None) | (Verdict::Retry { .. }, Some(409)) => None,
        (Verdict::Filtered | Verdict::Unevaluated, _) => None,
        (Verdict::Retry { .. }, _) => Some(Health::Failed),
    }
}

/// The gates a lease round saw: `inlet_breaker_state`, probes (the half-open transition)
/// and limited destinations' deliveries in flight across every instance.
fn report_gates(round: &lease::Round) {
    for (key, state) in &round.breakers {
        metrics::gauge!("inlet_breaker_state", "source" => key.source().to_owned(), "destination" => key.name().to_owned())
            .set(state.gauge());
    }
    for key in &round.probes {
        let (source, destination) = (key.source(), key.name());
        metrics::counter!("inlet_breaker_transitions_total", "source" => source.to_owned(), "destination" => destination.to_owned(), "to" => BreakerState::HalfOpen.as_str())
            .increment(1);
        tracing::info!(%source, %destination, "circuit breaker half-open: one probe delivery decides");
    }
    for (key, n) in &round.in_flight {
        metrics::gauge!("inlet_destination_in_flight", "source" => key.source().to_owned(), "destination" => key.name().to_owned())
            .set(*n as f64);
    }
}

/// A dead letter's log line, with its trace id (tracing on).
fn log_dead_letter(delivery: &Leased, error: &str) {
    let trace_id = delivery
        .trace_parent
        .as_deref()
        .and_then(traces::trace_id_of);
    tracing::warn!(delivery = delivery.id, destination = %delivery.destination, event_id = %delivery.event_id, %error, trace_id, "delivery dead-lettered");
}

/// A delivery waiting for its destination's answer: counted in the dispatcher's shares
/// (`flying`) until dropped — after the attempt, or if the task is cut short.
struct Waiting<'a>(&'a Dispatcher, &'a DestinationKey);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.answered(self.1);
    }
}

impl Dispatcher {
    /// A dispatcher for `destinations`; `grace` is how long in-flight deliveries may
    /// finish at shutdown.
    pub fn new(
        destinations: &Destinations,
        delivery: &DeliverySettings,
        grace: Duration,
        pool: DbPool,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let brokers = Arc::new(BrokerHealth::default());
        let tls = tls_connector()?;
        let prepared = prepare(destinations, &HashMap::new(), &brokers, &tls)?;
        let destinations = RwLock::new(prepared.ready);
        Ok(Self {
            brokers,
            tls,
            clients_at_start: prepared.clients_built,
            faults: Arc::new(Faults::default()),
            settler: Settler::new(pool.clone(), clock.clone(), None),
            pool,
            clock,
            destinations,
            lease: delivery.lease,
            batch: delivery.batch,
            concurrency: delivery.concurrency,
            poll_interval: delivery.poll_interval,
            grace,
            wake: Arc::new(Notify::new()),
            random: Mutex::new(fastrand::Rng::new()),
            in_flight: Mutex::new(HashMap::new()),
            flying: Mutex::default(),
            turns: Default::default(),
            calm: Mutex::default(),
            traces: Traces::default(),
            failing: FailureLog::default(),
        })
    }

    /// Records a span per attempt with `traces`, in the trace of its webhook.
    pub fn with_traces(mut self, traces: Traces) -> Self {
        self.traces = traces;
        self
    }

    /// Tests: faults armed on this dispatcher.
    pub fn with_faults(mut self, faults: Arc<Faults>) -> Self {
        faults.http_clients_built(self.clients_at_start);
        self.faults = faults;
        self
    }

    /// Tells `watcher`, in each settling transaction, which breakers changed and which
    /// deliveries went dead (operational notices).
    pub fn with_watcher(mut self, watcher: Arc<dyn SettleWatcher>) -> Self {
        self.settler = Settler::new(self.pool.clone(), self.clock.clone(), Some(watcher));
        self
    }

    /// The state of each broker destination, for readiness.
    pub fn broker_health(&self) -> Arc<BrokerHealth> {
        self.brokers.clone()
    }

    /// Connects to every broker destination and logs whether it answered; an unreachable
    /// broker is reported, never fatal (its deliveries wait in the outbox).
    pub async fn probe_brokers(&self) {
        let destinations: Vec<Arc<Destination>> = self.destinations().values().cloned().collect();
        probe(&destinations).await;
    }

    /// Puts `destinations` in force (a configuration reload): a destination whose settings
    /// are unchanged keeps its HTTP client or broker connection and its retry budget, a new
    /// or changed one is built, a removed one is dropped once its deliveries in flight
    /// finish. If one cannot be built, nothing changes. New brokers are probed in the
    /// background (on the Tokio runtime this is called from).
    ///
    /// Its work grows with the number of destinations and blocks the thread: call it
    /// off the async executor (`spawn_blocking`), as a configuration reload does.
    pub fn replace_destinations(&self, destinations: &Destinations) -> anyhow::Result<()> {
        self.replace_destinations_once(destinations, || Ok(()))
    }

    /// [`Self::replace_destinations`], once `ready` agrees: it runs after every new
    /// destination is built (what can fail has failed) and before any is put in use; its
    /// error leaves the current destinations in place.
    pub fn replace_destinations_once(
        &self,
        destinations: &Destinations,
        ready: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.faults.reload_builds();
        let current = self.destinations().clone();
        let prepared = prepare(destinations, &current, &self.brokers, &self.tls)?;
        self.faults.http_clients_built(prepared.clients_built);
        ready()?;
        let next = prepared.ready;
        for key in current.keys().filter(|key| !next.contains_key(*key)) {
            // A removed destination's gauges would otherwise keep their last value (an
            // open breaker would keep alerting).
            for gauge in ["inlet_breaker_state", "inlet_destination_in_flight"] {
                metrics::gauge!(gauge, "source" => key.source().to_owned(), "destination" => key.name().to_owned())
                    .set(0.0);
            }
        }
        let added: Vec<DestinationKey> = (next.keys())
            .filter(|key| !current.contains_key(*key))
            .cloned()
            .collect();
        *self
            .destinations
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = next;
        self.unpark(&added);
        let built = prepared.built;
        if built
            .iter()
            .any(|d| matches!(d.transport, Transport::Broker(_)))
        {
            tokio::spawn(async move { probe(&built).await });
        }
        Ok(())
    }

    /// Makes the rows parked for `added` destinations due now, and wakes the dispatcher
    /// (blocking; a failure only logged: the rows then wait out their park).
    fn unpark(&self, added: &[DestinationKey]) {
        if added.is_empty() {
            return;
        }
        let unparked = (self.pool.get())
            .map_err(|e| e.to_string())
            .and_then(|mut conn| {
                super::outbox::unpark(&mut conn, added, self.clock.now()).map_err(|e| e.to_string())
            });
        match unparked {
            Ok(0) => {}
            Ok(rows) => {
                tracing::info!(
                    rows,
                    "deliveries parked for destinations added by this reload are due now"
                );
                self.wake.notify_one();
            }
            Err(error) => {
                tracing::warn!(%error, "could not make the parked deliveries of added destinations due now")
            }
        }
    }

    fn destinations(&self) -> std::sync::RwLockReadGuard<'_, DestinationMap> {
        self.destinations
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn destination(&self, key: &DestinationKey) -> Option<Arc<Destination>> {
        self.destinations().get(key).cloned()
    }

    /// Wakes the dispatcher early (a new fact was committed).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut crate::db::DbConnection) -> diesel::QueryResult<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        crate::db::on_connection(&self.pool, move |conn| -> anyhow::Result<T> {
            Ok(work(conn)?)
        })
        .await
    }

    /// Leases up to `limit` due rows as the destinations' gates allow, and reports the
    /// gates; when a gate holds rows back, how long until it may let one through.
    async fn lease(&self, limit: u32) -> anyhow::Result<(Vec<Leased>, Option<Duration>)> {
        let now = self.clock.now();
        let lease = self.lease;
        let gated = self.gated();
        let configured: HashSet<&DestinationKey> = gated.iter().map(|(key, _)| key).collect();
        let shares = Shares::new(self.concurrency, gated.len(), lock(&self.flying).clone())
            .set_aside(|key| !configured.contains(key));
        let turn = self
            .turns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let round = self
            .with_conn(move |conn| {
                lease::lease_round(conn, now, lease, i64::from(limit), &gated, turn, &shares)
            })
            .await?;
        report_gates(&round);
        *lock(&self.calm) = round.calm;
        let mut in_flight = lock(&self.in_flight);
        let mut flying = lock(&self.flying);
        for row in &round.leased {
            in_flight.insert(row.id, row.fence());
            *flying.entry(row.key()).or_default() += 1;
        }
        Ok((round.leased, round.ready_in))
    }

    /// A delivery is settled (or given up on) here.
    fn landed(&self, delivery: &Leased) {
        lock(&self.in_flight).remove(&delivery.id);
    }

    /// A delivery no longer waits for its destination's answer (sent, or never to be).
    fn answered(&self, key: &DestinationKey) {
        let mut flying = lock(&self.flying);
        if let Some(n) = flying.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                flying.remove(key);
            }
        }
    }

    /// Every destination's gate settings.
    fn gated(&self) -> Vec<gates::Gated> {
        self.destinations()
            .iter()
            .map(|(key, d)| (key.clone(), d.settings.gate))
            .collect()
    }

    /// Sends one leased delivery and records the outcome under its fence.
    pub async fn deliver(&self, delivery: Leased) -> Settled {
        let settled = self.send_and_settle(&delivery).await;
        self.landed(&delivery);
        metrics::counter!("inlet_deliveries_total", "destination" => delivery.destination.clone(), "outcome" => settled.as_str())
            .increment(1);
        settled
    }

    async fn send_and_settle(&self, delivery: &Leased) -> Settled {
        let key = delivery.key();
        let waiting = Waiting(self, &key);
        let (outcome, settlement, log, observed) = match self.destination(&key) {
            None => {
                drop(waiting);
                let (outcome, settlement) = self.unknown_destination(delivery);
                (outcome, settlement, None, None)
            }
            Some(destination) => {
                let started = self.clock.now();
                let timer = std::time::Instant::now();
                let result = destination.attempt(delivery, started, &self.traces).await;
                drop(waiting);
                if self.faults.crash_after_send(&delivery.event_id) {
                    // As if this dispatcher died here: the row stays leased until its
                    // lease expires, then another lease sends it again.
                    return Settled::Unrecorded;
                }
                let log = AttemptLog {
                    fence: delivery.fence(),
                    started_at: started,
                    duration_ms: i64::try_from(timer.elapsed().as_millis()).unwrap_or(i64::MAX),
                };
                let observed = self.observe(&destination, &key, &result);
                let (outcome, settlement) = self.decide(&destination, delivery, result);
                (outcome, settlement, Some(log), observed)
            }
        };
        match self
            .record(delivery, settlement.clone(), log, observed)
            .await
        {
            Some(true) => {
                if let Settlement::Dead { error, .. } = &settlement {
                    log_dead_letter(delivery, error);
                }
                outcome
            }
            Some(false) => {
                tracing::warn!(
                    delivery = delivery.id,
                    attempt = delivery.attempt,
                    "lease lost: another dispatcher owns this delivery now"
                );
                Settled::LeaseLost
            }
            None => Settled::Unrecorded,
        }
    }

    /// How an attempt's result bears on its destination: logged when it starts or stops
    /// failing, and the observation its breaker records (none for a calm destination's
    /// answer, or without a breaker).
    fn observe(
        &self,
        destination: &Destination,
        key: &DestinationKey,
        result: &AttemptResult,
    ) -> Option<Observation> {
        let health = health_of(result);
        (self.failing).observe(key, health, result.error.as_deref(), self.clock.now());
        let breaker = destination.settings.gate.breaker;
        health
            .filter(|_| breaker.failures > 0)
            .filter(|health| !(*health == Health::Answered && lock(&self.calm).contains(key)))
            .map(|health| Observation {
                key: key.clone(),
                breaker,
                health,
            })
    }

    /// A row for a destination this instance does not know: another instance may have
    /// reloaded a configuration that adds it before this one did. It is parked — for a
    /// minute, doubling with each park up to an hour, spending no attempt — until its
    /// deadline, then dead-lettered; a reload that adds the destination makes it due at
    /// once.
    fn unknown_destination(&self, delivery: &Leased) -> (Settled, Settlement) {
        let now = self.clock.now();
        let doublings = u32::try_from(delivery.parked.clamp(0, 6)).unwrap_or(0);
        let at = now + chrono::Duration::minutes(1 << doublings);
        if at > delivery.deadline_at.and_utc() {
            let error = "the destination is no longer configured".to_owned();
            let dead = Settlement::Dead {
                at: now,
                status: None,
                error,
            };
            return (Settled::Dead, dead);
        }
        let error = "the destination is not configured on this instance (yet?)".to_owned();
        (Settled::Parked, Settlement::Park { at, error })
    }

    /// A row whose filter or transform found no free evaluator: parked for a moment (a
    /// time bound and up to a second more, so that rows do not come back together),
    /// spending no attempt, until its deadline.
    fn unevaluated(
        &self,
        delivery: &Leased,
        error: String,
        time: Duration,
    ) -> (Settled, Settlement) {
        let now = self.clock.now();
        let wait = time + Duration::from_millis(lock(&self.random).u64(0..1000));
        let at = now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(1));
        if at > delivery.deadline_at.and_utc() {
            let error = format!("{error} (its deadline passed)");
            let dead = Settlement::Dead {
                at: now,
                status: None,
                error,
            };
            return (Settled::Dead, dead);
        }
        (Settled::Parked, Settlement::Park { at, error })
    }

    /// What an attempt's result means for the row.
    fn decide(
        &self,
        destination: &Destination,
        delivery: &Leased,
        result: AttemptResult,
    ) -> (Settled, Settlement) {
        let now = self.clock.now();
        let error = result.error.unwrap_or_default();
        match result.verdict {
            Verdict::Delivered => (
                Settled::Delivered,
                Settlement::Delivered {
                    at: now,
                    status: result.status.unwrap_or(200),
                },
            ),
            Verdict::Dead => (
                Settled::Dead,
                Settlement::Dead {
                    at: now,
                    status: result.status,
                    error,
                },
            ),
            Verdict::Filtered => (Settled::Discarded, Settlement::Filtered { at: now }),
            Verdict::Unevaluated => self.unevaluated(delivery, error, destination.jq.time),
            Verdict::Retry { retry_after } => {
                match self.next_attempt(destination, delivery, now, retry_after) {
                    Some(at) => (
                        Settled::Retrying,
                        Settlement::Retry {
                            at,
                            status: result.status,
                            error,
                        },
                    ),
                    None => (
                        Settled::Dead,
                        Settlement::Dead {
                            at: now,
                            status: result.status,
                            error: format!(
                                "{error} (gave up after {} attempts)",
                                delivery.attempt - delivery.parked
                            ),
                        },
                    ),
                }
            }
        }
    }

    /// When to retry, after backoff and the destination's retry budget; `None` when the
    /// attempts or the deadline are exhausted.
    fn next_attempt(
        &self,
        destination: &Destination,
        delivery: &Leased,
        now: DateTime<Utc>,
        retry_after: Option<Duration>,
    ) -> Option<DateTime<Utc>> {
        // Leases that sent nothing spent no attempt.
        let attempts = u32::try_from(delivery.attempt - delivery.parked).unwrap_or(u32::MAX);
        let deadline = delivery.deadline_at.and_utc();
        let random = lock(&self.random).f64();
        let at = destination.settings.policy.next_attempt(
            attempts,
            now,
            deadline,
            retry_after,
            random,
        )?;
        Some(lock(&destination.budget).reserve(at))
    }

    async fn record(
        &self,
        delivery: &Leased,
        settlement: Settlement,
        log: Option<AttemptLog>,
        observed: Option<Observation>,
    ) -> Option<bool> {
        self.settler
            .settle(delivery.fence(), settlement, log, observed)
            .await
    }

    /// Delivers everything due now, once (`inlet deliver --once`): rows rescheduled for
    /// later stay for a later round.
    pub async fn run_once(self: &Arc<Self>) -> anyhow::Result<Report> {
        // Never stopped from outside: the round ends when nothing is due or in flight.
        let (_keep, mut never) = watch::channel(false);
        let mut tasks = JoinSet::new();
        self.pump(&mut tasks, &mut never, true).await
    }

    /// Runs until `shutdown` turns true: leases due rows as capacity allows, sleeping
    /// `poll_interval` or until woken. On shutdown, in-flight deliveries get the grace
    /// period; any still running are abandoned and their rows given back.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tasks = JoinSet::new();
        if let Err(error) = self.pump(&mut tasks, &mut shutdown, false).await {
            tracing::error!(%error, "the dispatcher stopped");
        }
        self.drain(tasks).await;
    }

    /// Keeps up to `concurrency` deliveries in flight, leasing up to `batch` rows at a
    /// time as sends finish, until `shutdown` (or, with `once`, until nothing is due or in
    /// flight). A lease failure ends a `once` round and is retried otherwise.
    async fn pump(
        self: &Arc<Self>,
        tasks: &mut JoinSet<Settled>,
        shutdown: &mut watch::Receiver<bool>,
        once: bool,
    ) -> anyhow::Result<Report> {
        let semaphore = Arc::new(Semaphore::new(self.concurrency as usize));
        let mut report = Report::default();
        while !*shutdown.borrow() {
            while let Some(done) = tasks.try_join_next() {
                report.tally(done, once)?;
            }
            let free = semaphore.available_permits().min(self.batch as usize);
            let mut leased = 0;
            let mut pause = self.poll_interval;
            if free > 0 {
                match self.lease(u32::try_from(free).unwrap_or(self.batch)).await {
                    Ok((rows, ready)) => {
                        leased = self.start(rows, &semaphore, tasks);
                        pause = self.pause(ready);
                    }
                    Err(error) if once => return Err(error),
                    Err(error) => tracing::warn!(%error, "cannot lease deliveries"),
                }
            }
            if once && leased == 0 && tasks.is_empty() {
                break;
            }
            // A full round: more may be due. A round the shares or the backlog cut short
            // waits for a send to finish (or a wake) instead of asking again at once.
            if leased == free && semaphore.available_permits() > 0 {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.wake.notified() => {}
                // A dropped sender (the application that owned it is gone) is a stop too.
                changed = shutdown.changed() => if changed.is_err() { break },
                Some(done) = tasks.join_next(), if !tasks.is_empty() => report.tally(done, once)?,
            }
        }
        Ok(report)
    }

    /// How long to wait for work: the poll interval, or less when a gate that holds rows
    /// back lets one through sooner (never under 10 ms).
    fn pause(&self, ready: Option<Duration>) -> Duration {
        ready.map_or(self.poll_interval, |ready| {
            ready.clamp(Duration::from_millis(10), self.poll_interval)
        })
    }

    /// Starts a delivery task per leased row, each holding one of `semaphore`'s permits
    /// (the caller leased no more rows than there are free permits); how many started.
    fn start(
        self: &Arc<Self>,
        rows: Vec<Leased>,
        semaphore: &Arc<Semaphore>,
        tasks: &mut JoinSet<Settled>,
    ) -> usize {
        let mut started = 0;
        for row in rows {
            let Ok(permit) = semaphore.clone().try_acquire_owned() else {
                // Cannot happen; the row stays leased until its lease expires.
                tracing::error!(delivery = row.id, "no delivery slot for a leased row");
                continue;
            };
            let this = self.clone();
            tasks.spawn(async move {
                let _permit = permit;
                this.deliver(row).await
            });
            started += 1;
        }
        started
    }

    async fn drain(&self, mut tasks: JoinSet<Settled>) {
        let finished = tokio::time::timeout(self.grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        let now = self.clock.now();
        let abandoned: Vec<(Fence, Settlement)> = lock(&self.in_flight)
            .drain()
            .map(|(_, fence)| (fence, Settlement::Release { at: now }))
            .collect();
        if abandoned.is_empty() {
            return;
        }
        let count = abandoned.len();
        match self
            .with_conn(move |conn| settle_all(conn, &abandoned, &[]))
            .await
        {
            Ok(_) => tracing::info!(
                count,
                "released unfinished deliveries for the next dispatcher"
            ),
            Err(error) => {
                tracing::warn!(count, %error, "cannot release deliveries; their leases will expire")
            }
        }
    }
}
