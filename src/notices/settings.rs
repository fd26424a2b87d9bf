//! `[notices]`: where Inlet's own events go, in which form, and which of them.

use crate::delivery::{DestinationFile, DestinationSettings};
use crate::duration::span;
use crate::error::ConfigError;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// The source every notice is an event of. No `[[sources]]` may take the name, so no
/// request can post to it: notices are written by Inlet alone.
pub const SOURCE: &str = "inlet";
/// The notices destination's name (under [`SOURCE`]).
pub const DESTINATION: &str = "notices";

/// Dead letters (of every destination but the notices one) that must be passed for a
/// `dead_letters.over_threshold` notice.
pub const DEFAULT_DEAD_LETTER_THRESHOLD: u32 = 100;
/// How often each instance looks at what no transaction tells it (a stalled sweeper,
/// the number of dead letters, a window's dead letters not told yet).
pub const DEFAULT_CHECK_INTERVAL: &str = "30s";
/// The span within which one destination's dead letters make one notice.
pub const DEFAULT_WINDOW: &str = "1m";

/// The header every delivery carries its source in: a notice's says [`SOURCE`], which no
/// configured source may be called, so it marks a notice wherever it arrives — at one of
/// Inlet's own sources too, where its dead letters are never told of again.
pub const MARKER_HEADER: &str = "Inlet-Source";

/// Whether `headers` (as received, or as stored) carry the mark of a notice's delivery:
/// an event that is itself a notice, sent back to Inlet.
pub fn is_notice_delivery<'a>(headers: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> bool {
    headers
        .into_iter()
        .any(|(name, value)| name.eq_ignore_ascii_case(MARKER_HEADER) && value == SOURCE.as_bytes())
}

/// The Slack form: the stored notice is the canonical JSON; a Slack incoming webhook is
/// sent its summary as `text` and one `mrkdwn` section block. `&`, `<` and `>` are
/// escaped as Slack asks, and the event id — the sender's text, the one value of a
/// request a summary quotes — is set in a code span wherever it appears, so its `*`,
/// `_`, `~` and links show as typed and `<!channel>` pings nobody; a backtick of its own,
/// which would end the span (mrkdwn has no escape for it), is shown as `ˋ` (U+02CB).
/// Written in jq, as any transform: it runs in the evaluator processes like the others.
pub const SLACK_TRANSFORM: &str = r#"def esc: gsub("&"; "&amp;") | gsub("<"; "&lt;") | gsub(">"; "&gt;");
def code: "`" + (gsub("`"; "ˋ") | esc) + "`";
(.event_id | if type == "string" and . != "" then . else null end) as $id
| (if $id == null then .summary | esc else .summary | split($id) | map(esc) | join($id | code) end) as $text
| {text: ("[Inlet] " + $text), blocks: [{type: "section", text: {type: "mrkdwn", text: ("*" + .type + "*\n" + $text)}}]}"#;

/// What Inlet tells about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoticeType {
    BreakerOpened,
    BreakerClosed,
    DeliveryDeadLettered,
    DeadLettersOverThreshold,
    ReloadRefused,
    FingerprintMismatch,
    SweeperStalled,
    HookSecretEstablished,
    HookSecretRefused,
    ReconcileFailed,
}

impl NoticeType {
    pub const ALL: [NoticeType; 10] = [
        Self::BreakerOpened,
        Self::BreakerClosed,
        Self::DeliveryDeadLettered,
        Self::DeadLettersOverThreshold,
        Self::ReloadRefused,
        Self::FingerprintMismatch,
        Self::SweeperStalled,
        Self::HookSecretEstablished,
        Self::HookSecretRefused,
        Self::ReconcileFailed,
    ];

    /// The event type of the notice (`breaker.opened`), as `types` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BreakerOpened => "breaker.opened",
            Self::BreakerClosed => "breaker.closed",
            Self::DeliveryDeadLettered => "delivery.dead_lettered",
            Self::DeadLettersOverThreshold => "dead_letters.over_threshold",
            Self::ReloadRefused => "config.reload_refused",
            Self::FingerprintMismatch => "event.fingerprint_mismatch",
            Self::SweeperStalled => "sweeper.stalled",
            Self::HookSecretEstablished => "hook_secret.established",
            Self::HookSecretRefused => "hook_secret.refused",
            Self::ReconcileFailed => "reconcile.failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// The body a notice is sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The canonical JSON notice, as stored.
    Standard,
    /// Slack's incoming-webhook form (`text` and `blocks`), by [`SLACK_TRANSFORM`].
    Slack,
}

/// `[notices]` as written, but for the destination's own keys (`url`, `secret`,
/// `timeout`, retries, `breaker`, …), which the configuration hands over beside it.
#[derive(Debug, Deserialize, Default)]
pub struct NoticesFile {
    format: Option<String>,
    types: Option<Vec<String>>,
    dead_letter_threshold: Option<u32>,
    check_interval: Option<String>,
    window: Option<String>,
}

impl NoticesFile {
    /// The keys above, for the list of keys `[notices]` accepts.
    pub const KEYS: [&'static str; 5] = [
        "format",
        "types",
        "dead_letter_threshold",
        "check_interval",
        "window",
    ];
}

/// Operational notices, validated.
#[derive(Debug, Clone)]
pub struct NoticeSettings {
    /// An ordinary destination of the source [`SOURCE`], named [`DESTINATION`].
    pub destination: DestinationSettings,
    pub format: Format,
    /// The notice types sent (every one unless `types` says otherwise).
    pub types: BTreeSet<NoticeType>,
    pub dead_letter_threshold: u32,
    pub check_interval: Duration,
    /// One `delivery.dead_lettered` notice per destination per window, with the count of
    /// the dead letters it stands for.
    pub window: Duration,
}

impl NoticeSettings {
    pub fn sends(&self, kind: NoticeType) -> bool {
        self.types.contains(&kind)
    }
}

impl NoticesFile {
    /// `[notices]` with its destination's keys (`destination`); errors name the key
    /// (`notices.types[1]`).
    pub fn validate(self, destination: DestinationFile) -> Result<NoticeSettings, ConfigError> {
        let format = match self.format.as_deref() {
            None | Some("standard") => Format::Standard,
            Some("slack") => Format::Slack,
            Some(other) => {
                return Err(ConfigError::new(
                    "notices.format",
                    format!("'{other}' is not a format: standard or slack"),
                ))
            }
        };
        let transform =
            match format {
                Format::Standard => None,
                Format::Slack => Some(crate::jq::compile(SLACK_TRANSFORM).map_err(|e| {
                    ConfigError::new("notices.format", format!("the Slack form: {e}"))
                })?),
            };
        let destination = destination.validate_own("notices", DESTINATION, transform)?;
        let threshold = self
            .dead_letter_threshold
            .unwrap_or(DEFAULT_DEAD_LETTER_THRESHOLD);
        if threshold == 0 {
            return Err(ConfigError::new(
                "notices.dead_letter_threshold",
                "must be at least 1 (delivery.dead_lettered tells of every dead letter)",
            ));
        }
        let check_interval = positive_span(
            "notices.check_interval",
            self.check_interval.as_deref(),
            DEFAULT_CHECK_INTERVAL,
        )?;
        let window = positive_span("notices.window", self.window.as_deref(), DEFAULT_WINDOW)?;
        if window < Duration::from_secs(1) || window > Duration::from_secs(86_400) {
            return Err(ConfigError::new(
                "notices.window",
                "must be between 1s and 1d (one notice per destination per window)",
            ));
        }
        Ok(NoticeSettings {
            destination,
            format,
            types: parse_types(self.types)?,
            dead_letter_threshold: threshold,
            check_interval,
            window,
        })
    }
}

/// The span at `key` (`default` when absent), longer than 0.
fn positive_span(key: &str, value: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    let parsed = span(key, value, default)?;
    if parsed.is_zero() {
        return Err(ConfigError::new(key, "must be longer than 0"));
    }
    Ok(parsed)
}

/// `types`: every type when absent; each entry a known type, once.
fn parse_types(types: Option<Vec<String>>) -> Result<BTreeSet<NoticeType>, ConfigError> {
    let Some(types) = types else {
        return Ok(NoticeType::ALL.into_iter().collect());
    };
    let mut parsed = BTreeSet::new();
    for (i, text) in types.iter().enumerate() {
        let key = format!("notices.types[{i}]");
        let kind = NoticeType::parse(text).ok_or_else(|| {
            let known: Vec<&str> = NoticeType::ALL.iter().map(|t| t.as_str()).collect();
            ConfigError::new(
                &key,
                format!("'{text}' is not a notice type: {}", known.join(", ")),
            )
        })?;
        if !parsed.insert(kind) {
            return Err(ConfigError::new(key, format!("'{text}' is listed twice")));
        }
    }
    Ok(parsed)
}
