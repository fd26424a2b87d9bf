//! PostgreSQL fails over under load. A Patroni cluster of the test's own (etcd, three
//! nodes, `synchronous_mode`, HAProxy in front: `scripts/patroni-cluster`) serves two
//! `inlet serve` instances that take signed Stripe load from 24 providers (about 30 %
//! duplicates) and deliver to a live application. Three faults, on each of two
//! topologies — Inlet reaching the primary through a libpq multi-host URL
//! (`target_session_attrs=read-write`) and through HAProxy (`GET /primary` health checks):
//!
//! - `kill -9` of the primary's Patroni and PostgreSQL (a host lost);
//! - a planned switchover (`patronictl switchover`);
//! - SIGSTOP of every process of the primary (a host frozen, not dead), SIGCONT once
//!   another node was promoted: the old primary must come back as a replica.
//!
//! After each: recovery without restarting Inlet, the provider's retries, a drain of the
//! outbox, then on the new primary every acknowledged event stored with its answer (and a
//! duplicate of each answered byte for byte), one fact per fact, every fact delivered, no
//! request answered later than Inlet's documented bound, no answer but 200 or a 503/409
//! with `Retry-After`. Last, the same `kill -9` and SIGSTOP with `synchronous_mode` off
//! count the acknowledged events the new primary does not have: what asynchronous
//! replication costs (reported, not failed). `INLET_CHAOS_FAILOVER_ROUNDS` repeats every
//! scenario; `INLET_CHAOS_FAILOVER_FREEZE_HOLD` keeps a frozen primary frozen that many
//! seconds longer after the promotion (CI: thawed at once).

use crate::cluster::{Cluster, Member};
use crate::helpers::{first_within, first_within_blocking, Process};
use crate::load::{retry_unacknowledged, Ledger};
use crate::support::{
    assert_none, check_invariants, drained, knob, post_stripe, report, seeded, serve, stop,
    stored_and_applied, Rig, Snapshot, DELIVERY_CONCURRENCY,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Concurrent providers.
const CLIENTS: usize = 24;
/// `inlet serve` instances on the cluster.
const INSTANCES: usize = 2;
/// `database.connect_timeout` of the campaign's Inlets: a try at each of three hosts
/// (libpq's `connect_timeout=2` in the URL) and a second to spare.
const CONNECT_TIMEOUT_SECS: u64 = 7;
/// `database.lock_timeout` (the default).
const LOCK_TIMEOUT_SECS: u64 = 5;
/// Inlet's documented bound on a webhook's answer (docs/src/internals/group-commit.md):
/// `connect_timeout + lock_timeout + 5 s`, then `503`.
const DOCUMENTED_BOUND: Duration =
    Duration::from_secs(CONNECT_TIMEOUT_SECS + LOCK_TIMEOUT_SECS + 5);
/// Scheduling noise allowed on top of the bound (a busy two-core machine).
const BOUND_SLACK: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    MultiHost,
    HaProxy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Switchover,
    Freeze,
}

/// One webhook attempt, on the campaign's clock.
struct Attempt {
    started: Instant,
    ended: Instant,
    instance: usize,
    /// The status and whether it carried `Retry-After`; `None`: no HTTP answer.
    answer: Option<(u16, bool)>,
}

impl Attempt {
    fn ok(&self) -> bool {
        matches!(self.answer, Some((200, _)))
    }

    fn took(&self) -> Duration {
        self.ended - self.started
    }
}

/// What one scenario showed.
struct Figures {
    what: String,
    requests: usize,
    statuses: BTreeMap<u16, usize>,
    /// Answers other than 200 and a 503/409 with `Retry-After`, and requests with none.
    other: usize,
    no_answer: usize,
    /// From the fault to the new leader (Patroni's view).
    failover: Duration,
    /// From the fault to the first failed answer, from there to the first 200 after it,
    /// and from the fault to the last failed answer.
    first_failure: Option<Duration>,
    window: Option<Duration>,
    last_failure: Option<Duration>,
    /// The longest stretch after the fault in which no request was answered 200: the
    /// write gap providers saw.
    gap: Duration,
    /// From the fault until every instance had answered 200 again.
    recovered: Duration,
    /// COMMITs whose outcome Inlet could not know (`inlet_db_commits_in_doubt_total`,
    /// both instances), each answered 503.
    in_doubt: u64,
    longest: Duration,
    over_five_secs: usize,
    /// Acknowledged events the new primary lost (asynchronous replication only).
    lost: Option<usize>,
}

/// Two Inlets on one database of the cluster, the providers' ledger and the checks' state.
struct Campaign {
    cluster: Arc<Cluster>,
    topology: Topology,
    rig: Rig,
    instances: Vec<Process>,
    ledger: Arc<Mutex<Ledger>>,
    applied_twice_before: usize,
    failures: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: cargo test --test chaos -- --include-ignored"]
async fn postgres_failover_under_load() {
    let rounds = knob("INLET_CHAOS_FAILOVER_ROUNDS", 1).max(1);
    let mut rng = seeded("failover");
    let began = Instant::now();
    let cluster = Arc::new(
        tokio::task::spawn_blocking(Cluster::start)
            .await
            .expect("a Patroni cluster"),
    );
    println!(
        "chaos failover: cluster up in {:.1} s, members {:?}",
        began.elapsed().as_secs_f64(),
        cluster.members()
    );
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    for topology in [Topology::MultiHost, Topology::HaProxy] {
        let mut campaign = Campaign::start(cluster.clone(), topology, "sync").await;
        for round in 1..=rounds {
            for fault in [Fault::Kill, Fault::Switchover, Fault::Freeze] {
                figures.push(campaign.scenario(fault, round, rng.u64(..), false).await);
            }
        }
        failures.extend(campaign.finish().await);
    }
    // Asynchronous replication: what a lost or frozen primary may cost.
    let cluster_for_mode = cluster.clone();
    tokio::task::spawn_blocking(move || cluster_for_mode.set_synchronous(false))
        .await
        .expect("synchronous_mode off");
    let mut campaign = Campaign::start(cluster.clone(), Topology::MultiHost, "async").await;
    for round in 1..=rounds {
        for fault in [Fault::Kill, Fault::Freeze] {
            figures.push(campaign.scenario(fault, round, rng.u64(..), true).await);
        }
    }
    failures.extend(campaign.finish().await);

    for figure in &figures {
        report(&figure.render());
    }
    report(&format!(
        "failover: {} scenarios in {:.1} s (bound on an answer {} s: connect_timeout {} s + \
         lock_timeout {} s + 5 s)",
        figures.len(),
        began.elapsed().as_secs_f64(),
        DOCUMENTED_BOUND.as_secs(),
        CONNECT_TIMEOUT_SECS,
        LOCK_TIMEOUT_SECS
    ));
    assert_none("failover", &failures);
}

impl Topology {
    fn name(self) -> &'static str {
        match self {
            Self::MultiHost => "multi-host URL",
            Self::HaProxy => "HAProxy",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Self::MultiHost => "m",
            Self::HaProxy => "h",
        }
    }
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Self::Kill => "kill -9 of the primary",
            Self::Switchover => "switchover",
            Self::Freeze => "SIGSTOP of the primary",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Self::Kill => "k",
            Self::Switchover => "s",
            Self::Freeze => "f",
        }
    }
}

impl Campaign {
    /// A database of its own on the cluster (`inlet_<mode>_<topology>`), two Inlets on it.
    async fn start(cluster: Arc<Cluster>, topology: Topology, mode: &str) -> Self {
        let db = format!("inlet_{mode}_{}", topology.tag());
        let for_db = (cluster.clone(), db.clone());
        tokio::task::spawn_blocking(move || for_db.0.create_database(&for_db.1))
            .await
            .expect("create the database");
        let url = match topology {
            Topology::MultiHost => cluster.multihost_url(&db),
            Topology::HaProxy => cluster.haproxy_url(&db),
        };
        let timeout = format!("{CONNECT_TIMEOUT_SECS}s");
        let rig = Rig::on_waiting(url, "failover", 0.05, &timeout).await;
        let mut instances = Vec::new();
        for _ in 0..INSTANCES {
            instances.push(serve(&rig.config).await);
        }
        println!(
            "chaos failover ({mode}, {}): inlet on ports {:?}, database {}",
            topology.name(),
            instances.iter().map(|p| p.port).collect::<Vec<_>>(),
            rig.url
        );
        Self {
            cluster,
            topology,
            rig,
            instances,
            ledger: Arc::default(),
            applied_twice_before: 0,
            failures: Vec::new(),
        }
    }

    /// One fault under load, recovery and the checks; `count_losses` (asynchronous
    /// replication) counts acknowledged events lost instead of failing on them.
    async fn scenario(
        &mut self,
        fault: Fault,
        round: u64,
        seed: u64,
        count_losses: bool,
    ) -> Figures {
        let tag = format!("{}{round}{}", self.topology.tag(), fault.tag());
        let attempts: Arc<Mutex<Vec<Attempt>>> = Arc::default();
        let ports: Vec<u16> = self.instances.iter().map(|p| p.port).collect();
        let in_doubt_before = in_doubt(&ports).await;
        let load = ProviderLoad::start(
            self.ledger.clone(),
            attempts.clone(),
            ports.clone(),
            &tag,
            seed,
        );
        // Real time must pass: the fault comes at a moment of the load, two to three
        // seconds in, not after anything.
        tokio::time::sleep(Duration::from_millis(2_000 + seed % 1_000)).await;

        let fault_at = Instant::now();
        let cluster = self.cluster.clone();
        let (old, failover) = tokio::task::spawn_blocking(move || inject(&cluster, fault))
            .await
            .expect("the fault");
        let recovered = self.wait_recovered(&attempts, fault_at + failover).await;
        // Real time must pass: the load goes on for two seconds on the recovered cluster.
        tokio::time::sleep(Duration::from_secs(2)).await;
        load.stop().await;
        self.heal(fault, &old).await;

        let retried = retry_unacknowledged(&self.ledger, self.instances[0].port).await;
        resend_acknowledged(&self.ledger, &tag, self.instances[1].port).await;
        let snapshot = drained(&self.rig.url, Duration::from_secs(90)).await;
        let what = format!(
            "{} ({}{}), round {round}",
            fault.name(),
            self.topology.name(),
            if count_losses {
                ", synchronous_mode off"
            } else {
                ""
            }
        );
        let lost = self.check(&what, &snapshot, count_losses);
        let in_doubt = in_doubt(&ports).await - in_doubt_before;
        let attempts = std::mem::take(&mut *attempts.lock().expect("attempts"));
        self.check_answers(&what, &attempts);
        println!(
            "chaos failover: {what}: done, {retried} retried after recovery; {}",
            stored_and_applied(&snapshot, &self.rig.app.log())
        );
        let figures = Figures::of(
            what, &attempts, fault_at, failover, recovered, in_doubt, lost,
        );
        println!("chaos {}", figures.render());
        figures
    }

    /// Until every instance has answered 200 to a request it got after `after` (at most
    /// 60 s); how long from the fault that took.
    async fn wait_recovered(&mut self, attempts: &Mutex<Vec<Attempt>>, after: Instant) -> Duration {
        let recovered = first_within(Duration::from_secs(60), || async {
            let attempts = attempts.lock().expect("attempts");
            (0..INSTANCES)
                .map(|i| {
                    attempts
                        .iter()
                        .filter(|a| a.instance == i && a.ok() && a.started >= after)
                        .map(|a| a.ended)
                        .min()
                })
                .collect::<Option<Vec<Instant>>>()
                .and_then(|ends| ends.into_iter().max())
        })
        .await;
        if let Some(at) = recovered {
            return at.saturating_duration_since(after);
        }
        self.failures.push(format!(
            "{}: an instance answered no 200 within 60 s of the new leader",
            self.topology.name()
        ));
        Duration::from_secs(60)
    }

    /// Brings the cluster back to three members (a killed node restarted) and checks that
    /// the old primary came back as a replica, within two minutes: a thawed one may look
    /// healthy for a moment before Patroni demotes it and rewinds it.
    async fn heal(&mut self, fault: Fault, old: &str) {
        let cluster = self.cluster.clone();
        let old_node = old.to_owned();
        let members = tokio::task::spawn_blocking(move || {
            if fault == Fault::Kill {
                cluster.start_node(&old_node);
            }
            let healed =
                first_within_blocking(Duration::from_secs(120), Duration::from_millis(500), || {
                    cluster.wait_healthy(120);
                    let members = cluster.members();
                    is_replica(&members, &old_node).then_some(members)
                });
            healed.unwrap_or_else(|| cluster.members())
        })
        .await
        .expect("heal the cluster");
        if !is_replica(&members, old) {
            self.failures.push(format!(
                "{}: after {fault:?} the old primary {old} is not a running replica: {members:?}",
                self.topology.name()
            ));
        }
    }

    /// The invariants on the new primary; returns the acknowledged events lost when
    /// `count_losses`, else adds them to the failures.
    fn check(&mut self, what: &str, snapshot: &Snapshot, count_losses: bool) -> Option<usize> {
        let ledger = self.ledger.lock().expect("ledger");
        let log = self.rig.app.log();
        let mut acknowledged = ledger.acknowledged();
        // An acknowledged event the new primary lost is stored again by a later retry, with
        // a fresh answer: two answers without Idempotent-Replayed.
        let lost: HashSet<String> = acknowledged
            .keys()
            .filter(|id| {
                !snapshot
                    .events
                    .contains_key(&("stripe".to_owned(), (*id).clone()))
                    || ledger.events[*id]
                        .acks
                        .iter()
                        .filter(|a| !a.replayed)
                        .count()
                        > 1
            })
            .cloned()
            .collect();
        let mut failures = Vec::new();
        if count_losses {
            acknowledged.retain(|id, _| !lost.contains(id));
        }
        let invariants = check_invariants(snapshot, &acknowledged, &log);
        // A fact the new primary lost is forgotten with its event: a later event of the
        // same payment is a new fact to it, delivered under its own key. That is the
        // price of asynchronous replication, counted with the lost events.
        let of_lost = |failure: &String| {
            failure.starts_with("payment ")
                && lost
                    .iter()
                    .any(|id| failure.contains(&format!("\"stripe:{id}\"")))
        };
        failures.extend((invariants.into_iter()).filter(|f| !(count_losses && of_lost(f))));
        failures.extend(
            ledger.stored_answer_differences().into_iter().filter(|d| {
                !count_losses || !lost.iter().any(|id| d.starts_with(&format!("{id}:")))
            }),
        );
        let applied_twice = log.applied_more_than_once();
        let bound = DELIVERY_CONCURRENCY * INSTANCES;
        if !count_losses && applied_twice - self.applied_twice_before > bound {
            failures.push(format!(
                "{} keys applied again, more than the {bound} deliveries in flight",
                applied_twice - self.applied_twice_before
            ));
        }
        self.applied_twice_before = applied_twice;
        self.failures
            .extend(failures.into_iter().map(|f| format!("{what}: {f}")));
        count_losses.then_some(lost.len())
    }

    /// Every answer is 200 or a 503/409 with `Retry-After`, within the documented bound;
    /// every instance is still the process it was.
    fn check_answers(&mut self, what: &str, attempts: &[Attempt]) {
        for attempt in attempts {
            let allowed = match attempt.answer {
                Some((200, _)) => true,
                Some((503 | 409, retry_after)) => retry_after,
                _ => false,
            };
            if !allowed {
                self.failures.push(format!(
                    "{what}: instance {} answered {:?} after {} ms",
                    attempt.instance,
                    attempt.answer,
                    attempt.took().as_millis()
                ));
            }
            if attempt.took() > DOCUMENTED_BOUND + BOUND_SLACK {
                self.failures.push(format!(
                    "{what}: a request took {} ms, over the documented {} s ({:?})",
                    attempt.took().as_millis(),
                    DOCUMENTED_BOUND.as_secs(),
                    attempt.answer
                ));
            }
        }
        for (i, process) in self.instances.iter_mut().enumerate() {
            if !matches!(process.child.try_wait(), Ok(None)) {
                self.failures
                    .push(format!("{what}: inlet instance {i} is no longer running"));
            }
        }
    }

    /// Stops both Inlets (SIGTERM, exit 0); the campaign's failures.
    async fn finish(self) -> Vec<String> {
        for process in self.instances {
            stop(process).await;
        }
        self.failures
    }
}

/// Whether `node` is a running replica (or sync standby) among `members`.
fn is_replica(members: &[Member], node: &str) -> bool {
    members
        .iter()
        .any(|m| m.name == node && m.role != "leader" && m.state == "running")
}

/// Injects `fault` into the cluster's current primary and waits for another node to
/// lead: (the old primary, the time from the fault to the new leader).
/// A frozen primary is thawed `INLET_CHAOS_FAILOVER_FREEZE_HOLD` seconds (CI: 0) after
/// another node was promoted.
fn inject(cluster: &Cluster, fault: Fault) -> (String, Duration) {
    let old = cluster.leader().expect("a leader before the fault");
    let within = Duration::from_secs(60);
    let at = Instant::now();
    match fault {
        Fault::Kill => {
            Cluster::signal(&cluster.pids(&old), "KILL");
            (old.clone(), cluster.wait_new_leader(&old, at, within))
        }
        Fault::Switchover => {
            let (from, _) = cluster.switchover();
            assert_eq!(from, old, "the switchover moves the leader we saw");
            (old.clone(), cluster.wait_new_leader(&old, at, within))
        }
        Fault::Freeze => {
            let pids = cluster.pids(&old);
            Cluster::signal(&pids, "STOP");
            let promoted = cluster.wait_new_leader(&old, at, within);
            // Real time must pass: the frozen primary stays frozen this long (the knob).
            std::thread::sleep(Duration::from_secs(knob(
                "INLET_CHAOS_FAILOVER_FREEZE_HOLD",
                0,
            )));
            Cluster::signal(&pids, "CONT");
            (old, promoted)
        }
    }
}

/// `inlet_db_commits_in_doubt_total` summed over the instances on `ports`.
async fn in_doubt(ports: &[u16]) -> u64 {
    let client = crate::support::load_client();
    let mut total = 0;
    for port in ports {
        let text = client
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics");
        total += text
            .lines()
            .find_map(|line| {
                line.strip_prefix("inlet_db_commits_in_doubt_total ")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0) as u64;
    }
    total
}

/// Providers posting to the instances in turn, each attempt timed, until stopped.
struct ProviderLoad {
    stop: Arc<AtomicBool>,
    clients: tokio::task::JoinSet<()>,
}

impl ProviderLoad {
    fn start(
        ledger: Arc<Mutex<Ledger>>,
        attempts: Arc<Mutex<Vec<Attempt>>>,
        ports: Vec<u16>,
        tag: &str,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = tokio::task::JoinSet::new();
        // A client that waits far longer than Inlet's bound, so a hang is measured, not cut.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client");
        for c in 0..CLIENTS {
            let (ledger, attempts, stop) = (ledger.clone(), attempts.clone(), stop.clone());
            let (client, instance) = (client.clone(), c % ports.len());
            let port = ports[instance];
            let tag = format!("{tag}c{c}");
            let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(c as u64));
            clients.spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let (id, body) = ledger.lock().expect("ledger").next_request(&mut rng, &tag);
                    let started = Instant::now();
                    let result = post_stripe(&client, port, &body).await;
                    let answer = result
                        .as_ref()
                        .ok()
                        .map(|a| (a.status, a.retry_after.is_some()));
                    attempts.lock().expect("attempts").push(Attempt {
                        started,
                        ended: Instant::now(),
                        instance,
                        answer,
                    });
                    ledger.lock().expect("ledger").record(&id, result);
                    if answer.is_none_or(|(status, _)| status != 200) {
                        // Real time must pass: a provider backs off before its retry.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
        }
        Self { stop, clients }
    }

    async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        while let Some(done) = self.clients.join_next().await {
            done.expect("a provider");
        }
    }
}

/// A duplicate of every acknowledged event whose id carries `tag`, once, after recovery:
/// each must get the stored answer from the new primary (recorded in the ledger, whose
/// check compares the bytes).
async fn resend_acknowledged(ledger: &Arc<Mutex<Ledger>>, tag: &str, port: u16) {
    let marker = format!("_{tag}c");
    let events: Vec<(String, Vec<u8>)> = {
        let ledger = ledger.lock().expect("ledger");
        ledger
            .events
            .iter()
            .filter(|(id, sent)| id.contains(&marker) && !sent.acks.is_empty())
            .map(|(id, sent)| (id.clone(), sent.body.clone()))
            .collect()
    };
    let client = crate::support::load_client();
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in events.chunks(events.len().div_ceil(16).max(1)) {
        let (chunk, client, ledger) = (chunk.to_vec(), client.clone(), ledger.clone());
        tasks.spawn(async move {
            for (id, body) in chunk {
                let result = post_stripe(&client, port, &body).await;
                ledger.lock().expect("ledger").record(&id, result);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a resend task");
    }
}

impl Figures {
    fn of(
        what: String,
        attempts: &[Attempt],
        fault_at: Instant,
        failover: Duration,
        recovered: Duration,
        in_doubt: u64,
        lost: Option<usize>,
    ) -> Self {
        let mut statuses = BTreeMap::new();
        for attempt in attempts {
            if let Some((status, _)) = attempt.answer {
                *statuses.entry(status).or_default() += 1;
            }
        }
        let failed_ends = attempts
            .iter()
            .filter(|a| !a.ok() && a.ended >= fault_at)
            .map(|a| a.ended);
        let first_failure = failed_ends.clone().min();
        let last_failure = failed_ends.max();
        let window = first_failure.and_then(|first| {
            attempts
                .iter()
                .filter(|a| a.ok() && a.started >= first)
                .map(|a| a.ended - first)
                .min()
        });
        let mut ok_ends: Vec<Instant> = attempts
            .iter()
            .filter(|a| a.ok() && a.ended >= fault_at)
            .map(|a| a.ended)
            .collect();
        ok_ends.sort();
        let gap = std::iter::once(fault_at)
            .chain(ok_ends.iter().copied())
            .zip(ok_ends.iter().copied())
            .map(|(before, after)| after - before)
            .max()
            .unwrap_or_default();
        let allowed = |a: &Attempt| matches!(a.answer, Some((200, _)) | Some((503 | 409, true)));
        Self {
            what,
            requests: attempts.len(),
            statuses,
            other: attempts
                .iter()
                .filter(|a| a.answer.is_some() && !allowed(a))
                .count(),
            no_answer: attempts.iter().filter(|a| a.answer.is_none()).count(),
            failover,
            first_failure: first_failure.map(|t| t - fault_at),
            window,
            last_failure: last_failure.map(|t| t - fault_at),
            gap,
            recovered: recovered + failover,
            in_doubt,
            longest: attempts.iter().map(Attempt::took).max().unwrap_or_default(),
            over_five_secs: attempts
                .iter()
                .filter(|a| a.took() > Duration::from_secs(5))
                .count(),
            lost,
        }
    }

    fn render(&self) -> String {
        let secs =
            |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
        let ok = self.statuses.get(&200).copied().unwrap_or(0);
        let unavailable = self.statuses.get(&503).copied().unwrap_or(0);
        let lost = self.lost.map_or(String::new(), |n| {
            format!("; acknowledged events lost by the new primary: {n}")
        });
        format!(
            "failover {}: {} requests, {ok} 200, {unavailable} 503, statuses {:?}, {} other \
             answers, {} without an answer\n\
             \x20 new leader after {:.2} s; first failure at {} after the fault, 503 window \
             (first failure to first 200) {}, last failure at {}, longest stretch without a 200 \
             {:.2} s; every instance answered 200 again {:.2} s after the fault; longest \
             request {:.2} s ({} over 5 s); {} COMMITs in doubt (any writer's: webhooks answered 503, deliveries retried){lost}",
            self.what,
            self.requests,
            self.statuses,
            self.other,
            self.no_answer,
            self.failover.as_secs_f64(),
            secs(self.first_failure),
            secs(self.window),
            secs(self.last_failure),
            self.gap.as_secs_f64(),
            self.recovered.as_secs_f64(),
            self.longest.as_secs_f64(),
            self.over_five_secs,
            self.in_doubt,
        )
    }
}
