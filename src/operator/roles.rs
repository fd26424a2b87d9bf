//! Operators are people: each configured operator has a name, a token and a role, and
//! every operator surface (the API, the CLI through it, the console) asks the same
//! question — may this role do that? — of [`Role::may`].

use crate::secret::{hmac_sha256, secrets_equal, Secret};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// What an operator may do; each role may do everything the ones before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads everything an operator can read (events, payloads, deliveries, the audit
    /// trail, a replay's preview); changes nothing.
    Viewer,
    /// Also replays events and requeues or discards dead letters.
    Operator,
    /// Also reloads the configuration.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.as_str() == text)
    }

    /// Whether this role may do what `needed` may.
    pub fn may(self, needed: Role) -> bool {
        self >= needed
    }
}

/// One configured operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub role: Role,
    pub token: Secret,
    /// What Idempotency-Keys are scoped to: the operator's name (so the API and the
    /// console share keys, and a rotated token keeps them), or for the `[operator]` token
    /// what it always was (so keys stored before named operators existed still match).
    pub scope: String,
}

impl Account {
    /// A named operator from `[[operators]]`.
    pub fn named(name: String, role: Role, token: Secret) -> Self {
        let scope = format!("operator:{name}");
        Self {
            name,
            role,
            token,
            scope,
        }
    }

    /// The `[operator] token`: an admin named [`LEGACY_NAME`].
    pub fn legacy(token: Secret) -> Self {
        let digest = Sha256::digest([b"inlet operator ", token.expose().as_bytes()].concat());
        Self {
            name: LEGACY_NAME.to_owned(),
            role: Role::Admin,
            scope: hex::encode(&digest[..8]),
            token,
        }
    }

    /// A fingerprint of the token under `key` (the console's server secret): a session
    /// carries it, so rotating this operator's token ends this operator's sessions, and a
    /// leaked cookie tells nothing about the token without the key.
    pub fn token_mark(&self, key: &[u8]) -> [u8; 32] {
        hmac_sha256(key, &[b"operator token ", self.token.expose().as_bytes()])
    }
}

/// The name the `[operator] token` signs in as.
pub const LEGACY_NAME: &str = "operator";

/// The operator whose token `given` is, comparing with every configured token in
/// constant time (all are compared, whichever matches: the time says nothing of which).
pub fn find<'a>(accounts: &'a [Account], given: &str) -> Option<&'a Account> {
    let mut found = None;
    for account in accounts {
        if secrets_equal(given.as_bytes(), account.token.expose().as_bytes()) {
            found = found.or(Some(account));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below_and_tokens_find_their_operator() {
        assert!(Role::Admin.may(Role::Operator) && Role::Operator.may(Role::Viewer));
        assert!(!Role::Viewer.may(Role::Operator) && !Role::Operator.may(Role::Admin));
        assert_eq!(Role::parse("viewer"), Some(Role::Viewer));
        assert_eq!(Role::parse("root"), None);
        let accounts = [
            Account::named(
                "ana".into(),
                Role::Viewer,
                Secret::new("ana-token-0123456789"),
            ),
            Account::legacy(Secret::new("legacy-token-0123456789")),
        ];
        assert_eq!(find(&accounts, "ana-token-0123456789").unwrap().name, "ana");
        assert_eq!(
            find(&accounts, "legacy-token-0123456789").unwrap().role,
            Role::Admin
        );
        assert!(find(&accounts, "ana-token-012345678").is_none());
        assert!(find(&accounts, "").is_none());
        let key = [7u8; 32];
        assert_ne!(accounts[0].token_mark(&key), accounts[1].token_mark(&key));
    }
}
