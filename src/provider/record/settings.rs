//! `[sources.reconcile]`: which API holds the source's record, how to call it, and how a
//! run reads it — validated with the source it belongs to.

use super::github::{GitHubDeliveries, Hook};
use super::paddle::PaddleNotifications;
use super::stripe::StripeEvents;
use super::{ApiClient, ApiError, ProviderRecord};
use crate::duration::HumanDuration;
use crate::error::ConfigError;
use crate::secret::Secret;
use chrono::{DateTime, Timelike, Utc};
use serde::Deserialize;
use std::time::Duration;

/// The longest default lookback (Paddle keeps 90 days; a source may look that far when
/// its events are kept longer).
const DEFAULT_LOOKBACK_CAP: Duration = Duration::from_secs(30 * 86_400);

/// `[sources.reconcile]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileFile {
    api: String,
    api_url: Option<String>,
    credential: String,
    interval: Option<String>,
    lookback: Option<String>,
    settle: Option<String>,
    mode: Option<String>,
    /// Stripe: only these event types.
    types: Option<Vec<String>>,
    /// GitHub: `repos/OWNER/REPO/hooks/ID`, `orgs/ORG/hooks/ID` or `app`.
    hook: Option<String>,
    /// GitHub, `hook = "app"`: the App's id (the credential is its private key).
    app_id: Option<String>,
    /// Paddle: the notification destination that points at Inlet.
    notification_setting: Option<String>,
}

/// What a run does with what it finds missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileMode {
    /// Recover it: ask the provider to resend it, or claim it as fetched.
    Recover,
    /// List it, change nothing.
    Report,
}

impl ReconcileMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recover => "recover",
            Self::Report => "report",
        }
    }
}

/// A source's reconciliation, validated.
#[derive(Debug, Clone)]
pub struct Reconciliation {
    pub api: RecordApi,
    /// How often a scheduled run starts.
    pub interval: Duration,
    /// How far back a run looks (at most what the API keeps).
    pub lookback: Duration,
    /// An event younger than this is not missing yet.
    pub settle: Duration,
    pub mode: ReconcileMode,
}

/// The API that holds a source's record, with how to call it.
#[derive(Debug, Clone)]
pub enum RecordApi {
    Stripe(StripeEvents),
    GitHub(GitHubDeliveries),
    Paddle(PaddleNotifications),
}

impl RecordApi {
    /// The record's own API.
    pub fn record(&self) -> &dyn ProviderRecord {
        match self {
            Self::Stripe(api) => api,
            Self::GitHub(api) => api,
            Self::Paddle(api) => api,
        }
    }

    /// A client of the API for a run starting `now` (a GitHub App's token is made now).
    pub fn client(&self) -> Result<ApiClient, ApiError> {
        match self {
            Self::Stripe(api) => api.client(),
            Self::GitHub(api) => api.client(Utc::now()),
            Self::Paddle(api) => api.client(),
        }
    }

    /// `api` authorized afresh for the next page: a GitHub App's token is signed as it is
    /// made and lasts minutes; every other credential stays as it is.
    pub fn reauthorize(&self, api: &mut ApiClient) -> Result<(), ApiError> {
        if let Self::GitHub(github) = self {
            api.set_authorization(github.authorization(Utc::now())?);
        }
        Ok(())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Stripe(_) => "stripe",
            Self::GitHub(_) => "github",
            Self::Paddle(_) => "paddle",
        }
    }

    /// How long the provider keeps its record (and so the longest lookback).
    pub fn keeps(name: &str) -> Option<Duration> {
        let days = |n: u64| Duration::from_secs(n * 86_400);
        match name {
            "stripe" => Some(days(30)),
            "github" => Some(days(3)),
            "paddle" => Some(days(90)),
            _ => None,
        }
    }

    fn default_url(name: &str) -> &'static str {
        match name {
            "stripe" => "https://api.stripe.com",
            "github" => "https://api.github.com",
            _ => "https://api.paddle.com",
        }
    }
}

/// The window a run looks at: from `lookback` before `now` (or from where the last clean
/// run ended, when later; or `since` before `now`) to `settle` before `now`, in whole
/// seconds (what the providers' time filters take: a mark of a fraction of a second would
/// leave its second's events out of both the window before and the one after).
pub fn window_of(
    reconciliation: &Reconciliation,
    now: DateTime<Utc>,
    since: Option<Duration>,
    checked_until: Option<DateTime<Utc>>,
) -> super::Window {
    let now = now.with_nanosecond(0).unwrap_or(now);
    let ago = |span: Duration| {
        let span = chrono::Duration::from_std(span).unwrap_or(chrono::Duration::MAX);
        now.checked_sub_signed(span)
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    };
    let earliest = ago(since
        .unwrap_or(reconciliation.lookback)
        .min(reconciliation.lookback));
    let from = match (since, checked_until) {
        (None, Some(checked)) if checked > earliest => checked,
        _ => earliest,
    };
    let from = from.with_nanosecond(0).unwrap_or(from);
    let to = ago(reconciliation.settle).max(from);
    super::Window { from, to }
}

impl ReconcileFile {
    /// Validates the table of `sources[index]`, whose provider is `provider`.
    pub fn validate(self, index: usize, provider: &str) -> Result<Reconciliation, ConfigError> {
        let key = |field: &str| format!("sources[{index}].reconcile.{field}");
        let keeps = RecordApi::keeps(&self.api).ok_or_else(|| {
            ConfigError::new(
                key("api"),
                format!(
                    "'{}' is not a record Inlet reads (stripe, github or paddle)",
                    self.api
                ),
            )
        })?;
        if self.api != provider {
            return Err(ConfigError::new(
                key("api"),
                format!("the {} api cannot reconcile a {provider} source", self.api),
            ));
        }
        let duration = |field: &str, value: &Option<String>, default: Duration| match value {
            None => Ok(default),
            Some(text) => HumanDuration::parse(text)
                .map(|d| d.0)
                .map_err(|m| ConfigError::new(key(field), m)),
        };
        let interval = duration("interval", &self.interval, Duration::from_secs(600))?;
        // What the provider keeps, at most 30 days: the events a run may look for are
        // still stored (retention.events, 35 days by default, is checked against it).
        let lookback = duration("lookback", &self.lookback, keeps.min(DEFAULT_LOOKBACK_CAP))?;
        let settle = duration("settle", &self.settle, Duration::from_secs(300))?;
        check_spans(&key, interval, lookback, settle, keeps, &self.api)?;
        let mode = match self.mode.as_deref() {
            None | Some("recover") => ReconcileMode::Recover,
            Some("report") => ReconcileMode::Report,
            Some(other) => {
                return Err(ConfigError::new(
                    key("mode"),
                    format!("'{other}' is not a mode (recover or report)"),
                ))
            }
        };
        let api = self.api(&key)?;
        Ok(Reconciliation {
            api,
            interval,
            lookback,
            settle,
            mode,
        })
    }

    /// Each API's own keys only on a source of that API.
    fn check_own_keys(&self, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        let own = [
            ("types", self.types.is_some(), "stripe"),
            ("hook", self.hook.is_some(), "github"),
            ("app_id", self.app_id.is_some(), "github"),
            (
                "notification_setting",
                self.notification_setting.is_some(),
                "paddle",
            ),
        ];
        match own
            .into_iter()
            .find(|(_, set, api)| *set && self.api != *api)
        {
            Some((field, _, api)) => Err(ConfigError::new(
                key(field),
                format!("applies to the {api} api only"),
            )),
            None => Ok(()),
        }
    }

    /// The API's own settings: only its keys, each as it needs.
    fn api(self, key: &dyn Fn(&str) -> String) -> Result<RecordApi, ConfigError> {
        let url = self.api_url.clone();
        let url = url.unwrap_or_else(|| RecordApi::default_url(&self.api).to_owned());
        check_url(&url).map_err(|m| ConfigError::new(key("api_url"), m))?;
        if self.api == "stripe" {
            check_stripe_types(self.types.as_deref())
                .map_err(|m| ConfigError::new(key("types"), m))?;
        }
        let credential = Secret::resolve(&self.credential)
            .map_err(|m| ConfigError::new(key("credential"), m))?;
        if credential.expose().trim().is_empty() {
            return Err(ConfigError::new(key("credential"), "is empty"));
        }
        self.check_own_keys(key)?;
        Ok(match self.api.as_str() {
            "stripe" => RecordApi::Stripe(StripeEvents::new(url, credential, self.types)),
            "github" => {
                let hook = Hook::parse(self.hook.as_deref(), self.app_id, &credential)
                    .map_err(|(field, m)| ConfigError::new(key(field), m))?;
                RecordApi::GitHub(GitHubDeliveries::new(url, credential, hook))
            }
            _ => {
                let setting = self
                    .notification_setting
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        ConfigError::new(
                            key("notification_setting"),
                            "is required: the id (ntfset_…) of the notification destination that \
                             points at Inlet (a replay goes to its notification's own destination)",
                        )
                    })?;
                RecordApi::Paddle(PaddleNotifications::new(url, credential, setting))
            }
        })
    }
}

/// An `https://` URL (`http://` only to this machine: a recovered event is trusted for
/// the authenticated call over TLS that fetched it).
fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let host = url.strip_prefix("http://").map(|rest| {
        let authority = rest.split('/').next().unwrap_or_default();
        match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        }
    });
    match host {
        Some("127.0.0.1" | "localhost" | "::1") => Ok(()),
        Some(_) => Err("must be https:// (http:// only to this machine): a recovered event is trusted for the authenticated call over TLS that fetched it".to_owned()),
        None => Err("must be an https:// URL".to_owned()),
    }
}

/// Stripe lists every endpoint's undelivered events: a source recovers only the types its
/// endpoint is subscribed to, at most 20 (Stripe's `types[]` limit).
fn check_stripe_types(types: Option<&[String]>) -> Result<(), String> {
    match types {
        None | Some([]) => Err(
            "is required for the stripe api: the event types this endpoint is subscribed to \
             (Stripe lists every endpoint's undelivered events)"
                .to_owned(),
        ),
        Some(types) if types.len() > 20 => Err(format!(
            "names {} types; Stripe filters on at most 20",
            types.len()
        )),
        Some(types) => match types.iter().find(|t| t.is_empty() || t.contains('*')) {
            Some(bad) => Err(format!("{bad:?} is not an event type (no wildcards)")),
            None => Ok(()),
        },
    }
}

/// The spans make sense together and with what the provider keeps.
fn check_spans(
    key: &dyn Fn(&str) -> String,
    interval: Duration,
    lookback: Duration,
    settle: Duration,
    keeps: Duration,
    api: &str,
) -> Result<(), ConfigError> {
    let human = |d: Duration| HumanDuration(d).to_string();
    if interval < Duration::from_secs(60) {
        return Err(ConfigError::new(key("interval"), "must be at least 1m"));
    }
    if lookback > keeps {
        return Err(ConfigError::new(
            key("lookback"),
            format!(
                "the {api} api keeps its record for {}: a run cannot look further back",
                human(keeps)
            ),
        ));
    }
    if settle >= lookback {
        return Err(ConfigError::new(
            key("settle"),
            format!("must be shorter than lookback ({})", human(lookback)),
        ));
    }
    Ok(())
}
