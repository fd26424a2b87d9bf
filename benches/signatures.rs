//! Signature verification per scheme at 1 KiB and 64 KiB, event-id extraction, a Stripe
//! event's fingerprint, and the refusal of a hostile signature list.
//! `cargo bench --bench signatures`.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use chrono::Utc;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use inlet::config::Settings;
use inlet::identity::Identity;
use inlet::provider::SourceSettings;
use inlet::signature::{EventToSign, Keys, Unverified};
use std::hint::black_box;

const SCHEMES: [&str; 6] = ["stripe", "github", "standard", "shopify", "slack", "hmac"];

fn source(scheme: &str) -> SourceSettings {
    let extra = if scheme == "hmac" {
        "event_id = \"header:X-Id\"\nreplay_horizon = \"1d\"\n[sources.hmac]\nheader = \"X-Sig\"\nprefix = \"sha256=\"\ntimestamp_header = \"X-Ts\"\n"
    } else {
        ""
    };
    let toml = format!(
        "[[sources]]\nname = \"s\"\nscheme = \"{scheme}\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n{extra}"
    );
    Settings::from_toml(&toml).expect("valid").sources.remove(0)
}

fn body(bytes: usize) -> Vec<u8> {
    let head = r#"{"id":"evt_bench","event_id":"evt_bench","type":"bench.event","data":{"object":{"id":"obj_1"}},"pad":""#;
    format!(
        "{head}{}\"}}",
        "x".repeat(bytes.saturating_sub(head.len() + 2))
    )
    .into_bytes()
}

fn signed(source: &SourceSettings, body: &[u8]) -> HeaderMap {
    let event = EventToSign {
        id: "evt_bench".into(),
        event_type: "bench.event".into(),
    };
    let mut map = HeaderMap::new();
    for (name, value) in inlet::cli::signed_headers_for(source, body, Utc::now(), &event) {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(&value).expect("value"),
        );
    }
    map
}

fn verification(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify");
    for size in [1024, 64 * 1024] {
        let body = body(size);
        group.throughput(Throughput::Bytes(size as u64));
        for scheme in SCHEMES {
            let source = source(scheme);
            let headers = signed(&source, &body);
            let keys = Keys {
                secrets: &source.secrets,
                tolerance: source.tolerance,
                now: Utc::now(),
            };
            group.bench_with_input(BenchmarkId::new(scheme, size), &body, |b, body| {
                b.iter(|| {
                    let verified = source
                        .provider
                        .scheme()
                        .verify(Unverified::new(&headers, body), keys);
                    black_box(verified.is_ok())
                })
            });
        }
    }
    group.finish();
}

fn extraction(c: &mut Criterion) {
    let mut group = c.benchmark_group("event id");
    let body = body(1024);
    for scheme in ["stripe", "github", "slack"] {
        let source = source(scheme);
        let headers = signed(&source, &body);
        let keys = Keys {
            secrets: &source.secrets,
            tolerance: source.tolerance,
            now: Utc::now(),
        };
        let verified = source
            .provider
            .scheme()
            .verify(Unverified::new(&headers, &body), keys)
            .expect("verifies");
        group.bench_function(scheme, |b| {
            b.iter(|| black_box(Identity::locate(&verified, &source.locators).is_ok()))
        });
    }
    group.finish();
}

/// A Stripe event's fingerprint (its canonical JSON without `pending_webhooks`, hashed), of
/// the example payment event: from the body as the identity already parsed it, which
/// ingest does, beside the parse it saves.
fn fingerprints(c: &mut Criterion) {
    let mut group = c.benchmark_group("stripe fingerprint");
    let body = include_bytes!("../examples/events/payment_intent.succeeded.json");
    let document: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    group.bench_function("from the parsed body", |b| {
        b.iter(|| black_box(inlet::provider::fingerprint::stripe(&document)))
    });
    group.bench_function("the parse it saves", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(body).is_ok()))
    });
    group.finish();
}

/// The refusal of a hostile `webhook-signature`: well-formed wrong entries (HMAC and
/// Ed25519 alternately), at the bound and at the 1,300 (120 KB) of the reported attack.
/// Over the bound the list is refused before anything is checked, so the long one costs
/// less than the short one.
fn hostile_lists(c: &mut Criterion) {
    use base64::Engine;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut group = c.benchmark_group("hostile webhook-signature");
    let mut source = source("standard");
    // A source moving to asymmetric signatures: v1a entries are checked too.
    source.secrets.push(inlet::secret::Secret::new(format!(
        "whpk_{}",
        encode(&PUBLIC_KEY)
    )));
    let body = body(1024);
    for entries in [inlet::signature::MAX_SIGNATURES, 1_300] {
        let list = (0..entries)
            .map(|i| match i % 2 {
                0 => format!("v1,{}", encode(&[i as u8; 32])),
                _ => format!("v1a,{}", encode(&[i as u8; 64])),
            })
            .collect::<Vec<_>>()
            .join(" ");
        let mut headers = signed(&source, &body);
        headers.insert(
            HeaderName::from_static("webhook-signature"),
            HeaderValue::from_str(&list).expect("value"),
        );
        let keys = Keys {
            secrets: &source.secrets,
            tolerance: source.tolerance,
            now: Utc::now(),
        };
        group.bench_function(BenchmarkId::from_parameter(entries), |b| {
            b.iter(|| {
                let verified = source
                    .provider
                    .scheme()
                    .verify(Unverified::new(&headers, &body), keys);
                black_box(verified.is_err())
            })
        });
    }
    group.finish();
}

/// RFC 8032 test 1's public key: a valid, full-order point.
const PUBLIC_KEY: [u8; 32] = [
    0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a,
    0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
];

criterion_group!(
    benches,
    verification,
    extraction,
    fingerprints,
    hostile_lists
);
criterion_main!(benches);
