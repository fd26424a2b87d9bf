//! `header_token`: for senders that sign nothing but send a shared token in a named header
//! (`token_header`). The header must equal one of the source's secrets, compared in
//! constant time, every secret tried (rotation). This proves who sent the request, not
//! that its body is unaltered or fresh: there is no signature over the body and no signed
//! timestamp.
//!
//! The token is a secret the user chooses (at least 16 bytes), and it travels in a header
//! of the user's own: not one HTTP, a proxy or Inlet itself reads, rewrites or treats as a
//! credential of another kind (see [`RESERVED`]).

use super::basic::any_secret_equals;
use super::Signer;
use super::{with_json_type, Keys, Scheme, SignatureError, Unverified, Verdict};
use super::{SignedHeaders, ToSign};
use crate::secret::{MinLength, Secret};

/// Headers a token may not travel in (compared without case), and why. A proxy or HTTP
/// server in front of Inlet may read, rewrite, drop or log them, so the token would not
/// arrive as sent, or would leak; Inlet reads some of them itself.
pub const RESERVED: [(&str, &str); 21] = [
    ("host", ROUTING),
    ("content-length", FRAMING),
    ("transfer-encoding", FRAMING),
    ("content-type", CONTENT),
    ("content-encoding", CONTENT),
    ("connection", HOP_BY_HOP),
    ("keep-alive", HOP_BY_HOP),
    ("proxy-connection", HOP_BY_HOP),
    ("te", HOP_BY_HOP),
    ("trailer", HOP_BY_HOP),
    ("upgrade", HOP_BY_HOP),
    ("expect", FRAMING),
    ("authorization", CREDENTIAL),
    ("proxy-authorization", CREDENTIAL),
    ("cookie", CREDENTIAL),
    ("forwarded", PROXIES),
    ("via", PROXIES),
    ("x-real-ip", PROXIES),
    ("x-request-id", LOGGED),
    ("traceparent", LOGGED),
    ("tracestate", LOGGED),
];

/// Header name prefixes refused like [`RESERVED`].
const RESERVED_PREFIXES: [(&str, &str); 1] = [("x-forwarded-", PROXIES)];

const ROUTING: &str = "it routes the request (proxies and virtual hosts read it)";
const FRAMING: &str = "it governs how the body is sent (HTTP servers and proxies consume it)";
const CONTENT: &str = "it describes the body (HTTP servers and Inlet read it to decode and \
                       parse the body)";
const HOP_BY_HOP: &str = "it is hop-by-hop (a proxy drops it before Inlet sees it)";
const CREDENTIAL: &str = "it carries another kind of credential (the basic scheme's \
                          Authorization, a proxy's, the console's cookie), which proxies \
                          consume and logs treat on their own terms";
const PROXIES: &str = "proxies set or append to it, so a sender's value is not what arrives";
const LOGGED: &str = "Inlet and proxies record it on every request (the request id goes into \
                      each log line and answer; trace context into traces), so a token \
                      there would be written down in clear";

/// A configured header-token scheme: the header that carries the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderToken {
    header: String,
}

impl HeaderToken {
    /// Validates the header name, refusing the [`RESERVED`] ones.
    pub fn new(header: String) -> Result<Self, String> {
        http::HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| format!("'{header}' is not a valid header name"))?;
        let lower = header.to_ascii_lowercase();
        let reserved = RESERVED
            .iter()
            .find(|(name, _)| *name == lower)
            .or_else(|| {
                RESERVED_PREFIXES
                    .iter()
                    .find(|(prefix, _)| lower.starts_with(prefix))
            });
        if let Some((_, why)) = reserved {
            return Err(format!(
                "'{header}' cannot carry a token: {why}; name a header of your own \
                 (e.g. X-Webhook-Token), or use scheme = \"basic\" for Authorization"
            ));
        }
        Ok(Self { header })
    }

    /// The header that carries the token.
    pub fn header(&self) -> &str {
        &self.header
    }
}

impl Scheme for HeaderToken {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let token = request.required(&self.header)?;
        if !any_secret_equals(keys.secrets, token) {
            return Err(SignatureError::Mismatch(self.header.clone()));
        }
        Ok(request.into_verified())
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    /// A valid header value without surrounding whitespace (HTTP strips it, so the token
    /// could never match), of at least the floor for secrets the user chooses.
    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        let token = secret.expose();
        http::HeaderValue::from_str(token)
            .map_err(|_| "a header token must be a valid header value".to_owned())?;
        if token.trim() != token {
            return Err("a header token cannot start or end with whitespace".to_owned());
        }
        MinLength::CHOSEN.check(secret)
    }
}

impl Signer for HeaderToken {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign { secret, .. } = signing;
        with_json_type([(self.header.as_str(), secret.expose().to_owned())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_that_http_proxies_or_inlet_read_are_refused() {
        for name in [
            "Host",
            "authorization",
            "Content-Length",
            "Content-Type",
            "Transfer-Encoding",
            "Connection",
            "Cookie",
            "X-Forwarded-For",
            "x-forwarded-hook-key",
            "X-Real-IP",
        ] {
            let refused = HeaderToken::new(name.to_owned()).unwrap_err();
            assert!(
                refused.contains("cannot carry a token"),
                "{name}: {refused}"
            );
        }
        for name in [
            "X-Webhook-Token",
            "X-Hook-Key",
            "Hostname",
            "X-Authorization-Token",
        ] {
            assert!(HeaderToken::new(name.to_owned()).is_ok(), "{name}");
        }
    }

    #[test]
    fn tokens_are_header_values_of_at_least_16_bytes() {
        let scheme = HeaderToken::new("X-Webhook-Token".to_owned()).unwrap();
        let check = |token: &str| scheme.check_secret(&Secret::new(token));
        assert!(check("0123456789abcdef").is_ok());
        assert!(check("x").unwrap_err().contains("too weak"));
        assert!(check("0123456789abcde").unwrap_err().contains("15 bytes"));
        assert!(check(" 0123456789abcdef").is_err());
        assert!(check("0123456789abcdef\n").is_err());
    }
}
