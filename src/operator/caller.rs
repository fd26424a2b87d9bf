//! Who calls an operator use case: the operator (never their token), their role, and
//! where the call came from — what the audit trail records of it.

use super::roles::{Account, Role};

/// Who is calling, and from where: the operator (never the token), the surface, the
/// request id and the client's address — what the audit trail records of an action.
/// Idempotency-Keys are scoped to the operator, so the API and the console share them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    pub(super) scope: String,
    /// `api` or `console`.
    pub surface: &'static str,
    pub request_id: Option<String>,
    pub client: Option<String>,
}

impl Caller {
    /// `account` calling through `surface`.
    pub fn new(
        account: &Account,
        surface: &'static str,
        request_id: Option<String>,
        client: Option<String>,
    ) -> Self {
        Self {
            name: account.name.clone(),
            role: account.role,
            scope: account.scope.clone(),
            surface,
            request_id,
            client,
        }
    }

    /// The process itself, told by a signal (`SIGHUP` reloads): no operator, no request.
    /// The audit trail names it `system`, on the surface `signal`.
    pub fn signal() -> Self {
        Self {
            name: "system".to_owned(),
            role: Role::Admin,
            scope: "system".to_owned(),
            surface: "signal",
            request_id: None,
            client: None,
        }
    }

    /// Whether the caller's role may do what `needed` may.
    pub fn may(&self, needed: Role) -> bool {
        self.role.may(needed)
    }
}
