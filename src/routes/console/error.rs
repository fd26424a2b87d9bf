//! Why a console request was not served as asked. Each renders as a page: the front
//! door (`mod.rs`) turns it into a response with the views.

use crate::routes::Problem;

/// Why a console request was not served as asked: each renders as a page.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("sign in first")]
    SignIn(String),
    #[error("the console is disabled: configure operator.token or [[operators]]")]
    Disabled,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Internal(String),
    /// A console path asked with a method it does not serve (`allow`: the ones it does).
    #[error("{detail}")]
    MethodNotAllowed { allow: String, detail: String },
    /// The operator API refused the action (its status and reason).
    #[error("{1}")]
    Refused(u16, String),
    #[error("{}", .0.detail)]
    Problem(Problem),
}

impl From<Problem> for ConsoleError {
    fn from(problem: Problem) -> Self {
        Self::Problem(problem)
    }
}

impl From<crate::operator::OperatorError> for ConsoleError {
    fn from(error: crate::operator::OperatorError) -> Self {
        Self::Problem(error.into())
    }
}

impl ConsoleError {
    /// Failures of Inlet itself are logged (refusals are the operator's to read).
    pub(super) fn log(&self) {
        match self {
            Self::Internal(detail) => tracing::error!(%detail, "console error"),
            Self::Problem(problem) if problem.reason == crate::routes::Reason::Internal => {
                tracing::error!(detail = %problem.detail, "console error")
            }
            Self::Problem(problem)
                if problem.reason == crate::routes::Reason::DatabaseUnavailable =>
            {
                tracing::warn!(detail = %problem.detail, "console: database unavailable")
            }
            Self::MethodNotAllowed { detail, .. } => {
                tracing::info!(%detail, "console: method not allowed")
            }
            _ => {}
        }
    }
}
