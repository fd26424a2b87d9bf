//! Every answer the harness reads is held to openapi.json: its status must be one the
//! document lists for the operation, its content type one the document gives for that
//! status, and a JSON body must validate against the document's schema (formats
//! included). Routes the document does not describe (the console's pages, an unknown
//! path, a method a route does not take, a route the listener does not serve) are not
//! checked here.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| serde_json::from_str(inlet::routes::OPENAPI).expect("openapi.json"))
}

/// The document's path template that `path` is an instance of: literal segments equal,
/// `{parameter}` segments anything but empty.
fn template_of(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.split('/').collect();
    let paths = document()["paths"].as_object()?;
    paths.keys().map(String::as_str).find(|template| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(part, segment)| {
                part == segment || (part.starts_with('{') && !segment.is_empty())
            })
    })
}

/// The media type `content_type` names (its parameters dropped).
fn media_type(content_type: Option<&str>) -> String {
    let full = content_type.unwrap_or("");
    full.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// A validator of `schema`, whose `$ref`s point into the document's components.
fn validator(schema: &Value) -> Arc<jsonschema::Validator> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let cache = VALIDATORS.get_or_init(Default::default);
    let key = schema.to_string();
    if let Some(found) = cache.lock().expect("the cache").get(&key) {
        return found.clone();
    }
    let rooted = serde_json::json!({
        "allOf": [schema],
        "components": document()["components"],
    });
    let built = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&rooted)
        .unwrap_or_else(|e| panic!("openapi.json: a schema does not compile: {e}\n{schema}"));
    let built = Arc::new(built);
    cache.lock().expect("the cache").insert(key, built.clone());
    built
}

/// Panics when the answer `method path` got disagrees with the document.
pub fn check(method: &str, path: &str, status: u16, content_type: Option<&str>, body: &[u8]) {
    let Some(template) = template_of(path) else {
        return;
    };
    let Some(operation) = document()["paths"][template].get(method.to_ascii_lowercase()) else {
        return;
    };
    let what = format!("{method} {template} answered {status}");
    let shown = String::from_utf8_lossy(body);
    let response = resolve(&operation["responses"][status.to_string()]);
    let Some(response) = response.filter(|r| r.is_object()) else {
        if unrouted(status, body) {
            return;
        }
        panic!("{what}, a status openapi.json does not list for it: {shown}");
    };
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        return;
    };
    let media = media_type(content_type);
    let declared = (content.iter())
        .find(|(listed, _)| media_type(Some(listed)) == media || *listed == "*/*")
        .map(|(_, declared)| declared);
    let Some(declared) = declared else {
        panic!(
            "{what} as {media:?}; openapi.json gives {:?}",
            content.keys()
        );
    };
    let Some(schema) = declared.get("schema") else {
        return;
    };
    if !media.ends_with("json") {
        return;
    }
    let instance: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{what} with a body that is not JSON ({e}): {shown}"));
    let errors: Vec<String> = validator(schema)
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} with a body openapi.json does not allow:\n{}\n{shown}",
        errors.join("\n")
    );
}

/// The router's own refusal of a route this listener does not serve (`/admin` on the
/// webhook port under `[admin] bind`): no operation of the document answered.
fn unrouted(status: u16, body: &[u8]) -> bool {
    let reason = serde_json::from_slice::<Value>(body)
        .ok()
        .map(|b| b["reason"].clone());
    status == 404 && reason.is_some_and(|reason| reason == "not_found")
}

/// A response object, following one `$ref` into the components.
fn resolve(response: &Value) -> Option<&Value> {
    match response.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#')?;
            document().pointer(pointer)
        }
        None => Some(response).filter(|r| !r.is_null()),
    }
}
