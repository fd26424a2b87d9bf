//! Compiling an expression, inside an evaluator process only (jaq's parser recurses as
//! deep as the expression nests): jaq's parser and compiler with jq's standard library,
//! minus what an expression inside a server must not do, and with errors that name their
//! line and column.

use super::budget::{charge, Metered};
use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::native::{v, Fun};
use jaq_core::{Compiler, Exn, Native};
use jaq_json::Val;
use std::fmt;

/// The variables every expression may read.
pub const GLOBALS: [&str; 4] = ["$headers", "$type", "$source", "$event_id"];

/// Built-ins an expression may not call: `env` reads the server's environment (its
/// secrets), `halt` exits, `stderr_empty`/`debug_empty` write to the server's streams,
/// `input` reads the server's standard input.
const REFUSED_NATIVES: [&str; 5] = ["env", "halt", "stderr_empty", "debug_empty", "input"];

/// The definitions of the standard library built on those.
const REFUSED_DEFINITIONS: [&str; 6] = ["stderr", "debug", "halt", "halt_error", "input", "inputs"];

/// A compiled expression.
pub struct Compiled {
    pub(super) filter: jaq_core::Filter<Metered>,
}

/// Why an expression does not compile, and where.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompileError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// Compiles `text`.
pub fn compile(text: &str) -> Result<Compiled, CompileError> {
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs())
        .filter(|def| !REFUSED_DEFINITIONS.contains(&def.name));
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(
            &arena,
            File {
                code: text,
                path: (),
            },
        )
        .map_err(|errors| load_error(text, errors))?;
    let filter = Compiler::default()
        .with_funs(natives())
        .with_global_vars(GLOBALS)
        .compile(modules)
        .map_err(|errors| {
            let (part, message) = errors
                .into_iter()
                .flat_map(|(_, errors)| errors)
                .map(|(part, undefined)| (part, undefined_message(part, &undefined)))
                .next()
                .unwrap_or(("", "does not compile".to_owned()));
            located(text, part, message)
        })?;
    Ok(Compiled { filter })
}

/// jq's built-ins as jaq has them, without the refused ones, and with a `range` that
/// charges a step per number (jaq's own would fill memory with `[range(1e9)]` without a
/// single metered step).
fn natives() -> impl Iterator<Item = Fun<Metered>> {
    jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !REFUSED_NATIVES.contains(name) && *name != "range")
        .chain([("range", v(3), Native::<Metered>::new(metered_range))])
}

/// `range($from; $to; $by)`, as jq defines it, one step per output.
fn metered_range<'a>(mut cv: jaq_core::Cv<'a, Metered>) -> jaq_core::ValXs<'a, Val> {
    let by = cv.0.pop_var();
    let to = cv.0.pop_var();
    let from = cv.0.pop_var();
    let zero = Val::from(0usize);
    let ascending = by > zero;
    let descending = by < zero;
    let mut next = Some(from);
    Box::new(std::iter::from_fn(move || {
        let x = next.take()?;
        let more = if ascending {
            x < to
        } else if descending {
            x > to
        } else {
            x != to
        };
        if !more {
            return None;
        }
        charge();
        match x.clone() + by.clone() {
            Ok(following) => next = Some(following),
            Err(e) => return Some(Err(Exn::from(e))),
        }
        Some(Ok(x))
    }))
}

/// `undefined filter 'startwith/1'`: a filter is named with its arity, as jq does.
fn undefined_message(part: &str, undefined: &jaq_core::compile::Undefined) -> String {
    match undefined {
        jaq_core::compile::Undefined::Filter(arity) => format!("undefined filter '{part}/{arity}'"),
        other => format!("undefined {} '{part}'", other.as_str()),
    }
}

fn load_error(text: &str, errors: load::Errors<&str, ()>) -> CompileError {
    let first = errors.into_iter().next().map(|(_, error)| error);
    let (part, message) = match first {
        Some(load::Error::Lex(errors)) => errors
            .into_iter()
            .next()
            .map(|(expected, part)| (part, format!("expected {}", expected.as_str())))
            .unwrap_or(("", "does not parse".to_owned())),
        Some(load::Error::Parse(errors)) => errors
            .into_iter()
            .next()
            .map(|(expected, part)| {
                let found = if part.is_empty() {
                    "the end".to_owned()
                } else {
                    format!("'{}'", part.chars().take(20).collect::<String>())
                };
                (
                    part,
                    format!("expected {}, found {found}", expected.as_str()),
                )
            })
            .unwrap_or(("", "does not parse".to_owned())),
        Some(load::Error::Io(errors)) => errors
            .into_iter()
            .next()
            .map(|(part, _)| (part, "modules cannot be included or imported".to_owned()))
            .unwrap_or(("", "does not load".to_owned())),
        None => ("", "does not parse".to_owned()),
    };
    located(text, part, message)
}

/// `message` at the position of `part`, a slice of `text` (the end when it is not one).
fn located(text: &str, part: &str, message: String) -> CompileError {
    let start = part.as_ptr() as usize;
    let base = text.as_ptr() as usize;
    let offset = if start >= base && start <= base + text.len() {
        start - base
    } else {
        text.len()
    };
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    CompileError {
        line,
        column,
        message,
    }
}

/// `text` without its comments and the literal parts of its strings (what is left is the
/// code, string interpolations included).
pub fn code_only(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars();
    // Each open string's interpolation depth: inside `"…\(` code runs until its `)`.
    let mut strings: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    while let Some(c) = chars.next() {
        let in_string = strings.last().is_some_and(|&open| open == depth);
        match (in_string, c) {
            (true, '\\') => {
                if chars.next() == Some('(') {
                    depth += 1;
                    code.push('(');
                }
            }
            (true, '"') => {
                strings.pop();
            }
            (true, _) => {}
            (false, '"') => strings.push(depth),
            (false, '#') => {
                chars.by_ref().take_while(|&c| c != '\n').for_each(drop);
                code.push('\n');
            }
            (false, '(') => {
                depth += 1;
                code.push(c);
            }
            (false, ')') => {
                depth = depth.saturating_sub(1);
                code.push(c);
            }
            (false, _) => code.push(c),
        }
    }
    code
}
