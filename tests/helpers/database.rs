//! A database that exists for one test — an SQLite file or a new PostgreSQL database —
//! and a TCP proxy to PostgreSQL a test can cut.

use super::*;
use chrono::Utc;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A name no other test (or run) uses: a database, a stream, a queue.
pub fn unique_name() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = Utc::now().timestamp_subsec_nanos();
    format!(
        "inlet_test_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn postgres_admin_url() -> String {
    std::env::var("INLET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `INLET_TEST_POSTGRES_POOLER_URL` (a server URL without a database, e.g.
/// `postgres://postgres@127.0.0.1:6432`): a transaction-pooling PgBouncer in front of the
/// server above, through which the Inlet under test connects (with `database.pooler =
/// "transaction"`); the test's own connections stay direct.
pub fn postgres_pooler_url() -> Option<String> {
    std::env::var("INLET_TEST_POSTGRES_POOLER_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A database that exists for one test and is removed afterwards.
pub enum TestDatabase {
    Sqlite(PathBuf),
    Postgres { name: String },
}

impl TestDatabase {
    pub(crate) fn create(backend: Backend) -> Self {
        let name = unique_name();
        match backend {
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(&name);
                Self::Sqlite(dir.join("inlet.db"))
            }
            Backend::Postgres => {
                let mut admin = PgConnection::establish(&postgres_admin_url())
                    .expect("PostgreSQL must be reachable for the PostgreSQL tests (INLET_TEST_POSTGRES_URL)");
                admin
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .expect("create the test database");
                Self::Postgres { name }
            }
        }
    }

    /// The URL Inlet connects with; `via` routes PostgreSQL through a proxy port.
    pub(crate) fn url(&self, via: Option<u16>) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres { name } => {
                let admin = postgres_admin_url();
                let (server, _) = admin.rsplit_once('/').expect("a database URL has a path");
                let server = match via {
                    Some(port) => {
                        let (prefix, _) = server
                            .rsplit_once('@')
                            .map_or((server, ""), |(p, h)| (p, h));
                        format!("{prefix}@127.0.0.1:{port}")
                    }
                    None => server.to_owned(),
                };
                format!("{server}/{name}")
            }
        }
    }

    /// The URL the Inlet under test connects with: through `via`'s proxy, else through
    /// `pooler` (a server URL without a database), else [`Self::url`].
    pub(crate) fn app_url(&self, via: Option<u16>, pooler: Option<String>) -> String {
        match (self, via, pooler) {
            (Self::Postgres { name }, None, Some(pooler)) => {
                format!("{}/{name}", pooler.trim_end_matches('/'))
            }
            _ => self.url(via),
        }
    }

    pub(crate) fn upstream(&self) -> SocketAddr {
        postgres_upstream()
    }
}

/// The test PostgreSQL server's address (`INLET_TEST_POSTGRES_URL`'s host and port).
pub fn postgres_upstream() -> SocketAddr {
    let admin = postgres_admin_url();
    let host = admin
        .rsplit_once('@')
        .map(|(_, rest)| rest)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("127.0.0.1:5432");
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    host.replace("localhost", "127.0.0.1")
        .parse()
        .expect("an IP:port PostgreSQL address")
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match self {
            Self::Sqlite(path) => {
                if let Some(dir) = path.parent() {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            Self::Postgres { name } => {
                if let Ok(mut admin) = PgConnection::establish(&postgres_admin_url()) {
                    let _ = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
                }
            }
        }
    }
}

/// A TCP proxy to PostgreSQL that the test can cut: down drops every open connection and
/// refuses new ones, up lets them through again.
pub struct ToggleProxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl ToggleProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let up = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let up = up.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !up.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    connections.lock().expect("proxy lock").push(task);
                }
            })
        };
        Self {
            port,
            up,
            connections,
            accept,
        }
    }

    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        for task in self.connections.lock().expect("proxy lock").drain(..) {
            task.abort();
        }
    }

    pub fn up(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for ToggleProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
    }
}

/// A PgBouncer of the test's own in transaction pooling (`scripts/pgbouncer`: its own
/// scratch directory and port) in front of the test PostgreSQL server; stopped on drop.
pub struct PrivatePgBouncer {
    dir: PathBuf,
    /// The server URL through it, without a database.
    pub url: String,
}

impl PrivatePgBouncer {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(unique_name());
        let upstream = postgres_upstream();
        let output = std::process::Command::new(Self::script())
            .arg("start")
            .arg(&dir)
            .arg(upstream.to_string())
            .output()
            .expect("run scripts/pgbouncer (Debian's pgbouncer; scripts/prepare installs it)");
        assert!(
            output.status.success(),
            "scripts/pgbouncer start failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let url = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        Self { dir, url }
    }

    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pgbouncer")
    }
}

impl Drop for PrivatePgBouncer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(Self::script())
            .arg("stop")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
