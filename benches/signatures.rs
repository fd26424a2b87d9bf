//! Signature verification per scheme at 1 KiB and 64 KiB, and event-id extraction.
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
            };
            let now = Utc::now();
            group.bench_with_input(BenchmarkId::new(scheme, size), &body, |b, body| {
                b.iter(|| {
                    let verified =
                        source
                            .scheme
                            .scheme()
                            .verify(Unverified::new(&headers, body), keys, now);
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
        };
        let verified = source
            .scheme
            .scheme()
            .verify(Unverified::new(&headers, &body), keys, Utc::now())
            .expect("verifies");
        group.bench_function(scheme, |b| {
            b.iter(|| black_box(Identity::locate(&verified, &source.locators).is_ok()))
        });
    }
    group.finish();
}

criterion_group!(benches, verification, extraction);
criterion_main!(benches);
