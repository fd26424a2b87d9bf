//! The real `inlet` process: SIGTERM under load loses nothing acknowledged, answers every
//! request it has begun to read, exits 0, and a restart carries on delivering.

use crate::helpers::{
    eventually, holds_within, sigterm, spawn_database_holder, start_process,
    start_process_reading_logs, stripe_event, stripe_signature, wait_exit, Backend, TestApp,
    STRIPE_SECRET,
};
use crate::on_both_backends;
use diesel::prelude::*;
use inlet::db::schema::{deliveries, events};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    sigterm_under_load_loses_nothing_and_a_restart_carries_on,
    a_stalled_log_reader_never_stalls_requests,
);

fn config(app: &TestApp, dir: &std::path::Path, destination: &str) -> std::path::PathBuf {
    let path = dir.join("inlet.toml");
    let toml = format!(
        "[server]\nbind = \"127.0.0.1:0\"\nworkers = 2\nshutdown_grace = \"2s\"\n\
         [database]\nurl = \"{}\"\npool_size = 8\n\
         [delivery]\npoll_interval = \"50ms\"\nlease = \"15s\"\n\
         [retention]\nsweeper = false\n\
         [[sources]]\nname = \"stripe\"\nscheme = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         [[sources.destinations]]\nurl = \"{destination}/events\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ntimeout = \"10s\"\n",
        app.database_url()
    );
    std::fs::write(&path, toml).expect("write config");
    path
}

/// One client request's fate.
struct Sent {
    event_id: String,
    result: Result<u16, String>,
}

async fn sigterm_under_load_loses_nothing_and_a_restart_carries_on(backend: Backend) {
    // The application is slow: deliveries are in flight when SIGTERM comes.
    let application = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&application)
        .await;
    let holder = spawn_database_holder(backend).await;
    let dir = std::env::temp_dir().join(format!(
        "inlet-lifecycle-{}-{backend:?}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = config(&holder, &dir, &application.uri());
    let mut process = tokio::task::spawn_blocking({
        let config = config.clone();
        move || start_process(&config)
    })
    .await
    .expect("start");
    let url = format!("http://127.0.0.1:{}/webhooks/stripe", process.port);

    // Sixteen clients, a fresh connection per request, until the server is gone.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..16 {
        let (client, url, sent) = (client.clone(), url.clone(), sent.clone());
        clients.spawn(async move {
            for i in 0.. {
                let event_id = format!("evt_term_{c}_{i}");
                let body = serde_json::json!({"id": event_id, "type": "charge.captured", "data": {"object": {"id": event_id}}})
                    .to_string();
                let signature = stripe_signature(STRIPE_SECRET, body.as_bytes(), chrono::Utc::now().timestamp());
                let result = client
                    .post(&url)
                    .header("Stripe-Signature", signature)
                    .body(body)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .map_err(|e| format!("{e:?}"));
                let failed = result.is_err();
                sent.lock().expect("lock").push(Sent { event_id, result });
                if failed {
                    break;
                }
            }
        });
    }
    // Until the load has run (a count, not a time: the machine may be busy); at most 30 s,
    // then on regardless, as the signal would come under any load.
    holds_within(Duration::from_secs(30), || async {
        let answered = sent
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| s.result.is_ok())
            .count();
        answered > 20
    })
    .await;
    // Requests Inlet has begun to handle when the signal comes: their heads read (Inlet
    // answered `100 Continue`), their bodies still to come.
    let mut held = Vec::new();
    for n in 0..4 {
        held.push(HeldRequest::open(process.port, &format!("evt_term_held_{n}")).await);
    }
    sigterm(&process);
    // Real time must pass: nothing outside marks that Inlet has taken the signal; a moment
    // lets the shutdown begin before the held bodies come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let finishing: Vec<_> = held.into_iter().map(|r| tokio::spawn(r.finish())).collect();
    let mut finished = Vec::new();
    for request in finishing {
        finished.push(request.await.expect("a held request"));
    }
    assert_eq!(
        finished, [200; 4],
        "requests under way at SIGTERM are answered"
    );
    while let Some(done) = clients.join_next().await {
        done.expect("client task");
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = wait_exit(&mut process, Duration::from_secs(20));
        (status, process)
    })
    .await
    .expect("wait task");
    assert_eq!(status.0.code(), Some(0), "a clean exit after SIGTERM");

    let sent = std::mem::take(&mut *sent.lock().expect("lock"));
    let acknowledged: Vec<&Sent> = sent
        .iter()
        .filter(|s| matches!(s.result, Ok(200..=299)))
        .collect();
    assert!(
        acknowledged.len() > 20,
        "the load ran: {} acknowledged",
        acknowledged.len()
    );
    for request in &sent {
        if let Ok(status) = request.result {
            assert_eq!(
                status, 200,
                "{}: every answer before shutdown is a success",
                request.event_id
            );
        }
    }

    // Everything acknowledged is in the database, with its delivery.
    let stored: Vec<String> = {
        let pool = holder.pool.clone();
        tokio::task::spawn_blocking(move || {
            events::table
                .select(events::event_id)
                .load::<String>(&mut pool.get().expect("conn"))
                .expect("events")
        })
        .await
        .expect("query")
    };
    for request in &acknowledged {
        assert!(
            stored.contains(&request.event_id),
            "{} was acknowledged but not stored",
            request.event_id
        );
    }
    let statuses = delivery_statuses(&holder).await;
    assert_eq!(
        statuses.len(),
        stored.len(),
        "one delivery per accepted fact"
    );
    assert!(
        !statuses.iter().any(|s| s == "in_progress"),
        "no delivery left in_progress: {statuses:?}"
    );

    // The application recovers; a restarted Inlet delivers everything left.
    application.reset().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&application)
        .await;
    let mut restarted = tokio::task::spawn_blocking(move || start_process(&config))
        .await
        .expect("restart");
    eventually("every delivery completed after the restart", || async {
        delivery_statuses(&holder)
            .await
            .iter()
            .all(|s| s == "delivered")
    })
    .await;
    sigterm(&restarted);
    let status =
        tokio::task::spawn_blocking(move || wait_exit(&mut restarted, Duration::from_secs(20)))
            .await
            .expect("wait");
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A webhook Inlet has begun to handle when the signal comes: sent by hand with
/// `Expect: 100-continue`, its head goes out in [`Self::open`], which waits for Inlet's
/// `100 Continue` (so Inlet has parsed it and waits for the body, whatever the load),
/// and its body in [`Self::finish`].
struct HeldRequest {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    body: Vec<u8>,
}

impl HeldRequest {
    /// Opens the request, or panics when Inlet does not answer `100 Continue` in 10 s.
    async fn open(port: u16, event_id: &str) -> Self {
        tokio::time::timeout(Duration::from_secs(10), Self::open_now(port, event_id))
            .await
            .expect("Inlet answers 100 Continue within 10 s")
    }

    async fn open_now(port: u16, event_id: &str) -> Self {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let mut stream = tokio::io::BufReader::new(stream);
        let body = stripe_event(event_id, "charge.captured", event_id);
        let signature = stripe_signature(STRIPE_SECRET, &body, chrono::Utc::now().timestamp());
        let head = format!(
            "POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1\r\nStripe-Signature: {signature}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\
             Expect: 100-continue\r\n\r\n",
            body.len()
        );
        stream
            .get_mut()
            .write_all(head.as_bytes())
            .await
            .expect("send the head");
        let mut line = String::new();
        stream
            .read_line(&mut line)
            .await
            .expect("an interim answer");
        assert!(
            line.starts_with("HTTP/1.1 100"),
            "100 Continue, not {line:?}"
        );
        line.clear();
        stream.read_line(&mut line).await.expect("its end");
        Self { stream, body }
    }

    /// Sends the body: the answer's status, or 0 when none comes within 10 s.
    async fn finish(mut self) -> u16 {
        let answer = async {
            self.stream.get_mut().write_all(&self.body).await.ok()?;
            Some(read_status(&mut self.stream).await)
        };
        tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .ok()
            .flatten()
            .unwrap_or(0)
    }
}

/// Reads one response: its status (its body is read and dropped), or 0 when the
/// connection fails first.
async fn read_status(stream: &mut tokio::io::BufReader<tokio::net::TcpStream>) -> u16 {
    let mut line = String::new();
    if stream.read_line(&mut line).await.is_err() {
        return 0;
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0;
    loop {
        let mut header = String::new();
        if stream.read_line(&mut header).await.is_err() {
            return 0;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if stream.read_exact(&mut body).await.is_err() {
        return 0;
    }
    status
}

async fn delivery_statuses(app: &TestApp) -> Vec<String> {
    let pool = app.pool.clone();
    tokio::task::spawn_blocking(move || {
        deliveries::table
            .select(deliveries::status)
            .load::<String>(&mut pool.get().expect("conn"))
            .expect("deliveries")
    })
    .await
    .expect("query")
}

/// Logs go to a pipe nobody reads (a stuck log shipper): after the pipe's 64 KiB fill, a
/// process that wrote logs on its request threads would hang every request. 600 webhooks,
/// 24 at a time, are all answered, and so is /healthz.
async fn a_stalled_log_reader_never_stalls_requests(backend: Backend) {
    let application = MockServer::start().await;
    let holder = spawn_database_holder(backend).await;
    let dir = std::env::temp_dir().join(format!(
        "inlet-stalled-logs-{}-{backend:?}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = config(&holder, &dir, &application.uri());
    let process = tokio::task::spawn_blocking(move || start_process_reading_logs(&config, false))
        .await
        .expect("start");
    let url = format!("http://127.0.0.1:{}", process.port);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let semaphore = Arc::new(tokio::sync::Semaphore::new(24));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..600 {
        let (client, url, semaphore) = (client.clone(), url.clone(), semaphore.clone());
        tasks.spawn(async move {
            let _permit = semaphore.acquire().await.expect("permit");
            let body = stripe_event(&format!("evt_log_{i}"), "charge.refunded", "ch");
            let signature = stripe_signature(STRIPE_SECRET, &body, chrono::Utc::now().timestamp());
            client
                .post(format!("{url}/webhooks/stripe"))
                .header("Stripe-Signature", signature)
                .body(body)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string())
        });
    }
    let mut answered = 0;
    while let Some(result) = tasks.join_next().await {
        assert_eq!(result.expect("task"), Ok(200));
        answered += 1;
    }
    assert_eq!(answered, 600);
    let health = client
        .get(format!("{url}/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
    drop(process);
    let _ = std::fs::remove_dir_all(&dir);
}
