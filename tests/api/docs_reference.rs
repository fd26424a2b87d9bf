//! The book's reference pages, checked against the code so that they cannot drift.
//!
//! - Configuration (`docs/src/reference/configuration.md`): the keys the code accepts are
//!   asked of the configuration parser itself. Every table of the file is read with
//!   `deny_unknown_fields`, so a probe key placed in a table is refused with the list of
//!   the keys that table accepts; each of those is probed in turn as a table and as an
//!   array of tables, and a key that takes neither is a leaf. Every accepted leaf must be
//!   documented, and every documented key must be accepted.
//! - Problems (`reference/problems.md`): exactly the `reason`s of `Reason::ALL` and those
//!   written out by hand in `src/` (`"reason": "…"`).
//! - Metrics (`reference/metrics.md`): every `inlet_…` name the source records or
//!   describes with the `metrics` macros, and no other.
//! - Commands (`reference/commands.md`): every subcommand `inlet --help` lists.

use inlet::config::Settings;
use inlet::routes::Reason;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A key no table accepts, placed where a table's keys are read.
const PROBE: &str = "zz_docs_probe";

fn book_page(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/src/reference")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One step into the configuration: a table (`server`) or an array of tables (`sources`).
#[derive(Clone)]
struct Step {
    name: String,
    array: bool,
}

/// A TOML document holding `inner` at `path`, written with inline tables.
fn document_at(path: &[Step], inner: &str) -> String {
    path.iter().rev().fold(inner.to_owned(), |inner, step| {
        if step.array {
            format!("{} = [{{ {inner} }}]", step.name)
        } else {
            format!("{} = {{ {inner} }}", step.name)
        }
    })
}

/// What the parser answers to a probe key inside the table at `path`.
enum Answer {
    /// It is a table: the keys it accepts.
    Table(Vec<String>),
    /// It refused the probe's value as the wrong type: not a table.
    Leaf,
}

fn probe(path: &[Step]) -> Result<Answer, String> {
    let document = document_at(path, &format!("{PROBE} = 1"));
    let error = match Settings::from_toml(&document) {
        Ok(_) => return Err(format!("{document}: accepted a key no table knows")),
        Err(error) => error,
    };
    let found = format!("unknown field: found `{PROBE}`, expected ");
    if let Some(expected) = error.message.strip_prefix(&found) {
        return Ok(Answer::Table(field_list(expected)));
    }
    if error.message.starts_with("invalid type") {
        return Ok(Answer::Leaf);
    }
    Err(format!("{document}: {} {}", error.key, error.message))
}

/// serde's list of expected fields: `` `a` ``, `` `a` or `b` ``, `` one of `a`, `b`, `c` ``
/// (figment wraps it in one more pair of backticks).
fn field_list(expected: &str) -> Vec<String> {
    let inner = expected
        .strip_prefix('`')
        .and_then(|e| e.strip_suffix('`'))
        .unwrap_or(expected);
    let inner = inner.strip_prefix("one of ").unwrap_or(inner);
    inner
        .split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|name| name.trim_matches('`').to_owned())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Every key path the configuration accepts (`sources.destinations.breaker.failures`),
/// and which of them are leaves.
fn accepted_keys() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut all = BTreeSet::new();
    let mut leaves = BTreeSet::new();
    let mut tables: Vec<Vec<Step>> = vec![Vec::new()];
    while let Some(path) = tables.pop() {
        let Ok(Answer::Table(fields)) = probe(&path) else {
            panic!("{} should be a table", dotted(&path));
        };
        for field in fields {
            let mut as_table = path.clone();
            as_table.push(Step {
                name: field.clone(),
                array: false,
            });
            let mut as_array = path.clone();
            as_array.push(Step {
                name: field.clone(),
                array: true,
            });
            let key = dotted(&as_table);
            all.insert(key.clone());
            let answers = (probe(&as_table), probe(&as_array));
            match answers {
                (Ok(Answer::Table(_)), _) => tables.push(as_table),
                (_, Ok(Answer::Table(_))) => tables.push(as_array),
                (Ok(Answer::Leaf), Ok(Answer::Leaf)) => {
                    leaves.insert(key);
                }
                (a, b) => panic!(
                    "cannot tell whether {key} is a table (does it deny unknown fields?): {:?} / {:?}",
                    a.err(),
                    b.err()
                ),
            }
        }
    }
    (all, leaves)
}

fn dotted(path: &[Step]) -> String {
    path.iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// The first cell of each table row of `page` that is one code span (`` `x` ``).
fn first_cells(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once("` |"))
        .map(|(cell, _)| cell.to_owned())
        .filter(|cell| !cell.contains('`'))
        .collect()
}

/// The configuration page writes keys as errors name them, arrays with `[]`
/// (`sources[].destinations[].url`); the parser's paths have no brackets.
fn documented_keys() -> BTreeSet<String> {
    first_cells(&book_page("configuration.md"))
        .into_iter()
        .map(|key| key.replace("[]", ""))
        .collect()
}

#[test]
fn the_configuration_reference_documents_exactly_the_accepted_keys() {
    let (accepted, leaves) = accepted_keys();
    // Not vacuous: the walk reached the deepest tables.
    for known in [
        "server.bind",
        "sources.hmac.signed_content",
        "sources.facts.key",
        "sources.destinations.breaker.cooldown_cap",
        "retired_sources",
    ] {
        assert!(leaves.contains(known), "{known} not found: {leaves:?}");
    }
    let documented = documented_keys();
    let undocumented: Vec<_> = leaves.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty(),
        "accepted by the configuration but missing from docs/src/reference/configuration.md: \
         {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "documented in docs/src/reference/configuration.md but refused by the \
         configuration: {unknown:?}"
    );
}

#[test]
fn the_problems_reference_lists_exactly_the_reasons() {
    let page = book_page("problems.md");
    let documented: BTreeSet<String> = first_cells(&page).into_iter().collect();
    let mut codes: BTreeSet<String> = Reason::ALL
        .iter()
        .map(|reason| reason.code().to_owned())
        .collect();
    // And the few answers written out by hand (`POST /admin/reload`'s `config_refused`).
    for file in rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for (at, literal) in text.match_indices("\"reason\": \"") {
            let rest = &text[at + literal.len()..];
            codes.extend(rest.split('"').next().map(str::to_owned));
        }
    }
    let missing: Vec<_> = codes.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&codes).collect();
    assert!(
        missing.is_empty(),
        "reasons missing from docs/src/reference/problems.md: {missing:?}"
    );
    assert!(
        unknown.is_empty(),
        "reasons in docs/src/reference/problems.md that Inlet never gives: {unknown:?}"
    );
}

/// The `.rs` files under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every metric name written as a literal in a `metrics` macro under `src/` (recording
/// ones and `describe_*` alike).
fn recorded_metrics() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for invocation in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in text.match_indices(invocation) {
                let rest = text[at + invocation.len()..].trim_start();
                let name = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split('"').next())
                    .filter(|name| name.starts_with("inlet_"));
                names.extend(name.map(str::to_owned));
            }
        }
    }
    names
}

#[test]
fn the_metrics_reference_lists_exactly_the_recorded_metrics() {
    let recorded = recorded_metrics();
    assert!(recorded.contains("inlet_webhooks_total"), "{recorded:?}");
    let documented: BTreeSet<String> = first_cells(&book_page("metrics.md"))
        .into_iter()
        .filter(|cell| cell.starts_with("inlet_"))
        .collect();
    let undocumented: Vec<_> = recorded.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&recorded).collect();
    assert!(
        undocumented.is_empty(),
        "metrics missing from docs/src/reference/metrics.md: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "metrics in docs/src/reference/metrics.md that nothing records: {unknown:?}"
    );
}

#[test]
fn every_command_is_documented() {
    let output = Command::new(env!("CARGO_BIN_EXE_inlet"))
        .arg("--help")
        .output()
        .expect("run inlet --help");
    let help = String::from_utf8_lossy(&output.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.contains(&"serve"), "{help}");
    let page = book_page("commands.md");
    let missing: Vec<&&str> = commands
        .iter()
        .filter(|name| {
            // The command's own cell: `inlet NAME` then its arguments or the code's end.
            [" ", "`"]
                .iter()
                .all(|end| !page.contains(&format!("`inlet {name}{end}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "commands missing from docs/src/reference/commands.md: {missing:?}"
    );
}
