//! Ed25519 for the schemes that sign with a private key and verify with its public key
//! (Discord interactions, Standard Webhooks `v1a`): key parsing that explains itself, and
//! strict verification.
//!
//! `verify_strict` rather than `verify`: it also refuses small-order public keys and
//! signature points, so no key or signature crafted to match several messages passes.
//! Honest signers (Discord, any Standard Webhooks sender using a mainstream library) never
//! produce those, and a weak public key is already refused at startup.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

/// An Ed25519 signature's length in bytes.
pub const SIGNATURE_LENGTH: usize = ed25519_dalek::SIGNATURE_LENGTH;

/// A public key from its 32 bytes: a valid curve point that is not of small order.
pub fn public_key(bytes: &[u8]) -> Result<VerifyingKey, String> {
    let bytes: &[u8; 32] = bytes
        .try_into()
        .map_err(|_| format!("an Ed25519 public key is 32 bytes, not {}", bytes.len()))?;
    let key = VerifyingKey::from_bytes(bytes)
        .map_err(|_| "these 32 bytes are not an Ed25519 public key (no curve point)")?;
    if key.is_weak() {
        return Err("this Ed25519 public key is of small order: it would accept forgeries".into());
    }
    Ok(key)
}

/// A private key from its 32-byte seed, or the 64 bytes of seed and public key that
/// libsodium and tweetnacl call the secret key (the public half must match).
pub fn signing_key(bytes: &[u8]) -> Result<SigningKey, String> {
    if let Ok(seed) = <&[u8; 32]>::try_from(bytes) {
        return Ok(SigningKey::from_bytes(seed));
    }
    let pair: &[u8; 64] = bytes.try_into().map_err(|_| {
        format!(
            "an Ed25519 private key is a 32-byte seed or 64 bytes of seed and public key, \
             not {} bytes",
            bytes.len()
        )
    })?;
    SigningKey::from_keypair_bytes(pair)
        .map_err(|_| "the public half of this 64-byte Ed25519 key does not match its seed".into())
}

/// Whether any of `signatures` is a valid signature of `message` under any of `keys`.
/// Public keys and signatures are public: no comparison here needs constant time.
pub fn any_verifies(keys: &[VerifyingKey], message: &[u8], signatures: &[Signature]) -> bool {
    keys.iter().any(|key| {
        signatures
            .iter()
            .any(|signature| key.verify_strict(message, signature).is_ok())
    })
}

/// A signature from its 64 bytes; `None` for any other length.
pub fn signature(bytes: &[u8]) -> Option<Signature> {
    <&[u8; SIGNATURE_LENGTH]>::try_from(bytes)
        .ok()
        .map(Signature::from_bytes)
}

/// The signature of `message` under `key`.
pub fn sign(key: &SigningKey, message: &[u8]) -> [u8; SIGNATURE_LENGTH] {
    key.sign(message).to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8032 section 7.1, test 2: one byte signed with a known seed.
    #[test]
    fn rfc_8032_test_2() {
        let seed = hex::decode("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
            .unwrap();
        let public =
            hex::decode("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
                .unwrap();
        let expected = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
                        085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";
        let key = signing_key(&seed).unwrap();
        assert_eq!(key.verifying_key().as_bytes().as_slice(), public.as_slice());
        let signed = sign(&key, &[0x72]);
        assert_eq!(hex::encode(signed), expected);
        let public = public_key(&public).unwrap();
        let signed = signature(&signed).unwrap();
        assert!(any_verifies(&[public], &[0x72], &[signed]));
        assert!(!any_verifies(&[public], &[0x73], &[signed]));
    }

    #[test]
    fn keys_explain_what_is_wrong() {
        assert!(public_key(&[0u8; 31]).unwrap_err().contains("32 bytes"));
        // The identity point is a valid encoding of small order.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(public_key(&identity).unwrap_err().contains("small order"));
        assert!(signing_key(&[1u8; 33]).unwrap_err().contains("33 bytes"));
        let key = signing_key(&[7u8; 32]).unwrap();
        let mut pair = key.to_keypair_bytes();
        assert!(signing_key(&pair).is_ok());
        pair[40] ^= 1;
        assert!(signing_key(&pair).unwrap_err().contains("does not match"));
        assert!(signature(&[0u8; 63]).is_none());
    }
}
