//! A real `inlet serve` process, started from the binary, its logs and its stopping.

use super::wait_for_blocking;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `inlet serve` process (the real binary) and the port it reported. Dropping
/// it kills the process, so a failing test leaves no server behind.
pub struct Process {
    pub child: Child,
    pub port: u16,
}

/// Starts `inlet serve --config config` with JSON logs and waits for its port.
pub fn start_process(config: &std::path::Path) -> Process {
    start_process_reading_logs(config, true)
}

/// `inlet serve` with `config`, logging JSON lines at `info`: the child and its log lines.
pub fn serve_logging_json(
    config: &std::path::Path,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .args(["--log-format", "json", "serve", "--config"])
        .arg(config)
        .env("INLET_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start inlet");
    let stdout = child.stdout.take().expect("stdout");
    (child, BufReader::new(stdout).lines())
}

/// Starts `inlet serve` and, after its port, reads its logs on (`drain`) or never again.
pub fn start_process_reading_logs(config: &std::path::Path, drain: bool) -> Process {
    let (child, mut lines) = serve_logging_json(config);
    let port = loop {
        let line = lines
            .next()
            .expect("inlet logs its port before anything else")
            .expect("a log line");
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if entry["fields"]["message"] == "inlet is listening" {
            break entry["fields"]["port"].as_u64().expect("a port") as u16;
        }
    };
    if drain {
        std::thread::spawn(move || lines.for_each(drop));
    } else {
        // Hold the pipe open, unread, for as long as the process lives.
        std::mem::forget(lines);
    }
    Process { child, port }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already exited after a SIGTERM test: nothing to kill, nothing to report.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGTERM, as an orchestrator stopping Inlet does.
pub fn sigterm(process: &Process) {
    let status = Command::new("kill")
        .args(["-TERM", &process.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits for the process to exit, at most `within`.
pub fn wait_exit(process: &mut Process, within: Duration) -> std::process::ExitStatus {
    wait_for_blocking("inlet to exit", within, || {
        process.child.try_wait().expect("wait")
    })
}
