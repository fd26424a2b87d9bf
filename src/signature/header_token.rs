//! `header_token`: for senders that sign nothing but send a shared token in a named header
//! (`token_header`). The header must equal one of the source's secrets, compared in
//! constant time, every secret tried (rotation). This proves who sent the request, not
//! that its body is unaltered or fresh: there is no signature over the body and no signed
//! timestamp.

use super::basic::any_secret_equals;
use super::{EventToSign, Keys, Scheme, SignatureError, Unverified, Verified};
use crate::secret::Secret;
use chrono::{DateTime, Utc};

/// A configured header-token scheme: the header that carries the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderToken {
    header: String,
}

impl HeaderToken {
    /// Validates the header name.
    pub fn new(header: String) -> Result<Self, String> {
        actix_web::http::header::HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| format!("'{header}' is not a valid header name"))?;
        Ok(Self { header })
    }

    /// The header that carries the token.
    pub fn header(&self) -> &str {
        &self.header
    }
}

impl Scheme for HeaderToken {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let token = request
            .header(&self.header)
            .ok_or_else(|| SignatureError::Missing(self.header.clone()))?;
        if !any_secret_equals(keys.secrets, token) {
            return Err(SignatureError::Mismatch(self.header.clone()));
        }
        Ok(request.into_verified())
    }

    fn sign(
        &self,
        _body: &[u8],
        secret: &Secret,
        _now: DateTime<Utc>,
        _event: &EventToSign,
    ) -> Vec<(String, String)> {
        vec![
            (self.header.clone(), secret.expose().to_owned()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        actix_web::http::header::HeaderValue::from_str(secret.expose())
            .map(drop)
            .map_err(|_| "a header token must be a valid header value".to_owned())
    }
}
