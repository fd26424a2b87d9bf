//! The generic `hmac` scheme, for senders without a built-in scheme: HMAC-SHA256 keyed
//! with the secret's bytes over a configurable signed content (`{body}`, optionally with a
//! `{timestamp}` taken from a header), carried hex- or base64-encoded in a named header,
//! optionally behind a prefix such as `sha256=`. The timestamp is Unix seconds; a built-in
//! provider may write it as an RFC 3339 date and time instead (Zendesk).

use super::timestamp::{check_tolerance, TimeFormat};
use super::Signer;
use super::{check_hmac, json_content_type, secret_hmac, Keys, Scheme, Verdict};
use super::{SignatureError, Unverified};
use super::{SignedHeaders, ToSign};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

/// How the signature is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

impl Encoding {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "hex" => Ok(Self::Hex),
            "base64" => Ok(Self::Base64),
            other => Err(format!("'{other}' is not hex or base64")),
        }
    }

    fn decode(self, text: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Hex => hex::decode(text).ok(),
            Self::Base64 => BASE64.decode(text).ok(),
        }
    }

    fn encode(self, bytes: &[u8]) -> String {
        match self {
            Self::Hex => hex::encode(bytes),
            Self::Base64 => BASE64.encode(bytes),
        }
    }
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Body,
    Timestamp,
}

/// A configured generic HMAC scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HmacScheme {
    header: String,
    prefix: String,
    encoding: Encoding,
    timestamp_header: Option<String>,
    time_format: TimeFormat,
    signed_content: Vec<Part>,
}

impl HmacScheme {
    /// Validates the parameters. `signed_content` defaults to `{body}`, or to
    /// `{timestamp}.{body}` when a timestamp header is named; it must contain `{body}`
    /// once, and `{timestamp}` only with a timestamp header.
    pub fn new(
        header: String,
        prefix: Option<String>,
        encoding: Encoding,
        timestamp_header: Option<String>,
        signed_content: Option<String>,
    ) -> Result<Self, (&'static str, String)> {
        for (field, name) in [
            ("header", Some(&header)),
            ("timestamp_header", timestamp_header.as_ref()),
        ] {
            if let Some(name) = name {
                http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| (field, format!("'{name}' is not a valid header name")))?;
            }
        }
        let template = signed_content.unwrap_or_else(|| match timestamp_header {
            Some(_) => "{timestamp}.{body}".to_owned(),
            None => "{body}".to_owned(),
        });
        let parts = parse_template(&template).map_err(|m| ("signed_content", m))?;
        if parts.contains(&Part::Timestamp) != timestamp_header.is_some() {
            return Err((
                "signed_content",
                "{timestamp} is used exactly when timestamp_header is set".to_owned(),
            ));
        }
        Ok(Self {
            header,
            prefix: prefix.unwrap_or_default(),
            encoding,
            timestamp_header,
            time_format: TimeFormat::UnixSeconds,
            signed_content: parts,
        })
    }

    /// The same scheme, its timestamp header written in `format`.
    pub(super) fn with_time_format(self, time_format: TimeFormat) -> Self {
        Self {
            time_format,
            ..self
        }
    }

    fn content<'a>(&'a self, timestamp: &'a [u8], body: &'a [u8]) -> Vec<&'a [u8]> {
        self.signed_content
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.as_bytes(),
                Part::Body => body,
                Part::Timestamp => timestamp,
            })
            .collect()
    }
}

fn parse_template(template: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        if start > 0 {
            parts.push(Part::Literal(rest[..start].to_owned()));
        }
        let end = rest[start..]
            .find('}')
            .ok_or_else(|| format!("unclosed '{{' in '{template}'"))?;
        parts.push(match &rest[start + 1..start + end] {
            "body" => Part::Body,
            "timestamp" => Part::Timestamp,
            other => {
                return Err(format!(
                    "unknown placeholder {{{other}}} (use {{body}}, {{timestamp}})"
                ))
            }
        });
        rest = &rest[start + end + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.to_owned()));
    }
    if parts.iter().filter(|p| **p == Part::Body).count() != 1 {
        return Err(format!("'{template}' must contain {{body}} exactly once"));
    }
    Ok(parts)
}

impl Scheme for HmacScheme {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let value = request.required(&self.header)?;
        let encoded = value.strip_prefix(self.prefix.as_bytes()).ok_or_else(|| {
            SignatureError::malformed(
                &self.header,
                format!("it does not start with '{}'", self.prefix),
            )
        })?;
        let tag = self
            .encoding
            .decode(encoded.trim_ascii())
            .filter(|tag| tag.len() == 32)
            .ok_or_else(|| {
                SignatureError::malformed(&self.header, "not an encoded 32-byte HMAC-SHA256")
            })?;
        let (timestamp, signed_at) = match &self.timestamp_header {
            Some(name) => {
                let value = request.required(name)?;
                (value, Some(self.time_format.parse(name, value)?))
            }
            None => (&b""[..], None),
        };
        check_hmac(
            keys,
            &self.content(timestamp, request.body),
            &[tag],
            &self.header,
        )?;
        if let Some(signed_at) = signed_at {
            check_tolerance(signed_at, now, keys.tolerance)?;
        }
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        self.timestamp_header.is_some()
    }
}

impl Signer for HmacScheme {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign {
            body, secret, now, ..
        } = signing;
        let timestamp = self.time_format.write(now);
        let tag = secret_hmac(secret, &self.content(timestamp.as_bytes(), body));
        let mut headers = vec![(
            self.header.clone(),
            format!("{}{}", self.prefix, self.encoding.encode(&tag)),
        )];
        if let Some(name) = &self.timestamp_header {
            headers.push((name.clone(), timestamp));
        }
        headers.push(json_content_type());
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse() {
        assert_eq!(parse_template("{body}").unwrap(), vec![Part::Body]);
        assert_eq!(
            parse_template("v0:{timestamp}:{body}").unwrap(),
            vec![
                Part::Literal("v0:".into()),
                Part::Timestamp,
                Part::Literal(":".into()),
                Part::Body
            ]
        );
        for bad in ["", "{timestamp}", "{body}{body}", "{body", "{id}.{body}"] {
            assert!(parse_template(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn timestamp_placeholder_needs_a_timestamp_header() {
        let scheme = |ts: Option<&str>, template: Option<&str>| {
            HmacScheme::new(
                "X-Sig".into(),
                None,
                Encoding::Hex,
                ts.map(Into::into),
                template.map(Into::into),
            )
        };
        assert!(scheme(None, Some("{timestamp}.{body}")).is_err());
        assert!(scheme(Some("X-Ts"), Some("{body}")).is_err());
        assert!(scheme(Some("X-Ts"), None).is_ok());
        assert!(scheme(None, None).is_ok());
    }
}
