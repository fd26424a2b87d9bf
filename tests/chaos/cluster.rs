//! A PostgreSQL high-availability cluster of the test's own — etcd, three Patroni nodes
//! and HAProxy in a scratch directory, on free loopback ports — driven through
//! `scripts/patroni-cluster` (which a person can run by hand too). Dropping it kills
//! everything the script started and removes the directory, so a failing campaign leaves
//! nothing behind. The machine's own PostgreSQL is never used.

use crate::helpers::first_within_blocking;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A member as Patroni reports it (`GET /cluster`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby` or `replica`.
    pub role: String,
    pub state: String,
}

pub struct Cluster {
    dir: PathBuf,
    env: HashMap<String, String>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/patroni-cluster")
}

/// Runs the script; its standard output, or a panic naming what failed.
fn run(args: &[&str]) -> String {
    let output = Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run scripts/patroni-cluster {args:?}: {e}"));
    assert!(
        output.status.success(),
        "scripts/patroni-cluster {args:?} failed: {}\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl Cluster {
    /// Starts the cluster and waits until it has a leader and a sync standby; blocking
    /// (call from `spawn_blocking`).
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "inlet-chaos-patroni-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let dir_text = dir.to_str().expect("a UTF-8 scratch path").to_owned();
        // The guard exists before the script starts anything, so a failed start cleans up.
        let mut cluster = Self {
            dir,
            env: HashMap::new(),
        };
        let printed = run(&["start", &dir_text]);
        cluster.env = printed
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        cluster
    }

    fn dir_text(&self) -> &str {
        self.dir.to_str().expect("a UTF-8 scratch path")
    }

    fn var(&self, name: &str) -> &str {
        self.env
            .get(name)
            .unwrap_or_else(|| panic!("{name} in cluster.env"))
    }

    /// The libpq multi-host URL of database `db`: every node, the writable one chosen.
    pub fn multihost_url(&self, db: &str) -> String {
        let hosts: Vec<String> = ["NODE1_PG", "NODE2_PG", "NODE3_PG"]
            .iter()
            .map(|port| format!("127.0.0.1:{}", self.var(port)))
            .collect();
        format!(
            "postgres://postgres@{}/{db}?target_session_attrs=read-write&connect_timeout=2",
            hosts.join(",")
        )
    }

    /// The URL of database `db` through HAProxy, which routes to the primary.
    pub fn haproxy_url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?connect_timeout=2",
            self.var("HAPROXY_PORT")
        )
    }

    /// Creates database `db` on the primary.
    pub fn create_database(&self, db: &str) {
        let mut conn = PgConnection::establish(&self.multihost_url("postgres"))
            .expect("connect to the cluster's primary");
        conn.batch_execute(&format!("CREATE DATABASE {db}"))
            .expect("create the campaign's database");
    }

    /// Every member Patroni knows of, as the first node that answers within 300 ms
    /// reports them (a frozen node does not answer; a dead one refuses).
    pub fn members(&self) -> Vec<Member> {
        ["NODE1_API", "NODE2_API", "NODE3_API"]
            .iter()
            .find_map(|port| patroni_cluster_view(self.var(port)))
            .unwrap_or_default()
    }

    /// The running leader's name, if there is one.
    pub fn leader(&self) -> Option<String> {
        self.members()
            .into_iter()
            .find(|m| m.role == "leader" && m.state == "running")
            .map(|m| m.name)
    }

    /// Waits until a member other than `old` leads; how long that took from `since`.
    pub fn wait_new_leader(&self, old: &str, since: Instant, within: Duration) -> Duration {
        let left = within.saturating_sub(since.elapsed());
        let new_leader = first_within_blocking(left, Duration::from_millis(100), || {
            self.leader().filter(|leader| leader != old)
        });
        assert!(
            new_leader.is_some(),
            "no new leader within {within:?}: {:?}",
            self.members()
        );
        since.elapsed()
    }

    /// Every process of `node`: runuser, Patroni, the postmaster and its children.
    pub fn pids(&self, node: &str) -> Vec<String> {
        run(&["pids", self.dir_text(), node])
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to every one of `pids`.
    pub fn signal(pids: &[String], signal: &str) {
        // A process may be gone already (a child of a killed postmaster): not an error.
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .args(pids)
            .stderr(Stdio::null())
            .status();
    }

    /// A planned switchover to the sync standby: (old leader, new leader).
    pub fn switchover(&self) -> (String, String) {
        let printed = run(&["switchover", self.dir_text()]);
        let mut words = printed.split_whitespace();
        let old = words.next().expect("the old leader").to_owned();
        let new = words.next().expect("the candidate").to_owned();
        (old, new)
    }

    /// Starts `node`'s Patroni again (after a kill): it rejoins as a replica.
    pub fn start_node(&self, node: &str) {
        run(&["start-node", self.dir_text(), node]);
    }

    /// Waits until three members run, one leads (and one is the sync standby).
    pub fn wait_healthy(&self, seconds: u64) {
        run(&["wait-healthy", self.dir_text(), &seconds.to_string()]);
    }

    /// Turns Patroni's `synchronous_mode` on or off, and waits until it has.
    pub fn set_synchronous(&self, on: bool) {
        run(&[
            "synchronous",
            self.dir_text(),
            if on { "on" } else { "off" },
        ]);
    }
}

/// `GET /cluster` of the Patroni REST API on `port`, read with a plain socket (HTTP/1.0:
/// the body ends with the connection); `None` if it does not answer in time.
fn patroni_cluster_view(port: &str) -> Option<Vec<Member>> {
    let timeout = Duration::from_millis(300);
    let address = format!("127.0.0.1:{port}").parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&address, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream
        .write_all(b"GET /cluster HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    let view: serde_json::Value = serde_json::from_str(body).ok()?;
    let field = |m: &serde_json::Value, key: &str| m[key].as_str().unwrap_or_default().to_owned();
    Some(
        view["members"]
            .as_array()?
            .iter()
            .map(|m| Member {
                name: field(m, "name"),
                role: field(m, "role"),
                state: field(m, "state"),
            })
            .collect(),
    )
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["stop", self.dir_text()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
