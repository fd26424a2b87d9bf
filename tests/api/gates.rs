//! What protects a destination, shared through the database by every Inlet instance: the
//! circuit breaker, `max_in_flight` and `rate`. The test clock is frozen unless a test
//! moves it, so retries and cool-downs come due only when the test says so.

use crate::helpers::{
    eventually, eventually_within, gate, serve_application, spawn_app_with, stripe_event, Backend,
    Seen, TestApp, TestOptions,
};
use crate::on_both_backends;
use diesel::prelude::*;
use inlet::db::schema::deliveries;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

on_both_backends!(
    a_failing_destination_opens_stops_receiving_is_probed_and_closes,
    two_instances_share_the_breaker_and_never_pass_max_in_flight,
    a_backlog_drains_at_the_configured_rate,
    a_held_or_limited_destination_does_not_hold_up_the_others,
    a_slow_destination_leaves_slots_for_the_others,
    each_of_many_destinations_gets_its_delivery_once_when_slots_are_shared,
    slow_destinations_arriving_in_turn_leave_a_slot_for_a_healthy_one,
);

const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A destination table for `url` named `name`, with quick retries and `extra` lines.
fn destination(url: &str, name: &str, extra: &str) -> String {
    format!(
        "url = \"{url}/events\"\nsecret = \"{APP_SECRET}\"\nname = \"{name}\"\n\
         retry_base = \"20ms\"\nretry_cap = \"100ms\"\n{extra}"
    )
}

/// A destination name no other test uses: the metrics are shared by every test.
fn name(what: &str, backend: Backend) -> String {
    format!("{what}-{backend:?}").to_lowercase()
}

async fn answering(server: &MockServer, status: u16) {
    server.reset().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status))
        .mount(server)
        .await;
}

async fn received(server: &MockServer) -> usize {
    server.received_requests().await.map_or(0, |r| r.len())
}

/// Posts `count` new facts, 20 at a time.
async fn post_facts(app: &Arc<TestApp>, prefix: &str, count: usize) {
    post_facts_of_type(app, prefix, count, "charge.succeeded").await;
}

/// Posts `count` new facts of `event_type`, 20 at a time.
async fn post_facts_of_type(app: &Arc<TestApp>, prefix: &str, count: usize, event_type: &str) {
    let mut sent = 0;
    while sent < count {
        let tasks: Vec<_> = (sent..count.min(sent + 20))
            .map(|n| {
                let app = app.clone();
                let body = stripe_event(
                    &format!("evt_{prefix}_{n}"),
                    event_type,
                    &format!("ch_{prefix}_{n}"),
                );
                tokio::spawn(async move { app.post_stripe(&body).await })
            })
            .collect();
        sent += tasks.len();
        for task in tasks {
            task.await.expect("request task").assert_status(200);
        }
    }
}

async fn breaker(app: &TestApp, destination: &str) -> String {
    gate(app, destination).await["breaker"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn delivered(app: &TestApp) -> i64 {
    app.with_conn(|c| {
        deliveries::table
            .filter(deliveries::status.eq("delivered"))
            .count()
            .get_result(c)
    })
    .await
}

/// Deliveries with an attempt that ended in an error (a timeout, say).
async fn ended(app: &TestApp) -> i64 {
    app.with_conn(|c| {
        deliveries::table
            .filter(deliveries::last_error.is_not_null())
            .count()
            .get_result(c)
    })
    .await
}

/// Gives the dispatcher (polling every 50 ms) time to do what it should not.
async fn let_it_poll() {
    // Real time must pass: what is checked is that nothing more is sent (while a breaker
    // is open, past a rate or a share), and nothing marks the absence of a request.
    tokio::time::sleep(Duration::from_millis(400)).await;
}

/// `inlet_breaker_transitions_total` for `destination`, by state reached.
async fn transitions(app: &TestApp, destination: &str) -> HashMap<String, f64> {
    let text = app.get("/metrics").await.text();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the metrics parse");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == "inlet_breaker_transitions_total")
        .filter(|s| s.labels.get("destination") == Some(destination))
        .filter_map(|s| match s.value {
            prometheus_parse::Value::Counter(n) => Some((s.labels.get("to")?.to_owned(), n)),
            _ => None,
        })
        .collect()
}

async fn a_failing_destination_opens_stops_receiving_is_probed_and_closes(backend: Backend) {
    let server = MockServer::start().await;
    answering(&server, 500).await;
    let app_name = name("breaker", backend);
    let breaker_lines = "breaker = { failures = 3, cooldown = \"30s\", cooldown_cap = \"45s\" }";
    let options = TestOptions {
        destination: Some(destination(&server.uri(), &app_name, breaker_lines)),
        clock_stopped: true,
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_facts(&app, "first", 3).await;
    eventually("the breaker to open", || async {
        breaker(&app, &app_name).await == "open"
    })
    .await;
    assert_eq!(received(&server).await, 3, "three failures open it");
    let open = gate(&app, &app_name).await;
    assert_eq!(open["consecutive_failures"], 3);
    assert_eq!(open["cooldown_ms"], 30_000);

    // While open, nothing is sent: neither the retries nor new facts.
    post_facts(&app, "while_open", 2).await;
    app.clock.advance(chrono::Duration::seconds(29));
    let_it_poll().await;
    assert_eq!(received(&server).await, 3, "nothing is sent while open");

    // The cool-down has passed: one probe, which fails and reopens for twice as long,
    // capped at 45 s.
    app.clock.advance(chrono::Duration::seconds(1));
    eventually("one probe", || async { received(&server).await == 4 }).await;
    eventually("the failed probe to reopen it", || async {
        gate(&app, &app_name).await["cooldown_ms"] == 45_000
    })
    .await;
    let_it_poll().await;
    assert_eq!(received(&server).await, 4, "a single probe at a time");
    assert_eq!(breaker(&app, &app_name).await, "open");

    // The application recovers: the next probe closes it and the backlog drains.
    answering(&server, 200).await;
    app.clock.advance(chrono::Duration::seconds(45));
    eventually("every fact to be delivered", || async {
        delivered(&app).await == 5
    })
    .await;
    let closed = gate(&app, &app_name).await;
    assert_eq!(closed["breaker"], "closed");
    assert_eq!(closed["consecutive_failures"], 0);
    let counted = transitions(&app, &app_name).await;
    assert_eq!(counted.get("open"), Some(&2.0), "{counted:?}");
    assert_eq!(counted.get("half_open"), Some(&2.0), "{counted:?}");
    assert_eq!(counted.get("closed"), Some(&1.0), "{counted:?}");
}

/// An application that answers every delivery after `delay`, with a status the test
/// sets, and counts how many it holds at once and how often each key arrives.
struct SlowApp {
    url: String,
    state: Arc<Slow>,
    _server: actix_web::dev::ServerHandle,
}

#[derive(Default)]
struct Slow {
    status: AtomicU16,
    seen: Mutex<Seen>,
}

impl SlowApp {
    async fn start() -> Self {
        let state = Arc::new(Slow::default());
        state.status.store(200, Ordering::SeqCst);
        let data = actix_web::web::Data::from(state.clone());
        let (url, handle) = serve_application(data, answer_slowly);
        Self {
            url,
            state,
            _server: handle,
        }
    }

    fn seen(&self) -> Seen {
        self.state.seen.lock().expect("seen").clone()
    }

    fn answer_with(&self, status: u16) {
        self.state.status.store(status, Ordering::SeqCst);
    }
}

async fn answer_slowly(
    request: actix_web::HttpRequest,
    state: actix_web::web::Data<Slow>,
) -> actix_web::HttpResponse {
    state.seen.lock().expect("seen").arrive(&request);
    // Real time must pass: a slow application, so that deliveries overlap in flight.
    tokio::time::sleep(Duration::from_millis(100)).await;
    state.seen.lock().expect("seen").in_flight -= 1;
    let status = state.status.load(Ordering::SeqCst);
    actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("a status"))
        .finish()
}

async fn two_instances_share_the_breaker_and_never_pass_max_in_flight(backend: Backend) {
    let application = SlowApp::start().await;
    let app_name = name("shared", backend);
    let lines = "max_in_flight = 3\nbreaker = { failures = 2, cooldown = \"10m\" }";
    let options = || TestOptions {
        destination: Some(destination(&application.url, &app_name, lines)),
        clock_stopped: true,
        ..Default::default()
    };
    let first = Arc::new(spawn_app_with(backend, options()).await);
    let second = Arc::new(first.another_instance(options()).await);

    // 40 facts, half through each instance; both dispatch.
    tokio::join!(
        post_facts(&first, "one", 20),
        post_facts(&second, "two", 20)
    );
    eventually("all 40 to be delivered", || async {
        delivered(&first).await == 40
    })
    .await;
    let seen = application.seen();
    assert!(
        seen.most_in_flight <= 3,
        "two instances together held {} deliveries in flight, over max_in_flight = 3",
        seen.most_in_flight
    );
    assert!(
        seen.most_in_flight >= 2,
        "deliveries never overlapped: {seen:?}"
    );
    assert_eq!(seen.per_key.len(), 40);
    assert!(seen.per_key.values().all(|n| *n == 1), "{seen:?}");

    // Two failures through the first instance open the breaker for both.
    application.answer_with(503);
    post_facts(&first, "failing", 2).await;
    eventually("the second instance to see the breaker open", || async {
        breaker(&second, &app_name).await == "open"
    })
    .await;
    assert_eq!(breaker(&first, &app_name).await, "open");
    let before = application.seen().per_key.len();
    post_facts(&second, "held", 3).await;
    let_it_poll().await;
    assert_eq!(
        application.seen().per_key.len(),
        before,
        "neither instance sends while the breaker is open"
    );
}

/// `rate = 50`: with the clock frozen, the full bucket lets 50 through at once; each
/// second the test moves the clock lets exactly 50 more through, never more.
async fn a_backlog_drains_at_the_configured_rate(backend: Backend) {
    let server = MockServer::start().await;
    answering(&server, 200).await;
    let app_name = name("paced", backend);
    let options = TestOptions {
        destination: Some(destination(&server.uri(), &app_name, "rate = 50")),
        clock_stopped: true,
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_facts(&app, "backlog", 1_000).await;
    let mut seconds = 0;
    loop {
        let expected = (50 * (seconds + 1)).min(1_000);
        eventually(
            &format!("{expected} deliveries after {seconds} s"),
            || async { delivered(&app).await >= expected },
        )
        .await;
        let_it_poll().await;
        assert_eq!(
            delivered(&app).await,
            expected,
            "no more than rate × elapsed + burst after {seconds} s"
        );
        if expected == 1_000 {
            break;
        }
        app.clock.advance(chrono::Duration::seconds(1));
        seconds += 1;
    }
    // 1,000 deliveries: 50 at once, then 50 a second for 19 seconds of the clock.
    assert_eq!(seconds, 19);
    assert_eq!(received(&server).await, 1_000);
}

/// Three destinations of one source: one paced (`rate = 200`, more than a lease round
/// takes), one whose breaker opens at its first failure, one without gates. The paced
/// one's allowance and the open one's backlog take nothing from the free one: each fact
/// reaches the free and the paced application once.
async fn a_held_or_limited_destination_does_not_hold_up_the_others(backend: Backend) {
    let (paced, down, free) = (
        MockServer::start().await,
        MockServer::start().await,
        MockServer::start().await,
    );
    answering(&paced, 200).await;
    answering(&down, 503).await;
    answering(&free, 200).await;
    let names = [
        name("paced-of-three", backend),
        name("down-of-three", backend),
        name("free-of-three", backend),
    ];
    let tables = [
        destination(&paced.uri(), &names[0], "rate = 200"),
        destination(&down.uri(), &names[1], "breaker = { failures = 1 }"),
        destination(&free.uri(), &names[2], ""),
    ];
    let options = TestOptions {
        destination: Some(tables.join("\n[[sources.destinations]]\n")),
        clock_stopped: true,
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_facts(&app, "three_first", 10).await;
    eventually("the failing destination's breaker to open", || async {
        breaker(&app, &names[1]).await == "open"
    })
    .await;
    // The first ten were out at once before the first failure came back.
    eventually("the first ten to be settled", || async {
        delivered(&app).await >= 20
    })
    .await;
    let let_through = received(&down).await;
    post_facts(&app, "three_then", 40).await;
    eventually(
        "the paced and the free application to get all 50",
        || async { received(&paced).await == 50 && received(&free).await == 50 },
    )
    .await;
    let_it_poll().await;
    assert_eq!(received(&free).await, 50, "once each");
    assert_eq!(received(&paced).await, 50, "once each");
    assert_eq!(
        received(&down).await,
        let_through,
        "the open breaker let nothing more through"
    );
}

/// A destination that accepts every connection and never answers: each request to it
/// stays in flight until its attempt times out. Its URL, and how many it has taken.
async fn never_answering() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (url, accepted, task)
}

/// `delivery.concurrency = 16`, and a destination that never answers with 40 deliveries
/// due: it holds no more than its share of the slots (half, while it is the only one
/// sending), so a destination of the same source and one of another source get their
/// first attempt while every request to it still hangs — none of its attempts has ended.
async fn a_slow_destination_leaves_slots_for_the_others(backend: Backend) {
    let (slow_url, hanging, slow) = never_answering().await;
    let (fast, other) = (MockServer::start().await, MockServer::start().await);
    answering(&fast, 200).await;
    answering(&other, 200).await;
    let names = [
        name("hanging", backend),
        name("beside-hanging", backend),
        name("apart-from-hanging", backend),
    ];
    let tables = [
        destination(
            &slow_url,
            &names[0],
            "timeout = \"12s\"\nevents = [\"slow.*\"]",
        ),
        destination(&fast.uri(), &names[1], "events = [\"fast.*\"]"),
    ];
    let other_source = format!(
        "\n[[sources]]\nname = \"other\"\nscheme = \"standard\"\nsecrets = [\"{APP_SECRET}\"]\n\
         [[sources.destinations]]\n{}\n",
        destination(&other.uri(), &names[2], "")
    );
    let options = TestOptions {
        destination: Some(tables.join("\n[[sources.destinations]]\n")),
        extra_sources: other_source,
        delivery_concurrency: Some(16),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_facts_of_type(&app, "hanging", 40, "slow.thing").await;
    eventually("the hanging destination to take its share", || async {
        hanging.load(Ordering::SeqCst) >= 8
    })
    .await;
    let_it_poll().await;

    post_facts_of_type(&app, "beside", 1, "fast.thing").await;
    let body = serde_json::json!({"type": "other.thing", "n": 1}).to_string();
    app.post_signed("other", body.as_bytes(), "msg_apart_1", None)
        .await
        .assert_status(200);
    eventually("both other destinations' first attempts", || async {
        received(&fast).await == 1 && received(&other).await == 1
    })
    .await;
    assert_eq!(hanging.load(Ordering::SeqCst), 8, "half of the 16 slots");
    assert_eq!(
        ended(&app).await,
        0,
        "no request to the hanging destination has ended yet"
    );
    slow.abort();
}

/// 600 destinations and 4 slots: no destination may take the round, so each is leased on
/// its own — among those the database finds due, asked 500 at a time. Every destination,
/// on either side of that boundary, gets its one delivery, once.
async fn each_of_many_destinations_gets_its_delivery_once_when_slots_are_shared(backend: Backend) {
    const DESTINATIONS: usize = 600;
    let server = MockServer::start().await;
    answering(&server, 200).await;
    let tables: Vec<String> = (0..DESTINATIONS)
        .map(|n| {
            let url = format!("{}/d{n:03}", server.uri());
            destination(&url, &name(&format!("many-{n:03}"), backend), "")
        })
        .collect();
    let options = TestOptions {
        destination: Some(tables.join("\n[[sources.destinations]]\n")),
        delivery_concurrency: Some(4),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    post_facts(&app, "many", 1).await;
    let all = i64::try_from(DESTINATIONS).expect("a count");
    let limit = std::time::Duration::from_secs(90);
    eventually_within("every destination's delivery", limit, || async {
        delivered(&app).await == all
    })
    .await;
    let_it_poll().await;
    let requests = server.received_requests().await.unwrap_or_default();
    let paths: std::collections::BTreeSet<String> =
        requests.iter().map(|r| r.url.path().to_owned()).collect();
    assert_eq!(requests.len(), DESTINATIONS, "one request per destination");
    assert_eq!(paths.len(), DESTINATIONS, "every destination, none twice");
    assert!(paths.contains("/d599/events") && paths.contains("/d000/events"));
}

/// `delivery.concurrency = 16` and three destinations that never answer, each with 40
/// deliveries due, arriving one after another: each takes what it is given (8, then 4,
/// then 1) and holds it, yet a slot stays free, so a healthy destination's first attempt
/// goes out while every request to the three still hangs. (Each taking its whole share —
/// 8, 5, 3 — would leave it waiting for one of theirs to time out.)
async fn slow_destinations_arriving_in_turn_leave_a_slot_for_a_healthy_one(backend: Backend) {
    let mut slow = Vec::new();
    for _ in 0..3 {
        slow.push(never_answering().await);
    }
    let fast = MockServer::start().await;
    answering(&fast, 200).await;
    let mut tables: Vec<String> = slow
        .iter()
        .enumerate()
        .map(|(n, (url, _, _))| {
            let events = format!("timeout = \"12s\"\nevents = [\"slow{n}.*\"]");
            destination(url, &name(&format!("in-turn-{n}"), backend), &events)
        })
        .collect();
    tables.push(destination(
        &fast.uri(),
        &name("after-three-slow", backend),
        "events = [\"fast.*\"]",
    ));
    let options = TestOptions {
        destination: Some(tables.join("\n[[sources.destinations]]\n")),
        delivery_concurrency: Some(16),
        ..Default::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    for (n, (_, hanging, _)) in slow.iter().enumerate() {
        post_facts_of_type(&app, &format!("in-turn-{n}"), 40, &format!("slow{n}.thing")).await;
        eventually("the slow destination to take what it is given", || async {
            hanging.load(Ordering::SeqCst) >= 1
        })
        .await;
        let_it_poll().await;
    }
    let taken: Vec<usize> = slow
        .iter()
        .map(|(_, h, _)| h.load(Ordering::SeqCst))
        .collect();
    assert!(
        taken.iter().sum::<usize>() < 16,
        "a slot is left: {taken:?}"
    );

    post_facts_of_type(&app, "after-three-slow", 1, "fast.thing").await;
    eventually("the healthy destination's first attempt", || async {
        received(&fast).await == 1
    })
    .await;
    assert_eq!(
        ended(&app).await,
        0,
        "no request to a slow destination has ended yet"
    );
    for (_, _, task) in slow {
        task.abort();
    }
}
