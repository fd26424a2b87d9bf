//! SQLite checkpoints off the write path. Left to itself, SQLite copies the write-ahead
//! log back into the database file inside the COMMIT that pushes the log past 1,000 pages
//! — a few milliseconds of page writes and an `fsync` of the database file during which
//! the one writer, and every webhook queued behind it, waits. Inlet's connections instead
//! leave checkpoints to a thread of their own on its own connection: a `PASSIVE`
//! checkpoint runs beside the writer without blocking it. The writer still checkpoints
//! itself as a safety net once the log is [`SAFETY_NET_PAGES`] long (the thread fell far
//! behind, or no server runs one).

use super::target::DatabaseTarget;
use super::{ConnectionManager, DatabaseSettings};
use diesel::connection::SimpleConnection;
use parking_lot::{Condvar, Mutex};
use r2d2::ManageConnection;
use std::sync::Arc;
use std::time::Duration;

/// `wal_autocheckpoint` on Inlet's SQLite connections: about 40 MB of log.
pub const SAFETY_NET_PAGES: u32 = 10_000;

/// How often the checkpoint thread runs.
const INTERVAL: Duration = Duration::from_millis(200);

/// The checkpoint thread of a server on SQLite; dropping it stops the thread.
pub struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Checkpointer {
    /// Starts the thread when the database is SQLite (`None` on PostgreSQL, which
    /// checkpoints in its own server processes).
    pub fn start(settings: &DatabaseSettings) -> std::io::Result<Option<Self>> {
        if !matches!(settings.target, DatabaseTarget::Sqlite(_)) {
            return Ok(None);
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let manager = ConnectionManager::new(settings);
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("inlet-checkpoint".to_owned())
            .spawn(move || run(&manager, &stopped))?;
        Ok(Some(Self { stop }))
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
    }
}

fn run(manager: &ConnectionManager, stop: &(Mutex<bool>, Condvar)) {
    let mut conn = None;
    loop {
        {
            let mut stopped = stop.0.lock();
            if !*stopped {
                stop.1.wait_for(&mut stopped, INTERVAL);
            }
            if *stopped {
                return;
            }
        }
        if conn.is_none() {
            conn = manager
                .connect()
                .map_err(|error| tracing::warn!(%error, "cannot open the checkpoint connection"))
                .ok();
        }
        if let Some(c) = conn.as_mut() {
            if let Err(error) = c.batch_execute("PRAGMA wal_checkpoint(PASSIVE)") {
                tracing::warn!(%error, "checkpoint failed; the writer will checkpoint itself");
                conn = None;
            }
        }
    }
}
