//! Stamps the commit the binary is built from into `inlet --version`: `INLET_COMMIT`
//! when set (a package or image built from a tarball names it), else `git rev-parse` when
//! this crate is the root of its git checkout, else `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=INLET_COMMIT");
    let commit = std::env::var("INLET_COMMIT")
        .ok()
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .or_else(commit_of_this_checkout)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=INLET_COMMIT={commit}");
}

/// The checkout's commit, watching what a new commit changes (HEAD, the branches, the
/// packed refs) so the stamp follows it. `None` outside a checkout, or inside one whose
/// root is not this crate's (a tarball unpacked within another repository).
fn commit_of_this_checkout() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let top = git(&manifest, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    for file in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&manifest, &["rev-parse", "--git-path", file]) {
            let path = manifest.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    git(&manifest, &["rev-parse", "--short=12", "HEAD"])
}

/// A git command's one line of output in `dir`, if it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}
