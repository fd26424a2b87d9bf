//! The URL a provider calls, as registered with it. Schemes that sign the URL (Square,
//! Twilio) sign the one the provider saw, which behind a proxy is not the one Inlet sees,
//! so each such source states it (`public_url`), byte for byte.

/// An absolute http(s) URL, kept exactly as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// Validates `url`: `https://` or `http://`, a host, printable ASCII.
    pub fn parse(url: String) -> Result<Self, String> {
        let scheme_ok = ["https://", "http://"]
            .iter()
            .any(|prefix| url.starts_with(prefix));
        let printable = url.bytes().all(|b| b.is_ascii_graphic());
        if !scheme_ok || !printable || url.len() <= "https://".len() {
            return Err(format!(
                "'{url}' is not the absolute http(s) URL registered with the provider"
            ));
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_must_be_absolute() {
        assert!(PublicUrl::parse("https://example.com/webhooks/square".into()).is_ok());
        for bad in [
            "",
            "example.com/hook",
            "https://",
            "https://a b",
            "ftp://x/y",
        ] {
            assert!(PublicUrl::parse(bad.into()).is_err(), "{bad}");
        }
    }
}
