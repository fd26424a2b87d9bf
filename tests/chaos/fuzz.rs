//! The signature fuzzer: valid signed requests for every source (one per scheme, and the
//! credential schemes `basic` and `header_token`), signed as the provider would
//! (`inlet::cli::signed_headers_with`, the signer behind `inlet sign`; for Discord and
//! Standard Webhooks `v1a` with the private key of fixed test seeds, whose public keys
//! are configured) with a current, a rotating-out or a removed secret, at now or a
//! shifted time; then random mutations — bit flips, truncation, headers
//! removed, repeated, re-cased, timestamps shifted or re-signed, signatures swapped or
//! added, whitespace, alias names — sent over raw TCP to a real server. The oracle
//! (`oracle.rs`) decides independently whether each request carries a matching
//! signature. Nothing may be accepted without one, a canonical matching request may not
//! be refused for its signature, and nothing may answer 5xx. At the end, the events
//! table holds exactly the accepted events: rejected input wrote nothing.

use crate::helpers::{spawn_app_with, Backend, TestApp, TestOptions, SOURCES};
use crate::onto_bus::FuzzBus;
use crate::oracle::{
    values, CopyAnswer, Headers, Judgement, OracleSource, Rule, TwilioMac, Verdict,
    DISCORD_SIGNATURE, DISCORD_TIMESTAMP, ED25519_LEN, FORM_TYPE, HUBSPOT_SIGNATURE,
    HUBSPOT_TIMESTAMP, SENDGRID_SIGNATURE, SENDGRID_TIMESTAMP, TOKEN_HEADER, TWILIO_SETTINGS,
};
use crate::support::{knob, seeded};
use chrono::{DateTime, Utc};
use inlet::db::schema::events;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

chaos_on_both_backends!(signature_fuzzer, the_fuzzer_catches_a_broken_verifier);

/// Concurrent senders.
const WORKERS: u64 = 16;
/// Every source's timestamp tolerance (the default).
const TOLERANCE: i64 = 300;

/// The notification URL the fuzzer's square source is registered under.
const SQUARE_URL: &str = "https://hooks.example.com/square?fuzz=1";

/// The target URL the fuzzer's hubspot source is registered under.
const HUBSPOT_URL: &str = "https://hooks.example.com/hubspot/events?portal=fuzz";

/// The status callback URL the fuzzer's twilio source is registered under: a query string,
/// so a JSON body's `bodySHA256` joins it with `&`.
const TWILIO_URL: &str = "https://hooks.example.com/twilio/status?tenant=fuzz&region=eu";

/// Sources of the providers the shared test configuration does not have, with their
/// current, rotating-out and removed secrets — for the schemes that verify with Ed25519
/// public keys, the private keys that sign (fixed seeds; the configuration gets their
/// public keys, see [`configured`]). `standard-ed25519` mixes both kinds: a `whpk_` key
/// (current) beside a `whsec_` secret (rotating out), so a `v1a` entry must verify under
/// the one and a `v1` entry under the other, never across.
const MORE_SOURCES: [(&str, [&str; 3]); 21] = [
    (
        "paddle",
        [
            "pdl_ntfset_current_0123456789abcdefghijklmn",
            "pdl_ntfset_rotating_out_0123456789abcdefghi",
            "pdl_ntfset_removed_0123456789abcdefghijklmn",
        ],
    ),
    (
        "zoom",
        [
            "zm_current_0123456789",
            "zm_rotating_out_0123456789",
            "zm_removed_0123456789",
        ],
    ),
    (
        "square",
        [
            "sq_current_0123456789abcdef",
            "sq_rotating_out_0123456789abcdef",
            "sq_removed_0123456789abcdef",
        ],
    ),
    (
        "twilio",
        [
            "tw_current_0123456789abcdefghijklmn",
            "tw_rotating_out_0123456789abcdefghi",
            "tw_removed_0123456789abcdefghijklmn",
        ],
    ),
    (
        "legacy",
        [
            "inlet:current-0123456789abcdef",
            "inlet:rotating-out-0123456789abcdef",
            "inlet:removed-0123456789abcdef",
        ],
    ),
    (
        "forms",
        [
            "tok_current_0123456789",
            "tok_rotating_out_0123456789",
            "tok_removed_0123456789",
        ],
    ),
    (
        "workos",
        [
            "wh_current_0123456789abcdefghij",
            "wh_rotating_out_0123456789abcdef",
            "wh_removed_0123456789abcdefghij",
        ],
    ),
    (
        "mux",
        [
            "mux_current_0123456789abcdefghij",
            "mux_rotating_out_0123456789abcdef",
            "mux_removed_0123456789abcdefghij",
        ],
    ),
    (
        "pagerduty",
        [
            "pd_current_0123456789abcdefghij",
            "pd_rotating_out_0123456789abcdef",
            "pd_removed_0123456789abcdefghij",
        ],
    ),
    (
        "linear",
        [
            "lin_current_0123456789abcdefghij",
            "lin_rotating_out_0123456789abcdef",
            "lin_removed_0123456789abcdefghij",
        ],
    ),
    (
        "zendesk",
        [
            "zd_current_0123456789abcdefghij",
            "zd_rotating_out_0123456789abcdef",
            "zd_removed_0123456789abcdefghij",
        ],
    ),
    // Dropbox app secrets are 15 characters.
    (
        "dropbox",
        ["dbxcurrent01234", "dbxrotating0123", "dbxremoved01234"],
    ),
    (
        "adyen",
        [
            "A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1A1",
            "B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2B2",
            "C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3C3",
        ],
    ),
    // Private keys (PKCS#8, base64), made with Node's crypto; their public keys in
    // [`SENDGRID_KEYS`] are what the source holds.
    (
        "sendgrid",
        [
            "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghBtrRYyIGc6EFJq2+w+bBtRRTNz/07O80Y9XN+bYDHChRANCAATQ4D0ULCH44yNyfHCc0k6q+TGy/W6pAILQ9C5UUujnP5tijysGOn6orG/BPRCWfBzXDZdiuppnEstMWD94otxi",
            "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRYRYfvEowRt0wjOkjeajTBprXlBVKynjU57+m7dovwihRANCAATDFkT/Nb31iYBwg5JM++6Lsk8RVushgaQ1JbVpepdL654Tvp7rJ0p9u/3DRbHxf7ZNgwgtqYdZHzdYmNYm6OvH",
            "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjyUFNS5vvPmxbqkSYg9m3e3+E0DnWqsEtnVE6LXp9mGhRANCAAShqp8/sS9/Glt7VeWKYMPq7Uh2oq/niELqGAj+l3p6JN2A9oA5Jpxk4yP5kCeum0T6vtAvyRNC+OklU0ummbEe",
        ],
    ),
    (
        "graph",
        [
            "graph-current-state-0123456789",
            "graph-rotating-out-state-0123456789",
            "graph-removed-state-0123456789",
        ],
    ),
    // Configured secrets (an operator moving a webhook): what verifies them is what
    // verifies a handshake's stored secret (tests/api/asana.rs has the handshake).
    // API key pairs, public_key:private_key.
    (
        "braintree",
        [
            "btcurrent01:bt-private-current-0123456789",
            "btrotating01:bt-private-rotating-0123456789",
            "btremoved01:bt-private-removed-0123456789",
        ],
    ),
    // The fixtures' signing keys (tests/fixtures/sns/<name>-key.pem), each certificate
    // served by the test's certificate host at /<name>-cert.pem: the expired one verifies
    // nothing.
    ("sns", ["signing", "other", "expired"]),
    (
        "hubspot",
        [
            "hubspot-current-0123456789abcdef",
            "hubspot-rotating-out-0123456789ab",
            "hubspot-removed-0123456789abcdef",
        ],
    ),
    (
        "asana",
        [
            "asana_current_0123456789abcdefghij",
            "asana_rotating_out_0123456789abcdef",
            "asana_removed_0123456789abcdefghij",
        ],
    ),
    (
        "discord",
        [
            "2121212121212121212121212121212121212121212121212121212121212121",
            "2222222222222222222222222222222222222222222222222222222222222222",
            "2323232323232323232323232323232323232323232323232323232323232323",
        ],
    ),
    (
        "standard-ed25519",
        [
            "whsk_MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=",
            "whsec_ZWQyNTUxOS1zb3VyY2UtaG1hYy1rZXktMA==",
            "whsk_MzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzMzM=",
        ],
    ),
];

/// SendGrid's test key pairs: a private key (PKCS#8) and its public key (SPKI), base64.
const SENDGRID_KEYS: [(&str, &str); 3] = [
    ("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghBtrRYyIGc6EFJq2+w+bBtRRTNz/07O80Y9XN+bYDHChRANCAATQ4D0ULCH44yNyfHCc0k6q+TGy/W6pAILQ9C5UUujnP5tijysGOn6orG/BPRCWfBzXDZdiuppnEstMWD94otxi", "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE0OA9FCwh+OMjcnxwnNJOqvkxsv1uqQCC0PQuVFLo5z+bYo8rBjp+qKxvwT0Qlnwc1w2XYrqaZxLLTFg/eKLcYg=="),
    ("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRYRYfvEowRt0wjOkjeajTBprXlBVKynjU57+m7dovwihRANCAATDFkT/Nb31iYBwg5JM++6Lsk8RVushgaQ1JbVpepdL654Tvp7rJ0p9u/3DRbHxf7ZNgwgtqYdZHzdYmNYm6OvH", "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEwxZE/zW99YmAcIOSTPvui7JPEVbrIYGkNSW1aXqXS+ueE76e6ydKfbv9w0Wx8X+2TYMILamHWR83WJjWJujrxw=="),
    ("MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjyUFNS5vvPmxbqkSYg9m3e3+E0DnWqsEtnVE6LXp9mGhRANCAAShqp8/sS9/Glt7VeWKYMPq7Uh2oq/niELqGAj+l3p6JN2A9oA5Jpxk4yP5kCeum0T6vtAvyRNC+OklU0ummbEe", "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEoaqfP7Evfxpbe1XlimDD6u1IdqKv54hC6hgI/pd6eiTdgPaAOSacZOMj+ZAnrptE+r7QL8kTQvjpJVNLppmxHg=="),
];

/// A SendGrid signature (base64 DER ECDSA P-256/SHA-256), made here with `ring`.
fn p256_sign(private: &str, message: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD
        .decode(private)
        .expect("a base64 PKCS#8 key");
    let rng = ring::rand::SystemRandom::new();
    let key = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
        &der,
        &rng,
    )
    .expect("a P-256 key");
    key.sign(&rng, message).expect("signed").as_ref().to_vec()
}

/// The Ed25519 private key (seed) a test secret is, if it is one: Discord's hex seed,
/// Standard's base64 after `whsk_`.
fn ed25519_seed(source: &str, secret: &str) -> Option<[u8; 32]> {
    use base64::Engine;
    let bytes = if rule_of(source) == Rule::Discord {
        hex::decode(secret).expect("a hex seed")
    } else {
        base64::engine::general_purpose::STANDARD
            .decode(secret.strip_prefix("whsk_")?)
            .expect("a base64 seed")
    };
    Some(bytes.try_into().expect("a 32-byte seed"))
}

/// An Ed25519 signature, made here with `ed25519-dalek`.
fn ed25519_sign(seed: &[u8; 32], message: &[u8]) -> Vec<u8> {
    use ed25519_dalek::Signer;
    ed25519_dalek::SigningKey::from_bytes(seed)
        .sign(message)
        .to_bytes()
        .to_vec()
}

/// The public key of a seed.
fn ed25519_public(seed: &[u8; 32]) -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(seed)
        .verifying_key()
        .to_bytes()
}

/// A test secret as the source's configuration holds it: a private key's public key
/// (Discord: hex; Standard: `whpk_` and base64), any other secret as it is.
fn configured(source: &str, secret: &str) -> String {
    use base64::Engine;
    if let Some((_, public)) = SENDGRID_KEYS.iter().find(|(private, _)| *private == secret) {
        return (*public).to_owned();
    }
    match ed25519_seed(source, secret) {
        Some(seed) if rule_of(source) == Rule::Discord => hex::encode(ed25519_public(&seed)),
        Some(seed) => format!(
            "whpk_{}",
            base64::engine::general_purpose::STANDARD.encode(ed25519_public(&seed))
        ),
        None => secret.to_owned(),
    }
}

/// The `[[sources]]` tables of [`MORE_SOURCES`].
fn more_sources_toml() -> String {
    let mut toml = String::new();
    for (name, [current, old, _]) in MORE_SOURCES {
        if name == "sns" {
            toml.push_str(&sns_host().source_toml(name, "tolerance_secs = 300\n", ""));
            continue;
        }
        let scheme = match name {
            "legacy" => "basic",
            "forms" => "header_token",
            "standard-ed25519" => "standard",
            other => other,
        };
        let (current, old) = (configured(name, current), configured(name, old));
        toml.push_str(&format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"{scheme}\"\n\
             secrets = [\"{current}\", \"{old}\"]\nreplay_horizon = \"1d\"\n"
        ));
        match name {
            "square" => toml.push_str(&format!("public_url = \"{SQUARE_URL}\"\n")),
            "twilio" => toml.push_str(&format!("public_url = \"{TWILIO_URL}\"\n")),
            "hubspot" => toml.push_str(&format!("public_url = \"{HUBSPOT_URL}\"\n")),
            "forms" => toml.push_str(&format!(
                "token_header = \"{TOKEN_HEADER}\"\nevent_id = \"json:/id\"\nevent_type = \"json:/type\"\n"
            )),
            "legacy" => toml.push_str("event_id = \"json:/id\"\nevent_type = \"json:/type\"\n"),
            _ => {}
        }
    }
    toml
}

fn rule_of(source: &str) -> Rule {
    match source {
        "stripe" => Rule::Stripe,
        "github" => Rule::Github,
        "standard" | "standard-ed25519" => Rule::Standard,
        "shopify" => Rule::Shopify,
        "slack" | "slack-commands" => Rule::Slack,
        "acme" => Rule::Acme,
        "paddle" => Rule::Paddle,
        "zoom" => Rule::Zoom,
        "square" => Rule::Square,
        "twilio" => Rule::Twilio,
        "legacy" => Rule::Basic,
        "forms" => Rule::Token,
        "discord" => Rule::Discord,
        "workos" => Rule::Workos,
        "mux" => Rule::Mux,
        "pagerduty" => Rule::Pagerduty,
        "linear" => Rule::Linear,
        "zendesk" => Rule::Zendesk,
        "adyen" => Rule::Adyen,
        "graph" => Rule::Graph,
        "dropbox" => Rule::Dropbox,
        "sendgrid" => Rule::Sendgrid,
        "asana" => Rule::Asana,
        "hubspot" => Rule::Hubspot,
        "braintree" => Rule::Braintree,
        "sns" => Rule::Sns,
        other => panic!("no rule for {other}"),
    }
}

/// What a source signs besides the body: Square's, Twilio's and HubSpot's URL.
fn signed_url(source: &str) -> &'static [u8] {
    match source {
        "square" => SQUARE_URL.as_bytes(),
        "twilio" => TWILIO_URL.as_bytes(),
        "hubspot" => HUBSPOT_URL.as_bytes(),
        _ => b"",
    }
}

/// The oracle's view of a test source: its two active secrets (current and rotating
/// out); the third, removed one must not verify.
fn oracle_source(source: &str) -> OracleSource {
    let [current, old, _] = secrets(source);
    if source == "sns" {
        return sns_oracle_source(&[current, old]);
    }
    rule_of(source).source(
        &[&configured(source, current), &configured(source, old)],
        TOLERANCE,
        signed_url(source),
    )
}

fn secrets(source: &str) -> [&'static str; 3] {
    SOURCES
        .iter()
        .chain(MORE_SOURCES.iter())
        .find(|(name, _)| *name == source)
        .map(|(_, secrets)| *secrets)
        .expect("a test source")
}

/// A fresh event's body for `source`, carrying `id` where the source reads it from the
/// body, and for Linear the signing time `at`.
fn body_for(source: &str, id: &str, at: DateTime<Utc>, rng: &mut fastrand::Rng) -> Vec<u8> {
    let nonce = rng.u64(..);
    let json = match source {
        "stripe" => {
            // Published onto NATS too: now and then a type a hostile sender picks.
            let event_type = crate::onto_bus::event_type(rng);
            serde_json::json!({"id": id, "object": "event", "type": event_type,
                "data": {"object": {"id": format!("pi_{id}"), "amount": nonce % 10_000}}})
        }
        "slack" => serde_json::json!({"type": "event_callback", "event_id": id,
            "event": {"type": "message", "text": format!("hello {nonce}")}}),
        "slack-commands" => {
            return format!("command=%2Fdeploy&text=v{nonce}&trigger_id={id}&user_id=U1")
                .into_bytes()
        }
        "standard" | "standard-ed25519" | "acme" => {
            serde_json::json!({"type": "invoice.created", "data": {"n": nonce, "ref": id}})
        }
        "paddle" => serde_json::json!({"event_id": id, "event_type": "transaction.paid",
            "data": {"id": format!("txn_{id}"), "n": nonce}}),
        "zoom" => serde_json::json!({"event": "meeting.started", "event_ts": nonce,
            "payload": {"object": {"id": id}}}),
        "square" => serde_json::json!({"event_id": id, "type": "payment.updated",
            "data": {"id": format!("pay_{id}"), "n": nonce}}),
        "twilio" => return twilio_body(id, nonce, rng),
        "adyen" => return adyen_body(id, nonce, rng),
        "graph" => {
            let notifications: Vec<serde_json::Value> = (0..rng.usize(1..4))
                .map(|n| (n, ["created", "updated", "deleted"][n % 3]))
                .map(|(n, change)| {
                    serde_json::json!({"subscriptionId": format!("sub-{}", n % 2),
                    "changeType": change,
                    "resource": format!("Users/u/Messages/{id}-{n}"),
                    "resourceData": {"id": format!("{id}-{n}"), "n": nonce}})
                })
                .collect();
            serde_json::json!({ "value": notifications })
        }
        "sendgrid" => return sendgrid_body(id, rng),
        "hubspot" => return hubspot_body(id, rng),
        // The notification's XML: the case signs it into a form (`inlet send`'s signer).
        "braintree" => {
            let kinds = [
                "subscription_charged_successfully",
                "dispute_opened",
                "check",
            ];
            return format!(
                "<notification><kind>{}</kind><timestamp type=\"datetime\">2026-12-04T10:00:00Z\
                 </timestamp><subject><id>{id}</id><n>{nonce}</n></subject></notification>",
                kinds[rng.usize(..kinds.len())]
            )
            .into_bytes();
        }
        "discord" => return discord_body(id, nonce, rng),
        "legacy" | "forms" => serde_json::json!({"id": id, "type": "thing.happened", "n": nonce}),
        "pagerduty" => serde_json::json!({"event": {"id": id, "event_type": "incident.triggered",
            "resource_type": "incident", "data": {"id": format!("P{nonce}")}}}),
        "mux" => serde_json::json!({"type": "video.asset.ready", "id": id,
            "object": {"type": "asset", "id": format!("asset_{nonce}")}, "attempts": []}),
        "workos" => serde_json::json!({"object": "event", "id": id, "event": "user.created",
            "data": {"id": format!("user_{id}"), "n": nonce}}),
        "zendesk" => serde_json::json!({"type": "zen:event-type:user.created", "id": id,
            "detail": {"id": format!("{nonce}"), "role": "end-user"}, "event": {}}),
        "dropbox" => serde_json::json!({"list_folder": {"accounts": [format!("dbid:{id}")]},
            "delta": {"users": [nonce]}}),
        "asana" => serde_json::json!({"events": [{"action": "changed",
            "resource": {"gid": id, "resource_type": "task"}, "created_at": format!("{nonce}")}]}),
        "linear" => serde_json::json!({"action": "create", "type": "Issue",
            "data": {"id": format!("issue_{id}"), "n": nonce},
            "webhookTimestamp": at.timestamp_millis()}),
        _ => serde_json::json!({"action": "opened", "delivery": id, "nonce": nonce}),
    };
    json.to_string().into_bytes()
}

/// An Adyen batch of one to three items, unsigned (the case signs it), now and then with
/// a `:` inside a signed field or an item repeated.
fn adyen_body(id: &str, nonce: u64, rng: &mut fastrand::Rng) -> Vec<u8> {
    let codes = ["AUTHORISATION", "CAPTURE", "REFUND", "CHARGEBACK"];
    let items: Vec<serde_json::Value> = (0..rng.usize(1..4))
        .map(|n| {
            let reference = match rng.u32(0..4) {
                0 => format!("order:{nonce}:{n}"),
                _ => format!("order-{nonce}-{n}"),
            };
            serde_json::json!({"NotificationRequestItem": {
                "pspReference": format!("{id}{n}"),
                "merchantAccountCode": "FuzzMerchant",
                "merchantReference": reference,
                "amount": {"value": nonce % 100_000, "currency": "EUR"},
                "eventCode": codes[rng.usize(..codes.len())],
                "success": if rng.u32(0..5) == 0 { "false" } else { "true" },
                "reason": "",
                "additionalData": {},
            }})
        })
        .collect();
    let mut items = items;
    if rng.u32(0..8) == 0 {
        items.push(items[0].clone());
    }
    serde_json::json!({"live": "false", "notificationItems": items})
        .to_string()
        .into_bytes()
}

/// A HubSpot batch of one to three events, now and then one of a few events every batch
/// may share, at another attempt (the same event: its attemptNumber is not part of it).
fn hubspot_body(id: &str, rng: &mut fastrand::Rng) -> Vec<u8> {
    let event = |name: &str, attempt: u32| {
        let n = name.bytes().map(u64::from).sum::<u64>();
        serde_json::json!({"eventId": n, "subscriptionId": 2801237, "portalId": 62515,
            "occurredAt": 1_796_374_800_000u64 + n, "subscriptionType": "contact.creation",
            "attemptNumber": attempt, "objectId": name, "changeSource": "CRM"})
    };
    let mut events: Vec<serde_json::Value> = (0..rng.usize(1..4))
        .map(|n| event(&format!("{id}-{n}"), 0))
        .collect();
    if rng.u32(0..4) == 0 {
        events.push(event(&format!("shared-{}", rng.u32(0..6)), rng.u32(0..10)));
    }
    serde_json::Value::from(events).to_string().into_bytes()
}

/// One SendGrid event, the same bytes whenever it is made for `id`.
fn sendgrid_event(id: &str) -> serde_json::Value {
    let kinds = ["processed", "delivered", "open", "click", "bounce"];
    let n = id.bytes().map(usize::from).sum::<usize>();
    serde_json::json!({"email": format!("user{n}@example.com"), "event": kinds[n % kinds.len()],
        "sg_event_id": id, "sg_message_id": format!("msg{n}.filter"), "timestamp": 1_796_374_800 + n})
}

/// A SendGrid batch of one to three events (CRLF after each, as SendGrid writes them), now
/// and then one of a few events every batch may share, or an event repeated.
fn sendgrid_body(id: &str, rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut events: Vec<serde_json::Value> = (0..rng.usize(1..4))
        .map(|n| sendgrid_event(&format!("{id}-{n}")))
        .collect();
    if rng.u32(0..4) == 0 {
        events.push(sendgrid_event(&format!("shared-{}", rng.u32(0..6))));
    }
    if rng.u32(0..8) == 0 {
        events.push(events[0].clone());
    }
    let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    format!("[{}]\r\n", lines.join(",\r\n")).into_bytes()
}

/// A Twilio message status callback as a form (its parameters in Twilio's order or
/// shuffled, now and then a repeated name, as an incoming message's media can have), or
/// now and then an Event Streams JSON event.
fn twilio_body(id: &str, nonce: u64, rng: &mut fastrand::Rng) -> Vec<u8> {
    let status = ["queued", "sent", "delivered", "undelivered", "failed"][rng.usize(..5)];
    if rng.u32(0..6) == 0 {
        return serde_json::json!({"specversion": "1.0", "id": format!("EZ{id}"),
            "type": format!("com.twilio.messaging.message.{status}"),
            "data": {"messageSid": format!("SM{id}"), "n": nonce}})
        .to_string()
        .into_bytes();
    }
    let mut params = vec![
        format!("MessageSid=SM{id}"),
        format!("MessageStatus={status}"),
        format!("SmsStatus={status}"),
        "AccountSid=AC0123456789abcdef0123456789abcdef".to_owned(),
        format!("To=%2B1555{:07}", nonce % 10_000_000),
        "From=%2B15017122661".to_owned(),
        "ApiVersion=2010-04-01".to_owned(),
    ];
    if status == "undelivered" || status == "failed" {
        params.push("ErrorCode=30003".to_owned());
    }
    if rng.u32(0..8) == 0 {
        params.extend(["Tag=b", "Tag=a", "Tag=b"].map(str::to_owned));
    }
    if rng.bool() {
        rng.shuffle(&mut params);
    }
    params.join("&").into_bytes()
}

/// A Discord interaction: now and then a PING (`{"type":1}`, bare or with the fields
/// Discord sends), else an application command, a message component, an autocomplete or
/// a modal submit.
fn discord_body(id: &str, nonce: u64, rng: &mut fastrand::Rng) -> Vec<u8> {
    let kind = match rng.u32(0..12) {
        0 => return br#"{"type":1}"#.to_vec(),
        1 => 1,
        2..=6 => 2,
        7 | 8 => 3,
        9 => 4,
        _ => 5,
    };
    serde_json::json!({"id": id, "application_id": "1300000000000000000", "type": kind,
        "token": format!("aW50ZXJhY3Rpb246{nonce}"), "version": 1,
        "data": {"id": "1300000000000000001", "name": "deploy", "type": 1}})
    .to_string()
    .into_bytes()
}

/// Whether a body is Discord's PING, which Inlet must answer PONG and never store.
fn is_discord_ping(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|b| b.get("type").and_then(serde_json::Value::as_u64))
        == Some(1)
}

/// A Standard Webhooks entry signed with `secret`: `v1a` (Ed25519, here with
/// `ed25519-dalek`) for a `whsk_` private key, `v1` (HMAC) for a `whsec_` secret.
fn standard_entry(source: &str, secret: &str, id: &[u8], timestamp: &[u8], body: &[u8]) -> Vec<u8> {
    let rule = Rule::Standard;
    let content = rule.content(timestamp, id, body);
    let tag = match ed25519_seed(source, secret) {
        Some(seed) => ed25519_sign(&seed, &content),
        None => crate::oracle::hmac_sha256(&rule.key(secret), &content),
    };
    rule.signature_value(&tag, b"")
}

/// A request in the making, and what was done to it.
#[derive(Clone)]
struct Case {
    source: &'static str,
    headers: Headers,
    body: Vec<u8>,
    steps: Vec<String>,
}

/// A shift of the signing time: mostly none, often near the tolerance edge, sometimes far.
fn time_shift(rng: &mut fastrand::Rng) -> i64 {
    let sign = if rng.bool() { 1 } else { -1 };
    sign * match rng.u32(0..10) {
        0..=5 => 0,
        6 => rng.i64(1..TOLERANCE - 5),
        7 => rng.i64(TOLERANCE - 3..=TOLERANCE + 3),
        8 => rng.i64(TOLERANCE + 4..100_000),
        _ => rng.i64(100_000..10_000_000_000),
    }
}

/// Signs a fresh event as the source's provider would, with `secret`, at `at`.
fn signed_case(
    app: &TestApp,
    source: &'static str,
    id: &str,
    rng: &mut fastrand::Rng,
    now: DateTime<Utc>,
) -> Case {
    let [current, old, removed] = secrets(source);
    let (secret, which) = match rng.u32(0..10) {
        0..=6 => (current, "current"),
        7 | 8 => (old, "rotating-out"),
        _ => (removed, "removed"),
    };
    let shift = if rule_of(source).signs_timestamp() {
        time_shift(rng)
    } else {
        0
    };
    let settings = app.settings.source(source).expect("a source");
    let event = inlet::signature::EventToSign {
        id: id.to_owned(),
        event_type: "thing.happened".to_owned(),
    };
    let at = now + chrono::Duration::seconds(shift);
    if source == "sns" {
        return sns_case(
            id,
            secret,
            at,
            rng,
            format!("signed with the {which} key, {shift:+}s"),
        );
    }
    let body = body_for(source, id, at, rng);
    // The source's own secret, or for public-key schemes the private key: Inlet's signer
    // (`inlet sign --private-key`), not its verifier.
    let signer = inlet::secret::Secret::new(secret);
    // Adyen signs inside the body (`inlet send`'s signer too).
    let body = match settings.provider.scheme().sign_body(&body, &signer) {
        Some(signed) => signed.expect("a signable Adyen batch"),
        None => body,
    };
    let headers = inlet::cli::signed_headers_with(settings, &signer, &body, at, &event)
        .into_iter()
        .map(|(n, v)| (n.into_bytes(), v.into_bytes()))
        .collect();
    let mut case = Case {
        source,
        headers,
        body,
        steps: vec![format!("signed with the {which} secret, {shift:+}s")],
    };
    if rule_of(source) == Rule::Standard && rng.u32(0..10) == 0 {
        // A sender whose signed ids are not ASCII: bytes of every kind, signed for real.
        let id: Vec<u8> = format!("msg_{id}_")
            .into_bytes()
            .into_iter()
            .chain((0..rng.usize(1..4)).map(|_| rng.u8(0x80..=0xff)))
            .collect();
        let timestamp = at.timestamp().to_string();
        let entry = standard_entry(source, secret, &id, timestamp.as_bytes(), &case.body);
        for (name, value) in case.headers.iter_mut() {
            match name.as_slice() {
                b"webhook-id" => *value = id.clone(),
                b"webhook-signature" => *value = entry.clone(),
                _ => {}
            }
        }
        case.steps
            .push(format!("webhook-id {} signed", id.escape_ascii()));
    }
    case
}

/// The headers a mutation aims at: mostly those the signature involves.
fn pick_header(case: &Case, rng: &mut fastrand::Rng) -> Option<usize> {
    if case.headers.is_empty() {
        return None;
    }
    let involved: Vec<usize> = case
        .headers
        .iter()
        .enumerate()
        .filter(|(_, (name, _))| {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            name.contains("signature")
                || name.contains("timestamp")
                || name.contains("token")
                || name == "authorization"
                || name.contains("hmac")
                || (name == "content-type" && case.source == "twilio")
                || name.starts_with("webhook-")
                || name.starts_with("svix-")
        })
        .map(|(i, _)| i)
        .collect();
    if !involved.is_empty() && rng.u32(0..10) < 7 {
        return Some(involved[rng.usize(..involved.len())]);
    }
    Some(rng.usize(..case.headers.len()))
}

/// Flips one bit of `bytes`, never making a CR or LF (which would change the framing
/// rather than the value).
fn flip_bit(bytes: &mut [u8], rng: &mut fastrand::Rng, in_header: bool) -> bool {
    if bytes.is_empty() {
        return false;
    }
    for _ in 0..16 {
        let (i, bit) = (rng.usize(..bytes.len()), rng.u8(0..8));
        let flipped = bytes[i] ^ (1 << bit);
        if in_header && matches!(flipped, b'\r' | b'\n') {
            continue;
        }
        bytes[i] = flipped;
        return true;
    }
    false
}

fn random_case_change(value: &mut [u8], rng: &mut fastrand::Rng) {
    match rng.u32(0..3) {
        0 => value.make_ascii_uppercase(),
        1 => value.make_ascii_lowercase(),
        _ => {
            for b in value.iter_mut() {
                if rng.bool() {
                    *b = if b.is_ascii_lowercase() {
                        b.to_ascii_uppercase()
                    } else {
                        b.to_ascii_lowercase()
                    };
                }
            }
        }
    }
}

/// Stripe's and Paddle's timestamp, an item of the signature header: its key and the
/// separator after it.
type TimestampItem = (&'static [u8], u8);

/// The timestamp's header, and the item it is when it is one.
fn timestamp_slot(case: &Case) -> Option<(usize, Option<TimestampItem>)> {
    let rule = rule_of(case.source);
    let names: &[&str] = match rule {
        Rule::Stripe => &["stripe-signature"],
        Rule::Paddle => &["paddle-signature"],
        Rule::Workos => &["workos-signature"],
        Rule::Mux => &["mux-signature"],
        Rule::Slack => &["x-slack-request-timestamp"],
        Rule::Zoom => &["x-zm-request-timestamp"],
        Rule::Acme => &["x-acme-timestamp"],
        Rule::Standard => &["webhook-timestamp", "svix-timestamp"],
        Rule::Discord => &[DISCORD_TIMESTAMP],
        Rule::Zendesk => &["x-zendesk-webhook-signature-timestamp"],
        Rule::Sendgrid => &[SENDGRID_TIMESTAMP],
        Rule::Hubspot => &[HUBSPOT_TIMESTAMP],
        Rule::Braintree | Rule::Sns => return None,
        Rule::Github
        | Rule::Shopify
        | Rule::Square
        | Rule::Twilio
        | Rule::Basic
        | Rule::Token
        | Rule::Pagerduty
        | Rule::Adyen
        | Rule::Graph
        | Rule::Dropbox
        | Rule::Asana
        // In the signed body: changing it is a body mutation.
        | Rule::Linear => return None,
    };
    let item = rule
        .timestamped_items()
        .map(|(key, _, separator)| (key, separator));
    case.headers
        .iter()
        .position(|(n, _)| {
            names
                .iter()
                .any(|name| n.eq_ignore_ascii_case(name.as_bytes()))
        })
        .map(|i| (i, item))
}

/// Where the timestamp text is in the header value: all of it, or the item's value.
fn timestamp_span(value: &[u8], item: Option<TimestampItem>) -> Option<(usize, usize)> {
    let Some((key, separator)) = item else {
        return Some((0, value.len()));
    };
    let key = [key, b"="].concat();
    let start = value.windows(key.len()).position(|w| w == key)? + key.len();
    let end = value[start..]
        .iter()
        .position(|b| *b == separator)
        .map_or(value.len(), |e| start + e);
    Some((start, end))
}

/// Replaces the timestamp text (Stripe's `t=`, Paddle's `ts=` value) with `text`.
fn set_timestamp(case: &mut Case, text: &[u8]) -> bool {
    let Some((i, item)) = timestamp_slot(case) else {
        return false;
    };
    let value = &mut case.headers[i].1;
    let Some((start, end)) = timestamp_span(value, item) else {
        return false;
    };
    value.splice(start..end, text.iter().copied());
    true
}

fn current_timestamp(case: &Case) -> Option<i64> {
    let (i, item) = timestamp_slot(case)?;
    let value = &case.headers[i].1;
    let (start, end) = timestamp_span(value, item)?;
    rule_of(case.source).time_value(&value[start..end])
}

/// Sets the timestamp to `now + shift` (written as a provider would, or oddly), then
/// signs again, correctly, with one of the three secrets: the oracle's own signer.
fn resign(case: &mut Case, now: i64, rng: &mut fastrand::Rng) -> String {
    let rule = rule_of(case.source);
    let [current, old, removed] = secrets(case.source);
    let secret = [current, old, removed][rng.usize(..3)];
    let shift = time_shift(rng);
    if rule == Rule::Sns {
        let at = DateTime::from_timestamp(now.saturating_add(shift), 0).unwrap_or_default();
        return resign_sns(case, secret, at, rng);
    }
    let value = now
        .saturating_add(shift)
        .saturating_mul(rule.units_per_second());
    let written = rule.time_text(value);
    let text = match rng.u32(0..8) {
        0 => format!("0{written}"),
        1 => format!("+{written}"),
        2 => format!(" {written}"),
        3 if rng.bool() => i64::MAX.to_string(),
        3 => i64::MIN.to_string(),
        // Another RFC 3339 spelling of the same instant.
        4 if rule == Rule::Zendesk => written.replace('Z', "+00:00"),
        _ => written,
    };
    if rule.signs_timestamp() && !set_timestamp(case, text.as_bytes()) {
        return "re-sign skipped (no timestamp)".to_owned();
    }
    let id = values(&case.headers, "webhook-id")
        .first()
        .or(values(&case.headers, "svix-id").first())
        .map(|v| v.to_vec())
        .unwrap_or_else(|| signed_url(case.source).to_vec());
    if rule == Rule::Twilio {
        return resign_twilio(case, secret, secret == removed, rng);
    }
    if rule == Rule::Adyen {
        return resign_adyen(case, secret, secret == removed, rng);
    }
    if rule == Rule::Graph {
        return change_graph_state(case, rng, secret);
    }
    if rule == Rule::Braintree {
        return resign_braintree(case, secret, rng);
    }
    let seed = ed25519_seed(case.source, secret);
    let tag = if rule.is_token() {
        rule.key(secret)
    } else if rule == Rule::Sendgrid {
        p256_sign(secret, &rule.content(text.as_bytes(), &id, &case.body))
    } else if let Some(seed) = seed {
        ed25519_sign(&seed, &rule.content(text.as_bytes(), &id, &case.body))
    } else {
        crate::oracle::hmac_sha256(
            &rule.key(secret),
            &rule.content(text.as_bytes(), &id, &case.body),
        )
    };
    let name = signature_names(rule)[0];
    let signature = rule.signature_value(&tag, text.as_bytes());
    match case
        .headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
    {
        Some((_, v)) => *v = signature,
        None => case.headers.push((name.as_bytes().to_vec(), signature)),
    }
    let which = if secret == removed {
        "removed"
    } else {
        "active"
    };
    if rule.signs_timestamp() {
        format!("re-signed at {text:?} with an {which} secret")
    } else {
        format!("re-signed with an {which} secret")
    }
}

/// Twilio's re-signing: the content type the request now says (the first one), the URL
/// as registered or with its port toggled, HMAC-SHA1 (the settings header removed, or
/// naming it) or HMAC-SHA256 (the settings header naming it).
fn resign_twilio(case: &mut Case, secret: &str, removed: bool, rng: &mut fastrand::Rng) -> String {
    use crate::oracle::{port_variants, twilio_content};
    let form = values(&case.headers, "content-type")
        .first()
        .is_some_and(|v| v.to_ascii_lowercase().starts_with(FORM_TYPE));
    let [as_written, toggled] = port_variants(TWILIO_URL.as_bytes());
    let (url, port) = if rng.u32(0..4) == 0 {
        (toggled, "port toggled")
    } else {
        (as_written, "URL as registered")
    };
    let (mac, settings) = match rng.u32(0..4) {
        0 => (
            TwilioMac::Sha256,
            Some("key=fuzz_shared_key,algorithm=HMAC_SHA256"),
        ),
        1 => (
            TwilioMac::Sha1,
            Some("key=fuzz_auth_token,algorithm=HMAC_SHA1"),
        ),
        _ => (TwilioMac::Sha1, None),
    };
    case.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case(TWILIO_SETTINGS.as_bytes()));
    if let Some(settings) = settings {
        case.headers.push((
            TWILIO_SETTINGS.as_bytes().to_vec(),
            settings.as_bytes().to_vec(),
        ));
    }
    let tag = mac.mac(secret.as_bytes(), &twilio_content(&url, &case.body, form));
    let signature = Rule::Twilio.signature_value(&tag, b"");
    let name = signature_names(Rule::Twilio)[0];
    match case
        .headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
    {
        Some((_, v)) => *v = signature,
        None => case.headers.push((name.as_bytes().to_vec(), signature)),
    }
    let which = if removed { "removed" } else { "active" };
    let what = if form { "form" } else { "JSON" };
    format!("re-signed as {what} with an {which} secret, {mac:?}, {port}")
}

/// One random mutation; returns what it did.
fn mutate(case: &mut Case, now: i64, rng: &mut fastrand::Rng, others: &[Case]) -> String {
    if rule_of(case.source) == Rule::Adyen && rng.bool() {
        return mutate_adyen(case, rng);
    }
    if rule_of(case.source) == Rule::Graph && rng.bool() {
        let [current, old, removed] = secrets(case.source);
        let state = [current, old, removed, "graph-rogue-state-0123456789"][rng.usize(..4)];
        return change_graph_state(case, rng, state);
    }
    if rule_of(case.source) == Rule::Sendgrid && rng.u32(0..3) == 0 {
        return mutate_sendgrid(case, rng);
    }
    if rule_of(case.source) == Rule::Sns && rng.bool() {
        return mutate_sns(case, rng);
    }
    match rng.u32(0..20) {
        0 => {
            flip_bit(&mut case.body, rng, false);
            "body: a bit flipped".to_owned()
        }
        1 => {
            let len = rng.usize(0..case.body.len().max(1));
            case.body.truncate(len);
            format!("body: truncated to {len} bytes")
        }
        2 => {
            let byte = [b'\n', b' ', b'}', 0, rng.u8(..)][rng.usize(..5)];
            case.body.push(byte);
            format!("body: byte {byte:#04x} appended")
        }
        3 | 4 => match pick_header(case, rng) {
            Some(i) if flip_bit(&mut case.headers[i].1, rng, true) => {
                format!("{}: a bit flipped", name(case, i))
            }
            _ => "nothing".to_owned(),
        },
        5 => match pick_header(case, rng) {
            Some(i) => {
                let len = rng.usize(0..case.headers[i].1.len().max(1));
                case.headers[i].1.truncate(len);
                format!("{}: truncated to {len} bytes", name(case, i))
            }
            None => "nothing".to_owned(),
        },
        6 => match pick_header(case, rng) {
            Some(i) => {
                let removed = case.headers.remove(i);
                format!("{}: removed", String::from_utf8_lossy(&removed.0))
            }
            None => "nothing".to_owned(),
        },
        7 | 8 => match pick_header(case, rng) {
            Some(i) => {
                let mut copy = case.headers[i].clone();
                let how = match rng.u32(0..3) {
                    0 => "the same value",
                    1 => {
                        flip_bit(&mut copy.1, rng, true);
                        "a flipped value"
                    }
                    _ => match others.iter().find_map(|o| {
                        o.headers
                            .iter()
                            .find(|(n, _)| n.eq_ignore_ascii_case(&copy.0))
                            .filter(|_| o.source == case.source)
                    }) {
                        Some((_, v)) => {
                            copy.1 = v.clone();
                            "another request's value"
                        }
                        None => "the same value",
                    },
                };
                let at = if rng.bool() { i } else { i + 1 };
                case.headers.insert(at, copy);
                format!(
                    "{}: repeated with {how}, {}",
                    name(case, at),
                    if at == i { "before" } else { "after" }
                )
            }
            None => "nothing".to_owned(),
        },
        9 => match pick_header(case, rng) {
            Some(i) => {
                random_case_change(&mut case.headers[i].0, rng);
                format!("{}: name re-cased", name(case, i))
            }
            None => "nothing".to_owned(),
        },
        10 => match pick_header(case, rng) {
            Some(i) => {
                random_case_change(&mut case.headers[i].1, rng);
                format!("{}: value re-cased", name(case, i))
            }
            None => "nothing".to_owned(),
        },
        11 => match current_timestamp(case) {
            Some(ts) => {
                let delta =
                    [1, -1, TOLERANCE, -TOLERANCE, TOLERANCE + 1, 86_400, -86_400][rng.usize(..7)];
                let units = rule_of(case.source).units_per_second();
                let shifted = ts.saturating_add(delta.saturating_mul(units));
                let text = rule_of(case.source).time_text(shifted);
                set_timestamp(case, text.as_bytes());
                format!("timestamp shifted by {delta:+}s, not re-signed")
            }
            None => "nothing".to_owned(),
        },
        12 | 13 => resign(case, now, rng),
        14 => {
            let (sig, _) = signature_slot(case);
            let donor = others.iter().rev().find(|o| o.source == case.source);
            match (sig, donor) {
                (Some(i), Some(donor)) => {
                    match donor
                        .headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(&case.headers[i].0))
                    {
                        Some((_, v)) => {
                            case.headers[i].1 = v.clone();
                            format!("{}: another request's signature", name(case, i))
                        }
                        None => "nothing".to_owned(),
                    }
                }
                _ => "nothing".to_owned(),
            }
        }
        15 => {
            let (sig, rule) = signature_slot(case);
            let Some(i) = sig else {
                return "nothing".to_owned();
            };
            let len = match rule {
                Rule::Discord => ED25519_LEN,
                Rule::Standard if case.source == "standard-ed25519" && rng.bool() => ED25519_LEN,
                _ => 32,
            };
            let random: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            let extra = match rule {
                Rule::Stripe | Rule::Workos | Rule::Mux | Rule::Pagerduty => {
                    format!("v1={}", hex::encode(&random))
                }
                Rule::Paddle => format!("h1={}", hex::encode(&random)),
                Rule::Standard if len == ED25519_LEN => format!("v1a,{}", base64_encode(&random)),
                Rule::Standard => format!("v1,{}", base64_encode(&random)),
                _ => hex::encode(&random),
            };
            let value = &mut case.headers[i].1;
            let separator = match rule {
                Rule::Standard => " ",
                Rule::Paddle => ";",
                _ => ",",
            };
            if rng.bool() {
                *value = [value.as_slice(), separator.as_bytes(), extra.as_bytes()].concat();
            } else {
                *value = [extra.as_bytes(), separator.as_bytes(), value.as_slice()].concat();
            }
            format!("{}: a random signature added", name(case, i))
        }
        16 => match pick_header(case, rng) {
            Some(i) if !case.headers[i].1.is_empty() => {
                let value = &mut case.headers[i].1;
                let at = rng.usize(..value.len());
                value[at] = rng.u8(0x80..=0xff);
                format!(
                    "{}: byte {at} set to {:#04x}",
                    name(case, i),
                    case.headers[i].1[at]
                )
            }
            _ => "nothing".to_owned(),
        },
        19 if rule_of(case.source) == Rule::Standard => cross_kind(case, rng),
        17 if rule_of(case.source) == Rule::Standard => {
            // The other family's name for a header already there, with another value.
            let Some(i) = pick_header(case, rng) else {
                return "nothing".to_owned();
            };
            let lower = case.headers[i].0.to_ascii_lowercase();
            let alias = if let Some(rest) = lower.strip_prefix(b"webhook-") {
                [b"svix-".as_slice(), rest].concat()
            } else if let Some(rest) = lower.strip_prefix(b"svix-") {
                [b"webhook-".as_slice(), rest].concat()
            } else {
                return "nothing".to_owned();
            };
            let value = if rng.bool() {
                [
                    case.headers[i].1.as_slice(),
                    format!("_{}", rng.u16(..)).as_bytes(),
                ]
                .concat()
            } else {
                format!("msg_alias_{}", rng.u32(..)).into_bytes()
            };
            let at = rng.usize(0..=case.headers.len());
            case.headers.insert(at, (alias, value));
            format!("{}: added, another value", name(case, at))
        }
        _ => {
            if rule_of(case.source) == Rule::Standard && rng.bool() {
                let mut renamed = 0;
                for (n, _) in case.headers.iter_mut() {
                    if n.to_ascii_lowercase().starts_with(b"webhook-") && rng.bool() {
                        *n = [b"svix-".as_slice(), &n[8..]].concat();
                        renamed += 1;
                    }
                }
                return format!("{renamed} webhook- headers renamed svix-");
            }
            match pick_header(case, rng) {
                Some(i) => {
                    let value = &mut case.headers[i].1;
                    let at = rng.usize(0..=value.len());
                    value.insert(at, b' ');
                    format!("{}: a space inserted at {at}", name(case, i))
                }
                None => "nothing".to_owned(),
            }
        }
    }
}

/// The body of an Adyen case as JSON, changed by `change` (one item, chosen at random) and
/// written back; "nothing" when the body is no longer an Adyen batch.
fn change_adyen_item(
    case: &mut Case,
    rng: &mut fastrand::Rng,
    change: impl FnOnce(&mut serde_json::Value, &mut fastrand::Rng) -> String,
) -> String {
    let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&case.body) else {
        return "nothing".to_owned();
    };
    let Some(items) = document["notificationItems"].as_array_mut() else {
        return "nothing".to_owned();
    };
    if items.is_empty() {
        return "nothing".to_owned();
    }
    let n = rng.usize(..items.len());
    let item = &mut items[n];
    // Only an item whose fields can be written (a fuzzed one may hold other shapes).
    let writable = |v: Option<&serde_json::Value>| v.is_none_or(serde_json::Value::is_object);
    let fields = item.get("NotificationRequestItem");
    if !fields.is_some_and(serde_json::Value::is_object)
        || !writable(fields.and_then(|f| f.get("amount")))
        || !writable(fields.and_then(|f| f.get("additionalData")))
    {
        return "nothing".to_owned();
    }
    let what = change(&mut item["NotificationRequestItem"], rng);
    case.body = document.to_string().into_bytes();
    format!("item {n}: {what}")
}

/// Adyen's own mutations, on one item: a signed field changed (or re-split around a `:`,
/// which signs the same), an unsigned one, the signature dropped, spaced, or another
/// item's; an item repeated or dropped.
fn mutate_adyen(case: &mut Case, rng: &mut fastrand::Rng) -> String {
    let signed = ["pspReference", "merchantReference", "eventCode", "success"];
    change_adyen_item(case, rng, |item, rng| match rng.u32(0..7) {
        0 => {
            let field = signed[rng.usize(..signed.len())];
            let text = item[field].as_str().unwrap_or_default().to_owned();
            item[field] = format!("{text}0").into();
            format!("{field} changed")
        }
        1 => {
            item["amount"]["value"] =
                (item["amount"]["value"].as_f64().unwrap_or(0.0) + 0.5).into();
            "amount.value written with a fraction".to_owned()
        }
        2 => {
            item["reason"] = format!("fuzz {}", rng.u32(..)).into();
            "an unsigned field changed".to_owned()
        }
        3 => {
            item["additionalData"] = serde_json::json!({});
            "the signature dropped".to_owned()
        }
        4 => {
            let tag = item["additionalData"]["hmacSignature"]
                .as_str()
                .unwrap_or_default();
            item["additionalData"]["hmacSignature"] = format!(" {tag} ").into();
            "the signature spaced".to_owned()
        }
        5 => {
            // "a:b" + "c" and "a" + "b:c" sign the same text.
            let reference = item["merchantReference"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let value = item["amount"]["value"].to_string();
            match reference.rsplit_once(':') {
                Some((head, tail)) => {
                    item["merchantReference"] = head.into();
                    item["amount"]["value"] = format!("{tail}:{value}").into();
                    "a colon moved from merchantReference into amount.value".to_owned()
                }
                None => "nothing".to_owned(),
            }
        }
        _ => {
            item["amount"]["currency"] = "USD".into();
            "the currency changed".to_owned()
        }
    })
}

/// Every stored Graph event: a notification whose `clientState` is `"[redacted]"` and
/// that holds no secret of the source, stored under the sha256 of its bytes; as many
/// events as the accepted requests need (at least one each).
fn check_graph_events(rows: &[(String, String, Vec<u8>)], accepted: u64) -> Vec<String> {
    use sha2::Digest;
    let mut failures = Vec::new();
    if (rows.len() as u64) < accepted.min(1) {
        failures.push(format!(
            "{accepted} Graph requests accepted, {} events stored",
            rows.len()
        ));
    }
    for (_, event_id, payload) in rows {
        let text = String::from_utf8_lossy(payload);
        let notification: serde_json::Value = serde_json::from_slice(payload).unwrap_or_default();
        if notification["clientState"] != "[redacted]" {
            failures.push(format!(
                "a Graph event stored without its clientState redacted: {text}"
            ));
        }
        if secrets("graph")
            .iter()
            .any(|secret| holds_as_client_state(&text, secret))
        {
            failures.push(format!("a Graph event stored with a secret: {text}"));
        }
        if *event_id != hex::encode(sha2::Sha256::digest(payload)) {
            failures.push(format!(
                "a Graph event not stored under its digest: {event_id}"
            ));
        }
    }
    failures
}

/// Whether `secret` is, anywhere in `text`, the value of a member named `clientState`
/// (however its name is escaped, a repeated one too): the credential Inlet must redact.
/// The same characters under another name are the sender's content (a fuzzed notification
/// may carry a `clien4State`), not a credential.
fn holds_as_client_state(text: &str, secret: &str) -> bool {
    let quoted = format!("\"{secret}\"");
    text.match_indices(&quoted).any(|(at, _)| {
        let before = text[..at].trim_end();
        let Some(before) = before.strip_suffix(':').map(str::trim_end) else {
            return false;
        };
        let Some(name_end) = before.strip_suffix('"') else {
            return false;
        };
        // The key's opening quote: the last one not escaped by a backslash.
        let bytes = name_end.as_bytes();
        let start = (0..bytes.len()).rev().find(|&i| {
            bytes[i] == b'"'
                && bytes[..i].iter().rev().take_while(|b| **b == b'\\').count() % 2 == 0
        });
        start.is_some_and(|start| {
            serde_json::from_str::<String>(&before[start..]).is_ok_and(|name| name == "clientState")
        })
    })
}

/// One Graph notification's `clientState` set to `state`, removed, or a rogue
/// notification with it added.
fn change_graph_state(case: &mut Case, rng: &mut fastrand::Rng, state: &str) -> String {
    let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&case.body) else {
        return "nothing".to_owned();
    };
    let Some(items) = document["value"]
        .as_array_mut()
        .filter(|items| !items.is_empty())
    else {
        return "nothing".to_owned();
    };
    let n = rng.usize(..items.len());
    let what = match rng.u32(0..4) {
        0 => {
            if let Some(item) = items[n].as_object_mut() {
                item.remove("clientState");
            }
            format!("notification {n}: its clientState removed")
        }
        1 => {
            items.push(
                serde_json::json!({"changeType": "deleted", "resource": "Users/rogue",
                "clientState": state}),
            );
            format!("a notification added with clientState {state:?}")
        }
        _ if items[n].is_object() => {
            items[n]["clientState"] = state.into();
            format!("notification {n}: clientState {state:?}")
        }
        _ => return "nothing".to_owned(),
    };
    case.body = document.to_string().into_bytes();
    what
}

/// SendGrid's own body mutations (a re-sign may follow, so most reach the events): an
/// event's field changed (its id kept: another body for a stored id), an event dropped,
/// repeated or borrowed from the shared ones, the list emptied, or an event that is not an
/// object; the whitespace between events changed.
fn mutate_sendgrid(case: &mut Case, rng: &mut fastrand::Rng) -> String {
    let Ok(mut events) = serde_json::from_slice::<Vec<serde_json::Value>>(&case.body) else {
        return "nothing".to_owned();
    };
    let n = rng.usize(..events.len().max(1));
    let what = match rng.u32(0..7) {
        0 if events.get(n).is_some_and(serde_json::Value::is_object) => {
            events[n]["event"] = "spamreport".into();
            format!("event {n}'s type changed, its id kept")
        }
        1 if events.len() > 1 => {
            events.remove(n);
            format!("event {n} dropped")
        }
        2 if !events.is_empty() => {
            events.push(events[n].clone());
            format!("event {n} repeated")
        }
        3 => {
            events.push(sendgrid_event(&format!("shared-{}", rng.u32(0..6))));
            "a shared event added".to_owned()
        }
        4 => {
            events.clear();
            "the list emptied".to_owned()
        }
        5 => {
            events.push(serde_json::json!(["not", "an", "event"]));
            "an event that is not an object".to_owned()
        }
        _ => {
            case.body = serde_json::to_vec_pretty(&events).expect("JSON");
            return "the events re-spaced".to_owned();
        }
    };
    case.body = serde_json::to_vec(&events).expect("JSON");
    what
}

/// Re-signs every item of an Adyen case with `secret`, as the oracle reads it.
/// Signs a Braintree form's payload again with `secret`'s key pair (the oracle's own
/// HMAC-SHA1), now and then over the payload and a line break, or behind a wrong pair of
/// the same public key (which must not count: only the first pair naming it is compared).
fn resign_braintree(case: &mut Case, secret: &str, rng: &mut fastrand::Rng) -> String {
    use sha1::Digest;
    let payload = form_urlencoded::parse(&case.body)
        .find(|(name, _)| name == "bt_payload")
        .map(|(_, value)| value.into_owned());
    let (Some(payload), Some((public, private))) = (payload, secret.split_once(':')) else {
        return "re-sign skipped (no payload)".to_owned();
    };
    let key = sha1::Sha1::digest(private.as_bytes());
    let newline = rng.bool();
    let signed = [payload.as_bytes(), if newline { b"\n" } else { b"" }].concat();
    let tag = hex::encode(crate::oracle::hmac_sha1(&key, &signed));
    let decoy = rng.u32(0..4) == 0;
    let pairs = match decoy {
        true => format!("{public}|{}&{public}|{tag}", "0".repeat(40)),
        false => format!("{public}|{tag}"),
    };
    case.body = form_urlencoded::Serializer::new(String::new())
        .append_pair("bt_signature", &pairs)
        .append_pair("bt_payload", &payload)
        .finish()
        .into_bytes();
    format!("re-signed with {public} (over a line break too: {newline}, behind a decoy: {decoy})")
}

fn resign_adyen(case: &mut Case, secret: &str, removed: bool, rng: &mut fastrand::Rng) -> String {
    let key = Rule::Adyen.key(secret);
    let Ok(mut document) = serde_json::from_slice::<serde_json::Value>(&case.body) else {
        return "re-sign skipped (not JSON)".to_owned();
    };
    let Some(items) = document["notificationItems"].as_array_mut() else {
        return "re-sign skipped (no items)".to_owned();
    };
    let only = rng.bool().then(|| rng.usize(..items.len().max(1)));
    for (n, wrapper) in items.iter_mut().enumerate() {
        let item = &mut wrapper["NotificationRequestItem"];
        let Some((reading, _)) = crate::oracle::adyen_reading(item) else {
            continue;
        };
        if only.is_some_and(|only| only != n) {
            continue;
        }
        if !item["additionalData"].is_object() && !item["additionalData"].is_null() {
            continue;
        }
        let tag = crate::oracle::hmac_sha256(&key, reading.as_bytes());
        item["additionalData"]["hmacSignature"] = base64_encode(&tag).into();
    }
    case.body = document.to_string().into_bytes();
    let which = if removed { "removed" } else { "active" };
    match only {
        Some(n) => format!("item {n} re-signed with an {which} key"),
        None => format!("every item re-signed with an {which} key"),
    }
}

/// Standard Webhooks across kinds: an entry's label swapped (`v1` ↔ `v1a`, the rest
/// kept), or (for the source with both kinds) a `v1` entry keyed with the configured
/// `whpk_` public key's bytes (which anyone has) or a `v1a` entry made with a seed
/// derived from the HMAC secret. None may verify.
fn cross_kind(case: &mut Case, rng: &mut fastrand::Rng) -> String {
    let Some(i) = case.headers.iter().position(|(n, _)| {
        n.eq_ignore_ascii_case(b"webhook-signature") || n.eq_ignore_ascii_case(b"svix-signature")
    }) else {
        return "nothing".to_owned();
    };
    let value = &mut case.headers[i].1;
    if case.source != "standard-ed25519" || rng.bool() {
        let swapped: Vec<Vec<u8>> = value
            .split(|b| *b == b' ')
            .map(|entry| {
                if let Some(rest) = entry.strip_prefix(b"v1a,") {
                    [b"v1,".as_slice(), rest].concat()
                } else if let Some(rest) = entry.strip_prefix(b"v1,") {
                    [b"v1a,".as_slice(), rest].concat()
                } else {
                    entry.to_vec()
                }
            })
            .collect();
        *value = swapped.join(&b' ');
        return format!("{}: v1 and v1a labels swapped", name(case, i));
    }
    let [current, old, _] = secrets(case.source);
    let id = values(&case.headers, "webhook-id")
        .first()
        .or(values(&case.headers, "svix-id").first())
        .map(|v| v.to_vec())
        .unwrap_or_default();
    let Some(timestamp) = current_timestamp(case) else {
        return "nothing".to_owned();
    };
    let content = Rule::Standard.content(timestamp.to_string().as_bytes(), &id, &case.body);
    let public = ed25519_public(&ed25519_seed(case.source, current).expect("a whsk_ key"));
    let hmac_key = Rule::Standard.key(old);
    let (entry, what) = if rng.bool() {
        let tag = crate::oracle::hmac_sha256(&public, &content);
        (
            format!("v1,{}", base64_encode(&tag)),
            "a v1 entry keyed with the whpk_ key's bytes",
        )
    } else {
        let seed: [u8; 32] = crate::oracle::hmac_sha256(&hmac_key, b"seed")
            .try_into()
            .expect("32 bytes");
        let mut padded = [0u8; 32];
        padded[..hmac_key.len().min(32)].copy_from_slice(&hmac_key[..hmac_key.len().min(32)]);
        let seed = if rng.bool() { padded } else { seed };
        (
            format!("v1a,{}", base64_encode(&ed25519_sign(&seed, &content))),
            "a v1a entry signed with a seed made from the whsec_ secret",
        )
    };
    case.headers[i].1 = entry.into_bytes();
    format!("{}: {what}", name(case, i))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn name(case: &Case, i: usize) -> String {
    String::from_utf8_lossy(&case.headers[i].0).into_owned()
}

/// The names the rule's signature (or credential) header goes by, as the provider writes
/// it first.
fn signature_names(rule: Rule) -> &'static [&'static str] {
    match rule {
        Rule::Stripe => &["stripe-signature"],
        Rule::Github => &["x-hub-signature-256"],
        Rule::Shopify => &["x-shopify-hmac-sha256"],
        Rule::Slack => &["x-slack-signature"],
        Rule::Acme => &["x-acme-signature"],
        Rule::Standard => &["webhook-signature", "svix-signature"],
        Rule::Paddle => &["paddle-signature"],
        Rule::Zoom => &["x-zm-signature"],
        Rule::Square => &["x-square-hmacsha256-signature"],
        Rule::Twilio => &["x-twilio-signature"],
        Rule::Basic => &["authorization"],
        Rule::Token => &[TOKEN_HEADER],
        Rule::Discord => &[DISCORD_SIGNATURE],
        Rule::Workos => &["workos-signature"],
        Rule::Mux => &["mux-signature"],
        Rule::Pagerduty => &["x-pagerduty-signature"],
        Rule::Linear => &["linear-signature"],
        Rule::Zendesk => &["x-zendesk-webhook-signature"],
        // In the body.
        Rule::Adyen | Rule::Graph => &[],
        Rule::Dropbox => &["x-dropbox-signature"],
        Rule::Sendgrid => &[SENDGRID_SIGNATURE],
        Rule::Asana => &["x-hook-signature"],
        Rule::Hubspot => &[HUBSPOT_SIGNATURE],
        // In the body.
        Rule::Braintree | Rule::Sns => &[],
    }
}

fn signature_slot(case: &Case) -> (Option<usize>, Rule) {
    let rule = rule_of(case.source);
    let names = signature_names(rule);
    let i = case.headers.iter().position(|(n, _)| {
        names
            .iter()
            .any(|name| n.eq_ignore_ascii_case(name.as_bytes()))
    });
    (i, rule)
}

/// A whole HTTP answer.
struct Raw {
    status: u16,
    body: Vec<u8>,
}

/// Sends exactly these bytes (HTTP/1.1, one request per connection) and reads the answer.
async fn send_raw(port: u16, case: &Case) -> std::io::Result<Raw> {
    let mut request = format!(
        "POST /webhooks/{} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        case.source,
        case.body.len()
    )
    .into_bytes();
    for (name, value) in &case.headers {
        request.extend_from_slice(name);
        request.extend_from_slice(b": ");
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(&case.body);
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(&request).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer))
        .await
        .map_err(|_| std::io::Error::other("no answer within 20 s"))??;
    parse_answer(&answer).ok_or_else(|| {
        std::io::Error::other(format!(
            "not an HTTP answer: {}",
            String::from_utf8_lossy(&answer)
        ))
    })
}

fn parse_answer(answer: &[u8]) -> Option<Raw> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let mut body = answer[end + 4..].to_vec();
    if chunked {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).ok()?.trim(), 16)
                    .ok()?;
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(rest.get(line_end + 2..line_end + 2 + size)?);
            rest = rest.get(line_end + 4 + size..)?;
        }
        body = decoded;
    }
    Some(Raw { status, body })
}

/// A header value an HTTP/1.1 parser must refuse (a control character).
fn http_invalid(case: &Case) -> bool {
    case.headers
        .iter()
        .any(|(_, v)| v.iter().any(|b| (*b < 0x20 && *b != b'\t') || *b == 0x7f))
}

#[derive(Default)]
struct Tally {
    cases: u64,
    by_verdict: BTreeMap<(Verdict, String), u64>,
    by_source: BTreeMap<&'static str, u64>,
    accepted: HashSet<(String, String)>,
    /// Discord PINGs answered PONG (not events: never stored).
    pongs: u64,
    /// Accepted Twilio forms re-sent re-encoded, answered as one event.
    twilio_variants: u64,
    /// Accepted Graph requests (their events are checked from the table).
    graph_accepted: u64,
    failures: Vec<String>,
}

fn describe(case: &Case, judgement: &Judgement, answer: &Raw) -> String {
    let headers: Vec<String> = case
        .headers
        .iter()
        .map(|(n, v)| format!("{}: {}", String::from_utf8_lossy(n), v.escape_ascii()))
        .collect();
    format!(
        "source {} — {}\n  oracle {:?}; inlet {} {}\n  headers {headers:?}\n  body {}",
        case.source,
        case.steps.join("; "),
        judgement.verdict,
        answer.status,
        String::from_utf8_lossy(&answer.body),
        case.body.escape_ascii()
    )
}

/// After a canonical Twilio form was accepted, a copy re-encoded as its signature allows
/// (the oracle's [`twilio_variants`](crate::oracle::twilio_variants)) with the same
/// headers, now and then: it must get the stored answer, byte for byte — or, when its own
/// reading is refused first, the `400` the oracle names — never become an event of its own
/// (the events table is compared with the accepted events at the end). `None` when no
/// copy was sent; else whether it was answered right.
async fn resend_twilio_variant(
    port: u16,
    case: &Case,
    judgement: &Judgement,
    answer: &Raw,
    rng: &mut fastrand::Rng,
) -> Option<Result<(), String>> {
    let form = values(&case.headers, "content-type")
        .first()
        .is_some_and(|v| v.trim_ascii().starts_with(FORM_TYPE));
    let accepted = (200..300).contains(&answer.status);
    if case.source != "twilio" || judgement.verdict != Verdict::Valid || !accepted || !form {
        return None;
    }
    let variants = crate::oracle::twilio_variants(&case.body);
    if variants.is_empty() || rng.u32(0..2) == 0 {
        return None;
    }
    let (what, body, expected) = variants[rng.usize(..variants.len())].clone();
    let copy = Case {
        body,
        steps: [
            case.steps.clone(),
            vec![format!("re-sent re-encoded: {what}")],
        ]
        .concat(),
        ..case.clone()
    };
    let again = send_raw(port, &copy).await.map_err(|e| e.to_string());
    let right = match (&again, expected) {
        (Ok(again), CopyAnswer::Stored) => {
            again.status == answer.status && again.body == answer.body
        }
        (Ok(again), CopyAnswer::Refused(reason)) => {
            again.status == 400
                && serde_json::from_slice::<serde_json::Value>(&again.body)
                    .is_ok_and(|b| b["reason"] == reason)
        }
        (Err(_), _) => false,
    };
    Some(match (right, again) {
        (true, _) => Ok(()),
        (false, Ok(again)) => Err(format!(
            "a Twilio copy ({what}) not answered as the same event: {}",
            describe(&copy, judgement, &again)
        )),
        (false, Err(e)) => Err(format!("no answer ({e}) to a Twilio copy ({what})")),
    })
}

/// What the answer says, checked against the oracle.
fn check(case: &Case, judgement: &Judgement, answer: &Raw, tally: &mut Tally) {
    let reason = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|b| b["reason"].as_str().map(str::to_owned));
    let accepted = (200..300).contains(&answer.status);
    let outcome = match (&reason, accepted) {
        (_, true) => "accepted".to_owned(),
        (Some(reason), false) => format!("{} {reason}", answer.status),
        (None, false) if http_invalid(case) => {
            format!(
                "{} from the HTTP parser (a control character)",
                answer.status
            )
        }
        (None, false) => format!("{} without problem details", answer.status),
    };
    tally.cases += 1;
    *tally.by_source.entry(case.source).or_default() += 1;
    *tally
        .by_verdict
        .entry((judgement.verdict, outcome.clone()))
        .or_default() += 1;
    if std::env::var("INLET_CHAOS_FUZZ_SHOW")
        .is_ok_and(|v| v == format!("{:?} {outcome}", judgement.verdict))
    {
        println!("SHOW {}", describe(case, judgement, answer));
    }
    let mut fail = |why: &str| {
        tally
            .failures
            .push(format!("{why}: {}", describe(case, judgement, answer)))
    };
    // An SNS message naming a certificate its host does not serve (a mutated URL, the
    // expired one): 503, SNS would retry; never for a canonical matching one.
    let unserved = case.source == "sns"
        && reason.as_deref() == Some("certificate_unavailable")
        && judgement.verdict != Verdict::Valid;
    if answer.status >= 500 && !unserved {
        fail("a 5xx answer");
    }
    if accepted && judgement.verdict == Verdict::Invalid {
        fail("accepted without a matching signature");
    }
    if accepted && http_invalid(case) {
        fail("accepted with a control character in a header");
    }
    let signature_refusal = answer.status == 401
        || matches!(
            reason.as_deref(),
            Some("missing_signature" | "malformed_signature")
        );
    if judgement.verdict == Verdict::Valid && signature_refusal && !http_invalid(case) {
        fail("a canonical matching signature refused");
    }
    if accepted && case.source == "discord" && is_discord_ping(&case.body) {
        // A handshake: answered PONG, never an event.
        if answer.body != br#"{"type":1}"# {
            fail("a Discord PING not answered PONG");
        }
        tally.pongs += 1;
        return;
    }
    if accepted && case.source == "graph" {
        // A batch: answered 202 with no body; what is stored is checked after the campaign
        // (`check_graph_events`): the oracle does not redact.
        if answer.status != 202 || !answer.body.is_empty() {
            fail("a Graph batch not answered 202 with no body");
        }
        tally.graph_accepted += 1;
        return;
    }
    let empty_batch = matches!(case.source, "sendgrid" | "hubspot");
    if empty_batch && (accepted || reason.as_deref() == Some("fingerprint_mismatch")) {
        // A batch: answered an empty 200, each event stored under its id (SendGrid's
        // sg_event_id, HubSpot's digest). An event whose id came first with other bytes
        // answers 422, its siblings stored.
        if accepted && !answer.body.is_empty() {
            fail("a SendGrid or HubSpot batch not answered an empty 200");
        }
        for id in &judgement.signed_ids {
            let id = String::from_utf8_lossy(id).into_owned();
            tally.accepted.insert((case.source.to_owned(), id));
        }
        return;
    }
    if accepted && case.source == "adyen" {
        // A batch: answered [accepted], each item stored under its signed reading's digest.
        if answer.body != b"[accepted]" {
            fail("an Adyen batch not answered [accepted]");
        }
        for id in &judgement.signed_ids {
            let id = String::from_utf8_lossy(id).into_owned();
            tally.accepted.insert((case.source.to_owned(), id));
        }
        return;
    }
    if accepted {
        let receipt: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        let mut event_id = receipt["event_id"].as_str().unwrap_or_default().to_owned();
        if case.source == "discord" {
            // Discord gets an interaction response, not a receipt: the event is the
            // interaction's id (the body is the one signed, so unchanged).
            event_id = serde_json::from_slice::<serde_json::Value>(&case.body)
                .ok()
                .and_then(|b| b["id"].as_str().map(str::to_owned))
                .unwrap_or_default();
        }
        if rule_of(case.source) == Rule::Standard
            && !judgement.signed_ids.contains(event_id.as_bytes())
        {
            fail("stored under a webhook-id the matching signature does not cover");
        }
        // Twilio signs parameters, not bytes: a form's event is what was signed.
        if case.source == "twilio" && judgement.verdict == Verdict::Valid {
            let content_type = values(&case.headers, "content-type").first().copied();
            if event_id != crate::oracle::twilio_event_id(content_type, &case.body) {
                fail("a Twilio event stored under an id other than the sha256 of what was signed");
            }
        }
        tally.accepted.insert((case.source.to_owned(), event_id));
    }
}

async fn signature_fuzzer(backend: Backend) {
    let cases = knob("INLET_CHAOS_FUZZ_CASES", 10_000);
    let failures = campaign(backend, cases, Verifier::Healthy).await;
    crate::support::assert_none(&format!("signature fuzzer ({backend:?})"), &failures);
}

/// The instance the fuzzer runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verifier {
    Healthy,
    /// Broken on purpose (`inlet::faults`): any signed time accepted, however stale.
    IgnoresTime,
}

/// The fuzzer's self-check: against an instance whose verifier skips the timestamp
/// tolerance — a wrong verifier that still checks every MAC — a short campaign must
/// report requests accepted without a matching signature (a stale one is no match), and
/// nothing else. Against a healthy instance the same campaign reports none
/// ([`signature_fuzzer`]). A fuzzer that could not tell these apart would prove nothing.
async fn the_fuzzer_catches_a_broken_verifier(backend: Backend) {
    let failures = campaign(backend, 400, Verifier::IgnoresTime).await;
    let caught = failures
        .iter()
        .filter(|f| f.starts_with("accepted without a matching signature"))
        .count();
    crate::support::report(&format!(
        "signature fuzzer self-check ({backend:?}): the verifier that ignores the time was \
         caught {caught} times in 400 requests"
    ));
    assert!(
        caught > 0,
        "the fuzzer did not catch a verifier that ignores the signed time"
    );
    // Nothing the fault does not explain: a stale request accepted (for Standard Webhooks
    // also stored under an id no matching signature covers, since none matches).
    let explained = [
        "accepted without a matching signature",
        "stored under a webhook-id the matching signature does not cover",
    ];
    let unexplained: Vec<&String> = failures
        .iter()
        .filter(|f| !explained.iter().any(|e| f.starts_with(e)))
        .collect();
    assert!(unexplained.is_empty(), "{unexplained:#?}");
}

/// One fuzzing campaign of `cases` requests against a fresh instance; what it found wrong.
async fn campaign(backend: Backend, cases: u64, verifier: Verifier) -> Vec<String> {
    let mut rng = seeded(&format!("signature fuzzer ({backend:?}, {verifier:?})"));
    let began = Instant::now();
    let bus = FuzzBus::new(format!("inlet-fuzz-{}", crate::helpers::unique_name())).await;
    let options = TestOptions {
        extra_sources: more_sources_toml(),
        destination: Some(bus.destination()),
        ..TestOptions::default()
    };
    let app = Arc::new(spawn_app_with(backend, options).await);
    if verifier == Verifier::IgnoresTime {
        app.faults.break_time_check(true);
    }
    let port: u16 = app
        .address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the test server's port");
    let sources: Vec<&'static str> = SOURCES
        .iter()
        .chain(MORE_SOURCES.iter())
        .map(|(name, _)| *name)
        .collect();
    let tally: Arc<Mutex<Tally>> = Arc::default();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let (app, tally, sources) = (app.clone(), tally.clone(), sources.clone());
        let mut rng = fastrand::Rng::with_seed(rng.u64(..));
        let share = cases / WORKERS + u64::from(w < cases % WORKERS);
        workers.spawn(async move {
            let mut recent: Vec<Case> = Vec::new();
            for n in 0..share {
                let source = sources[rng.usize(..sources.len())];
                let now = app.now();
                let mut case = signed_case(
                    &app,
                    source,
                    &format!("fz{w}x{n}x{}", rng.u32(..)),
                    &mut rng,
                    now,
                );
                let mutations = [0, 1, 1, 1, 2, 2, 3][rng.usize(..7)];
                for _ in 0..mutations {
                    let step = mutate(&mut case, now.timestamp(), &mut rng, &recent);
                    case.steps.push(step);
                }
                let judgement =
                    oracle_source(source).judge(&case.headers, &case.body, app.now().timestamp());
                let answer = send_raw(port, &case)
                    .await
                    .unwrap_or_else(|e| panic!("no answer ({e}) to {}", case.steps.join("; ")));
                check(
                    &case,
                    &judgement,
                    &answer,
                    &mut tally.lock().expect("tally"),
                );
                if let Some(failure) =
                    resend_twilio_variant(port, &case, &judgement, &answer, &mut rng).await
                {
                    let mut tally = tally.lock().expect("tally");
                    match failure {
                        Ok(()) => tally.twilio_variants += 1,
                        Err(why) => tally.failures.push(why),
                    }
                }
                recent.push(case);
                if recent.len() > 8 {
                    recent.remove(0);
                }
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.expect("a fuzzing worker");
    }

    // Rejected requests wrote nothing: the events table holds the accepted events only.
    let rows: Vec<(String, String, Vec<u8>)> = {
        let pool = app.pool.clone();
        tokio::task::spawn_blocking(move || {
            use diesel::prelude::*;
            events::table
                .select((events::source, events::event_id, events::payload))
                .load::<(String, String, Vec<u8>)>(&mut pool.get().expect("a connection"))
                .expect("read events")
        })
        .await
        .expect("query")
    };
    let tally = std::mem::take(&mut *tally.lock().expect("tally"));
    let mut failures = tally.failures.clone();
    // Graph's events: checked from what is stored (the oracle does not redact).
    let (graph, rows): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(s, _, _)| s == "graph");
    failures.extend(check_graph_events(&graph, tally.graph_accepted));
    let stored: HashSet<(String, String)> = rows.into_iter().map(|(s, id, _)| (s, id)).collect();
    if stored != tally.accepted {
        failures.push(format!(
            "events table ({} rows) differs from the accepted events ({}): stored only {:?}",
            stored.len(),
            tally.accepted.len(),
            stored
                .difference(&tally.accepted)
                .take(5)
                .collect::<Vec<_>>()
        ));
    }
    // Every source's canonical requests got through: a source the fuzzer could never get
    // accepted would make its "nothing accepted without a signature" vacuous.
    for source in &sources {
        let accepted = tally.accepted.iter().filter(|(s, _)| s == source).count()
            + usize::from(*source == "graph" && tally.graph_accepted > 0);
        if accepted == 0 && tally.cases >= 50 * sources.len() as u64 {
            failures.push(format!("no request of source {source} was accepted"));
        }
    }
    // Where the stripe facts landed on the bus: the oracle's encoding, nowhere else.
    let (published, bus_failures) = bus.check(&app).await;
    failures.extend(bus_failures);
    bus.remove().await;
    let health = app.get("/healthz").await;
    if health.status != 200 {
        failures.push(format!(
            "/healthz answers {} after the fuzzing",
            health.status
        ));
    }

    let mut summary = String::new();
    for ((verdict, outcome), count) in &tally.by_verdict {
        summary.push_str(&format!(
            "\n  oracle {verdict:?} → inlet {outcome}: {count}"
        ));
    }
    let mut accepted_by_source: BTreeMap<&str, u64> = BTreeMap::new();
    for (source, _) in &tally.accepted {
        *accepted_by_source.entry(source.as_str()).or_default() += 1;
    }
    crate::support::report(&format!(
        "signature fuzzer ({backend:?}, {verifier:?}): {} requests in {:.1} s by {WORKERS} senders, \
         per source {:?}; {} accepted ({:?}), all with a matching signature; \
         {} Graph batches accepted, their stored notifications redacted and keyed on their digest; {} Discord PINGs answered PONG; {} Twilio forms re-sent re-encoded, each answered \
         as the same event; {published} stripe facts published onto NATS, each on the \
         subject the bus encoding gives; {} failures{summary}",
        tally.cases,
        began.elapsed().as_secs_f64(),
        tally.by_source,
        tally.accepted.len(),
        accepted_by_source,
        tally.graph_accepted,
        tally.pongs,
        tally.twilio_variants,
        failures.len(),
    ));
    failures
}

/// The oracle agrees with the published vectors and the providers' own SDKs, before it
/// is trusted to judge Inlet.
#[test]
fn the_oracle_agrees_with_the_published_vectors() {
    for file in [
        "signatures.json",
        "official-signatures.json",
        "official-providers.json",
        "official-ed25519.json",
        "official-plain-hmac.json",
        "official-batches.json",
        "official-dropbox.json",
        "official-asana.json",
        "official-hubspot.json",
        "official-braintree.json",
        "official-sns.json",
    ] {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(file);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("vectors")).expect("JSON");
        for vector in doc["vectors"].as_array().expect("vectors") {
            let rule = match vector["scheme"].as_str().expect("scheme") {
                "stripe" => Rule::Stripe,
                "github" => Rule::Github,
                "standard" => Rule::Standard,
                "shopify" => Rule::Shopify,
                "slack" => Rule::Slack,
                "paddle" => Rule::Paddle,
                "zoom" => Rule::Zoom,
                "square" => Rule::Square,
                "twilio" => Rule::Twilio,
                "discord" => Rule::Discord,
                "workos" => Rule::Workos,
                "mux" => Rule::Mux,
                "pagerduty" => Rule::Pagerduty,
                "linear" => Rule::Linear,
                "zendesk" => Rule::Zendesk,
                "adyen" => Rule::Adyen,
                "dropbox" => Rule::Dropbox,
                "sendgrid" => Rule::Sendgrid,
                "asana" => Rule::Asana,
                "hubspot" => Rule::Hubspot,
                "braintree" => Rule::Braintree,
                "sns" => Rule::Sns,
                other => panic!("{other}"),
            };
            // Discord's vectors name the application's public key; the others the secret
            // (for Standard Webhooks a whsec_ secret or a whpk_ public key).
            let secret = vector["secret"]
                .as_str()
                .or(vector["public_key"].as_str())
                .expect("secret or public_key");
            let url = vector["public_url"].as_str().unwrap_or_default().as_bytes();
            let mut source = rule.source(&[secret], TOLERANCE, url);
            if rule == Rule::Sns {
                source = sns_vector_source(vector);
            }
            // Adyen's vectors sign in the body: no headers.
            let no_headers = serde_json::Map::new();
            let headers: Headers = vector["headers"]
                .as_object()
                .unwrap_or(&no_headers)
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_bytes().to_vec(),
                        v.as_str().expect("value").as_bytes().to_vec(),
                    )
                })
                .collect();
            let now = (vector["timestamp"].as_i64())
                .or(vector["now"].as_i64())
                .unwrap_or(0);
            let body = vector["body"].as_str().expect("body").as_bytes();
            let expected = match vector["valid"].as_bool().unwrap_or(true) {
                // Twilio with a repeated parameter name: the canonical reading has none,
                // so a valid one is left to Inlet (which must accept it: its own tests).
                true if rule == Rule::Twilio && crate::oracle::repeats_a_param(body) => {
                    Verdict::Either
                }
                // SendGrid's library checks no time: stale to Inlet, never valid.
                true if rule == Rule::Sendgrid && sendgrid_stale(&headers, now) => Verdict::Invalid,
                _ if rule == Rule::Sns => sns_expected(vector),
                true => Verdict::Valid,
                false => Verdict::Invalid,
            };
            let judged = source.judge(&headers, body, now).verdict;
            assert_eq!(judged, expected, "{file}: {vector}");
            // Too old (where the time is signed), and signed by another secret: never valid.
            let too_old = source.judge(&headers, body, now + 10 * TOLERANCE).verdict;
            let expected_late = if rule.signs_timestamp() {
                Verdict::Invalid
            } else {
                expected
            };
            assert_eq!(too_old, expected_late, "{vector}");
            let stranger = OracleSource {
                active: vec![b"another secret".to_vec()],
                public_keys: vec![ed25519_public(&[0x77; 32]).to_vec()],
                topics: vec![b"arn:aws:sns:us-east-1:123456789012:another".to_vec()],
                ..source.clone()
            };
            assert_eq!(
                stranger.judge(&headers, body, now).verdict,
                Verdict::Invalid,
                "{vector}"
            );
            // Across kinds: a v1a signature labelled v1 (and back) matches nothing, and a
            // whpk_ key's bytes are no HMAC key. (An entry of another version may be read
            // as either kind: only lists of v1 and v1a entries are swapped.)
            let only_v1_and_v1a = values(&headers, "webhook-signature").iter().all(|list| {
                list.split(|b| *b == b' ')
                    .all(|e| e.starts_with(b"v1,") || e.starts_with(b"v1a,"))
            });
            if let Some(public) = rule
                .public_key(secret)
                .filter(|_| rule == Rule::Standard && only_v1_and_v1a)
            {
                let swapped: Headers = headers
                    .iter()
                    .map(|(n, v)| {
                        let v = String::from_utf8_lossy(v)
                            .replace("v1a,", "v1_,")
                            .replace("v1,", "v1a,")
                            .replace("v1_,", "v1,");
                        (n.clone(), v.into_bytes())
                    })
                    .collect();
                assert_eq!(
                    source.judge(&swapped, body, now).verdict,
                    Verdict::Invalid,
                    "{vector}"
                );
                let as_hmac = OracleSource {
                    active: vec![public],
                    public_keys: Vec::new(),
                    ..source.clone()
                };
                assert_eq!(
                    as_hmac.judge(&headers, body, now).verdict,
                    Verdict::Invalid,
                    "{vector}"
                );
            }
        }
    }
}

/// A copy whose `MessageStatus` absorbs a parameter ending in a newline (what CI found)
/// is expected refused as `invalid_event_type`; one absorbing plain text, answered stored.
#[test]
fn the_oracle_expects_a_status_that_absorbs_a_control_character_refused() {
    let absorbing = |body: &[u8]| {
        crate::oracle::twilio_variants(body)
            .into_iter()
            .find(|(what, _, _)| what.contains("absorbing"))
            .map(|(_, _, answer)| answer)
    };
    assert_eq!(
        absorbing(b"MessageSid=SM1&MessageStatus=queued&SmsSid=SM1%0A"),
        Some(CopyAnswer::Refused("invalid_event_type"))
    );
    assert_eq!(
        absorbing(b"MessageSid=SM1&MessageStatus=queued&SmsSid=SM1"),
        Some(CopyAnswer::Stored)
    );
}

/// Whether a SendGrid vector's timestamp is further than the tolerance from `now`.
fn sendgrid_stale(headers: &Headers, now: i64) -> bool {
    let signed = values(headers, SENDGRID_TIMESTAMP)
        .first()
        .and_then(|t| std::str::from_utf8(t).ok()?.parse::<i64>().ok());
    signed.is_some_and(|signed| (now - signed).abs() > TOLERANCE)
}

/// The stored-Graph-event check finds a secret as a `clientState` value however the name
/// is written or repeated, and only there.
#[test]
fn a_secret_counts_as_a_credential_only_under_client_state() {
    let s = "graph-current-state-0123456789";
    for held in [
        format!(r#"{{"clientState":"{s}"}}"#),
        format!(r#"{{"a":1, "clientState" : "{s}"}}"#),
        format!(r#"{{"client\u0053tate":"{s}"}}"#),
        format!(r#"{{"clientState":"[redacted]","clientState":"{s}"}}"#),
    ] {
        assert!(holds_as_client_state(&held, s), "{held}");
    }
    for content in [
        format!(r#"{{"clien4State":"{s}","clientState":"[redacted]"}}"#),
        format!(r#"{{"note":"{s}"}}"#),
        format!(r#"{{"clientState":"x{s}"}}"#),
        format!(r#"["{s}"]"#),
    ] {
        assert!(!holds_as_client_state(&content, s), "{content}");
    }
}

/// The certificate host every campaign's sns source fetches from (one per test process).
fn sns_host() -> &'static crate::helpers::CertificateHost {
    static HOST: std::sync::OnceLock<crate::helpers::CertificateHost> = std::sync::OnceLock::new();
    HOST.get_or_init(crate::helpers::CertificateHost::start)
}

/// The URL of the certificate of the fixtures' key `name` on the certificate host.
fn sns_certificate_url(name: &str) -> String {
    sns_host().url(&format!("/{name}-cert.pem"))
}

/// The oracle's sns source: the certificates of `active` keys at their URLs, the topic.
fn sns_oracle_source(active: &[&str]) -> OracleSource {
    let certificates = active
        .iter()
        .map(|name| {
            let pem = std::fs::read(crate::helpers::sns_fixture(&format!("{name}-cert.pem")))
                .expect("a certificate");
            (sns_certificate_url(name).into_bytes(), pem)
        })
        .collect();
    OracleSource {
        certificates,
        topics: vec![crate::helpers::SNS_TOPIC.as_bytes().to_vec()],
        ..Rule::Sns.source(&[], TOLERANCE, b"")
    }
}

/// A notification signed as SNS signs it with the fixtures' key `key`, at `at`, naming its
/// certificate's URL: now and then without a Subject, with a line break in its Message,
/// as either version.
fn sns_case(id: &str, key: &str, at: DateTime<Utc>, rng: &mut fastrand::Rng, step: String) -> Case {
    let text = ["{\"order\":1}", "line one\nline \"two\" é", "", "x"][rng.usize(..4)];
    let mut message = crate::helpers::SnsMessage::notification(id, text, at);
    if rng.bool() {
        message.subject = None;
    }
    let version = [1, 2][rng.usize(..2)];
    let body = message.signed(
        &format!("{key}-key.pem"),
        version,
        &sns_certificate_url(key),
    );
    let headers = crate::helpers::sns_headers(&message)
        .into_iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.into_bytes()))
        .collect();
    Case {
        source: "sns",
        headers,
        body,
        steps: vec![format!("{step}, SignatureVersion {version}")],
    }
}

/// The notification the body holds (its id, Message and Subject), when it still reads.
fn sns_message_of(body: &[u8]) -> Option<crate::helpers::SnsMessage> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |name: &str| value[name].as_str().map(str::to_owned);
    let mut message = crate::helpers::SnsMessage::notification(
        &text("MessageId")?,
        &text("Message")?,
        Utc::now(),
    );
    message.subject = text("Subject");
    message.timestamp = text("Timestamp")?;
    message.topic = text("TopicArn")?;
    Some(message)
}

/// Signs the body's notification again with the key `key`, at `at`, as either version;
/// now and then naming another key's certificate.
fn resign_sns(case: &mut Case, key: &str, at: DateTime<Utc>, rng: &mut fastrand::Rng) -> String {
    let Some(mut message) = sns_message_of(&case.body) else {
        return "re-sign skipped (the body no longer reads)".to_owned();
    };
    message.timestamp = at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let version = [1, 2][rng.usize(..2)];
    let [current, old, removed] = secrets("sns");
    let named = match rng.u32(0..5) {
        0 => [current, old, removed][rng.usize(..3)],
        _ => key,
    };
    case.body = message.signed(
        &format!("{key}-key.pem"),
        version,
        &sns_certificate_url(named),
    );
    format!(
        "re-signed with {key} at {}, version {version}, naming {named}'s certificate",
        message.timestamp
    )
}

/// A change SNS's signature covers or must not be fooled by: a signed member changed, the
/// topic another account's, the version relabelled, a member repeated, the body re-encoded
/// (the same signed message), Subject null, an unsubscribe link elsewhere.
fn mutate_sns(case: &mut Case, rng: &mut fastrand::Rng) -> String {
    let Ok(serde_json::Value::Object(mut members)) = serde_json::from_slice(&case.body) else {
        return "nothing (the body no longer reads)".to_owned();
    };
    let text = String::from_utf8_lossy(&case.body).into_owned();
    let (body, step) = match rng.u32(0..8) {
        0 => {
            let name = ["Message", "MessageId", "Timestamp", "Type"][rng.usize(..4)];
            let value = members
                .get(name)
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            members.insert(name.to_owned(), format!("{value}x").into());
            (serde_json::to_vec(&members), format!("{name} changed"))
        }
        1 => {
            let foreign = "arn:aws:sns:us-east-1:999999999999:inlet-orders";
            members.insert("TopicArn".to_owned(), foreign.into());
            (
                serde_json::to_vec(&members),
                "another account's topic".to_owned(),
            )
        }
        2 => {
            let version = ["1", "2", "3", " 1"][rng.usize(..4)];
            members.insert("SignatureVersion".to_owned(), version.into());
            (
                serde_json::to_vec(&members),
                format!("SignatureVersion {version:?}"),
            )
        }
        3 => {
            let name = ["MessageId", "Message", "TopicArn", "Signature"][rng.usize(..4)];
            let first = rng.bool();
            let repeated = match first {
                true => text.replacen('{', &format!("{{\"{name}\":\"decoy\","), 1),
                false => text.replacen('{', &format!("{{\"{name}\":\"decoy\",\"pad\":1,"), 1),
            };
            (
                Ok(repeated.into_bytes()),
                format!("{name} repeated before the real one"),
            )
        }
        4 => (
            serde_json::to_vec(&members),
            "re-encoded (compact)".to_owned(),
        ),
        5 => {
            members.insert("Subject".to_owned(), serde_json::Value::Null);
            (serde_json::to_vec(&members), "Subject null".to_owned())
        }
        6 => {
            let elsewhere = "https://attacker.example/?Action=Unsubscribe";
            members.insert("UnsubscribeURL".to_owned(), elsewhere.into());
            (
                serde_json::to_vec(&members),
                "an UnsubscribeURL elsewhere".to_owned(),
            )
        }
        _ => {
            let url = match rng.u32(0..3) {
                0 => "https://attacker.example/signing-cert.pem".to_owned(),
                1 => sns_certificate_url("missing"),
                _ => sns_certificate_url("other"),
            };
            members.insert("SigningCertURL".to_owned(), url.clone().into());
            (
                serde_json::to_vec(&members),
                format!("SigningCertURL {url}"),
            )
        }
    };
    case.body = body.unwrap_or_default();
    step
}

/// The oracle's source for a published SNS vector: its certificate at the URL its body
/// names, its topic.
fn sns_vector_source(vector: &serde_json::Value) -> OracleSource {
    let body: serde_json::Value =
        serde_json::from_str(vector["body"].as_str().expect("body")).expect("JSON");
    let url = body["SigningCertURL"].as_str().expect("a URL");
    let pem = vector["secret"].as_str().expect("a certificate");
    OracleSource {
        certificates: vec![(url.as_bytes().to_vec(), pem.as_bytes().to_vec())],
        topics: vec![vector["topic"].as_str().expect("topic").as_bytes().to_vec()],
        ..Rule::Sns.source(&[], TOLERANCE, b"")
    }
}

/// What the oracle says of a published SNS vector: `Valid` for a notification
/// sns-validator accepts; `Either` for a confirmation (handshakes, answered and never
/// stored, are not the oracle's to require); an UnsubscribeConfirmation the other way
/// round from the library, which checks it without its Token (AWS signs Token).
fn sns_expected(vector: &serde_json::Value) -> Verdict {
    let case = vector["case"].as_str().expect("case");
    let valid = vector["valid"] == true;
    match (
        case.starts_with("UnsubscribeConfirmation"),
        case.starts_with("SubscriptionConfirmation"),
        valid,
    ) {
        (true, _, true) => Verdict::Invalid,
        (true, _, false) => Verdict::Either,
        (_, true, true) => Verdict::Either,
        (_, _, true) => Verdict::Valid,
        (_, _, false) => Verdict::Invalid,
    }
}
