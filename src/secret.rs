//! Secrets: values that never print, and a comparison whose time depends on neither
//! value.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;

/// A secret value. It never prints: `Debug` and `Display` show a placeholder.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<str>);

impl Secret {
    pub fn new(value: impl Into<Box<str>>) -> Self {
        Self(value.into())
    }

    /// The secret's text, for signing and verifying only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Resolves a configured reference: `env:NAME`, `file:PATH` or a literal value.
    pub fn resolve(reference: &str) -> Result<Self, String> {
        let value = if let Some(name) = reference.strip_prefix("env:") {
            std::env::var(name).map_err(|_| format!("environment variable {name} is not set"))?
        } else if let Some(path) = reference.strip_prefix("file:") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read secret file {path}: {e}"))?;
            text.trim_end_matches(['\r', '\n']).to_owned()
        } else {
            reference.to_owned()
        };
        if value.is_empty() {
            return Err("the secret is empty".to_owned());
        }
        Ok(Self::new(value))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Whether two secrets are equal, in time that depends on neither: each is MACed under
/// one fixed key (so lengths and contents leak nothing), and the tags are compared with
/// `verify_slice` (constant time). Exact: the values are the MAC's input, not its key,
/// which HMAC would pad or hash. For bearer tokens.
pub fn secrets_equal(given: &[u8], expected: &[u8]) -> bool {
    const KEY: &[u8] = b"inlet secret comparison";
    let tag = keyed_mac(KEY, &[expected]).finalize().into_bytes();
    keyed_mac(KEY, &[given]).verify_slice(&tag).is_ok()
}

/// HMAC-SHA256 of the concatenated parts under `key` (signed cookies, derived keys).
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    keyed_mac(key, parts).finalize().into_bytes().into()
}

fn keyed_mac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length: `new_from_slice` cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in parts {
        mac.update(part);
    }
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print_and_compare_exactly() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert!(secrets_equal(b"hunter2", b"hunter2"));
        assert!(!secrets_equal(b"hunter3", b"hunter2"));
        assert!(!secrets_equal(b"hunter", b"hunter2"));
        // HMAC zero-pads short keys: as keys, these two would be equal.
        assert!(!secrets_equal(b"hunter2\0", b"hunter2"));
    }
}
