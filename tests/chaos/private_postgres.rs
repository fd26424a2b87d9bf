//! A PostgreSQL instance of the test's own — `initdb` into a scratch directory, its own
//! port — that a campaign may stop and start at will. The shared server is never touched.
//! initdb refuses to run as root, so as root every PostgreSQL command runs as the
//! `postgres` user (`runuser -u postgres --`). Dropping it stops the instance and removes
//! its directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct PrivatePostgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    as_postgres_user: bool,
}

/// The directory holding `initdb` and `pg_ctl`: `INLET_CHAOS_PG_BIN`, else the one on
/// the PATH, else the newest `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("INLET_CHAOS_PG_BIN") {
        return PathBuf::from(dir);
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    if let Some(dir) = on_path {
        return dir;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let version = e.file_name().to_str()?.parse().ok()?;
                    Some((version, e.path().join("bin")))
                })
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("PostgreSQL's initdb and pg_ctl: on the PATH, in /usr/lib/postgresql/*/bin, or INLET_CHAOS_PG_BIN")
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl PrivatePostgres {
    /// initdb and start; blocking (call from `spawn_blocking`).
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "inlet-chaos-pg-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&dir).expect("the instance's directory");
        let as_postgres_user = running_as_root();
        let instance = Self {
            port: free_port(),
            dir,
            bin: pg_bin(),
            as_postgres_user,
        };
        if as_postgres_user {
            let status = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(&instance.dir)
                .status()
                .expect("chown");
            assert!(
                status.success(),
                "chown the instance's directory to postgres"
            );
        }
        instance.run(
            "initdb",
            &[
                "-D".as_ref(),
                instance.data().as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-A".as_ref(),
                "trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        instance.start_again();
        instance
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let output = self
            .command(program)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} failed: {}\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let mut all: Vec<&std::ffi::OsStr> = vec!["-D".as_ref(), data.as_os_str()];
        all.extend(args.iter().map(|a| a.as_ref() as &std::ffi::OsStr));
        self.run("pg_ctl", &all);
    }

    /// Starts the (stopped) instance and waits until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=on",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("postgres.log");
        self.pg_ctl(&[
            "-w",
            "-t",
            "60",
            "-l",
            log.to_str().expect("a UTF-8 path"),
            "-o",
            &options,
            "start",
        ]);
    }

    /// Stops it: `fast` (sessions terminated, a clean shutdown) or `immediate` (no
    /// checkpoint: a crash as far as the data is concerned).
    pub fn stop(&self, mode: &str) {
        self.pg_ctl(&["-w", "-m", mode, "stop"]);
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-w", "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
