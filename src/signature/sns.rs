//! Amazon SNS: certificate signatures. SNS posts each message to an HTTPS subscription as
//! a JSON object and signs it with the private key of an X.509 certificate it serves at the
//! message's `SigningCertURL`. What is signed is not the body's bytes but a string built
//! from some of its members, `"Name\nvalue\n"` for each in a fixed order (AWS's "Verifying
//! the signatures of Amazon SNS messages"; as npm's `sns-validator` 0.3.5 builds it):
//!
//! - `Notification`: `Message`, `MessageId`, `Subject` (when present), `Timestamp`,
//!   `TopicArn`, `Type`;
//! - `SubscriptionConfirmation` and `UnsubscribeConfirmation`: `Message`, `MessageId`,
//!   `SubscribeURL`, `Timestamp`, `Token`, `TopicArn`, `Type`.
//!
//! `SignatureVersion` `1` is RSA PKCS#1 v1.5 with SHA-1, `2` with SHA-256.
//!
//! Verification stays pure: the certificate is key material like any secret. The intake
//! reads [`Sns::certificate`] (the URL, checked against the source's hosts), fetches it
//! over HTTPS, and passes its PEM as the request's one key; [`Scheme::verify`] checks the
//! signature with it at `now`, the certificate's validity, the signed `Timestamp` against
//! the tolerance, and that `TopicArn` is one of the source's `topics` — any AWS account can
//! have SNS sign a message for its own topic, so the signature alone says nothing of whose.
//!
//! Only `Message` may hold a line break: every other signed member holds none (AWS's
//! never do), so the signed string reads back one way only and no member can be moved into
//! another. A body that names a member twice is refused, so no reader sees another value
//! than the one verified. The event is keyed on what was signed (the string's sha256,
//! [`Verified::content_digest`]): the same message re-encoded is one event.

use super::fetch::Fetch;
use super::timestamp::check_tolerance;
use super::{Certified, Signer};
use super::{Keys, Scheme, SignatureError, Unverified, Verdict, Verified};
use crate::secret::Secret;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Public};
use openssl::x509::X509;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The member that names the signing certificate's URL.
pub const CERTIFICATE_FIELD: &str = "SigningCertURL";
/// The longest URL read from a message: AWS's are about a hundred characters.
const MAX_URL: usize = 1024;
/// The longest signature read: base64 of an RSA signature of up to 8192 bits.
const MAX_SIGNATURE: usize = 1400;

/// Where a source's certificates may come from: AWS's SNS hosts
/// (`sns.<region>.amazonaws.com`, `.amazonaws.com.cn`), or the hosts its configuration
/// lists (a test's local server), with the roots trusted beyond the system's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateHosts {
    Aws,
    Listed(Vec<String>),
}

/// The sns scheme of one source: the topics it takes and where certificates may come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sns {
    topics: Vec<String>,
    hosts: CertificateHosts,
    roots: Option<Arc<[u8]>>,
}

/// A message's members, as SNS sends them (every one a string; others ignored).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Message {
    #[serde(rename = "Type")]
    kind: String,
    message_id: String,
    topic_arn: String,
    subject: Option<String>,
    message: String,
    timestamp: String,
    signature_version: Option<String>,
    signature: Option<String>,
    #[serde(rename = "SigningCertURL")]
    signing_cert_url: Option<String>,
    #[serde(rename = "SubscribeURL")]
    subscribe_url: Option<String>,
    token: Option<String>,
    #[serde(rename = "UnsubscribeURL")]
    unsubscribe_url: Option<String>,
}

/// The three kinds of message SNS posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Notification,
    SubscriptionConfirmation,
    UnsubscribeConfirmation,
}

fn malformed(detail: impl Into<String>) -> SignatureError {
    SignatureError::malformed("body", detail)
}

fn missing(member: &str) -> SignatureError {
    SignatureError::Missing(format!("{member} member of the body"))
}

/// The names of the members SNS sends.
const MEMBERS: [&str; 13] = [
    "Type",
    "MessageId",
    "TopicArn",
    "Subject",
    "Message",
    "Timestamp",
    "SignatureVersion",
    "Signature",
    "SigningCertURL",
    "SubscribeURL",
    "Token",
    "UnsubscribeURL",
    "MessageAttributes",
];

/// A name as readers that ignore case take it: lowercase, with the long s and the Kelvin
/// sign as the letters they fold to (Go's `encoding/json` matches names so).
fn folded(name: &str) -> String {
    name.chars()
        .flat_map(|c| match c {
            'ſ' => 's'.to_lowercase(),
            c => c.to_lowercase(),
        })
        .collect()
}

/// The body's members: a JSON object naming each member once, and none in another
/// spelling of one of SNS's names — a reader that ignores case could take a `"message"` for
/// the signed `"Message"`.
fn members(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, SignatureError> {
    let Members(list) = serde_json::from_slice(body)
        .map_err(|e| malformed(format!("not an SNS message (a JSON object): {e}")))?;
    let mut map = serde_json::Map::new();
    for (name, value) in list {
        let known = MEMBERS.iter().find(|known| folded(known) == folded(&name));
        if let Some(known) = known.filter(|known| **known != name) {
            return Err(malformed(format!(
                "a member named {:?}, another spelling of {known}",
                shown(&name)
            )));
        }
        if map.insert(name.clone(), value).is_some() {
            return Err(malformed(format!("{:?} is named twice", shown(&name))));
        }
    }
    Ok(map)
}

/// A JSON object's members as sent, in order, repeats kept.
struct Members(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// At most 64 characters of a value a sender wrote, for a refusal that quotes it.
fn shown(value: &str) -> String {
    value.chars().take(64).collect()
}

impl Message {
    fn parse(body: &[u8]) -> Result<Self, SignatureError> {
        let members = members(body)?;
        for required in ["Signature", CERTIFICATE_FIELD] {
            if !members.contains_key(required) {
                return Err(missing(required));
            }
        }
        let message: Self = serde_json::from_value(serde_json::Value::Object(members))
            .map_err(|e| malformed(format!("not an SNS message: {e}")))?;
        message.kind()?;
        let single_line = [
            Some(&message.kind),
            Some(&message.message_id),
            Some(&message.topic_arn),
            message.subject.as_ref(),
            Some(&message.timestamp),
            message.subscribe_url.as_ref(),
            message.token.as_ref(),
        ];
        if single_line
            .into_iter()
            .flatten()
            .any(|value| value.contains('\n'))
        {
            return Err(malformed(
                "a member other than Message holds a line break (SNS never sends one)",
            ));
        }
        Ok(message)
    }

    fn kind(&self) -> Result<Kind, SignatureError> {
        match self.kind.as_str() {
            "Notification" => Ok(Kind::Notification),
            "SubscriptionConfirmation" => Ok(Kind::SubscriptionConfirmation),
            "UnsubscribeConfirmation" => Ok(Kind::UnsubscribeConfirmation),
            other => Err(malformed(format!(
                "Type {:?} is none of Notification, SubscriptionConfirmation and \
                 UnsubscribeConfirmation",
                shown(other)
            ))),
        }
    }

    /// The string SNS signs: `"Name\nvalue\n"` for each signed member, in AWS's order.
    fn string_to_sign(&self) -> Result<String, SignatureError> {
        let mut members: Vec<(&str, &str)> =
            vec![("Message", &self.message), ("MessageId", &self.message_id)];
        match self.kind()? {
            Kind::Notification => {
                if let Some(subject) = &self.subject {
                    members.push(("Subject", subject));
                }
                members.push(("Timestamp", &self.timestamp));
            }
            Kind::SubscriptionConfirmation | Kind::UnsubscribeConfirmation => {
                let url = self
                    .subscribe_url
                    .as_deref()
                    .ok_or(missing("SubscribeURL"))?;
                let token = self.token.as_deref().ok_or(missing("Token"))?;
                members.extend([("SubscribeURL", url), ("Timestamp", &self.timestamp)]);
                members.push(("Token", token));
            }
        }
        members.extend([("TopicArn", &*self.topic_arn), ("Type", &*self.kind)]);
        Ok(members
            .into_iter()
            .map(|(name, value)| format!("{name}\n{value}\n"))
            .collect())
    }

    /// The digest the signature is made with: SHA-1 for version 1, SHA-256 for 2.
    fn digest(&self) -> Result<MessageDigest, SignatureError> {
        match self.signature_version.as_deref() {
            Some("1") => Ok(MessageDigest::sha1()),
            Some("2") => Ok(MessageDigest::sha256()),
            Some(other) => Err(SignatureError::malformed(
                "SignatureVersion",
                format!("{:?} is neither 1 nor 2", shown(other)),
            )),
            None => Err(missing("SignatureVersion")),
        }
    }

    fn signature(&self) -> Result<Vec<u8>, SignatureError> {
        let text = self.signature.as_deref().ok_or(missing("Signature"))?;
        (text.len() <= MAX_SIGNATURE)
            .then(|| BASE64.decode(text).ok())
            .flatten()
            .filter(|signature| !signature.is_empty())
            .ok_or_else(|| SignatureError::malformed("Signature", "not a base64 signature"))
    }

    /// The signed `Timestamp` (ISO 8601), in Unix seconds.
    fn signed_at(&self) -> Result<i64, SignatureError> {
        DateTime::parse_from_rfc3339(&self.timestamp)
            .map(|at| at.timestamp())
            .map_err(|_| SignatureError::malformed("Timestamp", "not an ISO 8601 time"))
    }
}

impl Sns {
    /// A source's scheme: `topics` (at least one) are the TopicArns it takes.
    pub fn new(
        topics: Vec<String>,
        hosts: CertificateHosts,
        roots: Option<Vec<u8>>,
    ) -> Result<Self, String> {
        if topics.is_empty() {
            return Err("names no topic: list the ARNs of the topics this source takes".into());
        }
        if let Some(topic) = topics.iter().find(|topic| !is_topic_arn(topic)) {
            return Err(format!(
                "{topic:?} is not a topic ARN (arn:aws:sns:<region>:<account>:<name>)"
            ));
        }
        if let CertificateHosts::Listed(hosts) = &hosts {
            if hosts.is_empty() {
                return Err("certificate_hosts lists no host".into());
            }
        }
        if let Some(pem) = &roots {
            X509::stack_from_pem(pem)
                .ok()
                .filter(|certificates| !certificates.is_empty())
                .ok_or("ca_file holds no PEM certificate")?;
        }
        Ok(Self {
            topics,
            hosts,
            roots: roots.map(Arc::from),
        })
    }

    /// Where `url` may be fetched from: HTTPS, an allowed host, no user, query or fragment,
    /// a path ending in `.pem` for a certificate.
    fn fetch(&self, member: &str, url: &str, pem: bool) -> Result<Fetch, SignatureError> {
        let refused = |why: &str| SignatureError::malformed(member, why.to_owned());
        if url.len() > MAX_URL {
            return Err(refused("too long for a URL"));
        }
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| refused("not an https:// URL"))?;
        let (host, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if url.contains(['@', '#', '\\']) || !url.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(refused(
                "a URL with a user, a fragment or a character URLs do not hold",
            ));
        }
        if pem && path.contains('?') {
            return Err(refused("a certificate URL with a query"));
        }
        if !self.allows(host) {
            return Err(refused(match &self.hosts {
                CertificateHosts::Aws => {
                    "not on an SNS host: sns.<region>.amazonaws.com (or .amazonaws.com.cn), \
                     <region> a region's name such as us-east-1"
                }
                CertificateHosts::Listed(_) => "not on one of the source's certificate_hosts",
            }));
        }
        if pem && !self.names_a_certificate(path) {
            return Err(refused(
                "not a certificate's path: one file name ending .pem \
                 (/SimpleNotificationService-<hex>.pem on AWS's hosts)",
            ));
        }
        Ok(Fetch {
            url: url.to_owned(),
            roots: self.roots.clone(),
        })
    }

    /// One file name of letters, digits, `-` and `_` ending `.pem` (on AWS's hosts,
    /// `SimpleNotificationService-…`): no other spelling of one URL reaches the same file.
    fn names_a_certificate(&self, path: &str) -> bool {
        let Some(name) = path.strip_prefix('/').and_then(|p| p.strip_suffix(".pem")) else {
            return false;
        };
        let name = match &self.hosts {
            CertificateHosts::Aws => name.strip_prefix("SimpleNotificationService-"),
            CertificateHosts::Listed(_) => Some(name),
        };
        name.is_some_and(|name| {
            (1..=64).contains(&name.len())
                && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    }

    /// What can be checked of a message before its certificate is at hand: its signature's
    /// form, the version, the topic and the time. Nothing is fetched for a message that
    /// fails them.
    fn checked(
        &self,
        message: &Message,
        keys: Keys<'_>,
        now: DateTime<Utc>,
    ) -> Result<(MessageDigest, Vec<u8>, String), SignatureError> {
        let digest = message.digest()?;
        let signature = message.signature()?;
        let signed = message.string_to_sign()?;
        if !self.topics.contains(&message.topic_arn) {
            return Err(SignatureError::NotAccepted(
                "TopicArn is not one of this source's topics".to_owned(),
            ));
        }
        check_tolerance(message.signed_at()?, now, keys.tolerance)?;
        Ok((digest, signature, signed))
    }

    fn allows(&self, host: &str) -> bool {
        match &self.hosts {
            CertificateHosts::Aws => is_aws_host(host),
            CertificateHosts::Listed(hosts) => hosts.iter().any(|allowed| allowed == host),
        }
    }
}

/// The kind of a verified SNS message (`None` for any other body).
pub fn kind_of(request: &Verified<'_>) -> Option<Kind> {
    Message::parse(request.body()).ok()?.kind().ok()
}

/// `sns.<region>.amazonaws.com` or `.amazonaws.com.cn` where `<region>` has a region's
/// shape ([`is_region`]). sns-validator's pattern,
/// `^sns\.[a-zA-Z0-9\-]{3,}\.amazonaws\.com(\.cn)?$`, also takes names that are not SNS's:
/// `sns.s3-us-west-2.amazonaws.com` is the legacy address of an S3 bucket named `sns`,
/// which serves whatever its owner uploads.
fn is_aws_host(host: &str) -> bool {
    let Some(rest) = host.strip_prefix("sns.") else {
        return false;
    };
    let region =
        (rest.strip_suffix(".amazonaws.com")).or_else(|| rest.strip_suffix(".amazonaws.com.cn"));
    region.is_some_and(is_region)
}

/// An AWS region's shape: two lower-case letters, one to three words of lower-case
/// letters, a number of one or two digits, joined by `-` (`us-east-1`, `cn-northwest-1`,
/// `us-gov-west-1`, `us-isob-east-1`) — what no S3 endpoint (`s3-…`, `s3-website-…`)
/// and no other service's host (`compute-1`) has.
fn is_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    let lower = |part: &&str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_lowercase());
    match parts.as_slice() {
        [area, words @ .., number] => {
            area.len() == 2
                && lower(area)
                && (1..=3).contains(&words.len())
                && words.iter().all(lower)
                && (1..=2).contains(&number.len())
                && number.bytes().all(|b| b.is_ascii_digit())
        }
        _ => false,
    }
}

/// `arn:<partition>:sns:<region>:<account>:<name>`, printable ASCII.
fn is_topic_arn(topic: &str) -> bool {
    let parts: Vec<&str> = topic.split(':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[2] == "sns"
        && parts.iter().all(|part| !part.is_empty())
        && topic.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether `pem` is a certificate Inlet can verify SNS messages with at `now`: one X.509
/// certificate with an RSA key, within its validity (checked when it is fetched). `Ok`:
/// the end of its validity, in Unix seconds, for a cache to know when to fetch it again.
pub fn check_certificate(pem: &[u8], now: i64) -> Result<i64, String> {
    usable_key(pem, now)?;
    let certificate = X509::from_pem(pem).map_err(|_| "not a PEM X.509 certificate".to_owned())?;
    let epoch = openssl::asn1::Asn1Time::from_unix(0).map_err(|e| e.to_string())?;
    let until = (epoch.diff(certificate.not_after())).map_err(|e| e.to_string())?;
    Ok(i64::from(until.days) * 86_400 + i64::from(until.secs))
}

/// The RSA key of the certificate `pem`, when it is within its validity at `now`.
fn usable_key(pem: &[u8], now: i64) -> Result<PKey<Public>, String> {
    let certificate = X509::from_pem(pem).map_err(|_| "not a PEM X.509 certificate".to_owned())?;
    let at = openssl::asn1::Asn1Time::from_unix(now).map_err(|e| e.to_string())?;
    use std::cmp::Ordering;
    let begun = certificate
        .not_before()
        .compare(&at)
        .is_ok_and(|o| o != Ordering::Greater);
    let ended = certificate
        .not_after()
        .compare(&at)
        .map_or(true, |o| o == Ordering::Less);
    if !begun || ended {
        return Err("the certificate is outside its validity".to_owned());
    }
    let key = (certificate.public_key()).map_err(|_| "its public key does not parse".to_owned())?;
    match key.rsa() {
        Ok(_) => Ok(key),
        Err(_) => Err("its key is not an RSA key".to_owned()),
    }
}

/// Whether `signature` is the signature of `signed` under the certificate `pem`, valid at
/// `now`. A key that does not parse, or a certificate out of its validity, verifies nothing.
fn signed_by(
    pem: &Secret,
    digest: MessageDigest,
    signed: &[u8],
    signature: &[u8],
    now: i64,
) -> bool {
    let Ok(key) = usable_key(pem.expose().as_bytes(), now) else {
        return false;
    };
    let verified = || -> Result<bool, openssl::error::ErrorStack> {
        let mut verifier = openssl::sign::Verifier::new(digest, &key)?;
        verifier.update(signed)?;
        verifier.verify(signature)
    };
    verified().unwrap_or(false)
}

impl Scheme for Sns {
    fn verify<'r>(&self, request: Unverified<'r>, keys: Keys<'_>) -> Verdict<'r> {
        let now = keys.now;
        let message = Message::parse(request.body)?;
        let (digest, signature, signed) = self.checked(&message, keys, now)?;
        let by_any = (keys.secrets.iter())
            .any(|pem| signed_by(pem, digest, signed.as_bytes(), &signature, now.timestamp()));
        if !by_any {
            return Err(SignatureError::Mismatch(
                "Signature, under the certificate at SigningCertURL,".to_owned(),
            ));
        }
        if let Some(url) = &message.unsubscribe_url {
            self.fetch("UnsubscribeURL", url, false)?;
        }
        Ok(request.into_verified_as(Sha256::digest(signed.as_bytes()).into()))
    }

    fn signs_timestamp(&self) -> bool {
        true
    }

    fn check_secret(&self, _secret: &Secret) -> Result<(), String> {
        Err(
            "the sns scheme verifies with AWS's signing certificate: it takes no secrets, \
             only [sources.sns] topics"
                .to_owned(),
        )
    }

    fn certified(&self) -> Option<&dyn Certified> {
        Some(self)
    }
}

impl Signer for Sns {
    fn sign_body(&self, _body: &[u8], _secret: &Secret) -> Option<Result<Vec<u8>, String>> {
        Some(Err(
            "AWS signs SNS messages with its own certificate's key: publish to the topic instead"
                .to_owned(),
        ))
    }

    fn signs_with(&self, _secret: &Secret) -> bool {
        false
    }
}

impl Certified for Sns {
    fn certificate(
        &self,
        request: &Unverified<'_>,
        keys: Keys<'_>,
    ) -> Option<Result<Fetch, SignatureError>> {
        let now = keys.now;
        let url = Message::parse(request.body).and_then(|message| {
            self.checked(&message, keys, now)?;
            (message.signing_cert_url).ok_or_else(|| missing(CERTIFICATE_FIELD))
        });
        Some(url.and_then(|url| self.fetch(CERTIFICATE_FIELD, &url, true)))
    }

    fn subscription(&self, request: &Verified<'_>) -> Option<Result<Fetch, SignatureError>> {
        let message = Message::parse(request.body()).ok()?;
        (message.kind().ok()? == Kind::SubscriptionConfirmation).then(|| {
            let url = (message.subscribe_url.as_deref()).ok_or_else(|| missing("SubscribeURL"))?;
            self.fetch("SubscribeURL", url, false)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_aws_sns_hosts_are_allowed_by_default() {
        for host in [
            "sns.us-east-1.amazonaws.com",
            "sns.cn-north-1.amazonaws.com.cn",
            "sns.cn-northwest-1.amazonaws.com.cn",
            "sns.us-gov-west-1.amazonaws.com",
            "sns.us-isob-east-1.amazonaws.com",
            "sns.ap-southeast-12.amazonaws.com",
        ] {
            assert!(is_aws_host(host), "{host}");
        }
        for host in [
            // S3 buckets named `sns` (legacy and website endpoints) and other services.
            "sns.s3-us-west-2.amazonaws.com",
            "sns.s3-external-1.amazonaws.com",
            "sns.s3-website-us-east-1.amazonaws.com",
            "sns.compute-1.amazonaws.com",
            "sns.my-bucket.amazonaws.com",
            "sns.US-EAST-1.amazonaws.com",
            "sns.us-east.amazonaws.com",
            "sns.us-east-123.amazonaws.com",
            "sns.u-east-1.amazonaws.com",
            "sns.us--1.amazonaws.com",
            "sns.us-a-b-c-d-1.amazonaws.com",
            "sns.us-east-1.amazonaws.com.attacker.example",
            "evilsns.us-east-1.amazonaws.com",
            "sns.eu.amazonaws.com",
            "sns.us-east-1.amazonaws.com:443",
            "sns.us_east.amazonaws.com",
            "s3.us-east-1.amazonaws.com",
            "",
        ] {
            assert!(!is_aws_host(host), "{host}");
        }
    }

    #[test]
    fn certificate_urls_are_https_pem_files_on_an_allowed_host() {
        let topic = "arn:aws:sns:us-east-1:123456789012:orders".to_owned();
        let sns = Sns::new(vec![topic], CertificateHosts::Aws, None).unwrap();
        let host = "https://sns.us-east-1.amazonaws.com";
        let file = "SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem";
        assert!(sns.fetch("u", &format!("{host}/{file}"), true).is_ok());
        let confirm = format!("{host}/?Action=ConfirmSubscription&Token=1");
        assert!(sns.fetch("u", &confirm, false).is_ok());
        for url in [
            format!("{host}/{file}?x=1"),
            format!("{host}/{file}#x"),
            format!("{host}/Cert-1.pem"),
            format!("{host}/SimpleNotificationService-1"),
            format!("{host}/./{file}"),
            format!("{host}/a/../{file}"),
            format!("{host}/%53impleNotificationService-1.pem"),
            format!("{host}\\{file}"),
            format!("{host}/SimpleNotificationService-1 .pem"),
            format!("{host}/SimpleNotificationService-1\t.pem"),
            format!("https://sns.us-east-1.amazonaws.com./{file}"),
            format!("https://[::1]/{file}"),
            format!("https://sns.us-east-1.amazonaws.com%2eattacker.example/{file}"),
            format!("http://sns.us-east-1.amazonaws.com/{file}"),
            format!("https://user@sns.us-east-1.amazonaws.com/{file}"),
            format!("https://sns.us-east-1.amazonaws.com@attacker.example/{file}"),
            format!("https://attacker.example/{file}"),
            format!(
                "{host}/SimpleNotificationService-{}.pem",
                "a".repeat(MAX_URL)
            ),
        ] {
            assert!(sns.fetch("u", &url, true).is_err(), "{url}");
        }
        assert!(sns
            .fetch("u", "https://attacker.example/?Action=Confirm", false)
            .is_err());
    }

    #[test]
    fn a_member_in_another_spelling_or_twice_is_refused() {
        let body = |extra: &str| {
            format!(
                "{{\"Type\":\"Notification\",\"MessageId\":\"m\",\"TopicArn\":\"t\",\
                 \"Message\":\"signed\",\"Timestamp\":\"2026-12-04T10:00:00.000Z\",\
                 \"SignatureVersion\":\"1\",\"Signature\":\"AA==\",\"SigningCertURL\":\"u\"{extra}}}"
            )
        };
        assert!(Message::parse(body("").as_bytes()).is_ok());
        for extra in [
            r#","message":"evil""#,
            r#","MESSAGE":"evil""#,
            r#","Meſſage":"evil""#,
            r#","type":"SubscriptionConfirmation""#,
            r#","Mess\u0061ge":"evil""#,
            r#","Message":"evil""#,
        ] {
            let refused = Message::parse(body(extra).as_bytes());
            assert!(
                matches!(refused, Err(SignatureError::Malformed { .. })),
                "{extra}"
            );
        }
        let attributes = body(r#","MessageAttributes":{"a":{"Type":"String"}}"#);
        assert!(Message::parse(attributes.as_bytes()).is_ok());
        assert!(Message::parse(b"[\"Notification\"]").is_err());
        let unsigned = body("").replace("\"Signature\":\"AA==\",", "");
        let refused = Message::parse(unsigned.as_bytes());
        assert!(matches!(refused, Err(SignatureError::Missing(_))));
    }

    #[test]
    fn topics_are_sns_arns() {
        let hosts = || CertificateHosts::Aws;
        assert!(Sns::new(vec![], hosts(), None).is_err());
        assert!(Sns::new(vec!["orders".to_owned()], hosts(), None).is_err());
        assert!(Sns::new(vec!["arn:aws:sqs:us-east-1:1:q".to_owned()], hosts(), None).is_err());
        let listed = CertificateHosts::Listed(Vec::new());
        let topic = "arn:aws-cn:sns:cn-north-1:123456789012:orders".to_owned();
        assert!(Sns::new(vec![topic.clone()], listed, None).is_err());
        assert!(Sns::new(vec![topic.clone()], hosts(), Some(b"not a pem".to_vec())).is_err());
        assert!(Sns::new(vec![topic], hosts(), None).is_ok());
    }
}
