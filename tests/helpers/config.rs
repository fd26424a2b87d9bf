//! The test configuration: every source (one per scheme) with its current, rotating-out and
//! removed secret, the operator token, and the limits the tests rely on.

/// Every test secret is as strong as its scheme asks (configurations with weaker ones are
/// refused); where a test needs a provider's documented, shorter, example secret it sets
/// it after validation ([`TestOptions::unchecked_secrets`]).
pub const STRIPE_SECRET: &str = "whsec_current_test_secret_0123456789abcdef";
pub const STRIPE_OLD_SECRET: &str = "whsec_rotating_out_test_secret_0123456789";
pub const OPERATOR_TOKEN: &str = "operator-token-for-tests-0123456789";

/// Every source of the test configuration (one per scheme, `acme` is generic hmac), with
/// its current secret, the one rotating out, and one that was removed.
pub const SOURCES: [(&str, [&str; 3]); 7] = [
    (
        "stripe",
        [
            STRIPE_SECRET,
            STRIPE_OLD_SECRET,
            "whsec_removed_test_secret_0123456789abcdef",
        ],
    ),
    (
        "github",
        [
            "gh-current-0123456789abcdef",
            "gh-rotating-out-0123456789abcdef",
            "gh-removed-0123456789abcdef",
        ],
    ),
    (
        "standard",
        [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "whsec_cmVtb3ZlZC1zZWNyZXQtcmVtb3ZlZA==",
        ],
    ),
    (
        "shopify",
        [
            "shop-current-0123456789abcdefghijklmnop",
            "shop-rotating-out-0123456789abcdefghij",
            "shop-removed-0123456789abcdefghijklmnop",
        ],
    ),
    (
        "slack",
        [
            "slack-current-0123456789abcdefghijklmn",
            "slack-rotating-out-0123456789abcdefghij",
            "slack-removed-0123456789abcdefghijklmn",
        ],
    ),
    (
        "slack-commands",
        [
            "cmd-current-0123456789abcdefghijklmnop",
            "cmd-rotating-out-0123456789abcdefghijk",
            "cmd-removed-0123456789abcdefghijklmnop",
        ],
    ),
    (
        "acme",
        [
            "acme-current-0123456789",
            "acme-rotating-out-0123456789",
            "acme-removed-0123456789",
        ],
    ),
];

/// The test sources; `stripe_extra` is appended to the stripe source (destinations).
pub(crate) fn sources_toml(stripe_extra: &str) -> String {
    let mut toml = String::new();
    for (name, [current, old, _]) in SOURCES {
        let scheme = match name {
            "acme" => "hmac",
            "slack-commands" => "slack",
            other => other,
        };
        toml.push_str(&format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"{scheme}\"\nsecrets = [\"{current}\", \"{old}\"]\n"
        ));
        match name {
            "acme" => toml.push_str(
                "event_id = \"header:X-Acme-Event-Id\"\nevent_type = \"json:/type\"\nreplay_horizon = \"2d\"\n\
                 [sources.hmac]\nheader = \"X-Acme-Signature\"\nprefix = \"sha256=\"\n\
                 encoding = \"hex\"\ntimestamp_header = \"X-Acme-Timestamp\"\n",
            ),
            "slack-commands" => {
                toml.push_str("event_id = \"form:trigger_id\"\nevent_type = \"form:command\"\n")
            }
            "stripe" => toml.push_str(stripe_extra),
            _ => {}
        }
    }
    toml
}

pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// For requests sent without any extra header.
pub const NO_HEADERS: &[(&str, &str)] = &[];
