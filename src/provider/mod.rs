//! Each provider's profile — which signature scheme it uses, where its event id, type and
//! fact key live, how late it can send a copy (its replay horizon), the fact rules that
//! hold for all its sources, and the setup handshake it expects — as one table
//! ([`PROFILES`]) read by one code path ([`Provider`]). Mostly data; the signature
//! arithmetic lives in [`crate::signature`].
//!
//! A *source* is one configured sender of a provider: `POST /webhooks/{name}`.

pub mod fingerprint;
mod handshake;
mod profiles;
pub mod record;
mod source;

pub use profiles::{
    Challenge, Configured, Place, Places, Profile, Signing, PADDLE_ONCE_PER_OBJECT_TYPES, PROFILES,
    SQUARE_ONCE_PER_OBJECT_TYPES, STRIPE_ONCE_PER_OBJECT_TYPES,
};
pub use source::{FactRuleFile, HmacFile, SnsFile, SourceFile, SourceName, SourceSettings};

use crate::idempotency::Answer;
use crate::identity::{JsonPointer, Locator, Locators};
use crate::ledger::FactRule;
use crate::secret::Secret;
use crate::signature::{HeaderToken, HmacScheme, PublicUrl, Scheme, Sns, Verified};
use std::time::Duration;

/// A source's provider: its profile, and the scheme built from the source's own
/// parameters where the profile's needs some.
#[derive(Debug, Clone)]
pub struct Provider {
    profile: &'static Profile,
    configured: Option<Configured>,
}

impl PartialEq for Provider {
    fn eq(&self, other: &Self) -> bool {
        self.profile.name == other.profile.name && self.configured == other.configured
    }
}

impl Eq for Provider {}

/// The parameters a source's table may give its scheme.
#[derive(Debug, Default)]
pub struct SchemeParams {
    pub hmac: Option<HmacScheme>,
    pub token_header: Option<HeaderToken>,
    pub public_url: Option<PublicUrl>,
    pub sns: Option<Sns>,
}

/// The scheme names accepted in `sources[].scheme`.
pub fn scheme_names() -> impl Iterator<Item = &'static str> {
    PROFILES.iter().map(|profile| profile.name)
}

fn names_of(signing: fn(&Signing) -> bool) -> String {
    let names: Vec<&str> = PROFILES
        .iter()
        .filter(|profile| signing(&profile.signing))
        .map(|profile| profile.name)
        .collect();
    names.join(" or ")
}

impl Provider {
    /// The provider named `name`, with the parameters its scheme needs (`hmac` its
    /// table, `header_token` its header, `square`, `twilio` and `hubspot` the URL they sign) and no
    /// others.
    pub fn named(name: &str, params: SchemeParams) -> Result<Self, String> {
        let profile = profiles::profile(name).ok_or_else(|| {
            let known: Vec<&str> = scheme_names().collect();
            format!("unknown scheme '{name}' (supported: {})", known.join(", "))
        })?;
        let signing = &profile.signing;
        if params.public_url.is_some() && !matches!(signing, Signing::PublicUrl(_)) {
            return Err(format!(
                "public_url applies only to scheme = {}, not {name}",
                names_of(|s| matches!(s, Signing::PublicUrl(_)))
            ));
        }
        if params.hmac.is_some() && !matches!(signing, Signing::Hmac) {
            return Err(format!(
                "[sources.hmac] applies only to scheme = \"hmac\", not {name}"
            ));
        }
        if params.token_header.is_some() && !matches!(signing, Signing::HeaderToken) {
            return Err(format!(
                "token_header applies only to scheme = \"header_token\", not {name}"
            ));
        }
        if params.sns.is_some() && !matches!(signing, Signing::Certificate) {
            return Err(format!(
                "[sources.sns] applies only to scheme = \"sns\", not {name}"
            ));
        }
        let configured = match *signing {
            Signing::Fixed(_) => None,
            Signing::PublicUrl(build) => Some(build(params.public_url.ok_or_else(|| {
                format!(
                    "the {name} scheme needs public_url = \"https://…\", the URL registered \
                     with the provider, exactly as registered (it is signed)"
                )
            })?)),
            Signing::Hmac => Some(Configured::Hmac(params.hmac.ok_or(
                "the hmac scheme needs a [sources.hmac] table (header, encoding, …)",
            )?)),
            Signing::HeaderToken => {
                Some(Configured::HeaderToken(params.token_header.ok_or(
                    "the header_token scheme needs token_header = \"NAME\"",
                )?))
            }
            Signing::Certificate => Some(Configured::Sns(params.sns.ok_or(
                "the sns scheme needs a [sources.sns] table with the topics it takes \
                 (topics = [\"arn:aws:sns:…\"])",
            )?)),
        };
        Ok(Self {
            profile,
            configured,
        })
    }

    pub fn name(&self) -> &'static str {
        self.profile.name
    }

    /// The signature scheme that verifies and signs this provider's requests.
    pub fn scheme(&self) -> &dyn Scheme {
        match (&self.configured, self.profile.signing) {
            (Some(configured), _) => configured.scheme(),
            (None, Signing::Fixed(scheme)) => scheme,
            // `named` builds every other kind of scheme.
            (None, _) => unreachable!("a configured scheme without its parameters"),
        }
    }

    /// Where the event id, type and fact key are found by default; `None` for generic
    /// hmac and token sources, which must say where their event id is.
    pub fn default_locators(&self) -> Option<Locators> {
        let places = self.profile.places?;
        Some(Locators {
            event_id: locator(places.event_id),
            event_type: places.event_type.map(locator),
            fact_key: places.fact_key.map(locator),
            form_requires_fact: places.form_requires_fact,
        })
    }

    /// How late a copy of an event can still arrive from this provider, and why; `None`
    /// when it has no documented window (generic hmac and token sources).
    pub fn resend_horizon(&self) -> Option<(Duration, &'static str)> {
        self.profile.horizon
    }

    /// For schemes that only authenticate the sender (nothing is signed), what that means;
    /// printed by `inlet check-config` and logged at startup.
    pub fn authenticates_sender_only(&self) -> Option<&'static str> {
        self.profile.sender_only
    }

    /// The header that carries a shared credential (never stored or shown), for schemes
    /// that authenticate with one.
    pub fn credential_header(&self) -> Option<&str> {
        match &self.configured {
            Some(Configured::HeaderToken(scheme)) => Some(scheme.header()),
            _ => self.profile.credential_header,
        }
    }

    /// Fact rules that apply to every source of this provider.
    pub fn default_fact_rules(&self) -> Vec<FactRule> {
        self.profile
            .once_per_object
            .map(|(types, pointer)| {
                FactRule::new(
                    types.iter().map(|t| (*t).to_owned()).collect(),
                    JsonPointer::parse(pointer).unwrap_or_else(|_| unreachable!("a valid pointer")),
                )
            })
            .into_iter()
            .collect()
    }

    /// A verified request that is part of the provider's setup protocol rather than an
    /// event (Slack's `url_verification`, Zoom's `endpoint.url_validation`, Discord's
    /// PING): answered directly, never stored.
    pub fn handshake(&self, request: &Verified<'_>, secrets: &[Secret]) -> Option<Answer> {
        self.profile.handshake?(request, secrets)
    }

    /// The answer to an unauthenticated request that validates the endpoint (Graph's
    /// `?validationToken=`), from the URL's query string, before any verification (`Err`:
    /// why it is refused); `None` when the request is no such thing.
    pub fn validation(&self, query: &str) -> Option<Result<Answer, String>> {
        self.profile.validation?(query)
    }

    /// The answer to the provider's unsigned `GET` verification of the endpoint, from the
    /// URL's query string (`Err`: why it is refused); `None` when the provider sends none,
    /// and its sources answer no `GET`.
    pub fn challenge(&self, query: &str) -> Option<Result<Answer, String>> {
        Some(self.profile.challenge?(query))
    }

    /// An event's fingerprint: what its signature covers, or where the provider's
    /// legitimate copies differ in their bytes, the digest of its canonical form (from
    /// `document`, the body as the request's identity parsed it) — then with the raw body's
    /// digest beside it, which rows stored before hold.
    pub fn fingerprint(
        &self,
        request: &Verified<'_>,
        document: Option<&serde_json::Value>,
    ) -> (String, Option<String>) {
        let raw = request.content_digest();
        let canonical = self.profile.fingerprint.zip(document);
        match canonical.and_then(|(fingerprint, document)| fingerprint(document)) {
            Some(canonical) => (canonical, Some(raw)),
            None => (raw, None),
        }
    }

    /// Whether the provider verifies the endpoint with a `GET` (its sources answer one).
    pub fn answers_get(&self) -> bool {
        self.profile.challenge.is_some()
    }

    /// The answer the provider needs for an event in place of Inlet's receipt, stored and
    /// replayed like it (a Discord interaction's deferred response). `None`: the receipt.
    pub fn event_answer(&self, request: &Verified<'_>) -> Option<Answer> {
        self.profile.event_answer?(request)
    }

    /// The header in which the provider sends, once, the secret it will sign with (Asana's
    /// `X-Hook-Secret`); `None` for providers whose secret is configured.
    pub fn secret_by_handshake(&self) -> Option<&'static str> {
        self.profile.secret_by_handshake
    }

    /// Whether requests are verified with a certificate they name (SNS), not with
    /// configured secrets.
    pub fn verifies_with_certificate(&self) -> bool {
        matches!(self.profile.signing, Signing::Certificate)
    }

    /// The tolerance of a signed timestamp when the source sets none, where the provider
    /// needs another than the common default (SNS).
    pub fn default_tolerance_secs(&self) -> Option<u64> {
        self.profile.tolerance_secs
    }

    /// Whether the signature covers a reading of the body rather than its bytes — one
    /// that other field values can produce too (Twilio runs the sorted parameters
    /// together: `MessageStatus=deliveredSmsSidSM1` reads as `MessageStatus=delivered`
    /// followed by `SmsSid=SM1`). Every event of such a source also records what was
    /// signed as a permanent fact, so no re-split copy is a new fact, even once its event
    /// has expired.
    pub fn signs_a_reading(&self) -> bool {
        self.profile.signs_a_reading
    }

    /// Whether a value read through `locator` is covered by the signature: the body is
    /// always signed, a header only when the scheme signs it.
    pub fn signs(&self, locator: &Locator) -> bool {
        match locator {
            Locator::Header(names) => names.iter().all(|name| {
                self.scheme()
                    .signed_headers()
                    .iter()
                    .any(|signed| signed.eq_ignore_ascii_case(name))
            }),
            Locator::Json(_)
            | Locator::Form(_)
            | Locator::FormOrMarked { .. }
            | Locator::BodyDigest
            | Locator::SignedType => true,
        }
    }
}

/// A profile's place as the locator a source reads it with.
fn locator(place: Place) -> Locator {
    match place {
        Place::Json(pointer) => Locator::json(pointer),
        Place::Headers(names) => Locator::Header(names.iter().map(|n| (*n).to_owned()).collect()),
        Place::Form(field) => Locator::Form(field.to_owned()),
        Place::FormOrMarked(field, marker, value) => Locator::FormOrMarked {
            field: field.to_owned(),
            marker: marker.to_owned(),
            value: value.to_owned(),
        },
        Place::BodyDigest => Locator::BodyDigest,
        Place::SignedType => Locator::SignedType,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> Result<Provider, String> {
        Provider::named(name, SchemeParams::default())
    }

    #[test]
    fn scheme_names_round_trip() {
        let configured = ["hmac", "header_token", "square", "twilio", "hubspot", "sns"];
        for name in scheme_names().filter(|n| !configured.contains(n)) {
            assert_eq!(named(name).unwrap().name(), name);
        }
        for name in configured {
            assert!(named(name).is_err(), "{name}");
        }
        let token = HeaderToken::new("X-Token".to_owned()).unwrap();
        let with_token = |name| {
            Provider::named(
                name,
                SchemeParams {
                    token_header: Some(token.clone()),
                    ..SchemeParams::default()
                },
            )
        };
        assert_eq!(with_token("header_token").unwrap().name(), "header_token");
        assert!(with_token("github").is_err());
        let url = PublicUrl::parse("https://example.com/hook".to_owned()).unwrap();
        let with_url = |name| {
            Provider::named(
                name,
                SchemeParams {
                    public_url: Some(url.clone()),
                    ..SchemeParams::default()
                },
            )
        };
        for name in ["square", "twilio", "hubspot"] {
            assert_eq!(with_url(name).unwrap().name(), name);
        }
        assert!(with_url("stripe").is_err());
        assert!(named("paypal").is_err());
    }

    #[test]
    fn every_profile_is_whole() {
        let mut names: Vec<&str> = scheme_names().collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PROFILES.len(), "a provider is listed twice");
        for profile in &PROFILES {
            // A provider with default places has a documented horizon, and the reverse.
            assert_eq!(
                profile.places.is_some(),
                profile.horizon.is_some(),
                "{}",
                profile.name
            );
            if let Some((types, pointer)) = profile.once_per_object {
                assert!(
                    !types.is_empty() && pointer.starts_with('/'),
                    "{}",
                    profile.name
                );
                assert!(
                    types.iter().all(|t| !t.ends_with(".updated")),
                    "{}",
                    profile.name
                );
            }
            if let Some(Places {
                event_id: Place::Json(p),
                ..
            }) = profile.places
            {
                assert!(p.starts_with('/'), "{}", profile.name);
            }
        }
    }

    #[test]
    fn only_signed_headers_count_as_signed() {
        let standard = named("standard").unwrap();
        let github = named("github").unwrap();
        assert!(standard.signs(&Locator::Header(vec!["webhook-id".to_owned()])));
        assert!(!github.signs(&Locator::Header(vec!["X-GitHub-Delivery".to_owned()])));
        assert!(github.signs(&Locator::json("/id")));
    }
}
