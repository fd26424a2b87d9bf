//! The `inlet` command line: parse arguments, call into the library.

use anyhow::Context;
use clap::{Parser, Subcommand};
use inlet::config::Settings;
use inlet::delivery::{Dispatcher, Settled};
use inlet::observability::LogFormat;
use inlet::retention::Sweeper;
use inlet::signature::SampleEvent;
use inlet::startup::{open_database, Application};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "inlet",
    version,
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
    /// Apply migrations, then serve until SIGTERM or Ctrl-C.
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Validate the configuration and print the retention audit.
    CheckConfig,
    /// Delete expired event rows and old delivered deliveries (what `serve` does on an
    /// interval). Facts are never deleted.
    Sweep {
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Send due deliveries to their destinations (what `serve` does continuously).
    Deliver {
        /// Deliver what is due now, once, and exit.
        #[arg(long)]
        once: bool,
    },
    /// Print the headers a source's provider would send for a body, signed now.
    Sign {
        #[arg(long)]
        source: String,
        #[arg(long)]
        body: PathBuf,
        #[command(flatten)]
        event: EventArgs,
    },
    /// Sign a body as the source's provider would and POST it to Inlet.
    Send {
        #[arg(long)]
        source: String,
        #[arg(long)]
        body: PathBuf,
        /// Defaults to this configuration's listener.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        event: EventArgs,
    },
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
    fn sample(self) -> SampleEvent {
        SampleEvent {
            id: self.event_id.unwrap_or_else(inlet::cli::sample_event_id),
            event_type: self.event_type,
        }
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    inlet::observability::init_logging(cli.log_format);
    let settings = match Settings::load(&cli.config) {
        Ok(settings) => settings,
        Err(error) => {
            // The audit's table spans lines: show it as written.
            eprintln!("invalid configuration: {error}");
            std::process::exit(2);
        }
    };
    match cli.command {
        Command::CheckConfig => {
            println!("configuration {} is valid", cli.config.display());
            println!("{}", settings.retention.audit);
        }
        Command::Sweep { dry_run } => {
            let pool = open_database(&settings).await?;
            let clock = std::sync::Arc::new(inlet::clock::SystemClock);
            let sweeper = Sweeper::new(pool, clock, settings.retention.clone());
            let report = tokio::task::spawn_blocking(move || sweeper.sweep(dry_run)).await??;
            if report.skipped {
                println!("skipped: another instance is sweeping");
            } else {
                let verb = if dry_run { "would delete" } else { "deleted" };
                println!(
                    "{verb}: events {}, deliveries {}",
                    report.events, report.deliveries
                );
            }
        }
        Command::Serve => {
            let app = Application::build(settings).await?;
            tracing::info!(port = app.port(), "inlet is listening");
            app.run_until_stopped().await?;
            tracing::info!("inlet stopped");
        }
        Command::Migrate => {
            open_database(&settings).await?;
            println!("migrations are current");
        }
        Command::Deliver { once } => {
            let pool = open_database(&settings).await?;
            let clock = std::sync::Arc::new(inlet::clock::SystemClock);
            let dispatcher = std::sync::Arc::new(Dispatcher::new(&settings, pool, clock)?);
            if once {
                let report = dispatcher.run_once().await?;
                for settled in [
                    Settled::Delivered,
                    Settled::Retrying,
                    Settled::Dead,
                    Settled::LeaseLost,
                    Settled::Unrecorded,
                ] {
                    println!("{}: {}", settled.as_str(), report.count(settled));
                }
            } else {
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let run = tokio::spawn(dispatcher.run(stopped));
                tokio::signal::ctrl_c().await?;
                let _ = stop.send(true);
                run.await?;
            }
        }
        Command::Sign {
            source,
            body,
            event,
        } => {
            let body =
                std::fs::read(&body).with_context(|| format!("cannot read {}", body.display()))?;
            for (name, value) in inlet::cli::signed_headers(
                &settings,
                &source,
                &body,
                chrono::Utc::now(),
                &event.sample(),
            )? {
                println!("{name}: {value}");
            }
        }
        Command::Send {
            source,
            body,
            url,
            event,
        } => {
            let body =
                std::fs::read(&body).with_context(|| format!("cannot read {}", body.display()))?;
            let headers = inlet::cli::signed_headers(
                &settings,
                &source,
                &body,
                chrono::Utc::now(),
                &event.sample(),
            )?;
            let url = url.unwrap_or_else(|| inlet::cli::default_url(&settings, &source));
            let (status, text) = inlet::cli::send(&url, &headers, body).await?;
            println!("{status}");
            println!("{text}");
            if !(200..300).contains(&status) {
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
