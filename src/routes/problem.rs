//! The one error type at the HTTP boundary: every rejection becomes an
//! `application/problem+json` body (RFC 9457) with a stable machine-readable `reason`.
//! The modules below return their own errors; this is the only place that maps them to a
//! status, deliberately: an unreachable or busy database is `503` with `Retry-After`
//! (nothing was stored, the provider retries), a claim that could not wait for a
//! concurrent claim of the same key is `409` with `Retry-After`, and anything else is a
//! logged `500`.

use crate::db::StoreError;
use crate::identity::IdentityError;
use crate::ingest::IngestError;
use crate::operator::OperatorError;
use crate::signature::SignatureError;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use std::fmt;

/// Why a request was refused. The `code` is part of the public contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NotFound,
    MethodNotAllowed,
    UnknownSource,
    PayloadTooLarge,
    RequestTimeout,
    MissingSignature,
    MalformedSignature,
    BadSignature,
    TimestampOutOfTolerance,
    InvalidBody,
    MissingEventId,
    InvalidEventId,
    InvalidEventType,
    InvalidFactKey,
    MissingFactKey,
    FingerprintMismatch,
    ClaimInProgress,
    DatabaseUnavailable,
    Internal,
    Unauthorized,
    Forbidden,
    TooManyAttempts,
    InvalidRequest,
    IdempotencyKeyMissing,
    IdempotencyKeyReused,
    Expired,
    UnknownEvent,
    InvalidChallenge,
    HookSecretHeld,
    CertificateUnavailable,
    SubscriptionUnconfirmed,
    TooManyEvaluations,
    PreviewOutdated,
}

impl Reason {
    pub const ALL: [Reason; 33] = [
        Reason::NotFound,
        Reason::MethodNotAllowed,
        Reason::UnknownSource,
        Reason::PayloadTooLarge,
        Reason::RequestTimeout,
        Reason::MissingSignature,
        Reason::MalformedSignature,
        Reason::BadSignature,
        Reason::TimestampOutOfTolerance,
        Reason::InvalidBody,
        Reason::MissingEventId,
        Reason::InvalidEventId,
        Reason::InvalidEventType,
        Reason::InvalidFactKey,
        Reason::MissingFactKey,
        Reason::FingerprintMismatch,
        Reason::ClaimInProgress,
        Reason::DatabaseUnavailable,
        Reason::Internal,
        Reason::Unauthorized,
        Reason::Forbidden,
        Reason::TooManyAttempts,
        Reason::InvalidRequest,
        Reason::IdempotencyKeyMissing,
        Reason::IdempotencyKeyReused,
        Reason::Expired,
        Reason::UnknownEvent,
        Reason::InvalidChallenge,
        Reason::HookSecretHeld,
        Reason::CertificateUnavailable,
        Reason::SubscriptionUnconfirmed,
        Reason::TooManyEvaluations,
        Reason::PreviewOutdated,
    ];

    /// The stable reason code, used in the body, in metrics and in logs.
    pub fn code(self) -> &'static str {
        match self {
            Reason::NotFound => "not_found",
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::UnknownSource => "unknown_source",
            Reason::PayloadTooLarge => "payload_too_large",
            Reason::RequestTimeout => "request_timeout",
            Reason::MissingSignature => "missing_signature",
            Reason::MalformedSignature => "malformed_signature",
            Reason::BadSignature => "bad_signature",
            Reason::TimestampOutOfTolerance => "timestamp_out_of_tolerance",
            Reason::InvalidBody => "invalid_body",
            Reason::MissingEventId => "missing_event_id",
            Reason::InvalidEventId => "invalid_event_id",
            Reason::InvalidEventType => "invalid_event_type",
            Reason::InvalidFactKey => "invalid_fact_key",
            Reason::MissingFactKey => "missing_fact_key",
            Reason::FingerprintMismatch => "fingerprint_mismatch",
            Reason::ClaimInProgress => "claim_in_progress",
            Reason::DatabaseUnavailable => "database_unavailable",
            Reason::Internal => "internal_error",
            Reason::Unauthorized => "unauthorized",
            Reason::Forbidden => "forbidden",
            Reason::TooManyAttempts => "too_many_attempts",
            Reason::InvalidRequest => "invalid_request",
            Reason::IdempotencyKeyMissing => "idempotency_key_missing",
            Reason::IdempotencyKeyReused => "idempotency_key_reused",
            Reason::Expired => "expired",
            Reason::UnknownEvent => "unknown_event",
            Reason::InvalidChallenge => "invalid_challenge",
            Reason::HookSecretHeld => "hook_secret_held",
            Reason::CertificateUnavailable => "certificate_unavailable",
            Reason::SubscriptionUnconfirmed => "subscription_unconfirmed",
            Reason::TooManyEvaluations => "too_many_evaluations",
            Reason::PreviewOutdated => "preview_outdated",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Reason::NotFound | Reason::UnknownSource | Reason::UnknownEvent => {
                StatusCode::NOT_FOUND
            }
            Reason::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Reason::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Reason::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Reason::MissingSignature
            | Reason::InvalidRequest
            | Reason::InvalidChallenge
            | Reason::IdempotencyKeyMissing
            | Reason::MalformedSignature
            | Reason::InvalidBody
            | Reason::MissingEventId
            | Reason::InvalidEventId
            | Reason::InvalidEventType
            | Reason::InvalidFactKey
            | Reason::MissingFactKey => StatusCode::BAD_REQUEST,
            Reason::BadSignature | Reason::TimestampOutOfTolerance | Reason::Unauthorized => {
                StatusCode::UNAUTHORIZED
            }
            Reason::FingerprintMismatch | Reason::IdempotencyKeyReused => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Reason::Expired => StatusCode::GONE,
            Reason::Forbidden => StatusCode::FORBIDDEN,
            Reason::TooManyAttempts | Reason::TooManyEvaluations => StatusCode::TOO_MANY_REQUESTS,
            Reason::ClaimInProgress | Reason::HookSecretHeld | Reason::PreviewOutdated => {
                StatusCode::CONFLICT
            }
            Reason::DatabaseUnavailable
            | Reason::CertificateUnavailable
            | Reason::SubscriptionUnconfirmed => StatusCode::SERVICE_UNAVAILABLE,
            Reason::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Reason::NotFound => "No such route",
            Reason::MethodNotAllowed => "Method not allowed on this route",
            Reason::UnknownSource => "Unknown webhook source",
            Reason::PayloadTooLarge => "Request body too large",
            Reason::RequestTimeout => "Request body not received in time",
            Reason::MissingSignature => "Signature header missing",
            Reason::MalformedSignature => "Signature header malformed",
            Reason::BadSignature => "Signature does not match",
            Reason::TimestampOutOfTolerance => "Signed timestamp outside the tolerance",
            Reason::InvalidBody => "Request body cannot be parsed",
            Reason::MissingEventId => "Event id missing",
            Reason::InvalidEventId => "Event id invalid",
            Reason::InvalidEventType => "Event type invalid",
            Reason::InvalidFactKey => "Fact key invalid",
            Reason::MissingFactKey => "Fact key missing",
            Reason::FingerprintMismatch => "Event id reused with a different body",
            Reason::ClaimInProgress => "Event is being processed by a concurrent request",
            Reason::DatabaseUnavailable => "Database unavailable",
            Reason::Internal => "Internal error",
            Reason::Unauthorized => "Operator token missing or wrong",
            Reason::Forbidden => "The operator's role may not do this",
            Reason::TooManyAttempts => "Too many wrong operator tokens from this address",
            Reason::InvalidRequest => "Request invalid",
            Reason::IdempotencyKeyMissing => "Idempotency-Key header required",
            Reason::IdempotencyKeyReused => "Idempotency-Key reused with a different request",
            Reason::Expired => "Swept after the retention window",
            Reason::UnknownEvent => "No such event",
            Reason::InvalidChallenge => "Verification challenge missing or invalid",
            Reason::HookSecretHeld => "The source already holds a secret",
            Reason::CertificateUnavailable => "Signing certificate unavailable",
            Reason::SubscriptionUnconfirmed => "Subscription not confirmed",
            Reason::TooManyEvaluations => "The operator's earlier evaluation is still running",
            Reason::PreviewOutdated => "The rows the preview counted have changed",
        }
    }

    /// Seconds a client should wait before retrying, for the retryable reasons.
    pub fn retry_after_secs(self) -> Option<u32> {
        match self {
            Reason::ClaimInProgress | Reason::TooManyEvaluations => Some(1),
            Reason::DatabaseUnavailable
            | Reason::CertificateUnavailable
            | Reason::SubscriptionUnconfirmed => Some(5),
            _ => None,
        }
    }
}

/// The `Retry-After` seconds for a wait of `left`: rounded up, at least 1. Rounded down, a
/// client that waits exactly what it was told would ask too early and be refused again.
pub fn seconds_to_wait(left: std::time::Duration) -> u64 {
    let whole = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    whole.max(1)
}

/// A refused request: a reason and a human-readable detail.
#[derive(Debug, Clone)]
pub struct Problem {
    pub reason: Reason,
    pub detail: String,
    /// Seconds to wait before retrying, when this refusal says (else the reason's).
    pub retry_after: Option<u64>,
    /// What the refusal adds (`preview_outdated`: the fresh preview), as a member of its
    /// document.
    pub preview: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ProblemBody<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    reason: &'a str,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    preview: Option<&'a serde_json::Value>,
}

impl Problem {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            retry_after: None,
            preview: None,
        }
    }

    /// The same refusal, telling the client to wait `secs` before retrying.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(Reason::Internal, detail)
    }

    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(Reason::DatabaseUnavailable, detail)
    }

    /// What a caller who is not an operator may read: a failure inside Inlet or of its
    /// database says only that, with the request id under which the full detail was
    /// logged (never index names, row sizes or database hosts). Refusals of the request
    /// itself keep their detail.
    pub fn for_outsiders(self, request_id: &str) -> Self {
        let generic = match self.reason {
            Reason::Internal => "internal error",
            Reason::DatabaseUnavailable => "database unavailable; retry later",
            Reason::CertificateUnavailable => {
                "the signing certificate could not be fetched; retry later"
            }
            Reason::SubscriptionUnconfirmed => {
                "the subscription could not be confirmed; retry later"
            }
            _ => return self,
        };
        // The detail is Inlet's; when to retry is the caller's to know.
        Self {
            detail: format!("{generic} (request id {request_id})"),
            ..self
        }
    }

    /// The problem+json document.
    pub fn body(&self) -> Vec<u8> {
        let code = self.reason.code();
        let body = ProblemBody {
            kind: format!("urn:inlet:problem:{code}"),
            title: self.reason.title(),
            status: self.reason.status().as_u16(),
            reason: code,
            detail: &self.detail,
            preview: self.preview.as_ref(),
        };
        // Serializing a struct of strings and integers cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason.code(), self.detail)
    }
}

impl ResponseError for Problem {
    fn status_code(&self) -> StatusCode {
        self.reason.status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        ));
        if self.reason == Reason::Unauthorized {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        let retry_after = self
            .retry_after
            .or(self.reason.retry_after_secs().map(u64::from));
        if let Some(seconds) = retry_after {
            response.insert_header((header::RETRY_AFTER, seconds.to_string()));
        }
        // The request's middleware logs refusals of routes that do not log their own.
        response.extensions_mut().insert(self.clone());
        response.body(self.body())
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        let reason = match error {
            StoreError::Unavailable(_) | StoreError::InDoubt(_) => Reason::DatabaseUnavailable,
            StoreError::Contended(_) => Reason::ClaimInProgress,
            StoreError::Failed(_) => Reason::Internal,
        };
        Problem::new(reason, error.to_string())
    }
}

impl From<crate::db::CommitInDoubt> for Problem {
    fn from(error: crate::db::CommitInDoubt) -> Self {
        StoreError::from(error).into()
    }
}

impl From<diesel::result::Error> for Problem {
    fn from(error: diesel::result::Error) -> Self {
        StoreError::from(error).into()
    }
}

impl From<r2d2::Error> for Problem {
    fn from(error: r2d2::Error) -> Self {
        StoreError::from(error).into()
    }
}

impl From<tokio::task::JoinError> for Problem {
    fn from(error: tokio::task::JoinError) -> Self {
        StoreError::from(error).into()
    }
}

impl From<SignatureError> for Problem {
    fn from(error: SignatureError) -> Self {
        let reason = match error {
            SignatureError::Missing(_) => Reason::MissingSignature,
            SignatureError::Malformed { .. } => Reason::MalformedSignature,
            SignatureError::Mismatch(_) | SignatureError::NotAccepted(_) => Reason::BadSignature,
            SignatureError::OutOfTolerance { .. } => Reason::TimestampOutOfTolerance,
        };
        Problem::new(reason, error.to_string())
    }
}

impl From<IdentityError> for Problem {
    fn from(error: IdentityError) -> Self {
        let reason = match error {
            IdentityError::MissingEventId(_) => Reason::MissingEventId,
            IdentityError::InvalidEventId(_) => Reason::InvalidEventId,
            IdentityError::InvalidEventType(_) => Reason::InvalidEventType,
            IdentityError::InvalidFactKey(_) => Reason::InvalidFactKey,
            IdentityError::MissingFactKey(_) => Reason::MissingFactKey,
            IdentityError::InvalidBody(_) => Reason::InvalidBody,
        };
        Problem::new(reason, error.to_string())
    }
}

impl From<IngestError> for Problem {
    fn from(error: IngestError) -> Self {
        match error {
            IngestError::FingerprintMismatch(mismatch) => {
                Problem::new(Reason::FingerprintMismatch, mismatch.to_string())
            }
            IngestError::Store(error) => error.into(),
            IngestError::Internal(detail) => Problem::internal(detail),
        }
    }
}

impl From<OperatorError> for Problem {
    fn from(error: OperatorError) -> Self {
        let reason = match &error {
            OperatorError::Invalid(_) => Reason::InvalidRequest,
            OperatorError::KeyMissing(_) => Reason::IdempotencyKeyMissing,
            OperatorError::KeyReused(_) => Reason::IdempotencyKeyReused,
            OperatorError::UnknownEvent(_) => Reason::UnknownEvent,
            OperatorError::NotFound(_) => Reason::NotFound,
            OperatorError::Expired(_) => Reason::Expired,
            OperatorError::Store(store) => return store.clone().into(),
            OperatorError::Internal(_) => Reason::Internal,
            OperatorError::Busy(_) => Reason::TooManyEvaluations,
            OperatorError::Outdated(_, preview) => {
                return Problem {
                    preview: Some(preview.clone()),
                    ..Problem::new(Reason::PreviewOutdated, error.to_string())
                }
            }
        };
        Problem::new(reason, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_distinct_code_and_a_valid_body() {
        let mut codes: Vec<_> = Reason::ALL.iter().map(|r| r.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Reason::ALL.len());
        for reason in Reason::ALL {
            let body: serde_json::Value =
                serde_json::from_slice(&Problem::new(reason, "d").body()).unwrap();
            assert_eq!(body["reason"], reason.code());
            assert_eq!(body["status"], reason.status().as_u16());
        }
    }
}
