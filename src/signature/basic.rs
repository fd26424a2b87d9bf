//! `basic`: for senders that sign nothing but send HTTP Basic credentials
//! (`Authorization: Basic base64(user:password)`). Each configured secret is one
//! `user:password` pair; every one is compared, in constant time. This proves who sent
//! the request, not that its body is unaltered or fresh: there is no signature over the
//! body and no signed timestamp.

use super::Signer;
use super::{with_json_type, Keys, Scheme, SignatureError, Unverified, Verdict};
use super::{SignedHeaders, ToSign};
use crate::secret::{secrets_equal, too_weak, Secret, MIN_SECRET_BYTES};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

const HEADER: &str = "Authorization";

#[derive(Debug)]
pub struct Basic;

impl Scheme for Basic {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let value = request.required(HEADER)?;
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

    fn signs_timestamp(&self) -> bool {
        false
    }

    /// `user:password`, the user not empty (RFC 7617: it cannot hold a ':') and the
    /// password at least [`MIN_SECRET_BYTES`]: the password is the secret, the user name
    /// is not.
    fn check_secret(&self, secret: &Secret) -> Result<(), String> {
        let Some((user, password)) = secret.expose().split_once(':') else {
            return Err("a basic source's secret is \"user:password\" (it has no ':')".to_owned());
        };
        if user.is_empty() {
            return Err("a basic source's secret is \"user:password\" with a user name".to_owned());
        }
        if password.len() < MIN_SECRET_BYTES {
            return Err(too_weak(
                "a basic source's password (after the first ':') has at least 16 bytes",
                password.len(),
            ));
        }
        Ok(())
    }
}

impl Signer for Basic {
    fn sign(&self, signing: ToSign<'_>) -> SignedHeaders {
        let ToSign { secret, .. } = signing;
        with_json_type([(HEADER, format!("Basic {}", BASE64.encode(secret.expose())))])
    }
}

/// Whether `given` equals any secret. Every secret is compared (no early exit), each in
/// constant time, so the time taken says nothing about which one matched or how closely.
pub(super) fn any_secret_equals(secrets: &[Secret], given: &[u8]) -> bool {
    secrets.iter().fold(false, |found, secret| {
        secrets_equal(given, secret.expose().as_bytes()) | found
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_need_a_user_and_a_16_byte_password() {
        let check = |pair: &str| Basic.check_secret(&Secret::new(pair));
        assert!(check("inlet:0123456789abcdef").is_ok());
        // The password is what follows the first ':' and may hold more.
        assert!(check("inlet:0123:456789abcdef").is_ok());
        assert!(check(":").unwrap_err().contains("user name"));
        assert!(check(":0123456789abcdef")
            .unwrap_err()
            .contains("user name"));
        assert!(check("inlet:").unwrap_err().contains("too weak"));
        let short = check("inlet:open sesame").unwrap_err();
        assert!(
            short.contains("11 bytes") && !short.contains("sesame"),
            "{short}"
        );
        assert!(check("no-colon").unwrap_err().contains("no ':'"));
    }
}
