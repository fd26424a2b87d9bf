//! What of a request's headers is stored beside its event: every header as received, but
//! a credential — by its name, or by its value wherever a sender, proxy or gateway copied
//! it — as [`REDACTED`].

use crate::secret::Secret;
use crate::signature::Headers;

/// Headers that carry credentials whatever the source: never stored.
const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "api-key",
    "x-forwarded-client-cert",
];

/// Parts of a header name that mark a credential (proxies add bearer assertions:
/// `cf-access-jwt-assertion`, `x-amzn-oidc-data`, session and API tokens).
const CREDENTIAL_MARKS: [&str; 7] = [
    "token",
    "secret",
    "password",
    "jwt",
    "session",
    "x-amzn-oidc-",
    "cf-access-",
];

/// What a credential's value is stored as.
pub const REDACTED: &str = "[redacted]";

/// Whether the header `name` (lower case) may carry a credential: the names above, any
/// name with a credential mark, and the source's own token header.
fn is_credential(name: &str, source_header: Option<&str>) -> bool {
    CREDENTIAL_HEADERS.contains(&name)
        || CREDENTIAL_MARKS.iter().any(|mark| name.contains(mark))
        || source_header.is_some_and(|header| header.eq_ignore_ascii_case(name))
}

/// What gives a source's credential away in a stored header: its name ([`is_credential`])
/// or its value — a sender, proxy or gateway may copy the credential under any other name
/// (`X-Forwarded-Hook-Key`, `X-Signature: Bearer …`).
struct Credentials<'a> {
    /// The source's own token header.
    header: Option<&'a str>,
    /// Each secret as configured, and its base64 without padding (how `Basic` sends
    /// `user:password`; a prefix of the padded form too).
    values: Vec<String>,
}

impl<'a> Credentials<'a> {
    fn of(header: Option<&'a str>, secrets: &[Secret]) -> Self {
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        use base64::Engine;
        let mut values = Vec::with_capacity(secrets.len() * 3);
        for secret in secrets.iter().map(Secret::expose) {
            values.push(secret.to_owned());
            values.push(STANDARD_NO_PAD.encode(secret));
            values.push(URL_SAFE_NO_PAD.encode(secret));
        }
        values.retain(|value| !value.is_empty());
        values.sort_unstable();
        values.dedup();
        Self { header, values }
    }

    /// Whether the header `name` (lower case) with `value` is stored as [`REDACTED`]. A
    /// substring search, not constant time: it runs only after the request verified, so
    /// whoever could time it already holds the credential.
    fn reveal(&self, name: &str, value: &str) -> bool {
        is_credential(name, self.header) || self.values.iter().any(|v| value.contains(v.as_str()))
    }
}

/// The request's headers as received, by name, as JSON `[[name, value], …]` (values as
/// text, invalid UTF-8 replaced); a header that would reveal a credential, by its name or
/// by its value ([`Credentials::reveal`]), is stored as [`REDACTED`]. Signature headers are
/// kept: they prove nothing to anyone without the secret.
pub fn stored_headers(headers: &dyn Headers, header: Option<&str>, secrets: &[Secret]) -> String {
    let credentials = Credentials::of(header, secrets);
    let mut rows: Vec<(&str, std::borrow::Cow<'_, str>)> = headers
        .all()
        .into_iter()
        .map(|(name, value)| {
            let text = String::from_utf8_lossy(value);
            let value = if credentials.reveal(name, &text) {
                REDACTED.into()
            } else {
                text
            };
            (name, value)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned())
}

/// The headers [`stored_headers`] wrote, by name; none when `stored` is not of that form.
pub fn read_stored_headers(stored: &str) -> Vec<(String, String)> {
    serde_json::from_str(stored).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{is_credential, Credentials};
    use crate::secret::Secret;

    #[test]
    fn credentials_are_recognised_and_signatures_are_not() {
        for name in [
            "authorization",
            "cookie",
            "x-api-key",
            "cf-access-jwt-assertion",
            "x-amzn-oidc-data",
            "x-auth-token",
            "x-session-id",
        ] {
            assert!(is_credential(name, None), "{name}");
        }
        for name in [
            "stripe-signature",
            "x-hub-signature-256",
            "webhook-signature",
            "x-twilio-signature",
            "x-signature-ed25519",
            "content-type",
        ] {
            assert!(!is_credential(name, None), "{name}");
        }
        assert!(is_credential("x-webhook-key", Some("X-Webhook-Key")));
    }

    #[test]
    fn a_secret_anywhere_in_a_value_reveals_it_under_any_name() {
        let secrets = [
            Secret::new("tok_0123456789abcdef"),
            Secret::new("user:pa/ss?>word"),
        ];
        let credentials = Credentials::of(None, &secrets);
        for value in [
            "tok_0123456789abcdef",
            "Bearer tok_0123456789abcdef",
            "Basic dXNlcjpwYS9zcz8+d29yZA==",
            "basic dXNlcjpwYS9zcz8-d29yZA",
        ] {
            assert!(credentials.reveal("x-forwarded-hook-key", value), "{value}");
        }
        for value in ["tok_0123456789abcde", "application/json", ""] {
            assert!(
                !credentials.reveal("x-forwarded-hook-key", value),
                "{value}"
            );
        }
        assert!(!Credentials::of(None, &[Secret::new("")]).reveal("x-a", "anything"));
    }
}
