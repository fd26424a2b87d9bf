//! A configured source: one provider's sender, its secrets, where its identity is read and
//! which facts it keys on objects — validated from its `[[sources]]` table.

use super::record::{ReconcileFile, Reconciliation};
use super::{Provider, SchemeParams};
use crate::duration::HumanDuration;
use crate::error::ConfigError;
use crate::identity::{JsonPointer, Locator, Locators};
use crate::ledger::FactRule;
use crate::secret::Secret;
use crate::signature::{CertificateHosts, Encoding, HeaderToken, HmacScheme, PublicUrl, Sns};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// Default `tolerance_secs` for schemes that sign a timestamp.
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;

/// A source's name, as it appears in the URL path: `[a-z0-9_-]`, 1 to 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceName(String);

impl SourceName {
    /// A name as the database holds it: checked when its source was configured (a row of
    /// a source configured no more keeps its name).
    pub fn stored(name: String) -> Self {
        Self(name)
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(format!(
                "'{name}' is not a valid source name (1-64 of a-z, 0-9, '_' and '-')"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One webhook sender: `POST /webhooks/{name}`.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub name: SourceName,
    pub provider: Provider,
    /// Where the event id, type and fact key are read (provider defaults, overridden).
    pub locators: Locators,
    /// Every one of these verifies (rotation); the first one signs (`inlet sign`).
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
    /// Configured rules first, then the provider's defaults.
    pub fact_rules: Vec<FactRule>,
    /// The event id is unsigned and the fact is not keyed on an unsigned header by
    /// choice, or the scheme signs a reading of the body that other field values produce
    /// too: every event also records its body's fact (kind `body`, the sha256 of what
    /// was signed), so no fresh id or type, and no re-split copy, makes a captured body a
    /// new fact.
    pub keys_body_fact: bool,
    /// The oldest age at which this source can still send a copy, and where that number
    /// comes from.
    pub resend_horizon: (HumanDuration, String),
    /// `[sources.reconcile]`: the provider's own record, read to recover what never
    /// arrived.
    pub reconcile: Option<Reconciliation>,
}

/// `[sources.hmac]`: the generic scheme's parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HmacFile {
    header: String,
    prefix: Option<String>,
    encoding: Option<String>,
    timestamp_header: Option<String>,
    signed_content: Option<String>,
}

/// `[sources.sns]`: the topics an sns source takes and, for tests, where its certificates
/// may come from instead of AWS's SNS hosts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnsFile {
    topics: Vec<String>,
    certificate_hosts: Option<Vec<String>>,
    ca_file: Option<String>,
}

impl SnsFile {
    fn scheme(&self, key: &dyn Fn(&str) -> String) -> Result<Sns, ConfigError> {
        let hosts = match &self.certificate_hosts {
            None => CertificateHosts::Aws,
            Some(hosts) => {
                let host_like = |host: &String| {
                    !host.is_empty()
                        && (host.bytes())
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
                };
                if let Some(host) = hosts.iter().find(|host| !host_like(host)) {
                    return Err(ConfigError::new(
                        key("sns.certificate_hosts"),
                        format!("{host:?} is not a host (name or address, and :port)"),
                    ));
                }
                CertificateHosts::Listed(hosts.clone())
            }
        };
        let roots = (self.ca_file.as_ref())
            .map(|path| {
                std::fs::read(path).map_err(|e| {
                    ConfigError::new(key("sns.ca_file"), format!("cannot read {path}: {e}"))
                })
            })
            .transpose()?;
        Sns::new(self.topics.clone(), hosts, roots).map_err(|m| ConfigError::new(key("sns"), m))
    }
}

/// `[[sources.facts]]`: event types keyed on an object.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactRuleFile {
    types: Vec<String>,
    key: String,
}

/// A source's table as written (its destinations are the delivery module's).
#[derive(Debug)]
pub struct SourceFile {
    pub name: String,
    pub scheme: String,
    pub secrets: Vec<String>,
    pub tolerance_secs: Option<u64>,
    pub facts: Vec<FactRuleFile>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub fact_key: Option<String>,
    pub replay_horizon: Option<String>,
    pub hmac: Option<HmacFile>,
    /// `header_token` sources: the header that carries the token.
    pub token_header: Option<String>,
    /// `square`, `twilio` and `hubspot` sources: the URL registered with the provider (it is signed).
    pub public_url: Option<String>,
    /// `sns` sources: `[sources.sns]`.
    pub sns: Option<SnsFile>,
    /// `[sources.reconcile]`.
    pub reconcile: Option<ReconcileFile>,
}

impl SourceFile {
    /// Validates `sources[index]`; every error names its key.
    pub fn validate(self, index: usize) -> Result<SourceSettings, ConfigError> {
        let key = |field: &str| format!("sources[{index}].{field}");
        let name = SourceName::parse(&self.name).map_err(|m| ConfigError::new(key("name"), m))?;
        let scheme = self.provider(&key)?;
        let secrets = self.secrets(&scheme, &key)?;
        if self.tolerance_secs.is_some() && !scheme.scheme().signs_timestamp() {
            return Err(ConfigError::new(
                key("tolerance_secs"),
                format!(
                    "the {} scheme signs no timestamp, so no tolerance applies",
                    scheme.name()
                ),
            ));
        }
        let locators = self.locators(&scheme, &key)?;
        let keys_body_fact = scheme.signs_a_reading()
            || (!scheme.signs(&locators.event_id)
                && locators.fact_key.as_ref().is_none_or(|l| scheme.signs(l)));
        if self.reconcile.is_some() && self.event_id.is_some() {
            return Err(ConfigError::new(
                key("reconcile"),
                "a source reconciled with its provider's record keys on the provider's own event \
                 id (the join key): remove event_id",
            ));
        }
        let reconcile = (self.reconcile)
            .map(|file| file.validate(index, scheme.name()))
            .transpose()?;
        Ok(SourceSettings {
            reconcile,
            keys_body_fact,
            locators,
            fact_rules: fact_rules(self.facts, &scheme, &key)?,
            resend_horizon: resend_horizon(self.replay_horizon.as_deref(), &scheme, index)?,
            tolerance: Duration::from_secs(
                (self.tolerance_secs)
                    .or(scheme.default_tolerance_secs())
                    .unwrap_or(DEFAULT_TOLERANCE_SECS),
            ),
            name,
            provider: scheme,
            secrets,
        })
    }

    fn provider(&self, key: &dyn Fn(&str) -> String) -> Result<Provider, ConfigError> {
        let hmac = match &self.hmac {
            None => None,
            Some(h) => {
                let encoding = Encoding::parse(h.encoding.as_deref().unwrap_or("hex"))
                    .map_err(|m| ConfigError::new(key("hmac.encoding"), m))?;
                let scheme = HmacScheme::new(
                    h.header.clone(),
                    h.prefix.clone(),
                    encoding,
                    h.timestamp_header.clone(),
                    h.signed_content.clone(),
                )
                .map_err(|(field, m)| ConfigError::new(key(&format!("hmac.{field}")), m))?;
                Some(scheme)
            }
        };
        let token_header = self
            .token_header
            .clone()
            .map(HeaderToken::new)
            .transpose()
            .map_err(|m| ConfigError::new(key("token_header"), m))?;
        let public_url = self
            .public_url
            .clone()
            .map(PublicUrl::parse)
            .transpose()
            .map_err(|m| ConfigError::new(key("public_url"), m))?;
        let sns = (self.sns.as_ref())
            .map(|file| file.scheme(key))
            .transpose()?;
        let params = SchemeParams {
            hmac,
            token_header,
            public_url,
            sns,
        };
        Provider::named(&self.scheme, params).map_err(|m| ConfigError::new(key("scheme"), m))
    }

    fn secrets(
        &self,
        scheme: &Provider,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Vec<Secret>, ConfigError> {
        let keyless = scheme.secret_by_handshake().is_some() || scheme.verifies_with_certificate();
        if self.secrets.is_empty() && !keyless {
            return Err(ConfigError::new(
                key("secrets"),
                "at least one secret is required (unsigned webhooks are never accepted)",
            ));
        }
        let mut secrets = Vec::with_capacity(self.secrets.len());
        for (i, reference) in self.secrets.iter().enumerate() {
            let field = key(&format!("secrets[{i}]"));
            let secret = Secret::resolve(reference).map_err(|m| ConfigError::new(&field, m))?;
            scheme
                .scheme()
                .check_secret(&secret)
                .map_err(|m| ConfigError::new(&field, m))?;
            secrets.push(secret);
        }
        Ok(secrets)
    }

    /// The provider's locators with the source's overrides. Where the event id comes from
    /// a header the scheme does not sign, the fact is keyed on the body's digest: whoever
    /// holds a captured request could otherwise re-send its signed body under a fresh id.
    fn locators(
        &self,
        scheme: &Provider,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Locators, ConfigError> {
        let locator = |field: &str, value: &str| {
            Locator::parse(value).map_err(|m| ConfigError::new(key(field), m))
        };
        let configured_id = self
            .event_id
            .as_deref()
            .map(|value| locator("event_id", value))
            .transpose()?;
        let mut locators = match (scheme.default_locators(), configured_id) {
            (Some(mut defaults), Some(event_id)) => {
                defaults.event_id = event_id;
                defaults
            }
            (Some(defaults), None) => defaults,
            (None, Some(event_id)) => Locators {
                event_id,
                event_type: None,
                fact_key: None,
                form_requires_fact: false,
            },
            (None, None) => {
                return Err(ConfigError::new(
                    key("event_id"),
                    format!(
                        "the {} scheme needs event_id (\"header:NAME\" or \"json:/pointer\")",
                        scheme.name()
                    ),
                ))
            }
        };
        if let Some(value) = &self.event_type {
            locators.event_type = Some(locator("event_type", value)?);
        }
        match &self.fact_key {
            Some(value) => locators.fact_key = Some(locator("fact_key", value)?),
            None if !scheme.signs(&locators.event_id) => {
                locators.fact_key = Some(Locator::BodyDigest);
            }
            None => {}
        }
        Ok(locators)
    }
}

/// The configured rules, then the provider's.
fn fact_rules(
    files: Vec<FactRuleFile>,
    scheme: &Provider,
    key: &dyn Fn(&str) -> String,
) -> Result<Vec<FactRule>, ConfigError> {
    let mut rules = Vec::with_capacity(files.len());
    for (i, file) in files.into_iter().enumerate() {
        let types_key = key(&format!("facts[{i}].types"));
        if file.types.is_empty() {
            return Err(ConfigError::new(types_key, "names no event type"));
        }
        let pointer = JsonPointer::parse(&file.key)
            .map_err(|m| ConfigError::new(key(&format!("facts[{i}].key")), m))?;
        let rule = FactRule::new(file.types, pointer);
        if let Some(update_like) = rule.update_like_type() {
            return Err(ConfigError::new(
                types_key,
                format!(
                    "'{update_like}' is an update: distinct updates of one object are distinct \
                     facts, so it must not be keyed on the object alone"
                ),
            ));
        }
        rules.push(rule);
    }
    rules.extend(scheme.default_fact_rules());
    Ok(rules)
}

/// The source's own horizon, or its provider's documented one.
fn resend_horizon(
    configured: Option<&str>,
    scheme: &Provider,
    index: usize,
) -> Result<(HumanDuration, String), ConfigError> {
    let key = format!("sources[{index}].replay_horizon");
    match (configured, scheme.resend_horizon()) {
        (Some(value), _) => Ok((
            HumanDuration::parse(value).map_err(|m| ConfigError::new(&key, m))?,
            format!("configuration ({key})"),
        )),
        (None, Some((value, origin))) => Ok((
            HumanDuration(value),
            format!("{} default: {origin}", scheme.name()),
        )),
        (None, None) => Err(ConfigError::new(
            key,
            format!(
                "the {} scheme has no documented retry window: state how late a copy can \
                 arrive (e.g. replay_horizon = \"3d\")",
                scheme.name()
            ),
        )),
    }
}
