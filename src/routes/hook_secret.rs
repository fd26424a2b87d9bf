//! A source whose secret a handshake establishes (Asana): the handshake — a request
//! carrying the secret in the provider's header (`X-Hook-Secret`) — is answered here, by
//! echoing it once the secret is stored, or refused `409 hook_secret_held` when the source
//! holds another; every other request is verified with the stored secret (read from the
//! database on each request, so every instance uses the one any of them stored) and the
//! configured ones, if any. The secret is never logged.

use super::{Problem, Reason};
use crate::hook_secrets::{self, Taken};
use crate::idempotency::Answer;
use crate::ingest::Received;
use crate::notices::Notice;
use crate::provider::SourceSettings;
use crate::secret::Secret;
use crate::state::AppState;

/// The longest secret a handshake may offer (Asana's are 64 characters).
const MAX_SECRET_CHARS: usize = 256;

/// An answered handshake, and the header it echoes.
pub struct Echo {
    pub received: Received,
    pub header: (&'static str, String),
}

/// The secret a handshake offers in `header`, checked: printable text of a length a
/// secret may have (the scheme's floor), or `400 malformed_signature`.
fn offered(source: &SourceSettings, header: &str, value: &[u8]) -> Result<Secret, Problem> {
    let malformed =
        |why: String| Problem::new(Reason::MalformedSignature, format!("{header}: {why}"));
    let text = std::str::from_utf8(value)
        .ok()
        .filter(|text| text.bytes().all(|b| b.is_ascii_graphic()))
        .filter(|text| !text.is_empty() && text.len() <= MAX_SECRET_CHARS)
        .ok_or_else(|| {
            malformed(format!(
                "a secret is 1 to {MAX_SECRET_CHARS} printable characters"
            ))
        })?;
    let secret = Secret::new(text);
    source
        .provider
        .scheme()
        .check_secret(&secret)
        .map_err(malformed)?;
    Ok(secret)
}

/// Takes the handshake `value` (the `header` of `source`'s provider): stored and echoed
/// when the source holds no secret (or this very one), else refused without any change —
/// also when the source's secrets are configured.
pub async fn handshake(
    state: &AppState,
    source: &SourceSettings,
    header: &'static str,
    value: &[u8],
) -> Result<Echo, Problem> {
    let name = source.name.as_str();
    if !source.secrets.is_empty() {
        return Err(Problem::new(
            Reason::HookSecretHeld,
            format!(
                "source {name} verifies with the secrets its configuration gives \
                 (sources.secrets): a handshake cannot replace them"
            ),
        ));
    }
    let secret = offered(source, header, value)?;
    let echoed = secret.expose().to_owned();
    let now = state.clock.now();
    match hook_secrets::take(&state.pool, name, secret, now).await? {
        Taken::Established => {
            metrics::counter!("inlet_hook_secrets_established_total", "source" => name.to_owned())
                .increment(1);
            tracing::info!(source = %name, "hook secret established by a handshake");
            tell(state, Notice::hook_secret_established(name, now)).await;
        }
        Taken::Same => {
            tracing::info!(source = %name, "handshake repeated with the secret already held");
        }
        Taken::Held(since) => {
            tell(state, Notice::hook_secret_refused(name, since, now)).await;
            return Err(Problem::new(
                Reason::HookSecretHeld,
                format!(
                    "source {name} already holds a secret from an earlier handshake; nothing \
                     changed. To create a new webhook, an operator first clears it \
                     (POST /admin/hook-secrets/clear)"
                ),
            ));
        }
    }
    let body = serde_json::json!({ "outcome": "handshake", "source": name }).to_string();
    Ok(Echo {
        received: Received::handshake(Answer {
            status: 200,
            content_type: "application/json".to_owned(),
            body: body.into_bytes(),
        }),
        header: (header, echoed),
    })
}

/// Writes `notice` (with `[notices]` configured), once per its id.
async fn tell(state: &AppState, notice: Notice) {
    if let Some(notices) = &state.notices {
        notices.send_from(&state.pool, vec![notice]).await;
    }
}

/// `source` with the secret its handshake stored beside the configured ones; `401
/// bad_signature` when it has neither (no handshake yet, or cleared).
pub async fn with_stored_secret(
    state: &AppState,
    source: &SourceSettings,
) -> Result<SourceSettings, Problem> {
    let stored = hook_secrets::stored(&state.pool, source.name.as_str()).await?;
    if stored.is_none() && source.secrets.is_empty() {
        return Err(Problem::new(
            Reason::BadSignature,
            format!(
                "source {} holds no secret yet: the webhook's handshake has not reached \
                 Inlet, or an operator cleared its secret",
                source.name
            ),
        ));
    }
    let mut source = source.clone();
    source.secrets.extend(stored);
    Ok(source)
}
