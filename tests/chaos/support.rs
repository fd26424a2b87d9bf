//! What the campaigns share: their knobs, a seeded random source, the fake application
//! that receives deliveries, real `inlet serve` processes with a configuration of their
//! own, and a snapshot of the tables an operator would look at.

use crate::helpers::{
    sigterm, spawn_database_holder, start_process, stripe_signature, wait_exit, Backend, Process,
    TestApp, STRIPE_SECRET,
};
use chrono::{NaiveDateTime, Utc};
use diesel::prelude::*;
use diesel::{PgConnection, SqliteConnection};
use inlet::db::schema::{deliveries, events, facts};
use inlet::db::DbConnection;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A whole number from the environment, or `default` (CI mode).
pub fn knob(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
        Err(_) => default,
    }
}

/// A random source for one campaign: `INLET_CHAOS_SEED` replays a run, otherwise a fresh
/// seed, printed so that a failure can be replayed.
pub fn seeded(campaign: &str) -> fastrand::Rng {
    let seed = knob("INLET_CHAOS_SEED", fastrand::u64(..));
    println!("chaos {campaign}: seed {seed} (INLET_CHAOS_SEED={seed} replays it)");
    fastrand::Rng::with_seed(seed)
}

/// A scratch directory removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(what: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "inlet-chaos-{what}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&path).expect("create a scratch directory");
        Self(path)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The secret Inlet signs its deliveries with (Standard Webhooks).
pub const DESTINATION_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How long a leased delivery belongs to its dispatcher in these runs: short, so that the
/// rows a killed process held are taken over within the drain.
pub const LEASE_SECS: u64 = 2;
/// Deliveries one Inlet has in flight at most (`delivery.concurrency`).
pub const DELIVERY_CONCURRENCY: usize = 16;

/// Writes the configuration of an `inlet serve` with one stripe source delivering to
/// `destination`, on `database_url`, waiting `connect_timeout` for a database connection,
/// `extra` appended (its first lines belong to the destination's table); returns its
/// path.
fn write_config(
    dir: &Path,
    database_url: &str,
    destination: &str,
    (connect_timeout, extra): (&str, &str),
) -> PathBuf {
    let path = dir.join("inlet.toml");
    let pool_size = if database_url.starts_with("sqlite://") {
        1
    } else {
        8
    };
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\nworkers = 2\nshutdown_grace = \"2s\"\n\
         [database]\nurl = \"{database_url}\"\npool_size = {pool_size}\nconnect_timeout = \"{connect_timeout}\"\n\
         busy_timeout = \"5s\"\n\
         [delivery]\npoll_interval = \"50ms\"\nlease = \"{LEASE_SECS}s\"\n\
         concurrency = {DELIVERY_CONCURRENCY}\n\
         [retention]\nsweeper = false\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [[sources.destinations]]\nname = \"app\"\nurl = \"{destination}/events\"\n\
         secret = \"{DESTINATION_SECRET}\"\ntimeout = \"1s\"\nconnect_timeout = \"500ms\"\n\
         max_attempts = 100\nretry_base = \"50ms\"\nretry_cap = \"500ms\"\ndeadline = \"1h\"\n\
         retry_rate = 1000.0\nretry_burst = 1000\n\
         breaker = {{ cooldown = \"1s\", cooldown_cap = \"5s\" }}\n{extra}\n"
    );
    std::fs::write(&path, toml).expect("write the configuration");
    path
}

/// What a campaign runs against: a database, the fake application, and the configuration
/// of an `inlet serve` on that database delivering to that application. Dropping it
/// removes the database it made and the scratch directory.
pub struct Rig {
    pub app: FakeApp,
    pub url: String,
    pub config: PathBuf,
    _holder: Option<TestApp>,
    _dir: ScratchDir,
}

impl Rig {
    /// On a fresh database of `backend` (a new PostgreSQL database or an SQLite file,
    /// removed at the end); `refuse_share` of the deliveries are answered 503.
    pub async fn fresh(backend: Backend, campaign: &str, refuse_share: f64) -> Self {
        Self::fresh_with(backend, campaign, refuse_share, "").await
    }

    /// [`Rig::fresh`], its configuration ending with `extra` (whose first lines belong to
    /// the destination's table).
    pub async fn fresh_with(
        backend: Backend,
        campaign: &str,
        refuse_share: f64,
        extra: &str,
    ) -> Self {
        let holder = spawn_database_holder(backend).await;
        let url = holder.database_url();
        let app = FakeApp::start(refuse_share).await;
        let dir = ScratchDir::new(campaign);
        let config = write_config(&dir.0, &url, &app.uri(), ("1s", extra));
        Self {
            app,
            url,
            config,
            _holder: Some(holder),
            _dir: dir,
        }
    }

    /// On the database at `url`, which the campaign looks after itself.
    pub async fn on(url: String, campaign: &str, refuse_share: f64) -> Self {
        Self::build(url, None, campaign, refuse_share, "1s").await
    }

    /// On the database at `url` (the campaign's own), with `database.connect_timeout` set
    /// to `connect_timeout`: a multi-host URL needs room for a try at every host.
    pub async fn on_waiting(
        url: String,
        campaign: &str,
        refuse_share: f64,
        connect_timeout: &str,
    ) -> Self {
        Self::build(url, None, campaign, refuse_share, connect_timeout).await
    }

    async fn build(
        url: String,
        holder: Option<TestApp>,
        campaign: &str,
        refuse_share: f64,
        connect_timeout: &str,
    ) -> Self {
        let app = FakeApp::start(refuse_share).await;
        let dir = ScratchDir::new(campaign);
        let config = write_config(&dir.0, &url, &app.uri(), (connect_timeout, ""));
        Self {
            app,
            url,
            config,
            _holder: holder,
            _dir: dir,
        }
    }
}

/// Starts `inlet serve` (the real binary) and waits until it listens.
pub async fn serve(config: &Path) -> Process {
    let config = config.to_owned();
    tokio::task::spawn_blocking(move || start_process(&config))
        .await
        .expect("start inlet")
}

/// SIGTERM, as an orchestrator stops Inlet: it must exit 0 within 20 s.
pub async fn stop(mut process: Process) {
    sigterm(&process);
    let status =
        tokio::task::spawn_blocking(move || wait_exit(&mut process, Duration::from_secs(20)))
            .await
            .expect("wait for inlet");
    assert_eq!(status.code(), Some(0), "a clean exit after SIGTERM");
}

/// `kill -9`: no shutdown, no flush, no goodbye.
pub async fn kill_9(mut process: Process) {
    tokio::task::spawn_blocking(move || {
        process.child.kill().expect("SIGKILL inlet");
        process.child.wait().expect("reap inlet");
    })
    .await
    .expect("kill task");
}

/// A Stripe event of the kinds the campaigns send: `payment_intent.succeeded` is keyed on
/// its object (a fact rule), the other types are facts of their own.
pub fn stripe_body(event_id: &str, event_type: &str, object: &str) -> Vec<u8> {
    serde_json::json!({
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created": Utc::now().timestamp(),
        "data": {"object": {"id": object, "object": "payment_intent", "amount": 2000}},
    })
    .to_string()
    .into_bytes()
}

/// What one signed POST got back.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub replayed: bool,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }

    pub fn reason(&self) -> String {
        self.json()["reason"].as_str().unwrap_or("-").to_owned()
    }
}

/// Signs `body` now, as Stripe would on every retry, and posts it.
pub async fn post_stripe(
    client: &reqwest::Client,
    port: u16,
    body: &[u8],
) -> Result<Answer, reqwest::Error> {
    let signature = stripe_signature(STRIPE_SECRET, body, Utc::now().timestamp());
    let response = client
        .post(format!("http://127.0.0.1:{port}/webhooks/stripe"))
        .header("Stripe-Signature", signature)
        .header("Content-Type", "application/json")
        .body(body.to_vec())
        .send()
        .await?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let replayed = header("idempotent-replayed").as_deref() == Some("true");
    let body = response.bytes().await?.to_vec();
    Ok(Answer {
        status,
        retry_after,
        replayed,
        body,
    })
}

/// An HTTP client for load: short timeouts, and a fresh connection per request so that a
/// killed server is noticed at once.
pub fn load_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(15))
        .build()
        .expect("an HTTP client")
}

/// The user's application, as the campaigns fake it: it applies each delivery (answers
/// 200) or, now and then, refuses it with a 503 that Inlet must retry, and records the
/// `Idempotency-Key` and the object of every delivery it applied.
pub struct FakeApp {
    pub server: MockServer,
    log: Arc<Mutex<AppLog>>,
}

#[derive(Default, Clone)]
pub struct AppLog {
    /// Idempotency-Key → how many times the application applied it.
    pub applied: HashMap<String, u32>,
    /// The payment object of each applied delivery → the keys it was applied under.
    pub objects: HashMap<String, Vec<String>>,
    /// Deliveries refused with 503.
    pub refused: u64,
}

impl AppLog {
    /// Keys applied more than once (allowed: delivery is at least once, and keyed).
    pub fn applied_more_than_once(&self) -> usize {
        self.applied.values().filter(|n| **n > 1).count()
    }

    pub fn applications(&self) -> u64 {
        self.applied.values().map(|n| u64::from(*n)).sum()
    }
}

struct Recorder {
    log: Arc<Mutex<AppLog>>,
    refuse_share: f64,
}

impl Respond for Recorder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let delay = Duration::from_millis(fastrand::u64(0..20));
        let mut log = self.log.lock().expect("app log");
        if fastrand::f64() < self.refuse_share {
            log.refused += 1;
            return ResponseTemplate::new(503).set_delay(delay);
        }
        let key = request
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("<none>")
            .to_owned();
        *log.applied.entry(key.clone()).or_default() += 1;
        let object = serde_json::from_slice::<serde_json::Value>(&request.body)
            .ok()
            .filter(|body| body["type"] == "payment_intent.succeeded")
            .and_then(|body| body["data"]["object"]["id"].as_str().map(str::to_owned));
        if let Some(object) = object {
            let keys = log.objects.entry(object).or_default();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        ResponseTemplate::new(200).set_delay(delay)
    }
}

impl FakeApp {
    /// `refuse_share` of the deliveries are answered 503.
    pub async fn start(refuse_share: f64) -> Self {
        let server = MockServer::start().await;
        let log: Arc<Mutex<AppLog>> = Arc::default();
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(Recorder {
                log: log.clone(),
                refuse_share,
            })
            .mount(&server)
            .await;
        Self { server, log }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    pub fn log(&self) -> AppLog {
        self.log.lock().expect("app log").clone()
    }
}

/// The rows the checks look at, read straight from the database.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// (source, event id) → (fact kind, fact key, stored answer's status).
    pub events: HashMap<(String, String), (String, String, Option<i32>)>,
    /// (source, kind, key) → first event id; `fact_rows` counts the rows.
    pub facts: HashMap<(String, String, String), String>,
    pub fact_rows: usize,
    pub deliveries: Vec<DeliveryRow>,
}

#[derive(Debug, Clone)]
pub struct DeliveryRow {
    pub source: String,
    pub event_id: String,
    pub status: String,
    pub attempt: i32,
    pub locked_until: Option<NaiveDateTime>,
}

fn connect(url: &str) -> DbConnection {
    match url.strip_prefix("sqlite://") {
        Some(path) => {
            DbConnection::Sqlite(SqliteConnection::establish(path).expect("open the SQLite file"))
        }
        None => {
            DbConnection::Postgres(PgConnection::establish(url).expect("connect to PostgreSQL"))
        }
    }
}

impl Snapshot {
    pub async fn read(url: &str) -> Self {
        let url = url.to_owned();
        tokio::task::spawn_blocking(move || Self::read_now(&url))
            .await
            .expect("snapshot task")
    }

    fn read_now(url: &str) -> Self {
        let mut conn = connect(url);
        let event_rows: Vec<(String, String, String, String, Option<i32>)> = events::table
            .select((
                events::source,
                events::event_id,
                events::fact_kind,
                events::fact_key,
                events::response_status,
            ))
            .load(&mut conn)
            .expect("read events");
        let fact_rows: Vec<(String, String, String, String)> = facts::table
            .select((
                facts::source,
                facts::kind,
                facts::fact_key,
                facts::first_event_id,
            ))
            .load(&mut conn)
            .expect("read facts");
        let delivery_rows: Vec<(String, String, String, i32, Option<NaiveDateTime>)> =
            deliveries::table
                .select((
                    deliveries::source,
                    deliveries::event_id,
                    deliveries::status,
                    deliveries::attempt,
                    deliveries::locked_until,
                ))
                .load(&mut conn)
                .expect("read deliveries");
        Self {
            events: event_rows
                .into_iter()
                .map(|(s, e, k, f, r)| ((s, e), (k, f, r)))
                .collect(),
            fact_rows: fact_rows.len(),
            facts: fact_rows
                .into_iter()
                .map(|(s, k, f, first)| ((s, k, f), first))
                .collect(),
            deliveries: delivery_rows
                .into_iter()
                .map(
                    |(source, event_id, status, attempt, locked_until)| DeliveryRow {
                        source,
                        event_id,
                        status,
                        attempt,
                        locked_until,
                    },
                )
                .collect(),
        }
    }

    /// Deliveries by status.
    pub fn delivery_statuses(&self) -> BTreeMap<String, usize> {
        let mut statuses = BTreeMap::new();
        for row in &self.deliveries {
            *statuses.entry(row.status.clone()).or_default() += 1;
        }
        statuses
    }

    /// Deliveries still `in_progress` although their lease has passed.
    pub fn stale_in_progress(&self) -> Vec<&DeliveryRow> {
        let now = Utc::now().naive_utc();
        self.deliveries
            .iter()
            .filter(|d| d.status == "in_progress" && d.locked_until.is_none_or(|l| l < now))
            .collect()
    }
}

/// Waits until every delivery is `delivered` (the outbox drained), at most `within`;
/// returns the last snapshot.
pub async fn drained(url: &str, within: Duration) -> Snapshot {
    snapshot_when(url, within, "the outbox to drain", |snapshot| {
        snapshot.deliveries.iter().all(|d| d.status == "delivered")
    })
    .await
}

/// The first snapshot of `url` for which `ready` holds, read until `within` has passed;
/// past it, a panic naming `what` and the delivery statuses last seen.
pub async fn snapshot_when(
    url: &str,
    within: Duration,
    what: &str,
    ready: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let found = crate::helpers::first_within(within, || async {
        let snapshot = Snapshot::read(url).await;
        ready(&snapshot).then_some(snapshot)
    })
    .await;
    match found {
        Some(snapshot) => snapshot,
        None => {
            let statuses = Snapshot::read(url).await.delivery_statuses();
            panic!("timed out after {within:?} waiting for {what}: {statuses:?}")
        }
    }
}

/// The invariants after a drain, for the events acknowledged with their receipts:
/// every acknowledged event stored with its fact, one fact per fact (and every event's
/// fact present: all or nothing), one delivery per fact, every delivery made, no object
/// applied under two keys, nothing `in_progress` past its lease. Returns the failures.
pub fn check_invariants(
    snapshot: &Snapshot,
    acknowledged: &HashMap<String, serde_json::Value>,
    app: &AppLog,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (event_id, receipt) in acknowledged {
        let key = ("stripe".to_owned(), event_id.clone());
        let Some((kind, fact_key, status)) = snapshot.events.get(&key) else {
            failures.push(format!("{event_id} was acknowledged but is not in events"));
            continue;
        };
        if *status != Some(200) {
            failures.push(format!("{event_id}: stored answer {status:?}"));
        }
        let fact = &receipt["fact"];
        if fact["kind"] != kind.as_str() || fact["key"] != fact_key.as_str() {
            failures.push(format!(
                "{event_id}: the receipt's fact {fact} is not the stored ({kind}, {fact_key})"
            ));
        }
        if !snapshot
            .facts
            .contains_key(&("stripe".to_owned(), kind.clone(), fact_key.clone()))
        {
            failures.push(format!(
                "{event_id} was acknowledged but its fact ({kind}, {fact_key}) is not in facts"
            ));
        }
    }
    for ((source, event_id), (kind, fact_key, _)) in &snapshot.events {
        if !snapshot
            .facts
            .contains_key(&(source.clone(), kind.clone(), fact_key.clone()))
        {
            failures.push(format!(
                "event {event_id} is stored without its fact ({kind}, {fact_key})"
            ));
        }
    }
    if snapshot.facts.len() != snapshot.fact_rows {
        failures.push(format!(
            "{} fact rows for {} distinct facts",
            snapshot.fact_rows,
            snapshot.facts.len()
        ));
    }
    let mut per_fact: HashMap<(&str, &str), usize> = HashMap::new();
    for delivery in &snapshot.deliveries {
        *per_fact
            .entry((&delivery.source, &delivery.event_id))
            .or_default() += 1;
    }
    for ((source, _, _), first_event_id) in &snapshot.facts {
        let rows = per_fact
            .get(&(source.as_str(), first_event_id.as_str()))
            .copied()
            .unwrap_or(0);
        if rows != 1 {
            failures.push(format!(
                "fact first recorded by {first_event_id}: {rows} delivery rows"
            ));
        }
        let key = format!("{source}:{first_event_id}");
        if !app.applied.contains_key(&key) {
            failures.push(format!("fact {key} was never delivered to the application"));
        }
    }
    if snapshot.deliveries.len() != snapshot.fact_rows {
        failures.push(format!(
            "{} delivery rows for {} facts",
            snapshot.deliveries.len(),
            snapshot.fact_rows
        ));
    }
    for (object, keys) in &app.objects {
        if keys.len() > 1 {
            failures.push(format!(
                "payment {object} was applied under {} keys: {keys:?}",
                keys.len()
            ));
        }
    }
    for stale in snapshot.stale_in_progress() {
        failures.push(format!(
            "delivery left in_progress past its lease: {stale:?}"
        ));
    }
    failures
}

/// The figures every campaign ends with: the rows stored, and what the application saw.
pub fn stored_and_applied(snapshot: &Snapshot, log: &AppLog) -> String {
    let max_attempt = snapshot
        .deliveries
        .iter()
        .map(|d| d.attempt)
        .max()
        .unwrap_or(0);
    format!(
        "events {}, facts {}, deliveries {} {:?} (highest attempt {max_attempt}); application \
         applied {} deliveries for {} keys, {} keys more than once (allowed, keyed), {} \
         refused with 503 and retried",
        snapshot.events.len(),
        snapshot.fact_rows,
        snapshot.deliveries.len(),
        snapshot.delivery_statuses(),
        log.applications(),
        log.applied.len(),
        log.applied_more_than_once(),
        log.refused,
    )
}

/// Prints a campaign's figures, every line marked `chaos| ` (`.ci/run` collects them).
pub fn report(figures: &str) {
    for line in figures.lines() {
        println!("chaos| {line}");
    }
}

/// Fails with every failure listed (at most 20), or does nothing.
pub fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{what}: {} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
