//! The `inlet` command line: parse arguments, call into the library.

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use inlet::cli::{AdminClient, ReplaySelection};
use inlet::config::Settings;
use inlet::delivery::Settled;
use inlet::observability::LogFormat;
use inlet::reconcile::{RunRequest, Trigger};
use inlet::reload::reload_on_hangup;
use inlet::retention::Sweeper;
use inlet::secret::Secret;
use inlet::signature::EventToSign;
use inlet::startup::{open_database, reconcile_once, Application, Delivering, Hooks};
use std::path::PathBuf;

/// `inlet --version`: the version and the commit built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("INLET_COMMIT"), ")");

#[derive(Parser)]
#[command(
    name = "inlet",
    version = VERSION,
    about = "Webhook ingestion with exactly-once effects"
)]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        env = "INLET_CONFIG",
        default_value = "inlet.toml"
    )]
    config: PathBuf,
    /// Log as human-readable text or as JSON lines.
    #[arg(
        long,
        global = true,
        env = "INLET_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations, then serve until SIGTERM or Ctrl-C; SIGHUP reloads the
    /// configuration file (sources, secrets, destinations, operator token).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Validate the configuration and print the retention check.
    CheckConfig,
    /// Delete expired event rows, old delivered deliveries, dead letters past
    /// retention.dead_letters, expired operator keys and audit rows older than
    /// retention.audit (what `serve` does on an interval).
    /// Facts are never deleted.
    Sweep {
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Reconcile a source with its provider's own record of events now: list what the
    /// provider sent, find what Inlet never claimed, and recover it (the provider resends
    /// it, or it is claimed as fetched) — or only print it (`--dry-run`).
    Reconcile {
        /// The source, as configured with [sources.reconcile].
        #[arg(long)]
        source: String,
        /// Look back this far (e.g. 2d) instead of from where the last clean run ended;
        /// at most the source's lookback.
        #[arg(long)]
        since: Option<String>,
        /// List what is missing; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Inspect events through the operator API.
    Events {
        #[command(subcommand)]
        action: EventsAction,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Deliver stored events' facts again, under their first Idempotency-Key (no second
    /// fact; an event whose fact another event recorded first delivers nothing).
    Replay {
        /// SOURCE/EVENT_ID; repeat for several. Without any, the filter flags choose.
        #[arg(
            long = "event",
            conflicts_with_all = ["source", "event_type", "status", "since", "until", "limit"]
        )]
        events: Vec<String>,
        #[command(flatten)]
        filter: EventFilterArgs,
        /// Replay every stored event (at most --limit): needed when nothing else selects.
        #[arg(long, conflicts_with = "events")]
        all: bool,
        /// Print what the replay would do (events, deliveries per destination); do nothing.
        #[arg(long)]
        dry_run: bool,
        /// Most events to replay when selecting by filter (capped by operator.max_replay).
        #[arg(long)]
        limit: Option<u32>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Try destinations' filters and transforms against a stored event (POST
    /// /admin/evaluate): read only, nothing enqueued.
    Filter {
        #[command(subcommand)]
        action: FilterAction,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Read the audit trail of operator actions (newest first) through the operator API.
    Audit {
        #[command(flatten)]
        query: AuditArgs,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Replay, requeue or discard everything a filter names, in batches (POST
    /// /admin/bulk): --dry-run previews the counts per destination and a sample; without
    /// it the action starts once (one Idempotency-Key), --wait follows it to the end.
    Bulk {
        #[command(subcommand)]
        action: BulkAction,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List, requeue or discard dead deliveries through the operator API.
    Deadletters {
        #[command(subcommand)]
        action: DeadlettersAction,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// List or clear the secrets sources' handshakes established (Asana's X-Hook-Secret)
    /// through the operator API: when each was established, never the secret.
    HookSecrets {
        #[command(subcommand)]
        action: HookSecretsAction,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Load Inlet with signed webhooks (or, with --ceiling, the database alone) and report
    /// throughput and latency.
    Bench(BenchArgs),
    /// Send due deliveries to their destinations (what `serve` does continuously); SIGHUP
    /// reloads the destinations from the configuration file.
    Deliver {
        /// Deliver what is due now, once, and exit.
        #[arg(long)]
        once: bool,
    },
    /// Make a running Inlet read its configuration file again (POST /admin/reload): prints
    /// what changed, or why nothing did (exit 1).
    Reload {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print the curl command that posts a body as a source's provider would, signed now
    /// (the body byte for byte: `--data-binary`, never `-d`, which strips newlines).
    Sign {
        /// The configured source whose scheme and first secret sign the body.
        #[arg(long)]
        source: String,
        /// The file holding the request body, sent byte for byte.
        #[arg(long)]
        body: PathBuf,
        /// The webhook URL in the command. Default: this configuration's listener.
        #[arg(long)]
        url: Option<String>,
        /// Print only the signed headers, one `Name: value` per line (and the signed
        /// body when the scheme signs inside it).
        #[arg(long)]
        headers_only: bool,
        #[command(flatten)]
        event: EventArgs,
        #[command(flatten)]
        key: PrivateKeyArg,
    },
    /// A sample application to deliver to (the quickstart's last step), on the inbox
    /// library: verifies each delivery's Standard Webhooks signature, applies it once to a
    /// SQLite file and prints it, until Ctrl-C.
    #[command(alias = "receive")]
    SampleApp(SampleAppArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print inlet(1) as roff, or write one page per command (inlet.1, inlet-serve.1, …)
    /// into --dir.
    Man {
        /// The directory to write the pages into (created when missing).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Probe a running Inlet's /readyz: exit 0 when it is ready, 1 (and why) when not.
    /// Needs no shell tools: the container image's HEALTHCHECK.
    Healthcheck {
        /// Base URL of the running Inlet (default: this configuration's listener).
        #[arg(long)]
        url: Option<String>,
    },
    /// Sign a body as the source's provider would and POST it to Inlet.
    Send {
        /// The configured source whose scheme and first secret sign the body.
        #[arg(long)]
        source: String,
        /// The file holding the request body, sent byte for byte.
        #[arg(long)]
        body: PathBuf,
        /// The webhook URL. Defaults to this configuration's listener.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        event: EventArgs,
        #[command(flatten)]
        key: PrivateKeyArg,
    },
}

/// `inlet sample-app`'s arguments.
#[derive(clap::Args)]
struct SampleAppArgs {
    /// Where to listen (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:9000")]
    bind: String,
    /// A destination's secret to verify with: whsec_…, env:NAME or file:PATH (prefer the
    /// last two); repeat for several. Default: the secrets of this configuration's
    /// destinations on --bind.
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// The SQLite database it applies deliveries to (its inbox table and `deliveries`);
    /// made with its folder when missing.
    #[arg(long, default_value = "data/sample-app.db")]
    database: PathBuf,
}

/// For sources that verify with public keys (discord, sendgrid, standard with a whpk_
/// key): the private key that signs; for an asana source without configured secrets, the
/// secret its handshake stored. Never printed.
#[derive(clap::Args)]
struct PrivateKeyArg {
    /// The private key to sign with: the value, env:NAME or file:PATH (prefer the last
    /// two: a value on the command line is visible to other users of the machine).
    /// Discord: the hex seed; SendGrid: base64 (or PEM) of the PKCS#8 DER; Standard
    /// Webhooks: whsk_<base64>; an asana source without configured secrets: the secret its
    /// handshake stored.
    #[arg(
        long = "private-key",
        env = "INLET_SIGNING_KEY",
        hide_env_values = true
    )]
    private_key: Option<String>,
}

impl PrivateKeyArg {
    fn resolve(self) -> anyhow::Result<Option<Secret>> {
        self.private_key
            .map(|reference| {
                Secret::resolve(&reference).map_err(|m| anyhow::anyhow!("--private-key: {m}"))
            })
            .transpose()
    }
}

/// `inlet bench`'s options.
#[derive(clap::Args)]
struct BenchArgs {
    /// The configured source whose scheme and first secret sign the requests.
    #[arg(long, default_value = "stripe")]
    source: String,
    /// The webhook URL to load. Default: this configuration's listener.
    #[arg(long)]
    url: Option<String>,
    /// Closed loop: requests in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// How long to run, e.g. 10s or 2m.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Open loop at this many requests per second (latency from the intended send time).
    #[arg(long)]
    rate: Option<f64>,
    /// Fraction of requests that re-send an earlier event (0.3 = 30 %).
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
    /// Size of each webhook body in bytes.
    #[arg(long, default_value_t = 1024)]
    body_bytes: usize,
    /// Run the statements of accepted webhooks on the database, no HTTP.
    #[arg(long)]
    ceiling: bool,
    /// With --ceiling: webhooks per transaction (64: the batched ceiling).
    #[arg(long, default_value_t = 1, requires = "ceiling")]
    batch: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Instead of loading Inlet, be a destination at this address (e.g. 127.0.0.1:18090):
    /// answer every request 200 after --sink-delay and count them (GET /count), until
    /// Ctrl-C or SIGTERM.
    #[arg(long, value_name = "ADDRESS", conflicts_with_all = ["ceiling", "url", "rate", "json"])]
    sink: Option<String>,
    /// How long the sink waits before each answer.
    #[arg(long, default_value = "5ms", requires = "sink")]
    sink_delay: String,
    /// Instead of loading Inlet, decide this jq filter on a payload of --body-bytes, on
    /// this configuration's live evaluators ([jq]), from --concurrency callers: the
    /// evaluations per second and each job's latency.
    #[arg(long, value_name = "FILTER", conflicts_with_all = ["ceiling", "url", "rate", "sink"])]
    evaluate: Option<String>,
    /// With --evaluate: filters per job (an event's filters are decided in one job).
    #[arg(long, default_value_t = 1, requires = "evaluate")]
    filters: usize,
}

#[derive(Subcommand)]
enum EventsAction {
    /// One page of events (pass --cursor with the printed next_cursor for the next).
    List {
        #[command(flatten)]
        filter: EventFilterArgs,
        /// The next_cursor printed with the previous page.
        #[arg(long)]
        cursor: Option<i64>,
        /// Events per page (at most 500; default 100).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// One event: metadata, payload, stored answer, fact, deliveries.
    Show {
        /// The source the event came in on.
        source: String,
        /// The provider's event id.
        event_id: String,
    },
}

#[derive(Subcommand)]
enum FilterAction {
    /// Prints what each destination's filter decides for the event and the body its
    /// transform would send (or what the expressions given here make of it).
    Test {
        /// The event's source.
        #[arg(long)]
        source: String,
        /// The event id.
        #[arg(long = "event")]
        event_id: String,
        /// One destination of the source (default: every one).
        #[arg(long)]
        destination: Option<String>,
        /// A jq filter to try in place of the destination's own.
        #[arg(long)]
        filter: Option<String>,
        /// A jq transform to try in place of the destination's own.
        #[arg(long)]
        transform: Option<String>,
    },
}

#[derive(Subcommand)]
enum DeadlettersAction {
    /// One page of dead deliveries.
    List {
        #[command(flatten)]
        filter: DeadLetterFilterArgs,
        /// The next_cursor printed with the previous page.
        #[arg(long)]
        cursor: Option<i64>,
        /// Deliveries per page (at most 500; default 100).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Back to pending, due now: the given ids, or every dead delivery matching the filter.
    Requeue {
        #[command(flatten)]
        selection: DeadLetterSelection,
    },
    /// Set aside for good (`discarded`, kept until swept after retention.dead_letters):
    /// the given ids, or every dead delivery matching the filter.
    Discard {
        #[command(flatten)]
        selection: DeadLetterSelection,
    },
}

#[derive(Subcommand)]
enum HookSecretsAction {
    /// Each source whose secret a handshake establishes, and when it was established.
    List,
    /// Forget a source's established secret (POST /admin/hook-secrets/clear), so that its
    /// next handshake — a new webhook's — is taken; until then its requests are refused.
    Clear {
        /// The source whose secret goes.
        #[arg(long)]
        source: String,
    },
}

#[derive(clap::Subcommand)]
enum BulkAction {
    /// Replay every stored event the filter names (to --destination alone when given).
    Replay(BulkArgs),
    /// Requeue every dead letter the filter names (--since/--until: when it died).
    Requeue(BulkArgs),
    /// Discard every dead letter the filter names.
    Discard(BulkArgs),
    /// One bulk action and how far it got; without an id, the newest ones.
    Status {
        id: Option<i64>,
        /// Follow the action until it is done, printing its progress.
        #[arg(long, requires = "id")]
        wait: bool,
    },
}

/// The filter and mode of a bulk action.
#[derive(clap::Args)]
struct BulkArgs {
    #[arg(long)]
    source: Option<String>,
    /// The destination (its configured name).
    #[arg(long)]
    destination: Option<String>,
    #[arg(long = "type")]
    event_type: Option<String>,
    /// From this time, RFC 3339 (e.g. 2026-11-30T00:00:00Z).
    #[arg(long)]
    since: Option<String>,
    /// Before this time, RFC 3339.
    #[arg(long)]
    until: Option<String>,
    /// Print what it would do (counts per destination, a sample); do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Follow the started action until it is done, printing its progress.
    #[arg(long, conflicts_with = "dry_run")]
    wait: bool,
}

#[derive(clap::Args)]
struct DeadLetterFilterArgs {
    /// Only deliveries of this source.
    #[arg(long)]
    source: Option<String>,
    /// Only deliveries to this destination (its configured name).
    #[arg(long)]
    destination: Option<String>,
}

/// Which dead letters an action applies to; one of these is required.
#[derive(clap::Args)]
struct DeadLetterSelection {
    /// A dead delivery's id; repeat for several.
    #[arg(long = "id", conflicts_with_all = ["source", "destination", "all"])]
    ids: Vec<i64>,
    #[command(flatten)]
    filter: DeadLetterFilterArgs,
    /// Every dead delivery (at most operator.max_replay): needed when nothing else selects.
    #[arg(long)]
    all: bool,
}

impl DeadLetterSelection {
    /// The request body, or why there is none.
    fn body(self) -> anyhow::Result<serde_json::Value> {
        let DeadLetterFilterArgs {
            source,
            destination,
        } = self.filter;
        if !self.ids.is_empty() {
            return Ok(serde_json::json!({ "ids": self.ids }));
        }
        if source.is_none() && destination.is_none() && !self.all {
            anyhow::bail!(
                "choose dead letters with --id, --source or --destination, or pass --all for every one"
            );
        }
        Ok(serde_json::json!({ "filter": { "source": source, "destination": destination } }))
    }
}

#[derive(clap::Args)]
struct EventFilterArgs {
    /// Only events of this source.
    #[arg(long)]
    source: Option<String>,
    /// Only events of this type.
    #[arg(long = "type")]
    event_type: Option<String>,
    /// Only events with this status.
    #[arg(long)]
    status: Option<String>,
    /// Received at or after this time, RFC 3339 (e.g. 2026-11-30T00:00:00Z).
    #[arg(long)]
    since: Option<String>,
    /// Received before this time, RFC 3339.
    #[arg(long)]
    until: Option<String>,
}

impl EventFilterArgs {
    fn params(self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("source", self.source),
            ("type", self.event_type),
            ("status", self.status),
            ("since", self.since),
            ("until", self.until),
        ]
    }

    fn json(self) -> serde_json::Value {
        let object: serde_json::Map<String, serde_json::Value> = self
            .params()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), serde_json::Value::String(v))))
            .collect();
        serde_json::Value::Object(object)
    }
}

/// Which rows of the audit trail to read.
#[derive(clap::Args)]
struct AuditArgs {
    /// Only this operator's actions.
    #[arg(long)]
    operator: Option<String>,
    /// Only this action: replay, requeue, discard, reload, sign_in, sign_out.
    #[arg(long)]
    action: Option<String>,
    /// Only this outcome: done, refused or failed.
    #[arg(long)]
    outcome: Option<String>,
    /// From this time on (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// Before this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// The next_cursor printed with the previous page.
    #[arg(long)]
    cursor: Option<i64>,
    /// Rows per page (at most 500; default 100).
    #[arg(long)]
    limit: Option<i64>,
}

impl AuditArgs {
    fn query(self) -> String {
        inlet::cli::query_string(&[
            ("operator", self.operator),
            ("action", self.action),
            ("outcome", self.outcome),
            ("since", self.since),
            ("until", self.until),
            ("cursor", self.cursor.map(|c| c.to_string())),
            ("limit", self.limit.map(|l| l.to_string())),
        ])
    }
}

/// Where the operator API is and its token; by default from the configuration.
#[derive(clap::Args)]
struct AdminArgs {
    /// Base URL of a running Inlet's operator API (default: this configuration's
    /// admin.bind, else its server.bind).
    #[arg(long, env = "INLET_ADMIN_URL", global = true)]
    admin_url: Option<String>,
    /// Your operator token (default: this configuration's operator.token; with
    /// [[operators]], pass your own).
    #[arg(
        long,
        env = "INLET_OPERATOR_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
}

impl AdminArgs {
    fn client(self, config: &std::path::Path) -> anyhow::Result<inlet::cli::AdminClient> {
        let settings = || {
            Settings::load(config)
                .map_err(|e| anyhow::anyhow!("{e} (or pass --admin-url and --token)"))
        };
        let url = match self.admin_url {
            Some(url) => url,
            None => inlet::cli::operator_url(&settings()?),
        };
        let token = match self.token {
            Some(token) => token,
            None => settings()?
                .operator
                .token
                .map(|t| t.expose().to_owned())
                .ok_or_else(|| {
                    anyhow::anyhow!("no operator token: pass --token or set operator.token")
                })?,
        };
        inlet::cli::AdminClient::new(&url, &token)
    }
}

/// Prints an operator API answer; non-2xx exits 1.
fn print_answer((status, body): (u16, String)) {
    match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(json) => println!("{}", serde_json::to_string_pretty(&json).unwrap_or(body)),
        Err(_) => println!("{body}"),
    }
    if !(200..300).contains(&status) {
        eprintln!("HTTP {status}");
        std::process::exit(1);
    }
}

/// For schemes that carry the event id or type in headers (GitHub, Shopify, Standard
/// Webhooks, generic hmac sources reading a header).
#[derive(clap::Args)]
struct EventArgs {
    /// The event id to send in a header; a fresh one by default.
    #[arg(long)]
    event_id: Option<String>,
    /// The event type (topic) to send in a header.
    #[arg(long, default_value = "ping")]
    event_type: String,
}

impl EventArgs {
    fn sample(self) -> EventToSign {
        EventToSign {
            id: self.event_id.unwrap_or_else(inlet::cli::sample_event_id),
            event_type: self.event_type,
        }
    }
}

fn main() -> std::process::ExitCode {
    // An evaluator process of this one's jq lanes (see inlet::jq::worker): before
    // anything else starts, no runtime, no logging.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "jq-worker")
    {
        inlet::jq::worker::serve();
    }
    // Evaluators run this very executable, even once a package upgrade replaced its file.
    let this = std::path::Path::new("/proc/self/exe");
    let this = match this.exists() {
        true => Ok(this.to_path_buf()),
        false => std::env::current_exe(),
    };
    if let Ok(this) = this {
        inlet::jq::set_worker_program(this);
    }
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line, whatever RUST_BACKTRACE says: what failed, and why.
            eprintln!("inlet: {}", described(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error as one line: its causes, and what to do when an address is taken.
fn described(error: &anyhow::Error) -> String {
    let in_use = error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    });
    match in_use {
        true => format!(
            "{error:#} — another process listens there (an inlet serve already running?): \
             stop it, or change the address in the configuration"
        ),
        false => format!("{error:#}"),
    }
}

#[actix_web::main]
async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _logs = inlet::observability::init_logging(cli.log_format);
    let config = cli.config;
    match cli.command {
        // The operator commands talk to a running Inlet: they need no valid local config.
        Command::Events { action, admin } => events(action, admin.client(&config)?).await,
        Command::Replay {
            events,
            filter,
            all,
            dry_run,
            limit,
            admin,
        } => {
            let selection = ReplaySelection {
                events,
                filter: filter.json(),
                all,
            };
            let body = inlet::cli::replay_body(selection, limit, dry_run)?;
            let client = admin.client(&config)?;
            print_answer(client.post("/admin/replay", &body).await?);
            Ok(())
        }
        Command::Deadletters { action, admin } => deadletters(action, admin.client(&config)?).await,
        Command::HookSecrets { action, admin } => {
            hook_secrets(action, admin.client(&config)?).await
        }
        Command::Bulk { action, admin } => bulk(action, admin.client(&config)?).await,
        Command::Audit { query, admin } => audit(query, admin.client(&config)?).await,
        Command::Filter { action, admin } => filter(action, admin.client(&config)?).await,
        Command::Reload { admin } => {
            let client = admin.client(&config)?;
            print_answer(client.post("/admin/reload", &serde_json::json!({})).await?);
            Ok(())
        }
        Command::SampleApp(args) => sample_app(args, &config).await,
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "inlet", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => man(dir),
        Command::Healthcheck { url } => {
            // Unhealthy is exit 1, whatever the cause (container runtimes reserve 2).
            let url = match url {
                Some(url) => url,
                None => inlet::cli::listener_url(
                    &Settings::load(&config)
                        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?,
                ),
            };
            println!("{}", inlet::cli::healthcheck(&url).await?);
            Ok(())
        }
        command => run_locally(command, &config).await,
    }
}

/// `inlet man`: inlet(1) on stdout, or every command's page into `dir`.
fn man(dir: Option<PathBuf>) -> anyhow::Result<()> {
    match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?,
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), &dir)?;
        }
    }
    Ok(())
}

/// `inlet sample-app`: the secrets given, or else those of the configuration's destinations
/// on `bind`.
async fn sample_app(args: SampleAppArgs, config: &std::path::Path) -> anyhow::Result<()> {
    let SampleAppArgs {
        bind,
        secrets,
        database,
    } = args;
    let secrets = match secrets.is_empty() {
        true => inlet::tools::sample_app::secrets_for(&load_settings(config), &bind)?,
        false => secrets
            .iter()
            .map(|reference| {
                let secret =
                    Secret::resolve(reference).map_err(|m| anyhow::anyhow!("--secret: {m}"))?;
                inlet::signature::check_standard_secret(&secret)
                    .map_err(|m| anyhow::anyhow!("--secret: {m}"))?;
                Ok(secret)
            })
            .collect::<anyhow::Result<_>>()?,
    };
    inlet::tools::sample_app::run_sample_app(&bind, secrets, &database).await
}

/// The configuration, or exit 2 with the reason (the check's table spans lines).
fn load_settings(config: &std::path::Path) -> Settings {
    Settings::load(config).unwrap_or_else(|error| {
        eprintln!("invalid configuration: {error}");
        std::process::exit(2);
    })
}

/// The commands that run with this configuration.
async fn run_locally(command: Command, config: &std::path::Path) -> anyhow::Result<()> {
    let settings = load_settings(config);
    match command {
        Command::Serve => serve(settings, config).await,
        Command::Migrate => {
            open_database(&settings).await?;
            println!("migrations are current");
            Ok(())
        }
        Command::CheckConfig => {
            check_config(&settings, config);
            Ok(())
        }
        Command::Sweep { dry_run } => sweep(settings, dry_run).await,
        Command::Reconcile {
            source,
            since,
            dry_run,
        } => reconcile(settings, source, since, dry_run).await,
        Command::Deliver { once } => deliver(settings, config, once).await,
        Command::Bench(options) => bench(settings, options).await,
        Command::Sign {
            source,
            body,
            url,
            headers_only,
            event,
            key,
        } => {
            let request = SignRequest {
                source: &source,
                body: &body,
                url,
                headers_only,
            };
            sign(&settings, request, event, key.resolve()?)
        }
        Command::Send {
            source,
            body,
            url,
            event,
            key,
        } => send(&settings, &source, &body, url, event, key.resolve()?).await,
        Command::Events { .. }
        | Command::Replay { .. }
        | Command::Deadletters { .. }
        | Command::HookSecrets { .. }
        | Command::Bulk { .. }
        | Command::Reload { .. }
        | Command::Audit { .. }
        | Command::Filter { .. }
        | Command::SampleApp { .. }
        | Command::Completions { .. }
        | Command::Man { .. }
        | Command::Healthcheck { .. } => {
            unreachable!("dispatched before the configuration is read")
        }
    }
}

/// `inlet filter test`: the evaluation `POST /admin/evaluate` answers, printed.
async fn filter(action: FilterAction, client: AdminClient) -> anyhow::Result<()> {
    let FilterAction::Test {
        source,
        event_id,
        destination,
        filter,
        transform,
    } = action;
    let body = serde_json::json!({
        "source": source,
        "event_id": event_id,
        "destination": destination,
        "filter": filter,
        "transform": transform,
    });
    print_answer(client.post("/admin/evaluate", &body).await?);
    Ok(())
}

/// `inlet check-config` on a configuration that loaded: the retention check, each
/// destination's routing, and what each source's scheme really proves.
fn check_config(settings: &Settings, config: &std::path::Path) {
    println!("configuration {} is valid", config.display());
    println!("{}", settings.retention.check);
    for (source, destination) in settings.destinations.iter() {
        println!(
            "destination {source}/{} ({}) receives {}",
            destination.name,
            destination.kind.label(),
            destination.events
        );
        if let Some(filter) = &destination.filter {
            println!("  filter: {}", filter.text());
        }
        if let Some(transform) = &destination.transform {
            println!("  transform: {}", transform.text());
        }
    }
    for source in &settings.sources {
        if let Some(meaning) = source.provider.authenticates_sender_only() {
            println!(
                "note: source {} ({}) {meaning}",
                source.name,
                source.provider.name()
            );
        }
    }
}

async fn serve(settings: Settings, config: &std::path::Path) -> anyhow::Result<()> {
    let names: Vec<String> = settings
        .sources
        .iter()
        .map(|s| s.name.to_string())
        .collect();
    let host = settings
        .server
        .bind
        .rsplit_once(':')
        .map_or("127.0.0.1", |(h, _)| h)
        .to_owned();
    let console = settings.console.enabled && settings.console.bind.is_none();
    let admin_host = settings
        .admin
        .bind
        .as_deref()
        .and_then(|bind| bind.rsplit_once(':'))
        .map(|(h, _)| h.to_owned());
    let app =
        Application::build_reloadable(settings, Hooks::default(), Some(config.to_owned())).await?;
    tokio::spawn(reload_on_hangup(app.reloader()));
    tracing::info!(port = app.port(), "inlet is listening");
    let base = format!("http://{host}:{}", app.port());
    let operator_base = match (admin_host, app.admin_port()) {
        (Some(host), Some(port)) => format!("http://{host}:{port}"),
        _ => base.clone(),
    };
    for (what, url) in inlet::startup::listening_urls(&names, &base, &operator_base, console) {
        tracing::info!(%url, "{what}");
    }
    app.run_until_stopped().await?;
    tracing::info!("inlet stopped");
    Ok(())
}

async fn sweep(settings: Settings, dry_run: bool) -> anyhow::Result<()> {
    let pool = open_database(&settings).await?;
    let clock = std::sync::Arc::new(inlet::clock::SystemClock);
    let sweeper = Sweeper::new(pool, clock, settings.retention.clone());
    let report = tokio::task::spawn_blocking(move || sweeper.sweep(dry_run)).await??;
    let verb = if dry_run { "would delete" } else { "deleted" };
    println!(
        "{verb}: events {}, deliveries {}, dead letters {}, operator keys {}, audit rows {}, \
         bulk actions {}, console sessions {}",
        report.events,
        report.deliveries,
        report.dead_letters,
        report.operator_requests,
        report.audit,
        report.bulk_actions,
        report.sessions
    );
    if report.skipped {
        println!("stopped: another instance is sweeping");
    }
    Ok(())
}

async fn reconcile(
    settings: Settings,
    source: String,
    since: Option<String>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let since = (since.as_deref())
        .map(inlet::duration::HumanDuration::parse)
        .transpose()
        .map_err(|m| anyhow::anyhow!("--since: {m}"))?
        .map(|d| d.0);
    let request = RunRequest {
        source,
        trigger: Trigger::Cli,
        since,
        dry_run,
    };
    let report = reconcile_once(settings, request).await?;
    let run = &report.run;
    let missing = run.missing_ids();
    println!(
        "run {} of {} ({}{}): {} to {}",
        run.id,
        run.source,
        run.mode,
        if report.resumed { ", resumed" } else { "" },
        run.window_from.and_utc().to_rfc3339(),
        run.window_to.and_utc().to_rfc3339()
    );
    println!(
        "listed {}, missing {}, recovered {}, errors {}: {}",
        run.listed, run.missing, run.recovered, run.errors, run.status
    );
    for event_id in &missing {
        println!("missing: {event_id}");
    }
    if let Some(error) = &run.error {
        anyhow::bail!("the run failed: {error}");
    }
    Ok(())
}

async fn deliver(settings: Settings, config: &std::path::Path, once: bool) -> anyhow::Result<()> {
    let delivering = Delivering::build(&settings, Hooks::default()).await?;
    if !once {
        return delivering.run_until_stopped(settings, config).await;
    }
    // `--once`: what is due now, then a count of each outcome.
    let report = delivering.run_once().await?;
    for settled in [
        Settled::Delivered,
        Settled::Retrying,
        Settled::Dead,
        Settled::Discarded,
        Settled::Parked,
        Settled::LeaseLost,
        Settled::Unrecorded,
    ] {
        println!("{}: {}", settled.as_str(), report.count(settled));
    }
    Ok(())
}

async fn bench(settings: Settings, options: BenchArgs) -> anyhow::Result<()> {
    if let Some(bind) = &options.sink {
        let delay = inlet::duration::HumanDuration::parse(&options.sink_delay)
            .map_err(|e| anyhow::anyhow!("--sink-delay: {e}"))?
            .0;
        let received = inlet::tools::bench::run_sink(bind, delay).await?;
        println!("sink received {received} requests");
        return Ok(());
    }
    let duration = inlet::duration::HumanDuration::parse(&options.duration)
        .map_err(|e| anyhow::anyhow!("--duration: {e}"))?
        .0;
    let report = if let Some(expression) = options.evaluate {
        inlet::tools::bench::run_evaluations(inlet::tools::bench::EvaluateOptions {
            expression,
            filters: options.filters,
            concurrency: options.concurrency,
            duration,
            body_bytes: options.body_bytes,
            limits: settings.destinations.jq,
        })
        .await?
    } else if options.ceiling {
        let pool = open_database(&settings).await?;
        let ceiling = inlet::tools::bench::CeilingOptions {
            concurrency: options.concurrency,
            duration,
            body_bytes: options.body_bytes,
            batch: options.batch,
        };
        tokio::task::spawn_blocking(move || inlet::tools::bench::run_ceiling(&pool, ceiling))
            .await??
    } else {
        let source = settings
            .source(&options.source)
            .ok_or_else(|| {
                anyhow::anyhow!("no source named {} in the configuration", options.source)
            })?
            .clone();
        inlet::tools::bench::run_load(inlet::tools::bench::LoadOptions {
            url: options
                .url
                .unwrap_or_else(|| inlet::cli::default_url(&settings, &options.source)),
            source,
            concurrency: options.concurrency,
            duration,
            rate: options.rate,
            duplicates: options.duplicates.clamp(0.0, 1.0),
            body_bytes: options.body_bytes,
        })
        .await?
    };
    if options.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}

fn read_body(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// What `inlet sign` is asked for.
struct SignRequest<'a> {
    source: &'a str,
    body: &'a std::path::Path,
    url: Option<String>,
    headers_only: bool,
}

fn sign(
    settings: &Settings,
    SignRequest {
        source,
        body,
        url,
        headers_only,
    }: SignRequest<'_>,
    event: EventArgs,
    private_key: Option<Secret>,
) -> anyhow::Result<()> {
    let body = read_body(body)?;
    let now = chrono::Utc::now();
    let sample = event.sample();
    let signed = inlet::cli::signed_body(settings, source, body.clone(), private_key.as_ref())?;
    let headers = inlet::cli::signed_headers(
        settings,
        source,
        &signed,
        now,
        &sample,
        private_key.as_ref(),
    )?;
    if headers_only {
        for (name, value) in headers {
            println!("{name}: {value}");
        }
        // A scheme that signs inside the body (Adyen): the signed body is what to send.
        if signed != body {
            println!("{}", String::from_utf8_lossy(&signed));
        }
        return Ok(());
    }
    let url = url.unwrap_or_else(|| inlet::cli::default_url(settings, source));
    // The signed body itself (Adyen signs inside it), as the bytes the signature covers.
    println!("{}", inlet::curl::command(&url, &headers, &signed));
    Ok(())
}

async fn send(
    settings: &Settings,
    source: &str,
    body: &std::path::Path,
    url: Option<String>,
    event: EventArgs,
    private_key: Option<Secret>,
) -> anyhow::Result<()> {
    let body = read_body(body)?;
    let body = inlet::cli::signed_body(settings, source, body, private_key.as_ref())?;
    let now = chrono::Utc::now();
    let sample = event.sample();
    let headers =
        inlet::cli::signed_headers(settings, source, &body, now, &sample, private_key.as_ref())?;
    let url = url.unwrap_or_else(|| inlet::cli::default_url(settings, source));
    let reply = inlet::cli::send(&url, &headers, body).await?;
    println!("{reply}");
    if !(200..300).contains(&reply.status) {
        std::process::exit(1);
    }
    Ok(())
}

async fn events(action: EventsAction, client: AdminClient) -> anyhow::Result<()> {
    let answer = match action {
        EventsAction::List {
            filter,
            cursor,
            limit,
        } => {
            let mut params = filter.params();
            params.push(("cursor", cursor.map(|c| c.to_string())));
            params.push(("limit", limit.map(|l| l.to_string())));
            let query = inlet::cli::query_string(&params);
            client.get(&format!("/admin/events{query}")).await?
        }
        EventsAction::Show { source, event_id } => {
            client
                .get(&inlet::cli::event_path(&source, &event_id))
                .await?
        }
    };
    print_answer(answer);
    Ok(())
}

/// `inlet audit`: one page of the audit trail.
async fn audit(query: AuditArgs, client: AdminClient) -> anyhow::Result<()> {
    let path = format!("/admin/audit{}", query.query());
    print_answer(client.get(&path).await?);
    Ok(())
}

async fn hook_secrets(action: HookSecretsAction, client: AdminClient) -> anyhow::Result<()> {
    let answer = match action {
        HookSecretsAction::List => client.get("/admin/hook-secrets").await?,
        HookSecretsAction::Clear { source } => {
            let body = serde_json::json!({ "source": source });
            client.post("/admin/hook-secrets/clear", &body).await?
        }
    };
    print_answer(answer);
    Ok(())
}

async fn deadletters(action: DeadlettersAction, client: AdminClient) -> anyhow::Result<()> {
    let answer = match action {
        DeadlettersAction::List {
            filter,
            cursor,
            limit,
        } => {
            let params = [
                ("status", Some("dead".to_owned())),
                ("source", filter.source),
                ("destination", filter.destination),
                ("cursor", cursor.map(|c| c.to_string())),
                ("limit", limit.map(|l| l.to_string())),
            ];
            let query = inlet::cli::query_string(&params);
            client.get(&format!("/admin/deliveries{query}")).await?
        }
        DeadlettersAction::Requeue { selection } => {
            client
                .post("/admin/deliveries/requeue", &selection.body()?)
                .await?
        }
        DeadlettersAction::Discard { selection } => {
            client
                .post("/admin/deliveries/discard", &selection.body()?)
                .await?
        }
    };
    print_answer(answer);
    Ok(())
}

/// `inlet bulk`: a preview, an action started (and followed with --wait), or its status.
async fn bulk(action: BulkAction, client: AdminClient) -> anyhow::Result<()> {
    let (kind, args) = match action {
        BulkAction::Replay(args) => ("replay", args),
        BulkAction::Requeue(args) => ("requeue", args),
        BulkAction::Discard(args) => ("discard", args),
        BulkAction::Status { id: None, .. } => {
            print_answer(client.get("/admin/bulk").await?);
            return Ok(());
        }
        BulkAction::Status { id: Some(id), wait } => {
            return inlet::cli::follow_bulk(&client, id, wait).await;
        }
    };
    let filter = serde_json::json!({
        "source": args.source, "destination": args.destination, "type": args.event_type,
        "since": args.since, "until": args.until,
    });
    let filter: serde_json::Map<_, _> = (filter.as_object().cloned().unwrap_or_default())
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .collect();
    let body = serde_json::json!({ "action": kind, "filter": filter, "dry_run": args.dry_run });
    let (status, answer) = client.post("/admin/bulk", &body).await?;
    let id = serde_json::from_str::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| v["action"]["id"].as_i64());
    print_answer((status, answer));
    match (args.wait, id) {
        (true, Some(id)) => inlet::cli::follow_bulk(&client, id, true).await,
        _ => Ok(()),
    }
}
