//! Secrets: values that never print, a comparison whose time depends on neither value,
//! and the floor on how short a secret may be.

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

/// The fewest bytes of key material Inlet accepts in a secret the user chooses (GitHub,
/// generic `hmac`, `basic` passwords, header tokens): 128 bits, so that guessing the key
/// costs as much as forging an HMAC-SHA256 tag by chance would. Providers that issue
/// their own secrets have their own, usually longer, floors (see each scheme).
pub const MIN_SECRET_BYTES: usize = 16;

/// How long a scheme's secret must be: at least `min` bytes of key material after a
/// fixed `prefix` the provider writes before it (which carries no secrecy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinLength {
    /// Written before the key material by the provider (`whsec_`), not counted; `""` for
    /// none.
    pub prefix: &'static str,
    /// Whether a secret without the prefix is refused: the provider always writes it, so
    /// a secret without it cannot be one the provider issued.
    pub prefix_required: bool,
    /// The fewest bytes after the prefix.
    pub min: usize,
    /// The rule in words, for the refusal (it never shows the secret).
    pub rule: &'static str,
}

impl MinLength {
    /// Checks `secret` against a provider's `rule`, or, without one, the floor for a
    /// secret the user chooses.
    pub fn check_rule(rule: Option<&Self>, secret: &Secret) -> Result<(), String> {
        rule.unwrap_or(&Self::CHOSEN).check(secret)
    }

    /// The floor for a secret the user chooses.
    pub const CHOSEN: Self = Self {
        prefix: "",
        prefix_required: false,
        min: MIN_SECRET_BYTES,
        rule: "a secret you choose has at least 16 bytes (128 bits), \
               for example `openssl rand -hex 32`",
    };

    /// A provider-issued secret with no prefix: at least `min` bytes.
    pub const fn issued(min: usize, rule: &'static str) -> Self {
        Self {
            prefix: "",
            prefix_required: false,
            min,
            rule,
        }
    }

    /// Refuses a secret shorter than the rule, saying the rule and how many bytes it has.
    pub fn check(&self, secret: &Secret) -> Result<(), String> {
        let text = secret.expose();
        let material = match text.strip_prefix(self.prefix) {
            Some(rest) if !self.prefix.is_empty() => rest,
            _ if self.prefix_required => {
                return Err(format!(
                    "not a secret this scheme uses: {} (it does not start with {})",
                    self.rule, self.prefix
                ))
            }
            _ => text,
        };
        if material.len() < self.min {
            return Err(too_weak(self.rule, material.len()));
        }
        Ok(())
    }
}

/// The refusal of a secret with `found` bytes of key material: the rule, never the value.
pub fn too_weak(rule: &str, found: usize) -> String {
    format!("too weak: {rule}; this one has {found} bytes of key material")
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

/// Bytes from the kernel's random source (session ids, generated server secrets).
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
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

    #[test]
    fn short_secrets_are_refused_without_being_shown() {
        let stripe = MinLength {
            prefix: "whsec_",
            prefix_required: true,
            min: 32,
            rule: "whsec_ and 32 more",
        };
        let long = format!("whsec_{}", "k".repeat(32));
        assert!(stripe.check(&Secret::new(long)).is_ok());
        let short = stripe.check(&Secret::new("whsec_hunter2")).unwrap_err();
        assert!(
            short.contains("too weak") && short.contains("7 bytes"),
            "{short}"
        );
        assert!(!short.contains("hunter2"), "{short}");
        let bare = stripe.check(&Secret::new("k".repeat(40))).unwrap_err();
        assert!(bare.contains("does not start with whsec_"), "{bare}");
        assert!(!bare.contains("kkkk"), "{bare}");
        // An optional prefix is not counted when present, and not needed.
        let optional = MinLength {
            prefix_required: false,
            ..stripe
        };
        assert!(optional.check(&Secret::new("k".repeat(32))).is_ok());
        assert!(optional
            .check(&Secret::new(format!("whsec_{}", "k".repeat(31))))
            .is_err());
        assert!(MinLength::CHOSEN
            .check(&Secret::new("x".repeat(15)))
            .is_err());
        assert!(MinLength::CHOSEN
            .check(&Secret::new("x".repeat(16)))
            .is_ok());
    }
}
