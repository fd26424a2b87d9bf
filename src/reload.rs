//! Live configuration reload (`SIGHUP`, `POST /admin/reload`, `inlet reload`): reads the
//! configuration file again, validates it as startup does, refuses a change that only a
//! restart applies, and otherwise puts the new sources, secrets, destinations and operator
//! token in force at once.
//!
//! Nothing is dropped on the way: a request in flight finishes on the settings snapshot
//! it started with, a delivery in flight on the destination it started with. A refused
//! reload changes nothing; every outcome is logged and counted the same way whatever
//! triggered it.

use crate::config::{ConfigError, LiveSettings, Settings};
use crate::db::DbPool;
use crate::delivery::{same_destination, DestinationSettings, Dispatcher};
use crate::notices::{Notice, Notices};
use crate::observability::{record_config_reload, start_webhook_counters};
use crate::operator::{Account, Outcome, Recorder};
use crate::provider::SourceSettings;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The key of a reload refused because its audit row could not be written (the
/// database's fault, not the file's).
pub const AUDIT_KEY: &str = "audit";

/// Reloads one instance's configuration; one reload at a time.
pub struct Reloader {
    job: Arc<Job>,
    /// Held for a whole reload, including its work off the executor: a reload whose
    /// caller went away still finishes before the next one starts.
    serial: Arc<tokio::sync::Mutex<()>>,
}

/// What a reload reads and changes.
struct Job {
    /// The file the instance was started from; `None` when it was built from settings
    /// alone (then every reload is refused).
    path: Option<PathBuf>,
    settings: LiveSettings,
    /// This instance's dispatcher, whose destinations follow the configuration.
    dispatcher: Option<Arc<Dispatcher>>,
    /// The database, asked which sources it holds rows of: a reload may not drop one.
    pool: Option<DbPool>,
    /// Webhook outcomes exported at 0 for each new source, as at startup.
    outcomes: Vec<&'static str>,
    /// Told of a refused reload.
    notices: Option<Arc<Notices>>,
}

/// What a reload changed, by name only (never a secret or a URL, which may carry
/// credentials).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Changes {
    pub sources: Names,
    /// `source/destination` names.
    pub destinations: Names,
    /// Whether the `[operator] token` changed (added, removed or rotated).
    pub operator_token_changed: bool,
    /// `[[operators]]` (and the `[operator] token`'s `operator`) by name: a changed one
    /// has a new token or role, and its console sessions end.
    pub operators: Names,
}

/// Names added, removed and changed, each list sorted.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Names {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl Names {
    /// Compares two `(name, settings)` lists with `same` (in time linear in their
    /// lengths: a configuration may have thousands of destinations).
    fn between<T>(old: &[(String, &T)], new: &[(String, &T)], same: fn(&T, &T) -> bool) -> Self {
        fn by_name<'a, T>(list: &'a [(String, &'a T)]) -> HashMap<&'a str, &'a T> {
            list.iter()
                .map(|(name, item)| (name.as_str(), *item))
                .collect()
        }
        let (before, after) = (by_name(old), by_name(new));
        let mut names = Names::default();
        for (name, item) in new {
            match before.get(name.as_str()) {
                None => names.added.push(name.clone()),
                Some(before) if !same(before, item) => names.changed.push(name.clone()),
                Some(_) => {}
            }
        }
        for (name, _) in old {
            if !after.contains_key(name.as_str()) {
                names.removed.push(name.clone());
            }
        }
        for list in [&mut names.added, &mut names.removed, &mut names.changed] {
            list.sort();
        }
        names
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl Changes {
    /// What putting `new` in force instead of `old` changes.
    pub fn between(old: &Settings, new: &Settings) -> Self {
        fn sources(s: &Settings) -> Vec<(String, &SourceSettings)> {
            s.sources.iter().map(|x| (x.name.to_string(), x)).collect()
        }
        fn destinations(s: &Settings) -> Vec<(String, &DestinationSettings)> {
            s.destinations
                .iter()
                .map(|(source, d)| (format!("{source}/{}", d.name), d))
                .collect()
        }
        Self {
            sources: Names::between(&sources(old), &sources(new), same_source),
            destinations: Names::between(&destinations(old), &destinations(new), same_destination),
            operator_token_changed: old.operator.token != new.operator.token,
            operators: Names::between(&operators(old), &operators(new), |a, b| a == b),
        }
    }

    /// What the audit trail says a reload changed (names only).
    pub fn summary(&self) -> String {
        let part = |what: &str, names: &Names| {
            let mut said = Vec::new();
            for (verb, list) in [
                ("added", &names.added),
                ("removed", &names.removed),
                ("changed", &names.changed),
            ] {
                if !list.is_empty() {
                    said.push(format!("{what} {verb}: {}", list.join(" ")));
                }
            }
            said
        };
        let mut said = part("sources", &self.sources);
        said.extend(part("destinations", &self.destinations));
        said.extend(part("operators", &self.operators));
        if said.is_empty() {
            "applied: nothing changed".to_owned()
        } else {
            format!("applied: {}", said.join("; "))
        }
    }
}

/// Operators by name (compared with their role and token).
fn operators(s: &Settings) -> Vec<(String, &Account)> {
    s.operator
        .accounts
        .iter()
        .map(|a| (a.name.clone(), a))
        .collect()
}

/// Whether a source verifies and identifies alike. `Debug` shows every field but the
/// secrets, which are compared themselves.
fn same_source(a: &SourceSettings, b: &SourceSettings) -> bool {
    a.secrets == b.secrets && format!("{a:?}") == format!("{b:?}")
}

impl Reloader {
    /// Reloads `path` (if any) into `settings`, and `dispatcher`'s destinations with it.
    pub fn new(
        path: Option<PathBuf>,
        settings: LiveSettings,
        dispatcher: Option<Arc<Dispatcher>>,
        pool: Option<DbPool>,
        outcomes: &[&'static str],
    ) -> Self {
        let job = Job {
            path,
            settings,
            dispatcher,
            pool,
            outcomes: outcomes.to_vec(),
            notices: None,
        };
        Self {
            job: Arc::new(job),
            serial: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Tells `notices` (when set) of every refused reload.
    pub fn with_notices(mut self, notices: Option<Arc<Notices>>) -> Self {
        if let Some(job) = Arc::get_mut(&mut self.job) {
            job.notices = notices;
        }
        self
    }

    /// Reads, validates and applies the configuration file; `trigger` (`sighup`, `api`)
    /// goes into the log line. On refusal nothing has changed; the error names the key.
    ///
    /// The work (reading the file, secrets behind `file:`, building every new
    /// destination) runs on a blocking thread, never on the thread that awaits this: an
    /// HTTP worker keeps answering webhooks while a reload builds. It runs to the end even
    /// if the caller stops waiting.
    pub async fn reload(&self, trigger: &'static str) -> Result<Changes, ConfigError> {
        self.reload_as(trigger, None).await
    }

    /// [`Reloader::reload`] told by `SIGHUP`: in the audit trail like an operator's
    /// (operator `system`, surface `signal`) when this instance has a database.
    pub async fn reload_signalled(&self) -> Result<Changes, ConfigError> {
        let recorder = (self.job.pool.clone())
            .map(|pool| Recorder::signalled_reload(pool, chrono::Utc::now()));
        self.reload_as("sighup", recorder).await
    }

    /// [`Reloader::reload`] for an operator: `recorder` writes the audit row — before the
    /// new settings are put in force (a reload whose row cannot be written is not
    /// applied), or after a refusal.
    pub async fn reload_recorded(
        &self,
        trigger: &'static str,
        recorder: Recorder,
    ) -> Result<Changes, ConfigError> {
        self.reload_as(trigger, Some(recorder)).await
    }

    async fn reload_as(
        &self,
        trigger: &'static str,
        recorder: Option<Recorder>,
    ) -> Result<Changes, ConfigError> {
        let one_at_a_time = self.serial.clone().lock_owned().await;
        let job = self.job.clone();
        let work = tokio::task::spawn_blocking(move || {
            let _one_at_a_time = one_at_a_time;
            let outcome = job.apply(recorder.as_ref());
            let unrecorded = matches!(&outcome, Err(e) if e.key == AUDIT_KEY);
            if let (Err(refused), Some(recorder), false) = (&outcome, &recorder, unrecorded) {
                let result = format!("refused: {}: {}", refused.key, refused.message);
                if let Err(error) = recorder.record(Outcome::Failed, &result) {
                    tracing::error!(%error, "cannot write the audit row of a refused reload");
                }
            }
            if let Err(refused) = &outcome {
                job.tell_refused(refused);
            }
            conclude(trigger, outcome)
        });
        match work.await {
            Ok(outcome) => outcome,
            Err(error) => conclude(
                trigger,
                Err(ConfigError::new(
                    "config",
                    format!("the reload was interrupted: {error}"),
                )),
            ),
        }
    }
}

/// Logs and counts a reload's outcome, the same way whatever triggered it.
fn conclude(
    trigger: &'static str,
    outcome: Result<Changes, ConfigError>,
) -> Result<Changes, ConfigError> {
    record_config_reload(outcome.is_ok(), chrono::Utc::now().timestamp());
    match &outcome {
        Ok(changes) => tracing::info!(
            trigger,
            sources_added = ?changes.sources.added,
            sources_removed = ?changes.sources.removed,
            sources_changed = ?changes.sources.changed,
            destinations_added = ?changes.destinations.added,
            destinations_removed = ?changes.destinations.removed,
            destinations_changed = ?changes.destinations.changed,
            operator_token_changed = changes.operator_token_changed,
            operators_added = ?changes.operators.added,
            operators_removed = ?changes.operators.removed,
            operators_changed = ?changes.operators.changed,
            "configuration reloaded"
        ),
        Err(error) => tracing::warn!(
            trigger,
            key = %error.key,
            reason = %error.message,
            "configuration reload refused; the running configuration is unchanged"
        ),
    }
    outcome
}

impl Job {
    /// A `config.reload_refused` notice, named by what was refused (the file's bytes and
    /// the reason): the same file refused again, or by another instance, is told once.
    fn tell_refused(&self, refused: &ConfigError) {
        let (Some(notices), Some(pool)) = (&self.notices, &self.pool) else {
            return;
        };
        let file = (self.path.as_deref())
            .and_then(|path| std::fs::read(path).ok())
            .unwrap_or_default();
        let reason = format!("{}\n{}", refused.key, refused.message);
        let digest = crate::ingest::fingerprint(&[file, reason.into_bytes()].concat());
        let notice = Notice::reload_refused(&refused.key, &refused.message, &digest, notices.now());
        match pool.get() {
            Ok(mut conn) => notices.send(&mut conn, vec![notice]),
            Err(error) => tracing::warn!(%error, "cannot write an operational notice"),
        }
    }

    /// Reads the file and puts it in force, once `recorder` (if any) has written the
    /// audit row; blocking (call it off the executor).
    fn apply(&self, recorder: Option<&Recorder>) -> Result<Changes, ConfigError> {
        let path = self.path.as_deref().ok_or_else(|| {
            ConfigError::new(
                "config",
                "this instance was not started from a configuration file",
            )
        })?;
        let next = Settings::load(path)?;
        let current = self.settings.current();
        if let Some(key) = current.restart_only_change(&next) {
            return Err(ConfigError::new(
                key.clone(),
                format!("{key} changes only on restart"),
            ));
        }
        let changes = Changes::between(&current, &next);
        if let Some(pool) = &self.pool {
            next.check_stored_sources(&stored_sources(pool)?)?;
        }
        // The audit row is written once everything that can fail has (the new
        // destinations are built), and before anything is put in force: a reload whose
        // row cannot be written is not applied, and one that is recorded is.
        let record = || match recorder {
            Some(recorder) => recorder
                .record(Outcome::Done, &changes.summary())
                .map_err(|e| {
                    ConfigError::new(
                        AUDIT_KEY,
                        format!("cannot write the audit row ({e}): nothing was applied"),
                    )
                }),
            None => Ok(()),
        };
        match &self.dispatcher {
            // First the dispatcher, then the settings: a delivery enqueued under the new
            // settings always finds its destination.
            Some(dispatcher) => {
                let mut unrecorded = None;
                let replaced = dispatcher.replace_destinations_once(&next.destinations, || {
                    record().map_err(|refused| {
                        let error = anyhow::anyhow!("{refused}");
                        unrecorded = Some(refused);
                        error
                    })
                });
                if let Some(refused) = unrecorded {
                    return Err(refused);
                }
                replaced.map_err(|e| ConfigError::new("sources", format!("{e:#}")))?;
            }
            None => record()?,
        }
        self.put_in_force(next, &changes);
        Ok(changes)
    }

    /// What follows an applied reload: counters for the sources it added, warnings about
    /// their schemes, the sessions of the operators it removed, and the settings in force.
    fn put_in_force(&self, next: Settings, changes: &Changes) {
        let added: Vec<&str> = changes.sources.added.iter().map(String::as_str).collect();
        start_webhook_counters(&added, &self.outcomes);
        warn_about_schemes(&next, &added);
        if let (false, Some(pool)) = (changes.operators.removed.is_empty(), &self.pool) {
            let accounts = &next.operator.accounts;
            crate::operator::sessions::end_sessions_of_removed_operators(pool, accounts);
        }
        self.settings.replace(Arc::new(next));
    }
}

/// The source names the database holds rows of (blocking).
fn stored_sources(pool: &DbPool) -> Result<std::collections::BTreeSet<String>, ConfigError> {
    let unreadable =
        |e: String| ConfigError::new("sources", format!("cannot read the database: {e}"));
    let mut conn = pool.get().map_err(|e| unreadable(e.to_string()))?;
    crate::ledger::stored_sources(&mut conn).map_err(|e| unreadable(e.to_string()))
}

/// As at startup: a new source whose scheme authenticates only the sender is logged, and
/// one that keys its facts on the body while some destination filters by type. (One pass
/// over the sources and one over the destinations: there may be thousands of each.)
pub fn warn_about_schemes(settings: &Settings, names: &[&str]) {
    let named: HashSet<&str> = names.iter().copied().collect();
    let filtered: HashSet<&str> = settings
        .destinations
        .iter()
        .filter(|(source, d)| named.contains(source) && d.events.is_filtered())
        .map(|(source, _)| source)
        .collect();
    for source in settings
        .sources
        .iter()
        .filter(|s| named.contains(s.name.as_str()))
    {
        if let Some(meaning) = source.provider.authenticates_sender_only() {
            tracing::warn!(source = %source.name, scheme = source.provider.name(), "{meaning}");
        }
        let unsigned_type = source.keys_body_fact && !source.provider.signs_a_reading();
        if unsigned_type && filtered.contains(source.name.as_str()) {
            tracing::warn!(source = %source.name, "this source's event type is not signed, so its facts are keyed on the body: an event whose exact body an event of another type already brought is a known fact, and reaches no destination, even one filtered to its own type");
        }
    }
}

/// Reloads on every `SIGHUP` until the process ends (`inlet serve`, `inlet deliver`);
/// the outcome is logged by [`Reloader::reload`], as for the API.
pub async fn reload_on_hangup(reloader: Arc<Reloader>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP: reload through POST /admin/reload");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        // Refusals are logged and counted inside; the process keeps running either way.
        let _ = reloader.reload_signalled().await;
    }
}
