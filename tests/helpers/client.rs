//! Talking to the test's Inlet over HTTP as a provider or an operator would, and the
//! reply read whole.

use super::*;
use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::{Connection, SqliteConnection};
use inlet::db::schema::{events, facts};

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn replayed(&self) -> bool {
        self.header("Idempotent-Replayed") == Some("true")
    }

    /// Asserts the status, showing the body when it differs.
    pub fn assert_status(&self, status: u16) {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
    }

    /// Asserts a problem+json rejection with this status and reason.
    pub fn assert_problem(&self, status: u16, reason: &str) {
        assert_eq!(
            self.status,
            status,
            "expected {status} {reason}, got {}: {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let body = self.json();
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["status"], status, "{body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
}

impl TestApp {
    pub fn now(&self) -> DateTime<Utc> {
        inlet::clock::Clock::now(self.clock.as_ref())
    }

    pub async fn post_webhook<N: AsRef<str>, V: AsRef<str>>(
        &self,
        source: &str,
        body: &[u8],
        headers: &[(N, V)],
    ) -> Reply {
        let mut request = self
            .client
            .post(format!("{}/webhooks/{source}", self.address))
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name.as_ref(), value.as_ref().to_owned());
        }
        read(
            "POST",
            request.send().await.expect("the request reaches Inlet"),
        )
        .await
    }

    /// The headers `source`'s provider would send for `body` now, signed with `secret`
    /// (the source's current one by default), carrying `event_id` where the scheme sends
    /// it in a header.
    pub fn sign_for(
        &self,
        source: &str,
        body: &[u8],
        event_id: &str,
        secret: Option<&str>,
    ) -> Vec<(String, String)> {
        let mut settings = self
            .settings
            .source(source)
            .expect("a configured source")
            .clone();
        if let Some(secret) = secret {
            settings.secrets = vec![inlet::secret::Secret::new(secret)];
        }
        let event = inlet::signature::EventToSign {
            id: event_id.to_owned(),
            event_type: "thing.happened".to_owned(),
        };
        inlet::cli::signed_headers_for(&settings, body, self.now(), &event)
    }

    /// Posts `body` to `source`, signed as its provider would with `secret`.
    pub async fn post_signed(
        &self,
        source: &str,
        body: &[u8],
        event_id: &str,
        secret: Option<&str>,
    ) -> Reply {
        let headers = self.sign_for(source, body, event_id, secret);
        self.post_webhook(source, body, &headers).await
    }

    /// An operator API call: `GET` when `body` is `None`, else `POST` with the body and,
    /// when given, an Idempotency-Key.
    pub async fn admin(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
        key: Option<&str>,
    ) -> Reply {
        self.admin_as(OPERATOR_TOKEN, path, body, key).await
    }

    /// [`Self::admin`] with `token`, on the operator surface's listener (`admin.bind`'s
    /// when it has one).
    pub async fn admin_as(
        &self,
        token: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        key: Option<&str>,
    ) -> Reply {
        let base = self.admin_address.as_ref().unwrap_or(&self.address);
        let url = format!("{base}{path}");
        let method = if body.is_some() { "POST" } else { "GET" };
        let mut request = match body {
            None => self.client.get(url),
            Some(body) => self
                .client
                .post(url)
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        };
        request = request.bearer_auth(token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        read(
            method,
            request.send().await.expect("the request reaches Inlet"),
        )
        .await
    }

    /// The configuration file as it is now (`TestOptions::config_file`).
    pub fn config_text(&self) -> String {
        let path = self.config_path.as_ref().expect("started with config_file");
        std::fs::read_to_string(path).expect("read the configuration file")
    }

    /// Replaces the configuration file (`TestOptions::config_file`); nothing changes until
    /// a reload.
    pub fn write_config(&self, text: &str) {
        let path = self.config_path.as_ref().expect("started with config_file");
        std::fs::write(path, text).expect("write the configuration file");
    }

    /// A fix to the configuration file (`from` replaced by `to`), reloaded, then every
    /// dead letter requeued under `key`: what an operator does once a filter or a
    /// transform is fixed. Returns how many were requeued.
    pub async fn fix_and_requeue(&self, (from, to): (&str, &str), key: &str) -> usize {
        let text = self.config_text();
        assert!(text.contains(from), "the configuration holds {from}");
        self.write_config(&text.replace(from, to));
        self.reload().await.assert_status(200);
        let dead = self
            .admin("/admin/deliveries?status=dead", None, None)
            .await
            .json();
        let ids: Vec<serde_json::Value> = (dead["deliveries"].as_array().into_iter().flatten())
            .map(|d| d["id"].clone())
            .collect();
        let body = serde_json::json!({ "ids": ids });
        self.admin("/admin/deliveries/requeue", Some(&body), Some(key))
            .await
            .assert_status(200);
        ids.len()
    }

    /// `POST /admin/reload`.
    pub async fn reload(&self) -> Reply {
        self.admin("/admin/reload", Some(&serde_json::json!({})), None)
            .await
    }

    /// Runs the `inlet` binary's operator commands against this instance (no local
    /// configuration needed); returns its exit code and stdout and stderr as text.
    pub async fn run_cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        self.run_cli_with_token(args, OPERATOR_TOKEN).await
    }

    /// [`Self::run_cli`] with another operator token.
    pub async fn run_cli_with_token(
        &self,
        args: &[&str],
        token: &'static str,
    ) -> (Option<i32>, String, String) {
        let address = self.admin_address.clone().unwrap_or(self.address.clone());
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_inlet"))
                .args(["--config", "/nonexistent/inlet.toml"])
                .args(&args)
                .args(["--admin-url", &address, "--token", token])
                .env_remove("INLET_OPERATOR_TOKEN")
                .output()
                .expect("run inlet")
        })
        .await
        .expect("the inlet process");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Posts `body` to the stripe source, signed now with the current secret.
    pub async fn post_stripe(&self, body: &[u8]) -> Reply {
        let signature = stripe_signature(STRIPE_SECRET, body, self.now().timestamp());
        self.post_webhook("stripe", body, &[("Stripe-Signature", signature)])
            .await
    }

    pub async fn get(&self, path: &str) -> Reply {
        let response = self
            .client
            .get(format!("{}{path}", self.address))
            .send()
            .await
            .expect("the request reaches Inlet");
        read("GET", response).await
    }

    /// A request with any method and no body.
    pub async fn request(&self, method: &str, path: &str) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let response = self
            .client
            .request(method.clone(), format!("{}{path}", self.address))
            .send()
            .await
            .expect("the request reaches Inlet");
        read(method.as_str(), response).await
    }

    pub async fn with_conn<T: Send + 'static>(
        &self,
        query: impl FnOnce(&mut inlet::db::DbConnection) -> QueryResult<T> + Send + 'static,
    ) -> T {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get().expect("a test connection");
            query(&mut conn).expect("test query")
        })
        .await
        .expect("test query task")
    }

    pub async fn count_events(&self) -> i64 {
        self.with_conn(|c| events::table.count().get_result(c))
            .await
    }

    pub async fn count_facts(&self) -> i64 {
        self.with_conn(|c| facts::table.count().get_result(c)).await
    }

    pub async fn count_deliveries(&self) -> i64 {
        self.with_conn(|c| inlet::db::schema::deliveries::table.count().get_result(c))
            .await
    }

    pub async fn count_attempts(&self) -> i64 {
        self.with_conn(|c| {
            inlet::db::schema::delivery_attempts::table
                .count()
                .get_result(c)
        })
        .await
    }

    /// How many deliveries the operator API lists with `status`.
    pub async fn deliveries_with_status(&self, status: &str) -> usize {
        self.admin(&format!("/admin/deliveries?status={status}"), None, None)
            .await
            .json()["deliveries"]
            .as_array()
            .map_or(0, Vec::len)
    }

    pub async fn facts_of(&self, kind: &str) -> Vec<(String, String)> {
        let kind = kind.to_owned();
        self.with_conn(move |c| {
            facts::table
                .filter(facts::kind.eq(kind))
                .select((facts::fact_key, facts::first_event_id))
                .order(facts::id)
                .load(c)
        })
        .await
    }

    /// One sweeper round now (on this instance's clock), as `inlet sweep` runs it.
    pub async fn sweep(&self, dry_run: bool) -> inlet::retention::SweepReport {
        let sweeper = inlet::retention::Sweeper::new(
            self.pool.clone(),
            self.clock.clone(),
            self.settings.retention.clone(),
        );
        tokio::task::spawn_blocking(move || sweeper.sweep(dry_run))
            .await
            .expect("sweep task")
            .expect("a sweep")
    }

    /// A connection of the test's own, outside Inlet's pool.
    pub fn direct_connection(&self) -> inlet::db::DbConnection {
        inlet::db::DbConnection::establish(&self.database.url(None).replace("sqlite://", ""))
            .expect("a direct connection")
    }

    /// SQLite only: another process holds the write lock until the returned guard drops.
    pub fn lock_sqlite_database(&self) -> SqliteConnection {
        let TestDatabase::Sqlite(path) = self.database.as_ref() else {
            panic!("lock_sqlite_database is for SQLite");
        };
        let mut conn =
            SqliteConnection::establish(path.to_str().expect("UTF-8 path")).expect("open");
        conn.batch_execute("BEGIN EXCLUSIVE")
            .expect("take the write lock");
        conn
    }
}

/// The answer to `method`, read whole and held to openapi.json.
async fn read(method: &str, response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let path = response.url().path().to_owned();
    let body = response.bytes().await.expect("read the body").to_vec();
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    contract::check(method, &path, status, content_type, &body);
    Reply {
        status,
        headers,
        body,
    }
}

/// Sends every body at once as one group: the group waits until all are queued.
pub async fn post_as_one_group(app: &std::sync::Arc<TestApp>, bodies: &[Vec<u8>]) -> Vec<Reply> {
    app.faults.gather_next_group(bodies.len());
    let tasks: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|body| {
            let app = app.clone();
            tokio::spawn(async move { app.post_stripe(&body).await })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.expect("request task"));
    }
    assert_eq!(
        app.faults.gathered_group(),
        bodies.len(),
        "the requests were committed as one group"
    );
    replies
}

/// PostgreSQL: a transaction of the test's own that holds the sweep lock, as another
/// instance's sweep batch does, until [`SweepLockHolder::release`] (or drop).
pub struct SweepLockHolder(inlet::db::DbConnection);

impl SweepLockHolder {
    pub fn take(app: &TestApp) -> Self {
        let mut conn = app.direct_connection();
        let inlet::db::DbConnection::Postgres(pg) = &mut conn else {
            panic!("the sweep lock is PostgreSQL's");
        };
        pg.batch_execute("BEGIN").expect("begin");
        inlet::db::AdvisoryLock::Sweep
            .wait_in_transaction(pg)
            .expect("hold the sweep lock");
        Self(conn)
    }

    pub fn release(mut self) {
        self.0.batch_execute("COMMIT").expect("commit");
    }
}
