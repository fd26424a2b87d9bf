//! GitHub's record: a webhook's deliveries (kept 3 days) — a repository's
//! (`repos/OWNER/REPO/hooks/ID`), an organisation's (`orgs/ORG/hooks/ID`) or a GitHub
//! App's (`app`, authenticated as the App with a JWT it signs, RS256) — listed newest
//! first, `per_page` ≤ 100, the next page in the `Link` header. GitHub never retries a
//! failed delivery, but redelivers one on request (`POST …/deliveries/{id}/attempts`)
//! under the same `X-GitHub-Delivery` guid Inlet keys on: a missing one arrives signed,
//! by the ordinary path.

use super::{parse_time, ApiClient, ApiError, Listed, Page, ProviderRecord, Recovery, Window};
use crate::secret::Secret;
use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Deserialize;

/// The API version Inlet was written against.
const API_VERSION: &str = "2022-11-28";

/// Whose deliveries: a hook's path under the API, or the App's own hook.
#[derive(Clone)]
pub enum Hook {
    /// `repos/OWNER/REPO/hooks/ID` or `orgs/ORG/hooks/ID`, read with a token.
    Path(String),
    /// The GitHub App's hook, read as the App.
    App {
        app_id: String,
        key: openssl::pkey::PKey<openssl::pkey::Private>,
    },
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Path(path) => write!(f, "Hook({path})"),
            Self::App { app_id, .. } => write!(f, "Hook(app {app_id})"),
        }
    }
}

impl Hook {
    /// `hook` (and for an App, its id, the credential being its private key): the key
    /// at fault and why, when it is not one.
    pub fn parse(
        hook: Option<&str>,
        app_id: Option<String>,
        credential: &Secret,
    ) -> Result<Self, (&'static str, String)> {
        let hook = hook.ok_or((
            "hook",
            "is required: \"repos/OWNER/REPO/hooks/ID\", \"orgs/ORG/hooks/ID\" or \"app\""
                .to_owned(),
        ))?;
        if hook == "app" {
            let app_id =
                app_id.filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
            let app_id = app_id.ok_or((
                "app_id",
                "is required for hook = \"app\": the App's numeric id".to_owned(),
            ))?;
            let key = openssl::pkey::PKey::private_key_from_pem(credential.expose().as_bytes())
                .map_err(|_| {
                    (
                        "credential",
                        "for hook = \"app\" it is the App's private key (PEM), and this is none"
                            .to_owned(),
                    )
                })?;
            return Ok(Self::App { app_id, key });
        }
        if app_id.is_some() {
            return Err(("app_id", "applies to hook = \"app\" only".to_owned()));
        }
        let parts: Vec<&str> = hook.split('/').collect();
        let named = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        };
        let valid = match parts.as_slice() {
            ["repos", owner, repo, "hooks", id] => {
                named(owner) && named(repo) && id.parse::<u64>().is_ok()
            }
            ["orgs", org, "hooks", id] => named(org) && id.parse::<u64>().is_ok(),
            _ => false,
        };
        match valid {
            true => Ok(Self::Path(hook.to_owned())),
            false => Err(("hook", format!("{hook:?} is not \"repos/OWNER/REPO/hooks/ID\", \"orgs/ORG/hooks/ID\" or \"app\""))),
        }
    }

    /// The hook's path under the API.
    fn path(&self) -> &str {
        match self {
            Self::Path(path) => path,
            Self::App { .. } => "app/hook",
        }
    }
}

/// GitHub's deliveries API for one hook.
#[derive(Debug, Clone)]
pub struct GitHubDeliveries {
    url: String,
    credential: Secret,
    hook: Hook,
}

#[derive(Deserialize)]
struct Delivery {
    id: i64,
    guid: String,
    delivered_at: String,
    #[serde(default)]
    redelivery: bool,
    #[serde(default)]
    status_code: u16,
}

impl Delivery {
    /// A redelivery the receiver refused (4xx): Inlet, when it is missing.
    fn refused(&self) -> Option<u16> {
        (self.redelivery && (400..500).contains(&self.status_code)).then_some(self.status_code)
    }
}

impl GitHubDeliveries {
    pub fn new(url: String, credential: Secret, hook: Hook) -> Self {
        Self {
            url,
            credential,
            hook,
        }
    }

    /// A client authenticated with the token, or as the App with a JWT made `now`.
    pub fn client(&self, now: DateTime<Utc>) -> Result<ApiClient, ApiError> {
        Ok(ApiClient::new(&self.url, self.authorization(now)?)?
            .with_header("x-github-api-version", API_VERSION))
    }

    /// What a call made `now` is authorized with: the token, or a JWT the App signs now
    /// (it lasts minutes: made again for each page).
    pub fn authorization(&self, now: DateTime<Utc>) -> Result<String, ApiError> {
        Ok(match &self.hook {
            Hook::Path(_) => format!("Bearer {}", self.credential.expose()),
            Hook::App { app_id, key } => format!("Bearer {}", app_jwt(app_id, key, now)?),
        })
    }
}

#[async_trait]
impl ProviderRecord for GitHubDeliveries {
    async fn page(
        &self,
        api: &ApiClient,
        window: Window,
        cursor: Option<&str>,
    ) -> Result<Page, ApiError> {
        let first = format!("/{}/deliveries?per_page=100", self.hook.path());
        let target = cursor.unwrap_or(&first);
        let (headers, deliveries): (_, Vec<Delivery>) =
            api.get_json(target, "a deliveries list").await?;
        let mut page = Page {
            entries: deliveries.len(),
            next: next_link(&headers),
            ..Page::default()
        };
        for delivery in deliveries {
            let occurred_at = parse_time(&delivery.delivered_at)?;
            // Newest first: past the window's start, the rest is older still.
            if occurred_at < window.from {
                page.next = None;
            }
            if window.holds(occurred_at) {
                page.listed.push(Listed {
                    refused: delivery.refused(),
                    resend_id: Some(delivery.id.to_string()),
                    event_id: delivery.guid,
                    occurred_at,
                    event: None,
                });
            }
        }
        Ok(page)
    }

    fn recovery(&self) -> Recovery {
        Recovery::Resend
    }

    async fn resend(&self, api: &ApiClient, listed: &Listed) -> Result<(), ApiError> {
        let id = listed.resend_id.as_deref().unwrap_or_default();
        api.post(&format!("/{}/deliveries/{id}/attempts", self.hook.path()))
            .await
            .map(drop)
    }
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(headers: &http::HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let next = params.split(';').any(|p| p.trim() == "rel=\"next\"");
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        next.then(|| url.to_owned())
    })
}

/// A JWT that authenticates as the App for ten minutes (GitHub's most), issued a minute
/// back to allow for clock drift, signed RS256 with its private key.
fn app_jwt(
    app_id: &str,
    key: &openssl::pkey::PKey<openssl::pkey::Private>,
    now: DateTime<Utc>,
) -> Result<String, ApiError> {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = serde_json::json!({
        "iat": now.timestamp() - 60,
        "exp": now.timestamp() + 540,
        "iss": app_id,
    });
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{claims}");
    let signed = (|| {
        let mut signer = openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), key)?;
        signer.update(signing_input.as_bytes())?;
        signer.sign_to_vec()
    })()
    .map_err(|e| ApiError::Setup(format!("cannot sign the App's token: {e}")))?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_the_link_marked_next() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "link",
            http::HeaderValue::from_static(
                "<https://api.github.com/x?cursor=b>; rel=\"next\", <https://api.github.com/x?cursor=a>; rel=\"prev\"",
            ),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("https://api.github.com/x?cursor=b")
        );
        assert_eq!(next_link(&http::HeaderMap::new()), None);
    }

    #[test]
    fn hooks_are_repository_organisation_or_app() {
        let token = Secret::new("ghp_x");
        assert!(Hook::parse(Some("repos/acme/shop/hooks/12"), None, &token).is_ok());
        assert!(Hook::parse(Some("orgs/acme/hooks/12"), None, &token).is_ok());
        for bad in [
            "repos/acme/hooks/12",
            "orgs/acme/hooks/x",
            "users/a/hooks/1",
            "repos/a/b/hooks/1/x",
        ] {
            assert_eq!(
                Hook::parse(Some(bad), None, &token)
                    .map(drop)
                    .map_err(|e| e.0),
                Err("hook")
            );
        }
        assert_eq!(
            Hook::parse(Some("app"), Some("1".into()), &token)
                .map(drop)
                .map_err(|e| e.0),
            Err("credential")
        );
        assert_eq!(
            Hook::parse(None, None, &token).map(drop).map_err(|e| e.0),
            Err("hook")
        );
    }

    #[test]
    fn the_app_token_is_an_rs256_jwt_naming_the_app() {
        let key = openssl::rsa::Rsa::generate(2048)
            .and_then(openssl::pkey::PKey::from_rsa)
            .expect("a key");
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("a time");
        let jwt = app_jwt("42", &key, now).expect("signed");
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("base64url"))
                .expect("JSON");
        assert_eq!(claims["iss"], "42");
        assert_eq!(claims["iat"], 1_700_000_000 - 60);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).expect("base64url");
        let mut verifier =
            openssl::sign::Verifier::new(openssl::hash::MessageDigest::sha256(), &key)
                .expect("verifier");
        verifier
            .update(format!("{}.{}", parts[0], parts[1]).as_bytes())
            .expect("update");
        assert!(verifier.verify(&signature).expect("verify"));
    }
}
