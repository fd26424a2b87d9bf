//! Stand-ins for the user's application and what a test watches through it: deliveries per
//! key, gates, metrics, the bus encoding.

use super::*;
use actix_web::dev::ServerHandle;

/// How many requests a mock application received under each Idempotency-Key.
pub async fn requests_per_key(
    server: &wiremock::MockServer,
) -> std::collections::HashMap<String, usize> {
    let mut per_key = std::collections::HashMap::new();
    for request in server.received_requests().await.unwrap_or_default() {
        *per_key.entry(idempotency_key(&request)).or_default() += 1;
    }
    per_key
}

/// Waits until the application has received `keys` distinct deliveries and `app` has
/// nothing left to send ([`nothing_left_to_send`]), and asserts each key came once: `keys`
/// events, each delivered once. Returns the deliveries per key.
pub async fn each_delivered_once(
    app: &TestApp,
    application: &wiremock::MockServer,
    keys: usize,
) -> std::collections::HashMap<String, usize> {
    eventually(&format!("{keys} deliveries"), || async {
        requests_per_key(application).await.len() == keys
    })
    .await;
    nothing_left_to_send(app).await;
    let per_key = requests_per_key(application).await;
    assert_eq!(per_key.len(), keys, "{per_key:?}");
    assert!(per_key.values().all(|n| *n == 1), "{per_key:?}");
    per_key
}

/// Waits until no delivery is pending or in progress: the dispatcher sends only those, so
/// what the applications received by then is all they will receive. The barrier for a
/// check that nothing more is sent (a preview requeued nothing, a duplicate enqueued
/// nothing), instead of a moment's sleep.
pub async fn nothing_left_to_send(app: &TestApp) {
    use diesel::prelude::*;
    use inlet::db::schema::deliveries;
    eventually("no delivery left pending or in progress", || async {
        let left: i64 = app
            .with_conn(|c| {
                deliveries::table
                    .filter(deliveries::status.eq_any(["pending", "in_progress"]))
                    .count()
                    .get_result(c)
            })
            .await;
        left == 0
    })
    .await;
}

/// The `Idempotency-Key` a delivery carried (empty without one).
pub fn idempotency_key(request: &wiremock::Request) -> String {
    request
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The destination's gate as `GET /admin/destinations` shows it.
pub async fn gate(app: &TestApp, destination: &str) -> serde_json::Value {
    let reply = app.admin("/admin/destinations", None, None).await;
    reply.assert_status(200);
    reply.json()["destinations"]
        .as_array()
        .and_then(|all| all.iter().find(|d| d["destination"] == destination))
        .cloned()
        .unwrap_or_else(|| panic!("no destination {destination} in {}", reply.text()))
}

/// A stand-in for the user's application: answers every POST with `status`.
pub async fn application_answering(status: u16) -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(wiremock::ResponseTemplate::new(status))
        .mount(&server)
        .await;
    server
}

/// Serves `handler` for every request on a port of its own, with `data` (a stand-in for
/// the user's application that a test watches): its URL and its server's handle.
pub fn serve_application<T, F, Args>(
    data: actix_web::web::Data<T>,
    handler: F,
) -> (String, ServerHandle)
where
    T: Send + Sync + 'static,
    F: actix_web::Handler<Args> + Clone + Send + 'static,
    Args: actix_web::FromRequest + 'static,
    F::Output: actix_web::Responder + 'static,
{
    use actix_web::{web, App, HttpServer};
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .default_service(web::to(handler.clone()))
    })
    .workers(2)
    .bind(("127.0.0.1", 0))
    .expect("bind the application");
    let url = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    (url, handle)
}

/// What a watching application saw: deliveries out at once, and per Idempotency-Key.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub in_flight: usize,
    pub most_in_flight: usize,
    /// Idempotency-Key → deliveries received under it.
    pub per_key: std::collections::HashMap<String, usize>,
}

impl Seen {
    /// A delivery arrives: counted under its key and as in flight; how many are out now.
    pub fn arrive(&mut self, request: &actix_web::HttpRequest) -> usize {
        let key = request
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        *self.per_key.entry(key).or_default() += 1;
        self.in_flight += 1;
        self.most_in_flight = self.most_in_flight.max(self.in_flight);
        self.in_flight
    }
}

/// The value of one exposed series (`name{labels}` as Prometheus prints it), 0 when absent.
pub async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.get("/metrics").await.text();
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `inlet_webhooks_total{source, outcome}`, 0 when never counted. The recorder is the
/// process's, shared with the other backend's run: tests compare before and after.
pub async fn webhooks_counted(app: &TestApp, source: &str, outcome: &str) -> f64 {
    let metrics = app.get("/metrics").await.text();
    let labels = [
        format!("source=\"{source}\""),
        format!("outcome=\"{outcome}\""),
    ];
    metrics
        .lines()
        .filter(|line| line.starts_with("inlet_webhooks_total{"))
        .find(|line| labels.iter().all(|label| line.contains(label.as_str())))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The book's bus encoding (docs/src/delivery/event-bus.md), written here independently
/// of Inlet's: a value fills one subject or routing-key token, ASCII letters, digits, `-` and `_` as they are and every
/// other UTF-8 byte as `%XX` (upper-case hex); a fact without a type is `~`.
pub fn bus_token(value: Option<&str>) -> String {
    let Some(value) = value else {
        return "~".to_owned();
    };
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An application that refuses the first `refusals` deliveries for good (422 with
/// `body`), then accepts everything.
pub async fn refusing_first(refusals: u64, body: &str) -> wiremock::MockServer {
    use wiremock::{matchers::method, Mock, ResponseTemplate};
    let server = wiremock::MockServer::start().await;
    if refusals > 0 {
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(422).set_body_string(body))
            .up_to_n_times(refusals)
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

/// Posts `count` Stripe events (ids `{prefix}_{i}`, of `types` in turn), 25 at a time,
/// each answered 200.
pub async fn post_events(
    app: &std::sync::Arc<TestApp>,
    prefix: &str,
    count: usize,
    types: &[&str],
) {
    let ids: Vec<(String, String)> = (0..count)
        .map(|i| (format!("{prefix}_{i}"), types[i % types.len()].to_owned()))
        .collect();
    for chunk in ids.chunks(25) {
        let mut posts = tokio::task::JoinSet::new();
        for (id, event_type) in chunk {
            let (app, id, event_type) = (app.clone(), id.clone(), event_type.clone());
            posts.spawn(async move {
                let body = stripe_event(&id, &event_type, &format!("obj_{id}"));
                app.post_stripe(&body).await.status
            });
        }
        assert!(posts.join_all().await.iter().all(|s| *s == 200));
    }
}
