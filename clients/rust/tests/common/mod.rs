//! What the crate's tests share: scratch databases on both backends and signed deliveries.
#![allow(dead_code)]

#[cfg(feature = "diesel")]
pub mod backends;
pub mod http;

use chrono::{DateTime, Utc};
use inlet_inbox::{sign, Verified, Verifier};
use std::sync::atomic::{AtomicU32, Ordering};

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const BODY: &[u8] = br#"{"type":"invoice.paid","data":{"invoice":"in_1","amount":1200}}"#;

/// The server every PostgreSQL test makes its scratch database on (`scripts/prepare`
/// exports it; this default is the one it exports).
pub fn postgres_url() -> String {
    std::env::var("INLET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh name for a scratch database or file, unique in this run.
pub fn scratch_name(label: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let label = label.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    format!("inbox_rs_{label}_{}_{n}", std::process::id())
}

/// A PostgreSQL database of its own for one test, dropped with this guard.
pub struct ScratchPostgres {
    pub name: String,
    pub url: String,
}

impl ScratchPostgres {
    pub fn new(label: &str) -> Self {
        let name = scratch_name(label);
        psql(&format!("CREATE DATABASE {name}"));
        let server = postgres_url();
        let base = server
            .rsplit_once('/')
            .map_or(server.as_str(), |(base, _)| base);
        Self {
            url: format!("{base}/{name}"),
            name,
        }
    }
}

impl Drop for ScratchPostgres {
    fn drop(&mut self) {
        psql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

fn psql(statement: &str) {
    let status = std::process::Command::new("psql")
        .args([postgres_url().as_str(), "-qAtc", statement])
        .status()
        .expect("psql runs");
    assert!(status.success(), "psql: {statement}");
}

/// A SQLite file of its own for one test, under the system's temporary directory.
pub struct ScratchSqlite {
    pub path: std::path::PathBuf,
}

impl ScratchSqlite {
    pub fn new(label: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{}.db", scratch_name(label)));
        Self { path }
    }

    pub fn url(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for ScratchSqlite {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

pub fn verifier() -> Verifier {
    Verifier::new([SECRET]).expect("a valid secret")
}

/// The headers Inlet sends for `message_id` now.
pub fn signed(message_id: &str, body: &[u8]) -> [(&'static str, String); 3] {
    signed_at(message_id, body, Utc::now())
}

pub fn signed_at(message_id: &str, body: &[u8], at: DateTime<Utc>) -> [(&'static str, String); 3] {
    sign(SECRET, message_id, body, at).expect("a valid secret")
}

/// A verified delivery, as a handler receives it: signed now, then verified.
pub fn delivery(message_id: &str) -> Verified {
    let headers = signed(message_id, BODY);
    let get = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_bytes())
    };
    verifier()
        .verify(inlet_inbox::verify::Headers::from_fn(get), BODY)
        .expect("signed just now")
}
