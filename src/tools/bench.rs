//! `inlet bench`: a load generator that signs every request the way the source's provider
//! would (each body distinct, signed at send time), closed-loop (`concurrency` workers
//! back to back) or open-loop at a fixed rate (latency measured from the *intended* send
//! time, so queueing is not hidden), with a fraction of duplicates re-sending earlier
//! events byte for byte. And `inlet bench --ceiling`: the statements of one accepted
//! webhook run straight on the database, with Inlet's pool and pragmas — the yardstick.
//! And `inlet bench --sink`: a destination for end-to-end runs that answers every request
//! `200` after a fixed delay and counts what it received.

use crate::db::{DbConnection, DbPool};
use crate::faults::Faults;
use crate::identity::{EventId, Identity};
use crate::ingest::{process_group, Claim};
use crate::ledger::FactIdentity;
use crate::provider::SourceSettings;
use crate::signature::EventToSign;
use actix_web::web::{self, Bytes};
use actix_web::{App, HttpResponse, HttpServer};
use chrono::Utc;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The webhook URL, e.g. `http://127.0.0.1:8080/webhooks/stripe`.
    pub url: String,
    pub source: SourceSettings,
    pub concurrency: usize,
    pub duration: Duration,
    /// Open loop at this many requests per second; closed loop when `None`.
    pub rate: Option<f64>,
    /// The fraction of requests that re-send an earlier event.
    pub duplicates: f64,
    pub body_bytes: usize,
}

/// What happened.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: String,
    pub seconds: f64,
    pub requests: u64,
    pub requests_per_sec: f64,
    /// Answers with `"outcome":"accepted"`: new facts.
    pub accepted: u64,
    pub accepted_per_sec: f64,
    /// By status; `0` counts transport errors.
    pub statuses: BTreeMap<u16, u64>,
    /// Latency in milliseconds.
    pub latency_ms: Percentiles,
}

#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(histogram: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            p50: ms(histogram.value_at_quantile(0.5)),
            p90: ms(histogram.value_at_quantile(0.9)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "mode        {}", self.mode)?;
        writeln!(f, "duration    {:.1} s", self.seconds)?;
        writeln!(
            f,
            "requests    {} ({:.0}/s)",
            self.requests, self.requests_per_sec
        )?;
        writeln!(
            f,
            "accepted    {} ({:.0}/s)",
            self.accepted, self.accepted_per_sec
        )?;
        let l = &self.latency_ms;
        writeln!(
            f,
            "latency ms  p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
            l.p50, l.p90, l.p99, l.p999, l.max
        )?;
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        write!(f, "statuses    {}", statuses.join(", "))
    }
}

/// Recent events, to re-send as duplicates.
struct Sent {
    recent: VecDeque<(String, Vec<u8>)>,
}

/// Shared state of one run.
struct Run {
    options: LoadOptions,
    client: reqwest::Client,
    run_id: String,
    next: std::sync::atomic::AtomicU64,
    sent: Mutex<Sent>,
    histogram: Mutex<Histogram<u64>>,
    statuses: Mutex<BTreeMap<u16, u64>>,
    accepted: std::sync::atomic::AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Run {
    /// A fresh event (id and body), or with probability `duplicates` an earlier one.
    fn next_event(&self) -> (String, Vec<u8>) {
        if self.options.duplicates > 0.0 && fastrand::f64() < self.options.duplicates {
            let sent = lock(&self.sent);
            if !sent.recent.is_empty() {
                return sent.recent[fastrand::usize(..sent.recent.len())].clone();
            }
        }
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("evt_bench_{}_{n}", self.run_id);
        let head = format!(
            r#"{{"id":"{id}","event_id":"{id}","type":"bench.event","data":{{"object":{{"id":"obj_{id}"}}}},"pad":""#
        );
        let pad = self.options.body_bytes.saturating_sub(head.len() + 2);
        let body = format!("{head}{}\"}}", "x".repeat(pad)).into_bytes();
        let mut sent = lock(&self.sent);
        if sent.recent.len() == 1000 {
            sent.recent.pop_front();
        }
        sent.recent.push_back((id.clone(), body.clone()));
        (id, body)
    }

    /// Signs and sends one event; records the latency from `since`.
    async fn send(&self, since: Instant) {
        let (id, body) = self.next_event();
        let event = EventToSign {
            id,
            event_type: "bench.event".to_owned(),
        };
        let headers =
            crate::cli::signed_headers_for(&self.options.source, &body, Utc::now(), &event);
        let mut request = self.client.post(&self.options.url).body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let status = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                // A replay's stored answer says "accepted" too: only a fresh answer counts.
                let replayed = response
                    .headers()
                    .contains_key(crate::idempotency::REPLAYED_HEADER);
                if let Ok(bytes) = response.bytes().await {
                    if status == 200 && !replayed && memchr(&bytes, br#""outcome":"accepted""#) {
                        self.accepted
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                status
            }
            Err(_) => 0,
        };
        let micros = u64::try_from(since.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        let _ = lock(&self.histogram).record(micros);
        *lock(&self.statuses).entry(status).or_default() += 1;
    }
}

fn memchr(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// `concurrency` senders, each sending its next request as soon as the last is answered.
async fn closed_loop(run: &Arc<Run>, deadline: Instant) -> String {
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..run.options.concurrency.max(1) {
        let run = run.clone();
        workers.spawn(async move {
            while Instant::now() < deadline {
                run.send(Instant::now()).await;
            }
        });
    }
    while workers.join_next().await.is_some() {}
    format!("closed loop, concurrency {}", run.options.concurrency)
}

/// `rate` requests a second on a fixed schedule, whatever the answers' latency; each
/// latency is counted from when its request was due (no coordinated omission).
async fn open_loop(run: &Arc<Run>, started: Instant, deadline: Instant, rate: f64) -> String {
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut in_flight = tokio::task::JoinSet::new();
    let mut n: u32 = 0;
    loop {
        let intended = started + interval * n;
        if intended >= deadline {
            break;
        }
        tokio::time::sleep_until(intended.into()).await;
        let run = run.clone();
        in_flight.spawn(async move { run.send(intended).await });
        while in_flight.try_join_next().is_some() {}
        n += 1;
    }
    while in_flight.join_next().await.is_some() {}
    format!("open loop, {rate} requests/s")
}

/// Runs the load and reports.
pub async fn run_load(options: LoadOptions) -> anyhow::Result<Report> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.concurrency.max(64))
        .timeout(Duration::from_secs(30))
        .build()?;
    let run = Arc::new(Run {
        client,
        run_id: format!("{:x}", fastrand::u64(..)),
        next: Default::default(),
        sent: Mutex::new(Sent {
            recent: VecDeque::new(),
        }),
        histogram: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
        statuses: Mutex::default(),
        accepted: Default::default(),
        options,
    });
    let started = Instant::now();
    let deadline = started + run.options.duration;
    let mode = match run.options.rate {
        None => closed_loop(&run, deadline).await,
        Some(rate) => open_loop(&run, started, deadline, rate).await,
    };
    let seconds = started.elapsed().as_secs_f64();
    let histogram = lock(&run.histogram).clone();
    let statuses = lock(&run.statuses).clone();
    let requests = histogram.len();
    let accepted = run.accepted.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Report {
        mode,
        seconds,
        requests,
        requests_per_sec: requests as f64 / seconds,
        accepted,
        accepted_per_sec: accepted as f64 / seconds,
        statuses,
        latency_ms: Percentiles::of(&histogram),
    })
}

/// Headers like those a benchmark request stores beside its event (about their size).
const CEILING_HEADERS: &str = r#"[["host","127.0.0.1:18080"],["content-type","application/json"],["content-length","1024"],["stripe-signature","t=1764748800,v1=9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1a3c5b7d9f1e"]]"#;

/// The database work of `ids.len()` accepted webhooks in one transaction — the real
/// ingest transaction of a group (claims with their payloads, headers and answers, facts,
/// one delivery row each, in one statement per table) on synthetic, already verified
/// claims, straight on a connection: no HTTP, no signature, no queue.
fn ceiling_transaction(
    conn: &mut DbConnection,
    ids: &[String],
    payload: &Bytes,
    fingerprint: &str,
) -> anyhow::Result<()> {
    let claims = ids
        .iter()
        .map(|id| ceiling_claim(id, payload, fingerprint))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let group: Vec<&Claim> = claims.iter().collect();
    for verdict in process_group(conn, &group, &Faults::default(), None)? {
        verdict.map_err(|p| anyhow::anyhow!("{p}"))?;
    }
    Ok(())
}

fn ceiling_claim(id: &str, payload: &Bytes, fingerprint: &str) -> anyhow::Result<Claim> {
    let now = Utc::now();
    let event_id = EventId::parse(id).map_err(|p| anyhow::anyhow!("{p}"))?;
    Ok(Claim {
        source: "bench".to_owned(),
        identity: Identity {
            event_id,
            event_type: Some("bench.event".to_owned()),
            fact_key: None,
            document: None,
        },
        fact: FactIdentity {
            kind: "bench.event".to_owned(),
            key: id.to_owned(),
        },
        body_fact: None,
        fingerprint: fingerprint.to_owned(),
        payload: payload.clone(),
        content_type: "application/json".to_owned(),
        headers: CEILING_HEADERS.to_owned(),
        received_at: now,
        expires_at: now + chrono::Duration::days(35),
        destinations: vec![crate::delivery::Route::taken(
            "app".to_owned(),
            now + chrono::Duration::days(3),
        )],
        answer: None,
        trace_parent: None,
        arrival: None,
        earlier_fingerprint: None,
    })
}

/// How `inlet bench --ceiling` loads the database.
#[derive(Debug, Clone, Copy)]
pub struct CeilingOptions {
    pub concurrency: usize,
    pub duration: Duration,
    pub body_bytes: usize,
    /// Webhooks per transaction: 1 is the per-transaction ceiling, 64 the batched one.
    pub batch: usize,
}

/// Runs the ceiling transaction from `concurrency` threads for `duration`; every figure
/// counts webhooks but the latency, which is each transaction's.
pub fn run_ceiling(pool: &DbPool, options: CeilingOptions) -> anyhow::Result<Report> {
    let batch = options.batch.max(1);
    // Each worker holds a connection for the whole run: no more workers than the pool has.
    let concurrency = options.concurrency.clamp(1, pool.max_size() as usize);
    let payload = Bytes::from(vec![b'x'; options.body_bytes]);
    let work = CeilingWork {
        fingerprint: crate::ingest::fingerprint(&payload),
        payload,
        run_id: format!("{:x}", fastrand::u64(..)),
        batch,
    };
    let started = Instant::now();
    let deadline = started + options.duration;
    let results: Vec<anyhow::Result<Histogram<u64>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..concurrency)
            .map(|worker| {
                let work = &work;
                scope.spawn(move || work.run(pool, worker, deadline))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a ceiling worker panicked")))
            })
            .collect()
    });
    let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3)?;
    for result in results {
        histogram.add(result?)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let webhooks = histogram.len() * batch as u64;
    Ok(Report {
        mode: format!("ceiling, {concurrency} connections, {batch} webhooks per transaction"),
        seconds,
        requests: webhooks,
        requests_per_sec: webhooks as f64 / seconds,
        accepted: webhooks,
        accepted_per_sec: webhooks as f64 / seconds,
        statuses: BTreeMap::new(),
        latency_ms: Percentiles::of(&histogram),
    })
}

/// What every ceiling worker writes: the same payload, ids of the run's own.
struct CeilingWork {
    payload: Bytes,
    fingerprint: String,
    run_id: String,
    batch: usize,
}

impl CeilingWork {
    /// One worker: ceiling transactions on a connection of its own until `deadline`, each
    /// one's latency recorded.
    fn run(
        &self,
        pool: &DbPool,
        worker: usize,
        deadline: Instant,
    ) -> anyhow::Result<Histogram<u64>> {
        let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3)?;
        let mut conn = pool.get()?;
        let mut n = 0u64;
        while Instant::now() < deadline {
            let ids: Vec<String> = (0..self.batch)
                .map(|i| format!("ceiling_{}_{worker}_{n}_{i:04}", self.run_id))
                .collect();
            let begun = Instant::now();
            ceiling_transaction(&mut conn, &ids, &self.payload, &self.fingerprint)?;
            let micros = u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX);
            histogram.record(micros.max(1))?;
            n += 1;
        }
        Ok(histogram)
    }
}

/// The largest body the sink reads; bigger ones are refused (and not counted).
const SINK_MAX_BODY: usize = 16 * 1024 * 1024;

/// The sink's state: how long it waits before answering, and what it received.
struct Sink {
    delay: Duration,
    received: AtomicU64,
}

/// Any request but `GET /count`: read the body, wait, count it, answer `200`.
async fn sink_receive(sink: web::Data<Sink>, _body: Bytes) -> HttpResponse {
    tokio::time::sleep(sink.delay).await;
    sink.received.fetch_add(1, Ordering::Relaxed);
    HttpResponse::Ok().finish()
}

/// `GET /count`: the number of requests received so far, as a bare number.
async fn sink_count(sink: web::Data<Sink>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain")
        .body(sink.received.load(Ordering::Relaxed).to_string())
}

/// The sink's routes, sharing `sink`.
fn sink_routes(sink: web::Data<Sink>) -> impl FnOnce(&mut web::ServiceConfig) {
    move |config| {
        config
            .app_data(sink)
            .app_data(web::PayloadConfig::new(SINK_MAX_BODY))
            .route("/count", web::get().to(sink_count))
            .default_service(web::to(sink_receive));
    }
}

/// Serves the sink at `bind` until Ctrl-C or SIGTERM; returns how many requests it
/// received. The wait is a timer, not a thread, so a few workers answer thousands of
/// requests per second: the sink is not what limits an end-to-end run.
pub async fn run_sink(bind: &str, delay: Duration) -> anyhow::Result<u64> {
    let sink = web::Data::new(Sink {
        delay,
        received: AtomicU64::new(0),
    });
    let state = sink.clone();
    let server = HttpServer::new(move || App::new().configure(sink_routes(state.clone())))
        .bind(bind)?
        .run();
    println!(
        "sink listening on {bind}: 200 after {} ms, GET /count for the count",
        delay.as_millis()
    );
    server.await?;
    Ok(sink.received.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::{call_and_read_body, call_service, init_service, TestRequest};

    #[actix_web::test]
    async fn the_sink_answers_200_after_its_delay_and_counts_what_it_received() {
        let sink = web::Data::new(Sink {
            delay: Duration::from_millis(20),
            received: AtomicU64::new(0),
        });
        let app = init_service(App::new().configure(sink_routes(sink.clone()))).await;
        for path in ["/webhooks", "/elsewhere"] {
            let begun = Instant::now();
            let request = TestRequest::post()
                .uri(path)
                .set_payload(vec![b'x'; 100_000])
                .to_request();
            assert_eq!(call_service(&app, request).await.status(), 200);
            assert!(begun.elapsed() >= Duration::from_millis(20));
        }
        let count = call_and_read_body(&app, TestRequest::get().uri("/count").to_request()).await;
        assert_eq!(&count[..], b"2");
        assert_eq!(sink.received.load(Ordering::Relaxed), 2);
    }
}

/// How `inlet bench --evaluate` loads the jq evaluators.
#[derive(Debug, Clone)]
pub struct EvaluateOptions {
    /// The filter, as a destination's `filter` would be written.
    pub expression: String,
    /// How many filters each job decides (an event's filters run in one job).
    pub filters: usize,
    pub concurrency: usize,
    pub duration: Duration,
    pub body_bytes: usize,
    pub limits: crate::jq::Limits,
}

/// Decides `filters` copies of the expression on a Stripe-like payload of `body_bytes`,
/// from `concurrency` callers for `duration`, on the live evaluators as ingest does:
/// evaluations per second (filters, not jobs), and each job's latency.
pub async fn run_evaluations(options: EvaluateOptions) -> anyhow::Result<Report> {
    let expression = options.expression.clone();
    let program = tokio::task::spawn_blocking(move || crate::jq::compile(&expression))
        .await?
        .map_err(|e| anyhow::anyhow!("--evaluate: {e}"))?;
    let programs = vec![program; options.filters.max(1)];
    let payload = evaluation_payload(options.body_bytes);
    let deadline = Instant::now() + options.duration;
    let started = Instant::now();
    let callers: Vec<_> = (0..options.concurrency.max(1))
        .map(|_| {
            let (programs, payload, limits) = (programs.clone(), payload.clone(), options.limits);
            tokio::spawn(async move { evaluate_until(programs, payload, limits, deadline).await })
        })
        .collect();
    let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3)?;
    let mut statuses = BTreeMap::new();
    for caller in callers {
        let (latencies, failed) = caller.await??;
        histogram.add(latencies)?;
        *statuses.entry(500).or_insert(0) += failed;
    }
    let seconds = started.elapsed().as_secs_f64();
    let jobs = histogram.len();
    let evaluations = jobs * programs.len() as u64;
    statuses.insert(200, jobs - statuses.get(&500).copied().unwrap_or(0));
    Ok(Report {
        mode: format!(
            "jq evaluations, {} filter(s) per job, {} callers, {} evaluator processes",
            programs.len(),
            options.concurrency.max(1),
            options.limits.workers
        ),
        seconds,
        requests: evaluations,
        requests_per_sec: evaluations as f64 / seconds,
        accepted: evaluations,
        accepted_per_sec: evaluations as f64 / seconds,
        statuses,
        latency_ms: Percentiles::of(&histogram),
    })
}

/// One caller: jobs until `deadline`, each one's latency, and how many failed.
async fn evaluate_until(
    programs: Vec<crate::jq::Program>,
    payload: Bytes,
    limits: crate::jq::Limits,
    deadline: Instant,
) -> anyhow::Result<(Histogram<u64>, u64)> {
    let mut histogram = Histogram::new_with_bounds(1, 60_000_000, 3)?;
    let mut failed = 0;
    while Instant::now() < deadline {
        let input = crate::jq::Input {
            payload: payload.clone(),
            event_type: Some("bench.event".to_owned()),
            source: "stripe".to_owned(),
            event_id: "evt_bench".to_owned(),
            ..crate::jq::Input::default()
        };
        let begun = Instant::now();
        let decisions =
            crate::jq::decide_each(&programs, input, &limits, crate::jq::Lane::Live).await;
        failed += u64::from(decisions.iter().any(Result::is_err));
        let micros = u64::try_from(begun.elapsed().as_micros()).unwrap_or(u64::MAX);
        histogram.record(micros.max(1))?;
    }
    Ok((histogram, failed))
}

/// A Stripe-like event of about `bytes` bytes (its description padded).
fn evaluation_payload(bytes: usize) -> Bytes {
    let event = serde_json::json!({
        "id": "evt_bench", "object": "event", "type": "bench.event",
        "data": { "object": { "id": "obj_bench", "amount": 4200, "currency": "eur",
                              "description": "" } },
    });
    let padding = bytes.saturating_sub(event.to_string().len());
    let mut event = event;
    event["data"]["object"]["description"] = serde_json::Value::from("x".repeat(padding));
    Bytes::from(event.to_string())
}
