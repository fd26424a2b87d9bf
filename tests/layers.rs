//! The module layout of docs/src/internals/architecture.md, checked: every
//! `crate::` path in `src/` names a module on the same layer or below, never above.
//! (Import cycles between top-level modules are what `../shared/tools/module-cycles`
//! reports; a same-layer import is allowed, so both checks run in CI.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top to bottom. A module may import its own layer and every layer below it.
const LAYERS: &[&[&str]] = &[
    &["main", "cli", "tools"],
    &["startup", "routes", "state", "reload"],
    &["config"],
    &[
        "operator",
        "ingest",
        "delivery",
        "retention",
        "reconcile",
        "notices",
        "hook_secrets",
        "certificates",
    ],
    &["provider"],
    &["signature"],
    &["ledger", "identity"],
    &["idempotency"],
    &["db"],
    &[
        "secret",
        "duration",
        "clock",
        "error",
        "observability",
        "traces",
        "faults",
        "jq",
        "curl",
    ],
];

/// The HTTP edge: the only modules that may name actix, status codes or `Problem` (the
/// problem+json error type). Below it, modules return their own errors and take `http`
/// and `bytes` types.
const EDGE: &[&str] = &["main", "cli", "tools", "startup", "routes"];

/// What only the edge may write: actix's paths and the edge's error and response types.
const EDGE_ONLY: &[&str] = &[
    "actix_web::",
    "actix_http::",
    "use actix_",
    "Problem",
    "HttpResponse",
    "HttpRequest",
    "ResponseError",
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read src");
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/NAME.rs` or `src/NAME/…`.
fn module_of(path: &Path, src: &Path) -> String {
    let relative = path.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .and_then(|c| c.as_os_str().to_str())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file without its `#[cfg(test)]` module (tests may reach anywhere).
fn production_code(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// Every top-level module named as `crate::NAME` (in `use crate::{a, b}` too).
fn imported_modules(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = item.trim().split("::").next().unwrap_or_default();
                found.push(name.trim().to_owned());
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file, &src);
        if module == "lib" {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            panic!("src module {module} is on no layer: add it to LAYERS and docs/src/internals/architecture.md");
        };
        let text = std::fs::read_to_string(file).expect("read a source file");
        for imported in imported_modules(production_code(&text)) {
            let Some(theirs) = layer_of(&imported) else {
                panic!(
                    "{} names crate::{imported}, which is on no layer",
                    file.display()
                );
            };
            if theirs < own {
                upward
                    .entry(format!("{module} -> {imported}"))
                    .or_default()
                    .push(file.display().to_string());
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports pointing up a layer: {upward:#?}"
    );
}

/// `code` without its comment lines (doc comments may name what the edge does).
fn without_comments(code: &str) -> String {
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `word` occurs in `code` as a whole identifier (or path prefix).
fn names(code: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        before.is_none_or(|c| !is_ident(c))
            && (word.ends_with(':') || word.ends_with('_') || after.is_none_or(|c| !is_ident(c)))
    })
}

#[test]
fn only_the_edge_speaks_http() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file, &src);
        if module == "lib" || EDGE.contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        let code = without_comments(production_code(&text));
        for word in EDGE_ONLY.iter().filter(|word| names(&code, word)) {
            found
                .entry(file.display().to_string())
                .or_default()
                .push(word);
        }
    }
    assert!(
        found.is_empty(),
        "HTTP types below the edge (routes/): {found:#?}"
    );
}

#[test]
fn the_edge_check_sees_what_it_looks_for() {
    assert!(names("use crate::routes::Problem;", "Problem"));
    assert!(names("fn f() -> actix_web::HttpResponse", "actix_web::"));
    assert!(!names("ProblemSolver", "Problem"));
    assert!(!names("\"actix_http\"", "actix_http::"));
    assert_eq!(without_comments("// Problem\nlet x = 1;"), "let x = 1;");
}

/// The layers as the book's architecture page draws them: the first code block after
/// `## The layers`, a layer a line, its modules before the `│`.
fn layers_in_the_book() -> Vec<Vec<String>> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/internals/architecture.md");
    let text = std::fs::read_to_string(&page).expect("the architecture page");
    let section = &text[text.find("## The layers").expect("a layers section")..];
    let block = section
        .split("```")
        .nth(1)
        .expect("a code block in the layers section");
    block
        .lines()
        .skip(1) // the fence's info string
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let modules = line.split('│').next().unwrap_or_default();
            modules.split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

#[test]
fn the_book_draws_the_layers_the_code_keeps() {
    let code: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|layer| layer.iter().map(|m| (*m).to_owned()).collect())
        .collect();
    assert_eq!(
        layers_in_the_book(),
        code,
        "docs/src/internals/architecture.md and LAYERS disagree"
    );
}

#[test]
fn every_module_is_on_exactly_one_layer() {
    let mut all: Vec<&str> = LAYERS
        .iter()
        .flat_map(|layer| layer.iter().copied())
        .collect();
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a module is listed twice");
}
