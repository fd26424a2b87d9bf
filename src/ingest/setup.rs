//! A provider's setup of its endpoint, done before (or instead of) verifying a webhook:
//! the validation a provider asks before it sends anything (Graph's `?validationToken=`),
//! the secret a handshake establishes (Asana's `X-Hook-Secret`: stored in the database,
//! so every instance verifies with the one any of them stored), the certificate a request
//! names (SNS: fetched, or taken from this instance's cache) and the subscription a
//! verified confirmation asks to be visited (SNS's `SubscribeURL`). Sources of every other
//! provider pass straight through. The secret is never logged.

use super::told::Told;
use super::{Intake, Received, Refusal, SetupRefusal, Webhook};
use crate::certificates::FetchError;
use crate::hook_secrets::{self, Taken};
use crate::idempotency::Answer;
use crate::provider::SourceSettings;
use crate::secret::Secret;
use crate::signature::{Fetch, Keys, SignatureError, Unverified};
use std::borrow::Cow;

/// The longest secret a handshake may offer (Asana's are 64 characters).
const MAX_SECRET_CHARS: usize = 256;

/// What the setup made of a request: answered already, or a webhook to verify with the
/// source's keys as the setup found them.
pub(super) enum SetUp<'s> {
    Answered(Received),
    VerifyAs(Box<Cow<'s, SourceSettings>>),
}

impl<'a> Intake<'a> {
    /// The setup of `webhook`'s source: its validation or handshake answered, or its keys
    /// (the stored secret, the named certificate) for verifying it.
    pub(super) async fn set_up(&self, webhook: &Webhook<'_>) -> Result<SetUp<'a>, Refusal> {
        let source = self.source;
        if let Some(validated) = source.provider.validation(webhook.query) {
            let answer = validated.map_err(SetupRefusal::InvalidChallenge)?;
            return Ok(SetUp::Answered(Received::handshake(answer)));
        }
        let mut keyed = Cow::Borrowed(source);
        if let Some(header) = source.provider.secret_by_handshake() {
            if let Some(offered) = webhook.headers.first(header) {
                let received = self.take_secret(header, offered).await?;
                return Ok(SetUp::Answered(received));
            }
            keyed = Cow::Owned(self.with_stored_secret().await?);
        }
        let keys = Keys {
            secrets: &keyed.secrets,
            tolerance: self.faults.tolerance(source.tolerance),
            now: self.now,
        };
        let request = Unverified::new(webhook.headers, webhook.body);
        let certified = source.provider.scheme().certified();
        match certified.and_then(|c| c.certificate(&request, keys)) {
            None => Ok(SetUp::VerifyAs(Box::new(keyed))),
            Some(fetch) => {
                let certified = self.certified(fetch).await?;
                Ok(SetUp::VerifyAs(Box::new(Cow::Owned(certified))))
            }
        }
    }

    /// Takes the secret a handshake offers in `header`: stored and echoed when the source
    /// holds none (or this very one), else refused without any change — also when the
    /// source's secrets are configured.
    async fn take_secret(&self, header: &'static str, value: &[u8]) -> Result<Received, Refusal> {
        let name = self.source.name.as_str();
        if !self.source.secrets.is_empty() {
            return Err(SetupRefusal::HookSecretHeld(format!(
                "source {name} verifies with the secrets its configuration gives \
                 (sources.secrets): a handshake cannot replace them"
            ))
            .into());
        }
        let secret = self.offered(header, value)?;
        let echoed = secret.expose().to_owned();
        let at = self.now;
        match hook_secrets::take(self.pool, name, secret, at).await? {
            Taken::Established => {
                metrics::counter!("inlet_hook_secrets_established_total", "source" => name.to_owned())
                    .increment(1);
                tracing::info!(source = %name, "hook secret established by a handshake");
                self.tell(Told::HookSecretEstablished { source: name, at })
                    .await;
            }
            Taken::Same => {
                tracing::info!(source = %name, "handshake repeated with the secret already held");
            }
            Taken::Held(held_since) => {
                let told = Told::HookSecretRefused {
                    source: name,
                    held_since,
                    at,
                };
                self.tell(told).await;
                return Err(SetupRefusal::HookSecretHeld(format!(
                    "source {name} already holds a secret from an earlier handshake; nothing \
                     changed. To create a new webhook, an operator first clears it \
                     (POST /admin/hook-secrets/clear)"
                ))
                .into());
            }
        }
        let body = serde_json::json!({ "outcome": "handshake", "source": name }).to_string();
        let answer = Answer {
            status: 200,
            content_type: "application/json".to_owned(),
            body: body.into_bytes(),
        };
        Ok(Received {
            echo: Some((header, echoed)),
            ..Received::handshake(answer)
        })
    }

    /// The secret a handshake offers in `header`, checked: printable text of a length a
    /// secret may have (the scheme's floor).
    fn offered(&self, header: &str, value: &[u8]) -> Result<Secret, SetupRefusal> {
        let malformed = |why: String| SetupRefusal::MalformedSecret(format!("{header}: {why}"));
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
        let scheme = self.source.provider.scheme();
        scheme.check_secret(&secret).map_err(malformed)?;
        Ok(secret)
    }

    /// The source with the secret its handshake stored beside the configured ones; no key
    /// when it has neither (no handshake yet, or cleared). Read on every request: a
    /// cleared secret stops verifying on every instance at once.
    async fn with_stored_secret(&self) -> Result<SourceSettings, SetupRefusal> {
        let source = self.source;
        let stored = hook_secrets::stored(self.pool, source.name.as_str()).await?;
        if stored.is_none() && source.secrets.is_empty() {
            return Err(SetupRefusal::NoKey(format!(
                "source {} holds no secret yet: the webhook's handshake has not reached \
                 Inlet, or an operator cleared its secret",
                source.name
            )));
        }
        let mut source = source.clone();
        source.secrets.extend(stored);
        Ok(source)
    }

    /// The source with the certificate its request names as its one key. A host that
    /// answered it serves none leaves no key (no signature can verify); one that could not
    /// answer is worth asking again once its failure is no longer remembered.
    async fn certified(
        &self,
        fetch: Result<Fetch, SignatureError>,
    ) -> Result<SourceSettings, Refusal> {
        let fetch = fetch?;
        let fetched =
            (self.certificates).certificate(self.source.name.as_str(), &fetch, self.clock);
        let pem = fetched.await.map_err(|error| match error.refused {
            true => SetupRefusal::NoKey(format!(
                "SigningCertURL serves no usable certificate ({})",
                error.why
            )),
            false => SetupRefusal::CertificateUnavailable {
                detail: error.to_string(),
                retry_after: error.remembered_for,
            },
        })?;
        Ok(SourceSettings {
            secrets: vec![pem],
            ..self.source.clone()
        })
    }

    /// Confirms the source's subscription by visiting the URL its confirmation named (once
    /// while its message can verify: a replay is answered from memory).
    pub(super) async fn confirm(&self, visit: &Fetch) -> Result<(), SetupRefusal> {
        let name = self.source.name.as_str();
        let tolerance = self.faults.tolerance(self.source.tolerance);
        let visited = self.certificates.visit(name, visit, self.clock, tolerance);
        visited
            .await
            .map_err(|error: FetchError| SetupRefusal::SubscriptionUnconfirmed {
                detail: format!("the SubscribeURL could not be visited: {error}"),
                retry_after: error.remembered_for,
            })?;
        tracing::info!(source = %name, "SNS subscription confirmed (its SubscribeURL visited)");
        Ok(())
    }

    /// Tells the watcher, if any, what the intake saw.
    pub(super) async fn tell(&self, told: Told<'_>) {
        if let Some(watcher) = self.watcher {
            watcher.tell(told).await;
        }
    }
}
