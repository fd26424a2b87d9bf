//! What an endpoint answers, the same from every web adapter: `200` with the claim after
//! the commit, `401` to a delivery that does not verify (Inlet keeps it as a dead letter),
//! `500` after a rollback (Inlet retries). The `problem+json` bodies name the reason and
//! nothing internal — the sender is not trusted with it; the cause goes to `tracing`.

use crate::Claim;

/// An endpoint's answer to one delivery.
pub(crate) enum Answer {
    Applied(Claim),
    Unverified,
    RolledBack,
}

impl Answer {
    /// The answer to a delivery that did not verify, its reason logged.
    pub(crate) fn unverified(reason: &dyn std::fmt::Display) -> Self {
        tracing::warn!(%reason, "inlet-inbox: a delivery did not verify (401)");
        Answer::Unverified
    }

    /// The answer to a processed delivery: its claim, or a rollback with the cause logged.
    pub(crate) fn processed<E: std::fmt::Display>(outcome: Result<Claim, E>) -> Self {
        match outcome {
            Ok(claim) => Answer::Applied(claim),
            Err(error) => {
                tracing::error!(%error, "inlet-inbox: a delivery was rolled back (500, Inlet retries it)");
                Answer::RolledBack
            }
        }
    }

    pub(crate) fn status(&self) -> u16 {
        match self {
            Answer::Applied(_) => 200,
            Answer::Unverified => 401,
            Answer::RolledBack => 500,
        }
    }

    pub(crate) fn content_type(&self) -> &'static str {
        match self {
            Answer::Applied(_) => "application/json",
            _ => "application/problem+json",
        }
    }

    pub(crate) fn body(&self) -> String {
        let title = match self {
            Answer::Applied(claim) => return format!(r#"{{"claim":"{}"}}"#, claim.as_str()),
            Answer::Unverified => "the delivery's signature does not verify",
            Answer::RolledBack => "the delivery was not applied: rolled back, to be sent again",
        };
        format!(
            r#"{{"type":"about:blank","title":"{title}","status":{}}}"#,
            self.status()
        )
    }
}
