//! A source whose requests are verified with a certificate they name (Amazon SNS): the
//! certificate is fetched (or taken from this instance's cache) before the request is
//! verified with it, and a subscription confirmation that verified is confirmed by visiting
//! its `SubscribeURL` before it is answered. Either failing is `503` with `Retry-After`
//! (what is left of the time the failure is remembered, rounded up: asking sooner gets
//! the same answer): nothing was stored, and SNS sends the message again — but a
//! certificate URL whose host answered that it serves none (or served something else) is
//! `401`: no signature verifies.

use super::{seconds_to_wait, Problem, Reason};
use crate::provider::SourceSettings;
use crate::signature::{Fetch, Headers, Keys, Unverified};
use crate::state::AppState;

/// `source` with the certificate its request names as its one key, when its scheme
/// verifies with one; `None` for every other source.
pub async fn with_certificate(
    state: &AppState,
    source: &SourceSettings,
    headers: &dyn Headers,
    body: &[u8],
) -> Option<Result<SourceSettings, Problem>> {
    let keys = Keys {
        secrets: &source.secrets,
        tolerance: state.faults.tolerance(source.tolerance),
    };
    let now = state.clock.now();
    let request = Unverified::new(headers, body);
    let fetch = source.provider.scheme().certificate(&request, keys, now)?;
    Some(certified(state, source, fetch).await)
}

async fn certified(
    state: &AppState,
    source: &SourceSettings,
    fetch: Result<Fetch, crate::signature::SignatureError>,
) -> Result<SourceSettings, Problem> {
    let fetch = fetch?;
    let name = source.name.as_str();
    let fetched = state
        .certificates
        .certificate(name, &fetch, state.clock.as_ref());
    let pem = fetched.await.map_err(|error| match error.refused {
        // No signature can verify under what is not there.
        true => Problem::new(
            Reason::BadSignature,
            format!(
                "SigningCertURL serves no usable certificate ({})",
                error.why
            ),
        ),
        false => Problem::new(Reason::CertificateUnavailable, error.to_string())
            .retry_after(seconds_to_wait(error.remembered_for)),
    })?;
    Ok(SourceSettings {
        secrets: vec![pem],
        ..source.clone()
    })
}

/// Confirms `source`'s subscription by visiting the URL its confirmation named (once
/// while its message can verify: a replay is answered from memory).
pub async fn confirm(
    state: &AppState,
    source: &SourceSettings,
    visit: &Fetch,
) -> Result<(), Problem> {
    let name = source.name.as_str();
    let tolerance = state.faults.tolerance(source.tolerance);
    let clock = state.clock.as_ref();
    match state
        .certificates
        .visit(name, visit, clock, tolerance)
        .await
    {
        Ok(()) => {
            tracing::info!(source = %name, "SNS subscription confirmed (its SubscribeURL visited)");
            Ok(())
        }
        Err(error) => Err(Problem::new(
            Reason::SubscriptionUnconfirmed,
            format!("the SubscribeURL could not be visited: {error}"),
        )
        .retry_after(seconds_to_wait(error.remembered_for))),
    }
}
