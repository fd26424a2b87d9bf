//! openapi.json is the contract: every reason the server can give is in it, each
//! operation's reasons fit their status, the webhook route names every scheme's headers,
//! the server holds requests to the document's rules (and no stricter), and the check
//! that holds every answer of this suite to the document catches what it should.

use crate::helpers::{contract, spawn_app, stripe_event, Backend};
use crate::on_both_backends;
use inlet::routes::Reason;
use serde_json::{json, Value};
use std::collections::BTreeSet;

on_both_backends!(the_server_takes_what_the_document_allows_and_refuses_what_it_does_not);

fn document() -> Value {
    serde_json::from_str(inlet::routes::OPENAPI).expect("openapi.json")
}

/// Every (path, method, status, reasons) the document lists a reason enum for.
fn documented_reasons(document: &Value) -> Vec<(String, String, u16, Vec<String>)> {
    let mut found = Vec::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                let response = match response["$ref"].as_str() {
                    Some(reference) => document
                        .pointer(reference.trim_start_matches('#'))
                        .expect("a $ref into the document"),
                    None => response,
                };
                let schema = &response["content"]["application/problem+json"]["schema"];
                let reasons = (schema["allOf"].as_array().into_iter().flatten())
                    .filter_map(|part| part["properties"]["reason"]["enum"].as_array())
                    .flatten()
                    .filter_map(|reason| reason.as_str().map(str::to_owned))
                    .collect::<Vec<_>>();
                let status = status.parse().expect("a status");
                found.push((path.clone(), method.clone(), status, reasons));
            }
        }
    }
    found
}

#[test]
fn every_reason_the_server_can_give_is_in_the_document() {
    let document = document();
    let listed: BTreeSet<&str> =
        (document["components"]["schemas"]["Problem"]["properties"]["reason"]["enum"].as_array())
            .expect("Problem.reason's enum")
            .iter()
            .filter_map(Value::as_str)
            .collect();
    let mut codes: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.code()).collect();
    codes.insert("config_refused");
    assert_eq!(listed, codes);
}

#[test]
fn each_operations_reasons_are_known_and_fit_their_status() {
    let document = document();
    let mut checked = 0;
    for (path, method, status, reasons) in documented_reasons(&document) {
        if status < 400 || (path == "/admin/reload" && status == 422) {
            continue;
        }
        assert!(!reasons.is_empty(), "{method} {path} {status}: no reasons");
        for code in reasons {
            let reason = (Reason::ALL.iter())
                .find(|r| r.code() == code)
                .unwrap_or_else(|| panic!("{method} {path} {status}: unknown reason {code}"));
            assert_eq!(reason.status().as_u16(), status, "{method} {path} {code}");
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn the_webhook_route_names_every_schemes_headers() {
    let document = document();
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("securitySchemes");
    let of = |name: &str| schemes[name]["x-inlet-scheme"].as_str().map(str::to_owned);
    let alternatives = document["paths"]["/webhooks/{source}"]["post"]["security"]
        .as_array()
        .expect("the webhook route's security");
    let mut named = BTreeSet::new();
    for alternative in alternatives {
        let names: BTreeSet<_> = alternative
            .as_object()
            .expect("a requirement")
            .keys()
            .map(|name| of(name).unwrap_or_else(|| panic!("{name}: no x-inlet-scheme")))
            .collect();
        assert_eq!(names.len(), 1, "one scheme per alternative: {alternative}");
        named.extend(names);
    }
    // A scheme that signs inside the body has no header to list: named apart, and it
    // really signs no header and does sign the body.
    let body_signed = document["paths"]["/webhooks/{source}"]["post"]["x-inlet-body-signed"]
        .as_array()
        .expect("x-inlet-body-signed");
    for entry in body_signed {
        let name = entry["x-inlet-scheme"].as_str().expect("a scheme name");
        let profile = inlet::provider::PROFILES
            .iter()
            .find(|profile| profile.name == name)
            .unwrap_or_else(|| panic!("{name}: no such scheme"));
        assert_eq!(
            signed_header_names(profile),
            Some(BTreeSet::new()),
            "{name}"
        );
        assert!(named.insert(name.to_owned()), "{name} listed twice");
    }
    let profiles: BTreeSet<String> = (inlet::provider::PROFILES.iter())
        .map(|profile| profile.name.to_owned())
        .collect();
    assert_eq!(named, profiles);
}

/// The headers `profile`'s scheme signs a request with (`inlet sign`'s), when its
/// headers are fixed (`hmac` and `header_token` sources name their own).
fn signed_header_names(profile: &inlet::provider::Profile) -> Option<BTreeSet<String>> {
    use inlet::provider::Signing;
    let built;
    let scheme: &dyn inlet::signature::Scheme = match profile.signing {
        Signing::Fixed(scheme) => scheme,
        Signing::PublicUrl(build) => {
            let url = inlet::signature::PublicUrl::parse("https://example.com/w".to_owned());
            built = build(url.expect("a URL"));
            built.scheme()
        }
        Signing::Hmac | Signing::HeaderToken => return None,
        // AWS signs inside the body with its certificate's key: no header, nothing Inlet signs.
        Signing::Certificate => return Some(BTreeSet::new()),
    };
    let secret = match profile.name {
        "adyen" => "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "discord" => "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "sendgrid" => "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtWjUWtHPcNxl/6OPNFvkHCOv8RXQz90eUeMlX6nq02ShRANCAATE6OCXmEpKa7jSlBApptpM7pizdOs0oG45I4z50BAg6Rpi5K4m+24XhJxG2wJWPdIbNx1z3X+yFBfMztgV60vI",
        "basic" => "inlet:a-basic-credential-0123456789",
        "braintree" => "dgq6r8pwk3s7xv2m:4f0c2b7e9a1d83c56e0b9f7a2d4c8e15",
        _ => "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    };
    let event = inlet::signature::EventToSign {
        id: "evt_1".to_owned(),
        event_type: "thing.happened".to_owned(),
    };
    let secret = inlet::secret::Secret::new(secret);
    // Either body-signing scheme's envelope: Adyen's items, Graph's notifications.
    let body =
        b"{\"notificationItems\":[{\"NotificationRequestItem\":{\"amount\":{}}}],\"value\":[{}]}";
    if let Some(signed) = scheme.sign_body(body, &secret) {
        assert!(
            signed.is_ok_and(|signed| signed != body),
            "{}",
            profile.name
        );
    }
    let headers = scheme.sign(inlet::signature::ToSign::new(
        b"{\"id\":\"evt_1\"}",
        &secret,
        chrono::Utc::now(),
        &event,
    ));
    Some(
        headers
            .into_iter()
            .map(|(name, _)| name.to_ascii_lowercase())
            .collect(),
    )
}

#[test]
fn every_documented_webhook_header_is_one_its_scheme_signs_with() {
    let document = document();
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("securitySchemes");
    let mut checked = 0;
    for profile in inlet::provider::PROFILES.iter() {
        let Some(signed) = signed_header_names(profile) else {
            continue;
        };
        for scheme in schemes.values() {
            if scheme["x-inlet-scheme"] != profile.name {
                continue;
            }
            let header = scheme["name"].as_str().unwrap_or("authorization");
            let header = header.to_ascii_lowercase();
            assert!(
                signed.contains(&header),
                "{}: {header} not in {signed:?}",
                profile.name
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn every_mutating_operator_call_documents_its_idempotency_key() {
    let document = document();
    for path in [
        "/admin/replay",
        "/admin/deliveries/requeue",
        "/admin/deliveries/discard",
        "/admin/bulk",
    ] {
        let parameters = document["paths"][path]["post"]["parameters"]
            .as_array()
            .expect("parameters");
        let named = parameters.iter().any(|parameter| {
            let parameter = match parameter["$ref"].as_str() {
                Some(reference) => document
                    .pointer(reference.trim_start_matches('#'))
                    .expect("a $ref into the document"),
                None => parameter,
            };
            parameter["name"] == "Idempotency-Key" && parameter["in"] == "header"
        });
        assert!(named, "{path}: {parameters:?}");
    }
}

/// Runs `check` and says whether it refused.
fn refuses(method: &str, path: &str, status: u16, media: &str, body: &str) -> bool {
    let (method, path, media, body) = (
        method.to_owned(),
        path.to_owned(),
        media.to_owned(),
        body.to_owned(),
    );
    std::panic::catch_unwind(move || {
        contract::check(&method, &path, status, Some(&media), body.as_bytes())
    })
    .is_err()
}

#[test]
fn the_contract_check_catches_what_the_document_does_not_allow() {
    let problem = |reason: &str, status: u16| {
        json!({ "type": format!("urn:inlet:problem:{reason}"), "title": "t", "status": status,
                "reason": reason, "detail": "d" })
        .to_string()
    };
    let json = "application/json";
    let events = r#"{"events": [], "next_cursor": null}"#;
    assert!(!refuses("GET", "/admin/events", 200, json, events));
    assert!(refuses(
        "GET",
        "/admin/events",
        200,
        json,
        r#"{"events": 5}"#
    ));
    assert!(
        refuses("GET", "/admin/events", 418, json, events),
        "a status not listed"
    );
    assert!(
        refuses("GET", "/admin/events", 200, "text/html", events),
        "a media type"
    );
    let problem_json = "application/problem+json";
    let refused = problem("invalid_request", 400);
    assert!(!refuses(
        "GET",
        "/admin/events",
        400,
        problem_json,
        &refused
    ));
    let elsewhere = problem("bad_signature", 400);
    assert!(
        refuses("GET", "/admin/events", 400, problem_json, &elsewhere),
        "a reason not listed"
    );
    let gone = problem("unknown_event", 404);
    assert!(!refuses(
        "GET",
        "/admin/events/stripe/evt_1",
        404,
        problem_json,
        &gone
    ));
    assert!(
        !refuses("GET", "/console/events", 200, "text/html", "<p>"),
        "not in the document"
    );
}

/// The server takes what the document allows — a whole number written `2.0`, a window
/// that ends before it starts, null for an absent field — and refuses, with 400, what it
/// does not: a status no row has, a control character, an empty id, a limit of 0.
async fn the_server_takes_what_the_document_allows_and_refuses_what_it_does_not(backend: Backend) {
    let app = spawn_app(backend).await;
    app.post_stripe(&stripe_event("evt_doc_1", "invoice.paid", "in_1"))
        .await
        .assert_status(200);
    let inverted =
        "/admin/events?status=processed&since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z";
    let everything = "/admin/events?status=processed&since=0001-01-01T00:00:00%2B01:00&cursor=-9999999999999999999";
    for (path, found) in [(inverted, 0), (everything, 1)] {
        let reply = app.admin(path, None, None).await;
        reply.assert_status(200);
        assert_eq!(
            reply.json()["events"].as_array().map(Vec::len),
            Some(found),
            "{path}"
        );
    }
    for path in [
        "/admin/deliveries?status=dead&source=stripe",
        "/admin/audit?operator=operator",
    ] {
        app.admin(path, None, None).await.assert_status(200);
    }
    for path in [
        "/admin/events?status=failed",
        "/admin/deliveries?status=null",
        "/admin/events?source=a%01b",
        "/admin/events/%01/evt_doc_1",
    ] {
        app.admin(path, None, None)
            .await
            .assert_problem(400, "invalid_request");
    }
    let long = "é".repeat(255);
    let reply = app
        .admin(&format!("/admin/events?type={long}"), None, None)
        .await;
    reply.assert_status(200);
    assert_eq!(
        reply.json()["events"],
        json!([]),
        "a value longer than any stored matches nothing"
    );
    let taken = [
        json!({ "ids": [1.0, 2], "limit": null }),
        json!({ "filter": { "source": "stripe", "destination": null }, "limit": 2.0 }),
        json!({ "ids": [7], "filter": null }),
    ];
    for (i, body) in taken.iter().enumerate() {
        let key = format!("taken-{i}");
        let reply = app
            .admin("/admin/deliveries/requeue", Some(body), Some(&key))
            .await;
        reply.assert_status(200);
    }
    let refused = [
        (
            "/admin/deliveries/requeue",
            json!({ "filter": {}, "limit": 0 }),
        ),
        ("/admin/deliveries/discard", json!({ "ids": [1.5] })),
        (
            "/admin/deliveries/discard",
            json!({ "ids": [1], "filter": {} }),
        ),
        (
            "/admin/replay",
            json!({ "events": [{ "source": "stripe", "event_id": "" }] }),
        ),
        ("/admin/replay", json!({ "filter": {}, "limit": 0 })),
        (
            "/admin/replay",
            json!({ "events": [["stripe", "evt_doc_1"]] }),
        ),
        (
            "/admin/deliveries/requeue",
            json!({ "filter": [null, null] }),
        ),
        (
            "/admin/deliveries/requeue",
            json!({ "filter": { "status": "pending" } }),
        ),
        ("/admin/deliveries/discard", json!([[1], null, null])),
    ];
    for (i, (path, body)) in refused.iter().enumerate() {
        let key = format!("refused-{i}");
        app.admin(path, Some(body), Some(&key))
            .await
            .assert_problem(400, "invalid_request");
    }
}
