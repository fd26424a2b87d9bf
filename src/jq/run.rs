//! One evaluation: the payload read as JSON, the variables bound, the program run under its
//! bounds, and its outputs read as a filter's decision or a transform's body.

use super::budget::{metered, Bounds, Meter};
use super::compile::Compiled;
use super::error::EvalError;
use jaq_core::{unwrap_valr, Ctx, Vars};
use jaq_json::Val;
use serde::de::IgnoredAny;

/// The most characters of an error's text kept (it may quote the payload).
const ERROR_CHARS: usize = 300;

/// What an expression is evaluated against: the event's payload and what the variables
/// hold. A transform's `headers` are always empty (see [`super::Role`]).
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub payload: bytes::Bytes,
    pub headers: Vec<(String, String)>,
    pub event_type: Option<String>,
    pub source: String,
    pub event_id: String,
}

/// What a filter decided.
pub type Decision = Result<bool, EvalError>;

/// Whether `payload` is one JSON document Inlet's own reader accepts (nesting at most 128
/// levels deep, which bounds jaq's recursive reader too).
pub fn is_json(payload: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(payload).is_ok()
}

/// The payload read once, with the variables' values, for any number of programs.
pub(super) struct Read {
    value: Val,
    globals: [Val; 4],
}

/// `input`'s payload as a JSON value (refused unless [`is_json`]) and its variables.
pub(super) fn read(input: &Input) -> Result<Read, EvalError> {
    if !is_json(&input.payload) {
        return Err(EvalError::NotJson);
    }
    let value = jaq_json::read::parse_single(&input.payload).map_err(|_| EvalError::NotJson)?;
    Ok(Read {
        value,
        globals: globals(input),
    })
}

/// Runs `program` on what was read, under `bounds`: its first two outputs (a third is
/// never computed).
fn outputs(program: &Compiled, read: &Read, bounds: Bounds) -> Result<Vec<Val>, EvalError> {
    let run = || {
        let filter = &program.filter;
        let vars = Vars::new(read.globals.clone());
        let ctx = Ctx::<super::budget::Metered>::new(Meter(&filter.lut), vars);
        filter
            .id
            .run((ctx, read.value.clone()))
            .map(unwrap_valr)
            .take(2)
            .collect::<Result<Vec<Val>, _>>()
            .map_err(|e| EvalError::Expression(shorten(e.to_string())))
    };
    metered(bounds, run)?
}

/// `$headers`, `$type`, `$source`, `$event_id`, in the order of [`super::compile::GLOBALS`].
fn globals(input: &Input) -> [Val; 4] {
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in &input.headers {
        match headers.iter_mut().find(|(n, _)| n == name) {
            Some((_, joined)) => {
                joined.push_str(", ");
                joined.push_str(value);
            }
            None => headers.push((name.clone(), value.clone())),
        }
    }
    let headers = Val::obj(
        headers
            .into_iter()
            .map(|(n, v)| (Val::from(n), Val::from(v)))
            .collect(),
    );
    [
        headers,
        input.event_type.clone().map_or(Val::Null, Val::from),
        Val::from(input.source.clone()),
        Val::from(input.event_id.clone()),
    ]
}

/// A filter's decision on what was read: `true` takes the event; `false`, `null` or no
/// output does not; anything else (another type, more than one output) is an error.
pub(super) fn decide(program: &Compiled, read: &Read, bounds: Bounds) -> Decision {
    decision(outputs(program, read, bounds)?)
}

/// The error an expression that reads neither its input nor a variable always makes:
/// it is the same for every event. `None` when it succeeds on `null` (or stops at a
/// bound, which an event's evaluation may not reach).
pub(super) fn constant_error(program: &Compiled, bounds: Bounds) -> Option<String> {
    let read = Read {
        value: Val::Null,
        globals: globals(&Input::default()),
    };
    match outputs(program, &read, bounds) {
        Err(EvalError::Expression(message)) => Some(message),
        _ => None,
    }
}

fn decision(outputs: Vec<Val>) -> Decision {
    match outputs.as_slice() {
        [] | [Val::Null] | [Val::Bool(false)] => Ok(false),
        [Val::Bool(true)] => Ok(true),
        [other] => Err(EvalError::Expression(shorten(format!(
            "a filter must output true or false, not {}",
            kind(other)
        )))),
        _ => Err(EvalError::Expression(
            "a filter must output one value, not several".to_owned(),
        )),
    }
}

/// A transform's body: its single output as compact JSON, at most `max_bytes` long.
pub(super) fn transform(
    program: &Compiled,
    read: &Read,
    bounds: Bounds,
    max_bytes: usize,
) -> Result<Vec<u8>, EvalError> {
    let outputs = outputs(program, read, bounds)?;
    let [output] = <[Val; 1]>::try_from(outputs).map_err(|outputs| {
        EvalError::Expression(if outputs.is_empty() {
            "a transform must output one value, not none".to_owned()
        } else {
            "a transform must output one value, not several".to_owned()
        })
    })?;
    let json = metered(bounds, || {
        let mut json = Vec::new();
        jaq_json::write::write(&mut json, &jaq_json::write::Pp::default(), 0, &output)
            .map(|()| json)
    })?
    .map_err(|e| EvalError::Expression(e.to_string()))?;
    if json.len() > max_bytes {
        return Err(EvalError::TooLarge(json.len(), max_bytes));
    }
    Ok(json)
}

fn kind(value: &Val) -> String {
    let name = match value {
        Val::Null => "null",
        Val::Bool(_) => "a boolean",
        Val::Num(_) => "a number",
        Val::BStr(_) | Val::TStr(_) => "a string",
        Val::Arr(_) => "an array",
        Val::Obj(_) => "an object",
    };
    name.to_owned()
}

fn shorten(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(ERROR_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}
