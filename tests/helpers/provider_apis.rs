//! Stand-ins for the providers' own ledgers of events, for the reconciliation tests:
//! Stripe's `GET /v1/events`, GitHub's webhook deliveries (repository, organisation and
//! App hooks) and Paddle Billing's notifications. They are written from the providers'
//! public API documentation, not from Inlet's code, so a test checks Inlet against what
//! the providers document rather than against Inlet's own reading of it.
//!
//! Each stand-in is an actix-web server on 127.0.0.1:0 ([`super::serve_application`])
//! with its ledger behind one mutex. A test records what the provider sent (or failed to
//! send) while Inlet was down, points Inlet's `api_url` at [`ProviderApi::url`], and
//! watches what Inlet asked ([`ProviderApi::requests`]), what it had resent
//! ([`ProviderApi::resends`]) and, once [`ProviderApi::settled`], what the resends did.
//!
//! Documentation followed (as read in 2026):
//! - Stripe: <https://docs.stripe.com/api/events/list>, <https://docs.stripe.com/api/pagination>,
//!   <https://docs.stripe.com/api/authentication>, <https://docs.stripe.com/api/errors>.
//! - GitHub: <https://docs.github.com/en/rest/webhooks/repo-deliveries>,
//!   <https://docs.github.com/en/rest/webhooks/org-deliveries>,
//!   <https://docs.github.com/en/rest/apps/webhooks> (`/app/hook/deliveries`),
//!   <https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers>,
//!   <https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app>.
//! - Paddle: <https://developer.paddle.com/api-reference/notifications/list-notifications>,
//!   <https://developer.paddle.com/api-reference/notifications/replay-notification>,
//!   <https://developer.paddle.com/api-reference/about/pagination>,
//!   <https://developer.paddle.com/webhooks/signature-verification>,
//!   <https://developer.paddle.com/errors/shared/invalid_token> and its sibling error pages.
//!
//! Not modelled: the providers' retention windows (Stripe lists 30 days of events, GitHub
//! keeps 3 days of deliveries, Paddle 90 days of notifications); every recorded entry
//! stays listable.

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use base64::Engine;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::Sha256;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The notification destination every Paddle notification of a stand-in belongs to, for a
/// test that filters on `notification_setting_id`.
pub const PADDLE_NOTIFICATION_SETTING_ID: &str = "ntfset_01inletreconcile0000000000";

/// The `api_version` a Stripe event gets when the test gave none.
const STRIPE_API_VERSION: &str = "2024-06-20";

/// GitHub delivery ids are past `u32` (a client reading them as 32-bit breaks here too).
const GITHUB_DELIVERY_ID_BASE: i64 = 40_000_000_000;

/// The hook id GitHub names in `X-GitHub-Hook-ID` for an App's single webhook.
const GITHUB_APP_HOOK_ID: i64 = 300_000_001;

/// Paddle's notification statuses (list notifications, `status`).
const PADDLE_STATUSES: [&str; 4] = ["not_attempted", "needs_retry", "delivered", "failed"];

/// How long a resend waits for Inlet's answer: below [`super::eventually`]'s 15 s, so
/// [`ProviderApi::settled`] sees a hung Inlet as an unanswered resend, not a hang.
const RESEND_TIMEOUT: Duration = Duration::from_secs(10);

/// One request a stand-in received: what Inlet asked and how it authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    pub method: String,
    /// The path with its query string as sent (`/v1/events?limit=100`).
    pub path: String,
    /// The `Authorization` header's value, `None` without one.
    pub authorization: Option<String>,
}

/// A provider's API on a port of its own, with the ledger a test fills.
pub struct ProviderApi {
    /// `http://127.0.0.1:PORT`: the provider's `api_url` in Inlet's configuration.
    pub url: String,
    shared: Arc<Shared>,
    _server: ServerHandle,
}

/// What the server's handlers and the resend tasks share.
struct Shared {
    provider: Provider,
    ledger: Mutex<Ledger>,
    /// Resends go out with their own client, as the provider's would.
    client: reqwest::Client,
    /// The test's runtime: resends run there, not on the server's worker threads.
    runtime: tokio::runtime::Handle,
    /// `url`, known once the server is bound; absolute `next` links are built from it.
    base_url: OnceLock<String>,
}

impl Shared {
    fn base_url(&self) -> &str {
        self.base_url.get().map(String::as_str).unwrap_or_default()
    }
}

/// Which provider a stand-in plays, and what it needs to check and resend.
enum Provider {
    Stripe {
        key: String,
    },
    GitHub {
        hook: GitHubHook,
        credential: GitHubCredential,
        target: Target,
    },
    Paddle {
        key: String,
        target: Target,
    },
}

impl Provider {
    fn name(&self) -> &'static str {
        match self {
            Self::Stripe { .. } => "Stripe",
            Self::GitHub { .. } => "GitHub",
            Self::Paddle { .. } => "Paddle",
        }
    }
}

/// Where resends go (Inlet's full webhook URL: settable, as Inlet's port is known only
/// once it runs, [`ProviderApi::deliver_to`]) and the secret they are signed with.
struct Target {
    inlet_url: Mutex<String>,
    secret: String,
}

impl Target {
    fn new(inlet_url: &str, secret: &str) -> Self {
        Self {
            inlet_url: Mutex::new(inlet_url.to_owned()),
            secret: secret.to_owned(),
        }
    }

    fn url(&self) -> String {
        self.inlet_url.lock().clone()
    }
}

/// Everything the provider holds: its events, the planned faults, and what it saw.
#[derive(Default)]
struct Ledger {
    stripe: Vec<StripeEvent>,
    github: Vec<GitHubDelivery>,
    paddle: Vec<PaddleNotification>,
    fault: Option<Fault>,
    requests: Vec<SeenRequest>,
    resends: Vec<String>,
    /// Resends sent and not yet answered by Inlet.
    in_flight: usize,
    counter: i64,
}

impl Ledger {
    /// A number never given before: ids of deliveries and notifications.
    fn fresh(&mut self) -> i64 {
        self.counter += 1;
        self.counter
    }

    /// Takes one request's worth of the planned fault, if any is left.
    fn take_fault(&mut self) -> Option<Fault> {
        let mut fault = self.fault.take()?;
        if fault.skip > 0 {
            fault.skip -= 1;
            self.fault = Some(fault);
            return None;
        }
        if fault.remaining == 0 {
            return None;
        }
        fault.remaining -= 1;
        if fault.remaining > 0 {
            self.fault = Some(fault);
        }
        Some(fault)
    }
}

/// The next `remaining` requests (after `skip` more answered as usual) are answered
/// `status`, with `Retry-After` when set.
#[derive(Debug, Clone, Copy)]
struct Fault {
    skip: usize,
    remaining: usize,
    status: u16,
    retry_after: Option<u64>,
}

impl ProviderApi {
    /// Stripe's API with secret key `key`: `GET /v1/events` and `GET /v1/events/{id}`.
    pub async fn stripe(key: &str) -> Self {
        Self::start(Provider::Stripe {
            key: key.to_owned(),
        })
    }

    /// GitHub's deliveries of one repository or organisation hook (`repos/OWNER/REPO/hooks/ID`
    /// or `orgs/ORG/hooks/ID`), read with a token; redeliveries go to `inlet_url` signed
    /// with `secret`. An App's hook takes a JWT instead: [`ProviderApi::github_app`].
    pub async fn github(token: &str, hook: &str, inlet_url: &str, secret: &str) -> Self {
        Self::start(Provider::GitHub {
            hook: GitHubHook::parse(hook),
            credential: GitHubCredential::Token(token.to_owned()),
            target: Target::new(inlet_url, secret),
        })
    }

    /// A GitHub App's webhook deliveries, under `/app/hook/deliveries` as GitHub serves
    /// them, read with a JWT whose `iss` is `app_id`.
    pub async fn github_app(app_id: &str, inlet_url: &str, secret: &str) -> Self {
        Self::start(Provider::GitHub {
            hook: GitHubHook::app(app_id),
            credential: GitHubCredential::App(app_id.to_owned()),
            target: Target::new(inlet_url, secret),
        })
    }

    /// Paddle Billing's notifications with API key `key`; replays go to `inlet_url`
    /// signed with the destination's `secret`.
    pub async fn paddle(key: &str, inlet_url: &str, secret: &str) -> Self {
        Self::start(Provider::Paddle {
            key: key.to_owned(),
            target: Target::new(inlet_url, secret),
        })
    }

    fn start(provider: Provider) -> Self {
        let shared = Arc::new(Shared {
            provider,
            ledger: Mutex::new(Ledger::default()),
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
            base_url: OnceLock::new(),
        });
        let (url, server) = super::serve_application(web::Data::from(Arc::clone(&shared)), answer);
        shared
            .base_url
            .set(url.clone())
            .expect("the base URL is set once, before any request");
        Self {
            url,
            shared,
            _server: server,
        }
    }

    fn expect_provider(&self, name: &str, call: &str) {
        let provider = self.shared.provider.name();
        assert_eq!(provider, name, "{call} on a {provider} stand-in");
    }

    /// Records a Stripe event (`id`, `type` and `created` required) and whether every
    /// endpoint got it (`delivery_success` filters on that). Fields Stripe always sends
    /// (`object`, `api_version`, `livemode`, `pending_webhooks`, `request`) are filled in
    /// when absent.
    pub fn add_stripe_event(&self, mut event: Value, delivered: bool) {
        self.expect_provider("Stripe", "add_stripe_event");
        for field in ["id", "type", "created"] {
            assert!(
                !event[field].is_null(),
                "a Stripe event needs `{field}`: {event}"
            );
        }
        let object = event
            .as_object_mut()
            .expect("a Stripe event is a JSON object");
        object.entry("object").or_insert_with(|| json!("event"));
        object
            .entry("api_version")
            .or_insert_with(|| json!(STRIPE_API_VERSION));
        object.entry("livemode").or_insert_with(|| json!(false));
        object
            .entry("pending_webhooks")
            .or_insert_with(|| json!(u8::from(!delivered)));
        object
            .entry("request")
            .or_insert_with(|| json!({"id": null, "idempotency_key": null}));
        let mut ledger = self.shared.ledger.lock();
        ledger.stripe.push(StripeEvent { event, delivered });
    }

    /// Records one GitHub delivery of `payload` (stored as compact JSON bytes, the body
    /// GitHub sent) under `guid`, answered `status_code` (0: GitHub could not connect).
    pub fn add_github_delivery(
        &self,
        guid: &str,
        event: &str,
        payload: Value,
        delivered_at: DateTime<Utc>,
        status_code: u16,
    ) {
        self.expect_provider("GitHub", "add_github_delivery");
        let payload = serde_json::to_vec(&payload).expect("a JSON value serialises");
        let mut ledger = self.shared.ledger.lock();
        let id = GITHUB_DELIVERY_ID_BASE + ledger.fresh();
        ledger.github.push(GitHubDelivery {
            id,
            guid: guid.to_owned(),
            event: event.to_owned(),
            payload,
            delivered_at,
            redelivery: false,
            status_code,
            duration: 0.1,
        });
    }

    /// Records a Paddle notification of event `event_id` in `status` (`not_attempted`,
    /// `needs_retry`, `delivered` or `failed`), with origin `event`; returns its `ntf_` id.
    pub fn add_paddle_notification(
        &self,
        event_id: &str,
        event_type: &str,
        data: Value,
        occurred_at: DateTime<Utc>,
        status: &str,
    ) -> String {
        self.expect_provider("Paddle", "add_paddle_notification");
        assert!(
            PADDLE_STATUSES.contains(&status),
            "a Paddle notification's status is one of {PADDLE_STATUSES:?}, not {status}"
        );
        let attempted = status != "not_attempted";
        let mut ledger = self.shared.ledger.lock();
        let id = paddle_id("ntf", ledger.fresh());
        ledger.paddle.push(PaddleNotification {
            id: id.clone(),
            event_id: event_id.to_owned(),
            event_type: event_type.to_owned(),
            data,
            occurred_at,
            status: status.to_owned(),
            origin: "event",
            delivered_at: (status == "delivered").then_some(occurred_at),
            replayed_at: None,
            last_attempt_at: attempted.then_some(occurred_at),
            retry_at: (status == "needs_retry").then_some(occurred_at + TimeDelta::minutes(5)),
            times_attempted: match status {
                "not_attempted" => 0,
                "failed" => 3,
                _ => 1,
            },
        });
        id
    }

    /// The body the provider sent (or would send) for `id`, as its webhooks serialise it,
    /// for a test that posts a late retry itself: Stripe's event pretty-printed in Stripe's
    /// key order (not the list answer's), GitHub's stored payload bytes (`id`: a guid or a
    /// delivery id), Paddle's payload with its `notification_id` (`id`: a notification id,
    /// or an event id for its first notification).
    pub fn webhook_body(&self, id: &str) -> Vec<u8> {
        let number: Option<i64> = id.parse().ok();
        let ledger = self.shared.ledger.lock();
        let found = match &self.shared.provider {
            Provider::Stripe { .. } => ledger
                .stripe
                .iter()
                .find(|e| e.event["id"] == id)
                .map(|e| stripe_webhook_body(&e.event)),
            Provider::GitHub { .. } => ledger
                .github
                .iter()
                .find(|d| d.guid == id || Some(d.id) == number)
                .map(|d| d.payload.clone()),
            Provider::Paddle { .. } => ledger
                .paddle
                .iter()
                .find(|n| n.id == id || n.event_id == id)
                .map(PaddleNotification::body),
        };
        found
            .unwrap_or_else(|| panic!("the {} stand-in holds no {id}", self.shared.provider.name()))
    }

    /// The next `n` requests (any path) are answered `status` with the provider's error
    /// JSON, and `Retry-After: secs` when given (a 429, typically).
    pub fn fail_next(&self, n: usize, status: u16, retry_after_secs: Option<u64>) {
        self.fail_after(0, n, status, retry_after_secs);
    }

    /// [`Self::fail_next`], once `skip` more requests have been answered as usual.
    pub fn fail_after(&self, skip: usize, n: usize, status: u16, retry_after_secs: Option<u64>) {
        self.shared.ledger.lock().fault = (n > 0).then_some(Fault {
            skip,
            remaining: n,
            status,
            retry_after: retry_after_secs,
        });
    }

    /// Resends go to `inlet_url` from now on (Inlet's webhook URL, once it runs).
    pub fn deliver_to(&self, inlet_url: &str) {
        match &self.shared.provider {
            Provider::GitHub { target, .. } | Provider::Paddle { target, .. } => {
                *target.inlet_url.lock() = inlet_url.to_owned();
            }
            Provider::Stripe { .. } => panic!("Stripe resends nothing"),
        }
    }

    /// Every request seen so far, faulted ones included.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.ledger.lock().requests.clone()
    }

    /// The id named by each resend call (GitHub attempts, Paddle replays) accepted so
    /// far, one entry per call, in order.
    pub fn resends(&self) -> Vec<String> {
        self.shared.ledger.lock().resends.clone()
    }

    /// Resolves once every resend started so far has been answered by Inlet (or failed to
    /// reach it), and its outcome recorded in the ledger.
    pub async fn settled(&self) {
        let shared = &self.shared;
        super::eventually("every resend answered by Inlet", || async move {
            shared.ledger.lock().in_flight == 0
        })
        .await
    }
}

/// A fresh 2048-bit RSA private key as PKCS#1 PEM (`BEGIN RSA PRIVATE KEY`, the form
/// GitHub hands out for an App), for the App's JWT.
pub fn rsa_private_key_pem() -> String {
    let key = openssl::rsa::Rsa::generate(2048).expect("generate an RSA key");
    let pem = key.private_key_to_pem().expect("PEM-encode the RSA key");
    String::from_utf8(pem).expect("PEM is ASCII")
}

// ---------------------------------------------------------------------------------------
// Shared plumbing

/// Every request: recorded, then a planned fault, then the provider's own answer.
async fn answer(request: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let shared = shared.into_inner();
    let fault = {
        let mut ledger = shared.ledger.lock();
        ledger.requests.push(seen(&request));
        ledger.take_fault()
    };
    if let Some(fault) = fault {
        return fault_answer(&shared.provider, fault);
    }
    match &shared.provider {
        Provider::Stripe { key } => stripe_answer(&shared, &request, key),
        Provider::GitHub {
            hook,
            credential,
            target,
        } => github_answer(&shared, &request, hook, credential, target),
        Provider::Paddle { key, target } => paddle_answer(&shared, &request, key, target),
    }
}

fn seen(request: &HttpRequest) -> SeenRequest {
    let query = request.query_string();
    let path = if query.is_empty() {
        request.path().to_owned()
    } else {
        format!("{}?{query}", request.path())
    };
    SeenRequest {
        method: request.method().as_str().to_owned(),
        path,
        authorization: header(request, "authorization"),
    }
}

/// A planned fault, with the body the provider gives for that status.
fn fault_answer(provider: &Provider, fault: Fault) -> HttpResponse {
    let body = match provider {
        Provider::Stripe { .. } => stripe_fault(fault.status),
        Provider::GitHub { .. } => github_fault(fault.status),
        Provider::Paddle { .. } => paddle_fault(fault.status),
    };
    let mut answer = HttpResponse::build(status_code(fault.status));
    answer.content_type("application/json");
    if let Some(secs) = fault.retry_after {
        answer.insert_header(("Retry-After", secs.to_string()));
    }
    answer.body(body.to_string())
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).expect("a valid HTTP status")
}

fn json_reply(status: u16, body: &Value) -> HttpResponse {
    HttpResponse::build(status_code(status))
        .content_type("application/json")
        .body(body.to_string())
}

fn header(request: &HttpRequest, name: &str) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// The query's pairs, percent-decoded (`created[gte]`, `types[]`…), in order.
fn query(request: &HttpRequest) -> Vec<(String, String)> {
    form_urlencoded::parse(request.query_string().as_bytes())
        .into_owned()
        .collect()
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// Hex of the HMAC `M` keyed with `secret` over the concatenated parts.
fn mac_hex<M: Mac + KeyInit>(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac =
        <M as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// A UUID-shaped request id, as Paddle puts in `meta.request_id`.
fn request_id() -> String {
    let hex = format!("{:032x}", fastrand::u128(..));
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Posts a webhook to Inlet as the provider does: Inlet's status, or 0 when Inlet could
/// not be reached in time (GitHub records that as "failed to connect").
async fn post(
    client: &reqwest::Client,
    url: &str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
) -> u16 {
    let mut request = client.post(url).timeout(RESEND_TIMEOUT).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(answer) => answer.status().as_u16(),
        Err(_) => 0,
    }
}

/// A JSON object serialised with its keys in the given order (serde_json's own map
/// sorts them), for the bodies whose key order the provider fixes.
struct Ordered<'a>(Vec<(&'a str, &'a Value)>);

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

// ---------------------------------------------------------------------------------------
// Stripe

/// One event in Stripe's ledger, and whether every webhook endpoint got it.
struct StripeEvent {
    event: Value,
    delivered: bool,
}

impl StripeEvent {
    fn created(&self) -> i64 {
        self.event["created"].as_i64().unwrap_or_default()
    }
}

/// A refused parameter: its name and Stripe's message.
type Invalid = (String, String);

fn stripe_answer(shared: &Shared, request: &HttpRequest, key: &str) -> HttpResponse {
    if let Err(message) = stripe_authorised(request, key) {
        let error = json!({"error": {"message": message, "type": "invalid_request_error"}});
        return json_reply(401, &error);
    }
    let path = request.path();
    if request.method().as_str() != "GET" {
        return stripe_unrecognised(request);
    }
    if path == "/v1/events" {
        return stripe_list(shared, request);
    }
    match path.strip_prefix("/v1/events/") {
        Some(id) if !id.is_empty() && !id.contains('/') => stripe_retrieve(shared, id),
        _ => stripe_unrecognised(request),
    }
}

/// Stripe takes the secret key as a Bearer token or as HTTP Basic's user name.
fn stripe_authorised(request: &HttpRequest, key: &str) -> Result<(), String> {
    let Some(value) = header(request, "authorization") else {
        return Err(
            "You did not provide an API key. You need to provide your API key in the \
                    Authorization header, using Bearer auth (e.g. 'Authorization: Bearer \
                    YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for \
                    details, or we can help at https://support.stripe.com/."
                .to_owned(),
        );
    };
    let given = if let Some(token) = value.strip_prefix("Bearer ") {
        token.trim().to_owned()
    } else if let Some(encoded) = value.strip_prefix("Basic ") {
        basic_user(encoded.trim())
    } else {
        value.clone()
    };
    if given == key {
        Ok(())
    } else {
        Err(format!("Invalid API Key provided: {}", masked(&given)))
    }
}

/// The user name of HTTP Basic credentials (Stripe's key; the password is empty).
fn basic_user(encoded: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(|pair| pair.split(':').next().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// A key as Stripe echoes a wrong one: its start and last four characters.
fn masked(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let n = chars.len();
    if n <= 12 {
        return "*".repeat(n);
    }
    let head: String = chars[..8].iter().collect();
    let tail: String = chars[n - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(n - 12))
}

fn stripe_unrecognised(request: &HttpRequest) -> HttpResponse {
    let message = format!(
        "Unrecognized request URL ({}: {}). Please see https://stripe.com/docs or we can help \
         at https://support.stripe.com/.",
        request.method(),
        request.path()
    );
    json_reply(
        404,
        &json!({"error": {"message": message, "type": "invalid_request_error"}}),
    )
}

fn stripe_invalid((param, message): Invalid) -> HttpResponse {
    let error =
        json!({"error": {"message": message, "param": param, "type": "invalid_request_error"}});
    json_reply(400, &error)
}

fn stripe_retrieve(shared: &Shared, id: &str) -> HttpResponse {
    let ledger = shared.ledger.lock();
    match ledger.stripe.iter().find(|e| e.event["id"] == id) {
        Some(event) => json_reply(200, &event.event),
        None => json_reply(
            404,
            &json!({"error": {
                "code": "resource_missing",
                "message": format!("No such event: '{id}'"),
                "param": "id",
                "type": "invalid_request_error",
            }}),
        ),
    }
}

/// `GET /v1/events`: the matching events newest first, one page of them, in Stripe's
/// list envelope (each event compact, keys sorted: not the webhook's bytes).
fn stripe_list(shared: &Shared, request: &HttpRequest) -> HttpResponse {
    let filter = match StripeFilter::parse(&query(request)) {
        Ok(filter) => filter,
        Err(invalid) => return stripe_invalid(invalid),
    };
    let ledger = shared.ledger.lock();
    let ordered = stripe_newest_first(&ledger.stripe);
    let (page, has_more) = match filter.page(&ordered) {
        Ok(page) => page,
        Err(invalid) => return stripe_invalid(invalid),
    };
    let object = json!("list");
    let url = json!("/v1/events");
    let has_more = json!(has_more);
    let data = Value::Array(page.iter().map(|e| e.event.clone()).collect());
    let envelope = Ordered(vec![
        ("object", &object),
        ("url", &url),
        ("has_more", &has_more),
        ("data", &data),
    ]);
    let body = serde_json::to_string(&envelope).expect("a JSON value serialises");
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}

/// Stripe's order: newest `created` first; events created in the same second, the one
/// recorded last first.
fn stripe_newest_first(events: &[StripeEvent]) -> Vec<&StripeEvent> {
    let mut ordered: Vec<(usize, &StripeEvent)> = events.iter().enumerate().collect();
    ordered.sort_by_key(|(index, event)| std::cmp::Reverse((event.created(), *index)));
    ordered.into_iter().map(|(_, event)| event).collect()
}

/// The list parameters Stripe documents for `GET /v1/events`.
#[derive(Default)]
struct StripeFilter {
    /// `created[gte]` and friends (`eq` for a bare `created`), in unix seconds.
    bounds: Vec<(&'static str, i64)>,
    delivered: Option<bool>,
    /// `types[]` (or `type`): exact types, or a prefix ending in `*`.
    types: Vec<String>,
    limit: usize,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

impl StripeFilter {
    fn parse(pairs: &[(String, String)]) -> Result<Self, Invalid> {
        let mut filter = Self {
            limit: 10,
            ..Self::default()
        };
        let mut single_type = None;
        for (name, value) in pairs {
            match name.as_str() {
                "limit" => filter.limit = stripe_limit(value)?,
                "delivery_success" => filter.delivered = Some(stripe_bool(name, value)?),
                "starting_after" => filter.starting_after = Some(value.clone()),
                "ending_before" => filter.ending_before = Some(value.clone()),
                "type" => single_type = Some(value.clone()),
                "created" => filter.bounds.push(("eq", stripe_integer(name, value)?)),
                _ if name.starts_with("types[") => filter.types.push(value.clone()),
                _ if name.starts_with("expand[") => {}
                _ => filter.bounds.push(stripe_bound(name, value)?),
            }
        }
        if let Some(single) = single_type {
            if !filter.types.is_empty() {
                let message = "You may pass either `type` or `types`, but not both.";
                return Err(("types".to_owned(), message.to_owned()));
            }
            filter.types.push(single);
        }
        Ok(filter)
    }

    fn matches(&self, event: &StripeEvent) -> bool {
        let created = event.created();
        let in_range = self.bounds.iter().all(|(op, bound)| match *op {
            "gte" => created >= *bound,
            "gt" => created > *bound,
            "lte" => created <= *bound,
            "lt" => created < *bound,
            _ => created == *bound,
        });
        let kind = event.event["type"].as_str().unwrap_or_default();
        let typed = self.types.is_empty() || self.types.iter().any(|t| type_matches(t, kind));
        in_range
            && typed
            && self
                .delivered
                .is_none_or(|wanted| wanted == event.delivered)
    }

    /// One page of `ordered` (newest first) after `starting_after` or just before
    /// `ending_before`, and whether more match in that direction. A cursor is placed by
    /// the named event's position in the whole ledger, so it may itself be filtered out.
    fn page<'a>(
        &self,
        ordered: &[&'a StripeEvent],
    ) -> Result<(Vec<&'a StripeEvent>, bool), Invalid> {
        let rank = |param: &str, id: &str| {
            ordered
                .iter()
                .position(|e| e.event["id"] == id)
                .ok_or_else(|| (param.to_owned(), format!("No such event: '{id}'")))
        };
        let mut matching: Vec<(usize, &'a StripeEvent)> = ordered
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, event)| self.matches(event))
            .collect();
        let limit = self.limit;
        match (&self.starting_after, &self.ending_before) {
            (Some(_), Some(_)) => Err((
                "starting_after".to_owned(),
                "You may only specify one of these parameters: ending_before, starting_after."
                    .to_owned(),
            )),
            (Some(id), None) => {
                let cursor = rank("starting_after", id.as_str())?;
                matching.retain(|(index, _)| *index > cursor);
                Ok(first_of(matching, limit))
            }
            (None, Some(id)) => {
                let cursor = rank("ending_before", id.as_str())?;
                matching.retain(|(index, _)| *index < cursor);
                let more = matching.len() > limit;
                let skip = matching.len().saturating_sub(limit);
                Ok((
                    matching.into_iter().skip(skip).map(|(_, e)| e).collect(),
                    more,
                ))
            }
            (None, None) => Ok(first_of(matching, limit)),
        }
    }
}

fn first_of(matching: Vec<(usize, &StripeEvent)>, limit: usize) -> (Vec<&StripeEvent>, bool) {
    let more = matching.len() > limit;
    (
        matching.into_iter().take(limit).map(|(_, e)| e).collect(),
        more,
    )
}

fn type_matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}

fn stripe_limit(value: &str) -> Result<usize, Invalid> {
    let invalid = |message: String| ("limit".to_owned(), message);
    let limit: i64 = value
        .parse()
        .map_err(|_| invalid(format!("Invalid integer: {value}")))?;
    if limit < 1 {
        return Err(invalid(
            "This value must be greater than or equal to 1.".to_owned(),
        ));
    }
    if limit > 100 {
        let message =
            format!("This value must be less than or equal to 100 (it currently is '{limit}').");
        return Err(invalid(message));
    }
    Ok(usize::try_from(limit).expect("1..=100 fits usize"))
}

fn stripe_bool(name: &str, value: &str) -> Result<bool, Invalid> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err((name.to_owned(), format!("Invalid boolean: {value}"))),
    }
}

fn stripe_integer(name: &str, value: &str) -> Result<i64, Invalid> {
    value
        .parse()
        .map_err(|_| (name.to_owned(), format!("Invalid integer: {value}")))
}

/// `created[gte|gt|lte|lt]=<unix seconds>`; any other parameter is unknown to Stripe,
/// which refuses it rather than ignore it.
fn stripe_bound(name: &str, value: &str) -> Result<(&'static str, i64), Invalid> {
    let op = match name {
        "created[gte]" => "gte",
        "created[gt]" => "gt",
        "created[lte]" => "lte",
        "created[lt]" => "lt",
        _ => {
            return Err((
                name.to_owned(),
                format!("Received unknown parameter: {name}"),
            ))
        }
    };
    Ok((op, stripe_integer(name, value)?))
}

fn stripe_fault(status: u16) -> Value {
    if status == 429 {
        json!({"error": {
            "code": "rate_limit",
            "message": "Request rate limit exceeded. Learn more about rate limits here \
                        https://stripe.com/docs/rate-limits.",
            "type": "invalid_request_error",
        }})
    } else {
        json!({"error": {
            "message": "Sorry, something went wrong. We've already been notified of the \
                        problem, but if you need any help, you can reach us at \
                        support.stripe.com/contact.",
            "type": "api_error",
        }})
    }
}

/// A Stripe webhook body: the event pretty-printed (two-space indent) with its keys in
/// Stripe's order, unlike the list answer's compact, sorted rendering of the same event.
fn stripe_webhook_body(event: &Value) -> Vec<u8> {
    const ORDER: [&str; 11] = [
        "id",
        "object",
        "account",
        "api_version",
        "context",
        "created",
        "data",
        "livemode",
        "pending_webhooks",
        "request",
        "type",
    ];
    let object = event.as_object().expect("a Stripe event is a JSON object");
    // A webhook carries the endpoints still owed the event as it was sent: one more than
    // the listing counts once another endpoint got it meanwhile.
    let owed = json!(
        object
            .get("pending_webhooks")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            + 1
    );
    let mut fields: Vec<(&str, &Value)> = ORDER
        .iter()
        .filter_map(|name| match *name {
            "pending_webhooks" => Some((*name, &owed)),
            _ => object.get(*name).map(|value| (*name, value)),
        })
        .collect();
    fields.extend(
        object
            .iter()
            .filter(|(name, _)| !ORDER.contains(&name.as_str()))
            .map(|(name, value)| (name.as_str(), value)),
    );
    serde_json::to_vec_pretty(&Ordered(fields)).expect("a JSON value serialises")
}

// ---------------------------------------------------------------------------------------
// GitHub

/// Where a GitHub hook lives in the API, its id, and the installation target GitHub
/// names in the delivery headers.
struct GitHubHook {
    /// `repos/OWNER/REPO/hooks/ID`, `orgs/ORG/hooks/ID` or `app/hook`.
    prefix: String,
    id: i64,
    target_type: &'static str,
    target_id: i64,
}

impl GitHubHook {
    fn parse(hook: &str) -> Self {
        let hook = hook.trim_matches('/');
        assert_ne!(
            hook, "app",
            "an App's hook takes a JWT, not a token: use ProviderApi::github_app"
        );
        let parts: Vec<&str> = hook.split('/').collect();
        // The ids of GitHub's own examples (octocat/Hello-World, github).
        let (target_type, target_id) = match parts.as_slice() {
            ["repos", _, _, "hooks", _] => ("repository", 1_296_269),
            ["orgs", _, "hooks", _] => ("organization", 9_919),
            _ => panic!(
                "a GitHub hook is repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID, not {hook}"
            ),
        };
        let id = parts
            .last()
            .and_then(|id| id.parse().ok())
            .expect("a hook id is an integer");
        Self {
            prefix: hook.to_owned(),
            id,
            target_type,
            target_id,
        }
    }

    /// An App's single webhook: `GET /app/hook/deliveries` and
    /// `POST /app/hook/deliveries/{id}/attempts`.
    fn app(app_id: &str) -> Self {
        Self {
            prefix: "app/hook".to_owned(),
            id: GITHUB_APP_HOOK_ID,
            target_type: "integration",
            target_id: app_id.parse().unwrap_or_default(),
        }
    }
}

/// How the API is read: a token for repository and organisation hooks, the App's JWT for
/// the App's hook (GitHub refuses the other on each).
enum GitHubCredential {
    Token(String),
    App(String),
}

impl GitHubCredential {
    fn check(&self, authorization: Option<&str>) -> Result<(), String> {
        let Some(value) = authorization else {
            return Err("Requires authentication".to_owned());
        };
        match self {
            Self::Token(token) => {
                let given = value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("token "))
                    .map(str::trim);
                if given == Some(token.as_str()) {
                    Ok(())
                } else {
                    Err("Bad credentials".to_owned())
                }
            }
            Self::App(app_id) => {
                let jwt = value.strip_prefix("Bearer ").unwrap_or_default();
                check_app_jwt(jwt.trim(), app_id)
            }
        }
    }
}

/// GitHub's rules for an App's JWT: RS256, `iss` the App's id (or client id), `iat` not in
/// the future, `exp` ahead but at most 10 minutes ahead (a minute's slack for clocks).
/// The stand-in checks the token's shape and claims only, NOT its RSA signature: it holds
/// no public key, so a JWT signed with any key passes here.
fn check_app_jwt(token: &str, app_id: &str) -> Result<(), String> {
    let undecodable = || "A JSON web token could not be decoded".to_owned();
    let parts: Vec<&str> = token.split('.').collect();
    let [head, claims, signature] = parts.as_slice() else {
        return Err(undecodable());
    };
    if signature.is_empty() {
        return Err(undecodable());
    }
    let head = jwt_part(head).ok_or_else(undecodable)?;
    let claims = jwt_part(claims).ok_or_else(undecodable)?;
    if head["alg"] != "RS256" {
        return Err(undecodable());
    }
    let issuer = match &claims["iss"] {
        Value::String(issuer) => issuer.clone(),
        Value::Number(issuer) => issuer.to_string(),
        _ => String::new(),
    };
    if issuer != app_id {
        return Err("Bad credentials".to_owned());
    }
    let now = Utc::now().timestamp();
    let (Some(issued), Some(expires)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return Err(
            "'Issued at' claim ('iat') and 'Expiration time' claim ('exp') are required".to_owned(),
        );
    };
    if issued > now + 60 {
        Err(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past"
                .to_owned(),
        )
    } else if expires <= now {
        Err("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires".to_owned())
    } else if expires > now + 660 {
        Err("'Expiration time' claim ('exp') is too far in the future".to_owned())
    } else {
        Ok(())
    }
}

fn jwt_part(part: &str) -> Option<Value> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn github_message(message: &str, status: u16) -> Value {
    json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": status.to_string(),
    })
}

fn github_not_found() -> HttpResponse {
    json_reply(404, &github_message("Not Found", 404))
}

fn github_fault(status: u16) -> Value {
    let message = match status {
        403 | 429 => "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
        503 => "Service Unavailable",
        _ => "Server Error",
    };
    github_message(message, status)
}

fn github_answer(
    shared: &Arc<Shared>,
    request: &HttpRequest,
    hook: &GitHubHook,
    credential: &GitHubCredential,
    target: &Target,
) -> HttpResponse {
    if let Err(message) = credential.check(header(request, "authorization").as_deref()) {
        return json_reply(401, &github_message(&message, 401));
    }
    let path = request.path().trim_start_matches('/');
    let Some(rest) = path
        .strip_prefix(hook.prefix.as_str())
        .and_then(|rest| rest.strip_prefix("/deliveries"))
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    else {
        return github_not_found();
    };
    let segments: Vec<&str> = rest.split('/').skip(1).collect();
    match (request.method().as_str(), segments.as_slice()) {
        ("GET", []) => github_list(shared, request, hook),
        ("GET", [id]) => github_delivery(shared, hook, target, id),
        ("POST", [id, "attempts"]) => github_redeliver(shared, hook, target, id),
        _ => github_not_found(),
    }
}

/// One delivery of a hook, as GitHub lists it.
#[derive(Clone)]
struct GitHubDelivery {
    id: i64,
    guid: String,
    event: String,
    /// The body GitHub sent, byte for byte.
    payload: Vec<u8>,
    delivered_at: DateTime<Utc>,
    redelivery: bool,
    /// Inlet's answer; 0 when GitHub could not connect.
    status_code: u16,
    duration: f64,
}

impl GitHubDelivery {
    fn payload_json(&self) -> Value {
        serde_json::from_slice(&self.payload).unwrap_or(Value::Null)
    }

    /// The list item GitHub documents (`hook-delivery-item`).
    fn item(&self) -> Value {
        let payload = self.payload_json();
        json!({
            "id": self.id,
            "guid": self.guid,
            "delivered_at": self.delivered_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            "redelivery": self.redelivery,
            "duration": self.duration,
            "status": github_status_text(self.status_code),
            "status_code": self.status_code,
            "event": self.event,
            "action": payload["action"].as_str(),
            "installation_id": payload["installation"]["id"].as_i64(),
            "repository_id": payload["repository"]["id"].as_i64(),
            "throttled_at": null,
        })
    }
}

/// GitHub's `status` beside `status_code`: "OK", "failed to connect", or the code.
fn github_status_text(code: u16) -> String {
    match code {
        0 => "failed to connect".to_owned(),
        200..=299 => "OK".to_owned(),
        _ => format!("Invalid HTTP Response: {code}"),
    }
}

fn github_find<'a>(deliveries: &'a [GitHubDelivery], id: &str) -> Option<&'a GitHubDelivery> {
    let id: i64 = id.parse().ok()?;
    deliveries.iter().find(|delivery| delivery.id == id)
}

/// Newest first: by `delivered_at`, then by id (a redelivery is always at the head).
fn github_newest_first(deliveries: &[GitHubDelivery]) -> Vec<&GitHubDelivery> {
    let mut ordered: Vec<&GitHubDelivery> = deliveries.iter().collect();
    ordered.sort_by_key(|delivery| std::cmp::Reverse((delivery.delivered_at, delivery.id)));
    ordered
}

/// `GET …/deliveries?per_page=&cursor=&redelivery=`: a JSON array, newest first, and a
/// `Link: <…>; rel="next"` header (absolute URL) while more remain. The cursor is opaque
/// to clients (`v1_<last id shown>` here); an unreadable one is a 400 as on GitHub.
fn github_list(shared: &Shared, request: &HttpRequest, hook: &GitHubHook) -> HttpResponse {
    let pairs = query(request);
    let per_page = param(&pairs, "per_page")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(30)
        .min(100);
    let redelivery = param(&pairs, "redelivery").map(|value| value == "true");
    let after = match param(&pairs, "cursor") {
        None => None,
        Some(cursor) => match cursor
            .strip_prefix("v1_")
            .and_then(|id| id.parse::<i64>().ok())
        {
            Some(id) => Some(id),
            None => return json_reply(400, &github_message("Bad Request", 400)),
        },
    };
    let ledger = shared.ledger.lock();
    let ordered = github_newest_first(&ledger.github);
    let start = match after {
        None => 0,
        Some(id) => match ordered.iter().position(|delivery| delivery.id == id) {
            Some(position) => position + 1,
            None => return json_reply(400, &github_message("Bad Request", 400)),
        },
    };
    let matching: Vec<&GitHubDelivery> = ordered[start..]
        .iter()
        .copied()
        .filter(|delivery| redelivery.is_none_or(|wanted| wanted == delivery.redelivery))
        .collect();
    let shown = &matching[..matching.len().min(per_page)];
    let mut answer = HttpResponse::Ok();
    answer.content_type("application/json; charset=utf-8");
    if let (true, Some(last)) = (matching.len() > per_page, shown.last()) {
        let mut next = format!("per_page={per_page}&cursor=v1_{}", last.id);
        if let Some(wanted) = redelivery {
            next.push_str(&format!("&redelivery={wanted}"));
        }
        let link = format!(
            "<{}/{}/deliveries?{next}>; rel=\"next\"",
            shared.base_url(),
            hook.prefix
        );
        answer.insert_header(("Link", link));
    }
    answer.body(Value::Array(shown.iter().map(|d| d.item()).collect()).to_string())
}

/// The headers GitHub sends with a delivery (and shows under `request.headers`).
fn github_headers(
    hook: &GitHubHook,
    delivery: &GitHubDelivery,
    secret: &str,
) -> Vec<(&'static str, String)> {
    let body = delivery.payload.as_slice();
    vec![
        ("Accept", "*/*".to_owned()),
        ("Content-Type", "application/json".to_owned()),
        ("User-Agent", "GitHub-Hookshot/7c5d1a3".to_owned()),
        ("X-GitHub-Delivery", delivery.guid.clone()),
        ("X-GitHub-Event", delivery.event.clone()),
        ("X-GitHub-Hook-ID", hook.id.to_string()),
        (
            "X-GitHub-Hook-Installation-Target-ID",
            hook.target_id.to_string(),
        ),
        (
            "X-GitHub-Hook-Installation-Target-Type",
            hook.target_type.to_owned(),
        ),
        (
            "X-Hub-Signature",
            format!("sha1={}", mac_hex::<Hmac<sha1::Sha1>>(secret, &[body])),
        ),
        (
            "X-Hub-Signature-256",
            format!("sha256={}", mac_hex::<Hmac<Sha256>>(secret, &[body])),
        ),
    ]
}

/// `GET …/deliveries/{id}`: the item with the request GitHub sent (headers and payload).
fn github_delivery(shared: &Shared, hook: &GitHubHook, target: &Target, id: &str) -> HttpResponse {
    let ledger = shared.ledger.lock();
    let Some(delivery) = github_find(&ledger.github, id) else {
        return github_not_found();
    };
    let headers: serde_json::Map<String, Value> = github_headers(hook, delivery, &target.secret)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), Value::String(value)))
        .collect();
    let mut answer = delivery.item();
    answer["url"] = json!(target.url());
    answer["request"] = json!({"headers": headers, "payload": delivery.payload_json()});
    answer["response"] = json!({"headers": {}, "payload": null});
    json_reply(200, &answer)
}

/// `POST …/deliveries/{id}/attempts`: 202 at once; the delivery then goes to Inlet again
/// under the same guid, signed with the hook's secret, and its outcome is listed as a new
/// delivery (`redelivery: true`) at the head of the list.
fn github_redeliver(
    shared: &Arc<Shared>,
    hook: &GitHubHook,
    target: &Target,
    id: &str,
) -> HttpResponse {
    let delivery = {
        let mut ledger = shared.ledger.lock();
        let Some(delivery) = github_find(&ledger.github, id).cloned() else {
            return github_not_found();
        };
        ledger.resends.push(id.to_owned());
        ledger.in_flight += 1;
        delivery
    };
    let headers = github_headers(hook, &delivery, &target.secret);
    let url = target.url();
    let task = Arc::clone(shared);
    shared.runtime.spawn(async move {
        let started = Instant::now();
        let status_code = post(&task.client, &url, headers, delivery.payload.clone()).await;
        let mut ledger = task.ledger.lock();
        let id = GITHUB_DELIVERY_ID_BASE + ledger.fresh();
        ledger.github.push(GitHubDelivery {
            id,
            delivered_at: Utc::now(),
            redelivery: true,
            status_code,
            duration: started.elapsed().as_secs_f64(),
            ..delivery
        });
        ledger.in_flight -= 1;
    });
    json_reply(202, &json!({}))
}

// ---------------------------------------------------------------------------------------
// Paddle

/// One notification: an event's delivery to the stand-in's one notification destination.
#[derive(Clone)]
struct PaddleNotification {
    id: String,
    event_id: String,
    event_type: String,
    data: Value,
    occurred_at: DateTime<Utc>,
    status: String,
    /// `event` (Paddle's own) or `replay` (asked for through the API).
    origin: &'static str,
    delivered_at: Option<DateTime<Utc>>,
    replayed_at: Option<DateTime<Utc>>,
    last_attempt_at: Option<DateTime<Utc>>,
    retry_at: Option<DateTime<Utc>>,
    times_attempted: u32,
}

impl PaddleNotification {
    /// The webhook body: `event_id`, `event_type`, `occurred_at`, `notification_id`,
    /// `data`, in that (Paddle's) order, compact.
    fn body(&self) -> Vec<u8> {
        let event_id = json!(self.event_id);
        let event_type = json!(self.event_type);
        let occurred_at = json!(paddle_time(self.occurred_at));
        let notification_id = json!(self.id);
        let payload = Ordered(vec![
            ("event_id", &event_id),
            ("event_type", &event_type),
            ("occurred_at", &occurred_at),
            ("notification_id", &notification_id),
            ("data", &self.data),
        ]);
        serde_json::to_vec(&payload).expect("a JSON value serialises")
    }

    /// The notification entity of the list and get operations.
    fn entity(&self) -> Value {
        let payload = json!({
            "event_id": self.event_id,
            "event_type": self.event_type,
            "occurred_at": paddle_time(self.occurred_at),
            "notification_id": self.id,
            "data": self.data,
        });
        json!({
            "id": self.id,
            "type": self.event_type,
            "status": self.status,
            "payload": payload,
            "occurred_at": paddle_time(self.occurred_at),
            "delivered_at": self.delivered_at.map(paddle_time),
            "replayed_at": self.replayed_at.map(paddle_time),
            "origin": self.origin,
            "last_attempt_at": self.last_attempt_at.map(paddle_time),
            "retry_at": self.retry_at.map(paddle_time),
            "times_attempted": self.times_attempted,
            "notification_setting_id": PADDLE_NOTIFICATION_SETTING_ID,
        })
    }
}

/// Paddle's ids: a prefix and 26 lowercase alphanumerics; zero-padded counters here, so
/// ordering by id is ordering by creation, as with Paddle's time-ordered ids.
fn paddle_id(prefix: &str, n: i64) -> String {
    format!("{prefix}_{n:026}")
}

/// RFC 3339 with microseconds and `Z`, as Paddle writes times.
fn paddle_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn paddle_error(status: u16, code: &str, detail: &str, area: &str) -> HttpResponse {
    let kind = if status >= 500 {
        "api_error"
    } else {
        "request_error"
    };
    json_reply(
        status,
        &json!({
            "error": {
                "type": kind,
                "code": code,
                "detail": detail,
                "documentation_url": format!("https://developer.paddle.com/errors/{area}/{code}"),
            },
            "meta": {"request_id": request_id()},
        }),
    )
}

fn paddle_fault(status: u16) -> Value {
    let (kind, code, detail) = if status == 429 {
        let detail = "IP address exceeded the allowed rate limit. Retry after the number of \
                      seconds in the Retry-After header.";
        ("request_error", "too_many_requests", detail)
    } else {
        let detail = "An internal error has occurred, we have been notified and will be \
                      looking into it.";
        ("api_error", "internal_error", detail)
    };
    json!({
        "error": {
            "type": kind,
            "code": code,
            "detail": detail,
            "documentation_url": format!("https://developer.paddle.com/errors/shared/{code}"),
        },
        "meta": {"request_id": request_id()},
    })
}

/// Paddle answers 403 for a missing, malformed or wrong key, each with its own code.
fn paddle_authorised(request: &HttpRequest, key: &str) -> Result<(), (&'static str, &'static str)> {
    let Some(value) = header(request, "authorization") else {
        return Err(("authentication_missing", "Authentication header missing."));
    };
    let Some(token) = value.strip_prefix("Bearer ") else {
        return Err((
            "authentication_malformed",
            "Authentication header included, but incorrectly formatted.",
        ));
    };
    if token.trim() == key {
        Ok(())
    } else {
        Err(("invalid_token", "Invalid or revoked API key."))
    }
}

fn paddle_answer(
    shared: &Arc<Shared>,
    request: &HttpRequest,
    key: &str,
    target: &Target,
) -> HttpResponse {
    if let Err((code, detail)) = paddle_authorised(request, key) {
        return paddle_error(403, code, detail, "shared");
    }
    let segments: Vec<&str> = request.path().trim_start_matches('/').split('/').collect();
    match (request.method().as_str(), segments.as_slice()) {
        ("GET", ["notifications"]) => paddle_list(shared, request),
        ("GET", ["notifications", id]) => paddle_get(shared, id),
        ("POST", ["notifications", id, "replay"]) => paddle_replay(shared, target, id),
        _ => paddle_error(404, "not_found", "Not found", "shared"),
    }
}

/// The list parameters Paddle documents for `GET /notifications`.
struct PaddleFilter {
    statuses: Vec<String>,
    settings: Vec<String>,
    /// On `occurred_at`: `from` inclusive, `to` exclusive.
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    /// Matches `id` or `type`.
    search: Option<String>,
    per_page: usize,
    after: Option<String>,
    /// `order_by=id[DESC]`, Paddle's default, or `id[ASC]`.
    descending: bool,
}

impl PaddleFilter {
    fn parse(pairs: &[(String, String)]) -> Result<Self, String> {
        let list = |name: &str| -> Vec<String> {
            param(pairs, name)
                .map(|value| value.split(',').map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let statuses = list("status");
        if let Some(bad) = statuses
            .iter()
            .find(|s| !PADDLE_STATUSES.contains(&s.as_str()))
        {
            return Err(format!(
                "Invalid request. status: {bad} is not one of {PADDLE_STATUSES:?}"
            ));
        }
        let per_page = match param(pairs, "per_page") {
            None => 50,
            Some(n) => n
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("Invalid request. per_page: {n} is not a positive integer"))?
                .min(200),
        };
        let descending = match param(pairs, "order_by").unwrap_or("id[DESC]") {
            "id[DESC]" => true,
            "id[ASC]" => false,
            other => {
                return Err(format!(
                    "Invalid request. order_by: {other} is not id[ASC] or id[DESC]"
                ))
            }
        };
        Ok(Self {
            statuses,
            settings: list("notification_setting_id"),
            from: paddle_instant(pairs, "from")?,
            to: paddle_instant(pairs, "to")?,
            search: param(pairs, "search").map(str::to_owned),
            per_page,
            after: param(pairs, "after").map(str::to_owned),
            descending,
        })
    }

    fn matches(&self, notification: &PaddleNotification) -> bool {
        let at = notification.occurred_at;
        (self.statuses.is_empty() || self.statuses.contains(&notification.status))
            && (self.settings.is_empty()
                || self
                    .settings
                    .iter()
                    .any(|setting| setting.as_str() == PADDLE_NOTIFICATION_SETTING_ID))
            && self.from.is_none_or(|from| at >= from)
            && self.to.is_none_or(|to| at < to)
            && self.search.as_ref().is_none_or(|search| {
                notification.id.contains(search.as_str())
                    || notification.event_type.contains(search.as_str())
            })
    }

    /// Whether `id` comes after the `after` cursor in the requested order.
    fn past_cursor(&self, id: &str) -> bool {
        match &self.after {
            None => true,
            Some(after) if self.descending => id < after.as_str(),
            Some(after) => id > after.as_str(),
        }
    }
}

fn paddle_instant(pairs: &[(String, String)], name: &str) -> Result<Option<DateTime<Utc>>, String> {
    param(pairs, name)
        .map(|value| {
            DateTime::parse_from_rfc3339(value)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|_| {
                    format!("Invalid request. {name}: {value} is not an RFC 3339 date-time")
                })
        })
        .transpose()
}

/// `GET /notifications`: one page in id order (newest first by default) with Paddle's
/// pagination: `next` is this request's URL with `after` = the page's last id, always
/// present; `estimated_total` counts every match, cursor aside.
fn paddle_list(shared: &Shared, request: &HttpRequest) -> HttpResponse {
    let pairs = query(request);
    let filter = match PaddleFilter::parse(&pairs) {
        Ok(filter) => filter,
        Err(detail) => return paddle_error(400, "invalid_field", &detail, "shared"),
    };
    let ledger = shared.ledger.lock();
    // The ledger is in id order: ids are handed out as notifications are recorded.
    let mut matching: Vec<&PaddleNotification> =
        ledger.paddle.iter().filter(|n| filter.matches(n)).collect();
    if filter.descending {
        matching.reverse();
    }
    let estimated_total = matching.len();
    matching.retain(|notification| filter.past_cursor(&notification.id));
    let shown = &matching[..matching.len().min(filter.per_page)];
    let after = shown
        .last()
        .map(|n| n.id.as_str())
        .or(filter.after.as_deref());
    let pagination = json!({
        "per_page": filter.per_page,
        "next": paddle_next(shared.base_url(), &pairs, after),
        "has_more": matching.len() > filter.per_page,
        "estimated_total": estimated_total,
    });
    let data: Vec<Value> = shown.iter().map(|n| n.entity()).collect();
    json_reply(
        200,
        &json!({"data": data, "meta": {"request_id": request_id(), "pagination": pagination}}),
    )
}

fn paddle_next(base: &str, pairs: &[(String, String)], after: Option<&str>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs.iter().filter(|(name, _)| name.as_str() != "after") {
        query.append_pair(name, value);
    }
    if let Some(after) = after {
        query.append_pair("after", after);
    }
    format!("{base}/notifications?{}", query.finish())
}

fn paddle_get(shared: &Shared, id: &str) -> HttpResponse {
    let ledger = shared.ledger.lock();
    match ledger.paddle.iter().find(|n| n.id == id) {
        Some(notification) => json_reply(
            200,
            &json!({"data": notification.entity(), "meta": {"request_id": request_id()}}),
        ),
        None => paddle_error(
            404,
            "not_found",
            &format!("Entity {id} not found"),
            "shared",
        ),
    }
}

/// `POST /notifications/{id}/replay`, as documented: only a `delivered` or `failed`
/// notification of origin `event` can be replayed (400 otherwise). 202 with the new
/// notification's id at once; the new notification (origin `replay`, same `event_id`)
/// then goes to Inlet and takes Inlet's outcome.
fn paddle_replay(shared: &Arc<Shared>, target: &Target, id: &str) -> HttpResponse {
    let replay = {
        let mut ledger = shared.ledger.lock();
        let new_id = paddle_id("ntf", ledger.fresh());
        let Some(original) = ledger.paddle.iter_mut().find(|n| n.id == id) else {
            return paddle_error(
                404,
                "not_found",
                &format!("Entity {id} not found"),
                "shared",
            );
        };
        if let Some((code, detail)) = paddle_unreplayable(original) {
            return paddle_error(400, code, &detail, "notifications");
        }
        original.replayed_at = Some(Utc::now());
        let replay = PaddleNotification {
            id: new_id,
            status: "not_attempted".to_owned(),
            origin: "replay",
            delivered_at: None,
            replayed_at: None,
            last_attempt_at: None,
            retry_at: None,
            times_attempted: 0,
            ..original.clone()
        };
        ledger.paddle.push(replay.clone());
        ledger.resends.push(id.to_owned());
        ledger.in_flight += 1;
        replay
    };
    let answer =
        json!({"data": {"notification_id": replay.id}, "meta": {"request_id": request_id()}});
    paddle_send(shared, target, replay);
    json_reply(202, &answer)
}

/// Why Paddle refuses to replay `notification`, if it does.
fn paddle_unreplayable(notification: &PaddleNotification) -> Option<(&'static str, String)> {
    if notification.origin != "event" {
        let detail = "Only notifications with the origin `event` can be replayed.";
        return Some(("notification_replay_invalid_origin_type", detail.to_owned()));
    }
    if notification.status != "delivered" && notification.status != "failed" {
        let detail = format!(
            "Notification {} cannot be replayed because it's not `delivered` or `failed`.",
            notification.id
        );
        return Some(("notification_cannot_replay", detail));
    }
    None
}

/// Sends `notification` to Inlet as Paddle does (`Paddle-Signature: ts=…;h1=…` over
/// `"{ts}:{body}"`), then records the outcome: `delivered`, or `needs_retry`.
fn paddle_send(shared: &Arc<Shared>, target: &Target, notification: PaddleNotification) {
    let body = notification.body();
    let ts = Utc::now().timestamp().to_string();
    let h1 = mac_hex::<Hmac<Sha256>>(
        &target.secret,
        &[ts.as_bytes(), b":".as_slice(), body.as_slice()],
    );
    let headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Paddle-Signature", format!("ts={ts};h1={h1}")),
    ];
    let url = target.url();
    let task = Arc::clone(shared);
    shared.runtime.spawn(async move {
        let status = post(&task.client, &url, headers, body).await;
        let now = Utc::now();
        let delivered = (200..300).contains(&status);
        let mut ledger = task.ledger.lock();
        if let Some(sent) = ledger.paddle.iter_mut().find(|n| n.id == notification.id) {
            sent.status = if delivered {
                "delivered"
            } else {
                "needs_retry"
            }
            .to_owned();
            sent.times_attempted += 1;
            sent.last_attempt_at = Some(now);
            sent.delivered_at = delivered.then_some(now);
            sent.retry_at = (!delivered).then_some(now + TimeDelta::minutes(1));
        }
        ledger.in_flight -= 1;
    });
}
