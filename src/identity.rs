//! Who the provider says an event is: its id, type and (optionally) fact key, read from a
//! verified request through *locators* — a header, a JSON pointer into the body, a form
//! field, or the body's digest. Each provider has default locators; a source may override
//! them. Shared by ingest, the ledger and the provider profiles.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// A JSON pointer (RFC 6901), such as `/data/object/id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPointer(String);

impl JsonPointer {
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('/') {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!(
                "'{text}' is not a JSON pointer (it must start with '/')"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value at this pointer, as a key: a non-empty string, or a number's text.
    pub fn key_in(&self, document: &Value) -> Option<String> {
        match document.pointer(&self.0)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// A fact key the request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactKey {
    /// Read where the source says (a configured `fact_key`).
    Located(String),
    /// The sha256 of the body: the fact of a source whose event id is not signed.
    BodyDigest(String),
}

/// Whether a `Content-Type` value names a form body (media types are case-insensitive).
/// One reading for every module: the schemes that sign forms and the identity that
/// requires their fields must agree on what a form is.
pub fn is_form_type(content_type: &[u8]) -> bool {
    const FORM: &[u8] = b"application/x-www-form-urlencoded";
    content_type
        .get(..FORM.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(FORM))
}

/// Longest identity value (event id, type, fact key) accepted. Providers' are far
/// shorter, and it keeps every index row — `facts(source, kind, fact_key)` is the widest,
/// with a source name of at most 64 bytes — far below PostgreSQL's 2,704-byte btree limit.
pub const MAX_IDENTITY_BYTES: usize = 255;

/// Why a verified request has no identity Inlet can store. Each variant's text is the
/// detail shown to the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("{0}")]
    MissingEventId(String),
    #[error("{0}")]
    InvalidEventId(String),
    #[error("{0}")]
    InvalidEventType(String),
    #[error("{0}")]
    InvalidFactKey(String),
    #[error("{0}")]
    MissingFactKey(String),
    /// The body cannot be read where the source's locators look.
    #[error("{0}")]
    InvalidBody(String),
}

/// The identity values a request carries, each bounded the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    EventId,
    EventType,
    FactKey,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Self::EventId => "event id",
            Self::EventType => "event type",
            Self::FactKey => "fact key",
        }
    }

    fn invalid(self, detail: String) -> IdentityError {
        match self {
            Self::EventId => IdentityError::InvalidEventId(detail),
            Self::EventType => IdentityError::InvalidEventType(detail),
            Self::FactKey => IdentityError::InvalidFactKey(detail),
        }
    }

    /// Whether `error` refuses a value of this field as unstorable.
    fn refused(self, error: &IdentityError) -> bool {
        matches!(
            (self, error),
            (Self::EventId, IdentityError::InvalidEventId(_))
                | (Self::EventType, IdentityError::InvalidEventType(_))
                | (Self::FactKey, IdentityError::InvalidFactKey(_))
        )
    }

    /// Refuses a value that is longer than [`MAX_IDENTITY_BYTES`] or holds a control
    /// character (NUL, newline, …): it could not be stored, indexed or sent as a header.
    pub fn check(self, value: &str) -> Result<(), IdentityError> {
        if value.len() > MAX_IDENTITY_BYTES || value.chars().any(char::is_control) {
            return Err(self.invalid(format!(
                "the {} is {} bytes{}: it must be at most {MAX_IDENTITY_BYTES} bytes of \
                     printable UTF-8 text",
                self.name(),
                value.len(),
                if value.chars().any(char::is_control) {
                    " with a control character"
                } else {
                    ""
                }
            )));
        }
        Ok(())
    }

    /// A header's raw value as text, or why it is not.
    fn text(self, raw: &[u8]) -> Result<&str, IdentityError> {
        std::str::from_utf8(raw)
            .map_err(|_| self.invalid(format!("the {} is not valid UTF-8", self.name())))
    }
}

/// A provider's event id: 1 to 255 bytes of printable text, but not `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventId(String);

impl EventId {
    pub fn parse(id: &str) -> Result<Self, IdentityError> {
        if id.is_empty() {
            return Err(IdentityError::MissingEventId(
                "the event id is empty".to_owned(),
            ));
        }
        Field::EventId.check(id)?;
        // A dot segment, encoded or not, is resolved away by browsers and HTTP clients:
        // such an event could never be opened at its URL (`/admin/events/{source}/..`).
        if id == "." || id == ".." {
            return Err(IdentityError::InvalidEventId(format!(
                "the event id '{id}' is a path segment of its own, not an id"
            )));
        }
        Ok(Self(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `(source, event id)`: what a webhook is deduplicated on (UNIQUE in `events`), and how
/// an operator names an event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    pub source: String,
    pub event_id: String,
}

impl EventKey {
    pub fn new(source: impl Into<String>, event_id: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            event_id: event_id.into(),
        }
    }
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.source, self.event_id)
    }
}

/// Where a value lives in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    /// The first of these headers that is present.
    Header(Vec<String>),
    /// A JSON pointer into a JSON object body.
    Json(JsonPointer),
    /// A field of an `application/x-www-form-urlencoded` body.
    Form(String),
    /// A field of a form body, or — in a form without it — `value`, when the form's field
    /// `marker` holds exactly that (Twilio's type: `MessageStatus`, or `received` for an
    /// incoming message, which has no `MessageStatus` and whose `SmsStatus` is `received`).
    /// Only a provider profile names it: any other value of `marker` reads as absent, so
    /// a form that is neither shape is still refused where the fact needs a type.
    FormOrMarked {
        field: String,
        marker: String,
        value: String,
    },
    /// The sha256 of the raw body (hex) — or of the canonical content a scheme signs
    /// instead of the bytes (Twilio's sorted parameters): the default fact key of sources
    /// whose event id the signature does not cover, so a signed body re-sent under a
    /// fresh id is the same fact.
    BodyDigest,
    /// A value the scheme reads from the content it verified (Braintree's `<kind>`, inside
    /// the base64 XML it signs); only a provider profile names it.
    SignedType,
}

impl Locator {
    /// A built-in JSON pointer.
    pub(crate) fn json(pointer: &str) -> Self {
        Self::Json(
            JsonPointer::parse(pointer)
                .unwrap_or_else(|_| unreachable!("built-in pointers start with /")),
        )
    }

    /// Parses `header:NAME`, `json:/pointer` or `form:FIELD`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let invalid = || format!("'{text}' is not header:NAME, json:/pointer or form:FIELD");
        let (kind, rest) = text.split_once(':').ok_or_else(invalid)?;
        if rest.is_empty() {
            return Err(invalid());
        }
        match kind {
            "header" => http::HeaderName::from_bytes(rest.as_bytes())
                .map(|_| Self::Header(vec![rest.to_owned()]))
                .map_err(|_| format!("'{rest}' is not a valid header name")),
            "json" => JsonPointer::parse(rest).map(Self::Json),
            "form" => Ok(Self::Form(rest.to_owned())),
            _ => Err(invalid()),
        }
    }
}

impl fmt::Display for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(names) => write!(f, "the {} header", names.join(" or ")),
            Self::Json(pointer) => write!(f, "{} in the JSON body", pointer.as_str()),
            Self::Form(field) => write!(f, "the form field {field}"),
            Self::FormOrMarked {
                field,
                marker,
                value,
            } => write!(f, "the form field {field} (or {marker}={value})"),
            Self::BodyDigest => f.write_str("the sha256 of the body"),
            Self::SignedType => f.write_str("the type in the signed content"),
        }
    }
}

/// Where a source's event id, type and fact key come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locators {
    pub event_id: Locator,
    pub event_type: Option<Locator>,
    /// Overrides the default fact key (the event id) when present in the request.
    pub fact_key: Option<Locator>,
    /// The type and fact key must both be present in a form body: a Twilio status
    /// callback without them has no fact of its own (its id is what was signed, which a
    /// re-split parameter reads alike), so it is refused rather than recorded as a new one.
    pub form_requires_fact: bool,
}

/// Who the provider says an event is, and the parsed body when it is a JSON object (fact
/// rules read it).
#[derive(Debug, Clone)]
pub struct Identity {
    pub event_id: EventId,
    pub event_type: Option<String>,
    pub fact_key: Option<FactKey>,
    pub document: Option<Value>,
}

/// What identity is read from: a request's headers and raw body. The signature module
/// implements it for verified requests only, so an unverified request cannot be located.
pub trait RequestParts {
    /// A header's raw value, when present.
    fn header(&self, name: &str) -> Option<&[u8]>;
    fn body(&self) -> &[u8];
    /// The sha256 (hex) of what was signed: the body, unless the scheme signs a canonical
    /// reading of it.
    fn content_digest(&self) -> String {
        hex::encode(Sha256::digest(self.body()))
    }
    /// The event type the scheme reads from what it verified, for a scheme that encodes
    /// it (Braintree's `<kind>`).
    fn signed_type(&self) -> Option<String> {
        None
    }
}

/// The request's body, parsed at most once per format.
struct Body<'r> {
    request: &'r dyn RequestParts,
    json: Result<Value, String>,
    form: Option<Vec<(String, String)>>,
}

impl<'r> Body<'r> {
    fn new(request: &'r dyn RequestParts) -> Self {
        let json = match serde_json::from_slice::<Value>(request.body()) {
            Ok(value) if value.is_object() => Ok(value),
            Ok(_) => Err("the body is not a JSON object".to_owned()),
            Err(e) => Err(format!("the body is not valid JSON: {e}")),
        };
        Self {
            request,
            json,
            form: None,
        }
    }

    fn is_form(&self) -> bool {
        self.request
            .header("content-type")
            .is_some_and(is_form_type)
    }

    /// The located value as text: strings as they are, numbers as written; bounded as
    /// `field`.
    fn find(&mut self, locator: &Locator, field: Field) -> Result<Option<String>, IdentityError> {
        let found = self.find_unchecked(locator, field)?;
        if let Some(value) = &found {
            field.check(value)?;
        }
        Ok(found)
    }

    fn find_unchecked(
        &mut self,
        locator: &Locator,
        field: Field,
    ) -> Result<Option<String>, IdentityError> {
        match locator {
            Locator::Header(names) => names
                .iter()
                .find_map(|n| self.request.header(n))
                .map(|raw| field.text(raw).map(str::to_owned))
                .transpose(),
            Locator::Json(pointer) => match &self.json {
                Ok(document) => match document.pointer(pointer.as_str()) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(Value::Number(n)) => Ok(Some(n.to_string())),
                    Some(_) => Err(IdentityError::InvalidEventId(format!(
                        "{locator} is neither a string nor a number"
                    ))),
                },
                Err(_) if self.is_form() => Err(IdentityError::MissingEventId(format!(
                    "this form-encoded request has no JSON body, so no value at {}; \
                         configure the source's event_id (e.g. \"form:trigger_id\")",
                    pointer.as_str()
                ))),
                Err(detail) => Err(IdentityError::InvalidBody(detail.clone())),
            },
            Locator::BodyDigest => Ok(Some(self.request.content_digest())),
            Locator::SignedType => Ok(self.request.signed_type()),
            Locator::Form(field) => Ok(self.form_field(field)),
            Locator::FormOrMarked {
                field,
                marker,
                value,
            } => Ok(self.form_field(field).or_else(|| {
                (self.form_field(marker).as_ref() == Some(value)).then(|| value.clone())
            })),
        }
    }

    /// The first value of the form field `name`, the form parsed once.
    fn form_field(&mut self, name: &str) -> Option<String> {
        let body = self.request.body();
        let pairs = self.form.get_or_insert_with(|| {
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        });
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

impl Identity {
    /// Reads the event id (required), type and fact key (optional) from a verified request.
    pub fn locate(request: &dyn RequestParts, locators: &Locators) -> Result<Self, IdentityError> {
        let mut body = Body::new(request);
        let event_id = body
            .find(&locators.event_id, Field::EventId)?
            .ok_or_else(|| {
                IdentityError::MissingEventId(format!(
                    "no event id: expected {}",
                    locators.event_id
                ))
            })?;
        let event_id = EventId::parse(&event_id)?;
        // Type and fact key are optional: absent, empty or of the wrong shape (a JSON
        // object, say) counts as absent; present but unstorable (too long, a control
        // character, not UTF-8) is refused.
        let mut optional = |locator: &Option<Locator>, field: Field| -> Result<_, IdentityError> {
            let Some(locator) = locator else {
                return Ok(None);
            };
            match body.find(locator, field) {
                Ok(value) => Ok(value.filter(|v| !v.is_empty())),
                Err(error) if field.refused(&error) => Err(error),
                Err(_) => Ok(None),
            }
        };
        let event_type = optional(&locators.event_type, Field::EventType)?;
        let fact_key =
            optional(&locators.fact_key, Field::FactKey)?.map(|key| match locators.fact_key {
                Some(Locator::BodyDigest) => FactKey::BodyDigest(key),
                _ => FactKey::Located(key),
            });
        if locators.form_requires_fact && body.is_form() {
            require_fact(locators, event_type.is_some(), fact_key.is_some())?;
        }
        Ok(Self {
            event_id,
            event_type,
            fact_key,
            document: body.json.ok(),
        })
    }
}

/// Refuses a form whose type or fact key is absent, naming what its fact is keyed on.
fn require_fact(locators: &Locators, has_type: bool, has_key: bool) -> Result<(), IdentityError> {
    let missing: Vec<String> = [
        (&locators.event_type, has_type),
        (&locators.fact_key, has_key),
    ]
    .into_iter()
    .filter_map(|(locator, found)| match (locator, found) {
        (Some(locator), false) => Some(locator.to_string()),
        _ => None,
    })
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(IdentityError::MissingFactKey(format!(
        "this source keys its facts on the event type and fact key, and the request lacks {}",
        missing.join(" and ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_are_bounded_printable_text() {
        assert!(EventId::parse("evt_1").is_ok());
        assert!(matches!(
            EventId::parse(""),
            Err(IdentityError::MissingEventId(_))
        ));
        assert!(matches!(
            EventId::parse("a\nb"),
            Err(IdentityError::InvalidEventId(_))
        ));
        assert!(matches!(
            EventId::parse(&"x".repeat(MAX_IDENTITY_BYTES + 1)),
            Err(IdentityError::InvalidEventId(_))
        ));
    }

    #[test]
    fn locators_parse_or_explain() {
        assert_eq!(
            Locator::parse("header:X-Id").unwrap(),
            Locator::Header(vec!["X-Id".into()])
        );
        assert_eq!(Locator::parse("json:/a/b").unwrap(), Locator::json("/a/b"));
        assert_eq!(
            Locator::parse("form:trigger_id").unwrap(),
            Locator::Form("trigger_id".into())
        );
        for bad in ["", "json:", "json:a", "header:bad header", "query:x", "/id"] {
            assert!(Locator::parse(bad).is_err(), "{bad}");
        }
    }
}
