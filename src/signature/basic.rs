//! `basic`: for senders that sign nothing but send HTTP Basic credentials
//! (`Authorization: Basic base64(user:password)`). Each configured secret is one
//! `user:password` pair; every one is compared, in constant time. This proves who sent
//! the request, not that its body is unaltered or fresh: there is no signature over the
//! body and no signed timestamp.

use super::{EventToSign, Keys, Scheme, SignatureError, Unverified, Verified};
use crate::secret::{secrets_equal, Secret};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};

const HEADER: &str = "Authorization";

#[derive(Debug)]
pub struct Basic;

impl Scheme for Basic {
    fn verify<'r>(
        &self,
        request: Unverified<'r>,
        keys: Keys<'_>,
        _now: DateTime<Utc>,
    ) -> Result<Verified<'r>, SignatureError> {
        let value = request
            .header(HEADER)
            .ok_or_else(|| SignatureError::Missing(HEADER.to_owned()))?;
        let (scheme, encoded) = value
            .trim_ascii()
            .split_at_checked(6)
            .ok_or_else(|| SignatureError::malformed(HEADER, "not Basic credentials"))?;
        if !scheme.eq_ignore_ascii_case(b"basic ") {
            return Err(SignatureError::malformed(HEADER, "not Basic credentials"));
        }
        let credentials = BASE64
            .decode(encoded.trim_ascii())
            .map_err(|_| SignatureError::malformed(HEADER, "the credentials are not base64"))?;
        if !any_secret_equals(keys.secrets, &credentials) {
            return Err(SignatureError::Mismatch(HEADER.to_owned()));
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
            (
                HEADER.to_owned(),
                format!("Basic {}", BASE64.encode(secret.expose())),
            ),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ]
    }

    fn signs_timestamp(&self) -> bool {
        false
    }

    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        if secret.expose().contains(':') {
            Ok(())
        } else {
            Err("a basic source's secret is \"user:password\" (it has no ':')".to_owned())
        }
    }
}

/// Whether `given` equals any secret. Every secret is compared (no early exit), each in
/// constant time, so the time taken says nothing about which one matched or how closely.
pub(super) fn any_secret_equals(secrets: &[Secret], given: &[u8]) -> bool {
    secrets.iter().fold(false, |found, secret| {
        secrets_equal(given, secret.expose().as_bytes()) | found
    })
}
