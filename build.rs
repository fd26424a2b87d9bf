//! Stamps the commit the binary is built from into `inlet --version`: `git rev-parse`
//! in a checkout, else `INLET_COMMIT` (a package or image built from a tarball), else
//! `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=INLET_COMMIT");
    // A new commit moves HEAD or the branch it names (or the packed refs).
    if let Ok(head) = std::fs::read_to_string(".git/HEAD") {
        println!("cargo:rerun-if-changed=.git/HEAD");
        if let Some(branch) = head.strip_prefix("ref: ").map(str::trim) {
            if Path::new(".git").join(branch).exists() {
                println!("cargo:rerun-if-changed=.git/{branch}");
            }
        }
        if Path::new(".git/packed-refs").exists() {
            println!("cargo:rerun-if-changed=.git/packed-refs");
        }
    }
    let commit = std::env::var("INLET_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=INLET_COMMIT={}", commit.trim());
}

fn git_commit() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !commit.trim().is_empty()).then(|| commit.trim().to_owned())
}
