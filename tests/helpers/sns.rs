//! Amazon SNS in tests: a local HTTPS host standing in for AWS's certificate host (its
//! server certificate signed by the test CA of `tests/fixtures/sns/`, trusted only through
//! a source's `ca_file`), which serves signing certificates and answers subscription
//! confirmations, counting each; and messages signed as SNS signs them, with the fixtures'
//! key standing in for AWS's.

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub const SNS_TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:inlet-orders";

/// A file of `tests/fixtures/sns/`.
pub fn sns_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sns")
        .join(name)
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(sns_fixture(name)).expect("an SNS fixture")
}

/// The local certificate host: `GET /<name>.pem` serves `tests/fixtures/sns/<name>.pem`
/// (404 when there is none; `/unavailable-cert.pem` 500, `/redirect-cert.pem` a redirect to
/// the signing certificate, `/big-cert.pem` 20 KiB), `GET /confirm…` answers 200 as SNS's
/// ConfirmSubscription does, anything else 500. Every request is counted by its path.
pub struct CertificateHost {
    pub port: u16,
    requests: Arc<Mutex<HashMap<String, usize>>>,
}

impl CertificateHost {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the certificate host");
        let port = listener.local_addr().expect("an address").port();
        let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).expect("TLS");
        acceptor
            .set_private_key_file(sns_fixture("server-key.pem"), SslFiletype::PEM)
            .expect("the server key");
        acceptor
            .set_certificate_chain_file(sns_fixture("server-cert.pem"))
            .expect("the server certificate");
        let acceptor = Arc::new(acceptor.build());
        let requests = Arc::new(Mutex::new(HashMap::new()));
        let counted = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let acceptor = Arc::clone(&acceptor);
                let counted = Arc::clone(&counted);
                std::thread::spawn(move || {
                    if let Ok(stream) = acceptor.accept(stream) {
                        serve(stream, &counted);
                    }
                });
            }
        });
        Self { port, requests }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// How many requests asked for `path` (its query included).
    pub fn requests(&self, path: &str) -> usize {
        let requests = self.requests.lock().expect("the counts");
        requests.get(path).copied().unwrap_or(0)
    }

    /// The `[[sources]]` table of an sns source named `name` taking [`SNS_TOPIC`] from this
    /// host, with the keys `settings`, then `extra` (its destinations).
    pub fn source_toml(&self, name: &str, settings: &str, extra: &str) -> String {
        format!(
            "\n[[sources]]\nname = \"{name}\"\nscheme = \"sns\"\n{settings}[sources.sns]\n\
             topics = [\"{SNS_TOPIC}\"]\ncertificate_hosts = [\"127.0.0.1:{}\"]\n\
             ca_file = \"{}\"\n{extra}",
            self.port,
            sns_fixture("ca.pem").display()
        )
    }
}

fn serve(
    mut stream: openssl::ssl::SslStream<std::net::TcpStream>,
    counted: &Mutex<HashMap<String, usize>>,
) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    *counted
        .lock()
        .expect("the counts")
        .entry(path.clone())
        .or_default() += 1;
    let special = match path.as_str() {
        "/unavailable-cert.pem" => Some(("500 Internal Server Error", String::new())),
        "/redirect-cert.pem" => Some(("302 Found\r\nLocation: /signing-cert.pem", String::new())),
        "/big-cert.pem" => Some(("200 OK", "A".repeat(20 * 1024))),
        _ => None,
    };
    let pem = path.strip_prefix('/').filter(|p| p.ends_with(".pem"));
    let (status, body) = if let Some((status, body)) = special {
        (status, body.into_bytes())
    } else if let Some(name) = pem {
        match std::fs::read(sns_fixture(name)) {
            Ok(pem) if !name.contains("key") => ("200 OK", pem),
            _ => ("404 Not Found", b"no such certificate".to_vec()),
        }
    } else if path.starts_with("/confirm") {
        let arn = format!("<ConfirmSubscriptionResponse><ConfirmSubscriptionResult><SubscriptionArn>{SNS_TOPIC}:1</SubscriptionArn></ConfirmSubscriptionResult></ConfirmSubscriptionResponse>");
        ("200 OK", arn.into_bytes())
    } else {
        ("500 Internal Server Error", b"failing on purpose".to_vec())
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes());
    let _ = stream.write_all(&body);
    let _ = stream.shutdown();
}

/// An SNS message as SNS posts it: its members, signed with `key` (a fixture's name,
/// `signing-key.pem`) as `SignatureVersion` `version`, naming `certificate_url`.
#[derive(Debug, Clone)]
pub struct SnsMessage {
    pub kind: &'static str,
    pub message_id: String,
    pub topic: String,
    pub subject: Option<String>,
    pub message: String,
    pub timestamp: String,
    pub subscribe_url: Option<String>,
    pub token: Option<String>,
}

impl SnsMessage {
    pub fn notification(
        message_id: &str,
        message: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        Self {
            kind: "Notification",
            message_id: message_id.to_owned(),
            topic: SNS_TOPIC.to_owned(),
            subject: Some("order placed".to_owned()),
            message: message.to_owned(),
            timestamp: at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            subscribe_url: None,
            token: None,
        }
    }

    /// A `SubscriptionConfirmation` (or `kind`) naming `subscribe_url`.
    pub fn confirmation(kind: &'static str, message_id: &str, subscribe_url: &str) -> Self {
        Self {
            kind,
            subject: None,
            message: format!("You have chosen to subscribe to the topic {SNS_TOPIC}."),
            subscribe_url: Some(subscribe_url.to_owned()),
            token: Some(
                "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92".to_owned(),
            ),
            ..Self::notification(message_id, "", chrono::Utc::now())
        }
    }

    /// The string SNS signs.
    pub fn string_to_sign(&self) -> String {
        let mut members = vec![
            ("Message", self.message.as_str()),
            ("MessageId", &self.message_id),
        ];
        if self.kind == "Notification" {
            members.extend(self.subject.as_deref().map(|s| ("Subject", s)));
            members.push(("Timestamp", &self.timestamp));
        } else {
            members.push((
                "SubscribeURL",
                self.subscribe_url.as_deref().unwrap_or_default(),
            ));
            members.push(("Timestamp", &self.timestamp));
            members.push(("Token", self.token.as_deref().unwrap_or_default()));
        }
        members.extend([("TopicArn", self.topic.as_str()), ("Type", self.kind)]);
        members
            .iter()
            .map(|(name, value)| format!("{name}\n{value}\n"))
            .collect()
    }

    /// The body: its members with `Signature` made by `key` as `version`, naming
    /// `certificate_url` — pretty-printed with `Type` first, as SNS writes it.
    pub fn signed(&self, key: &str, version: u8, certificate_url: &str) -> Vec<u8> {
        let pem = read_fixture(key);
        let key = PKey::private_key_from_pem(&pem).expect("a private key");
        let digest = match version {
            1 => MessageDigest::sha1(),
            _ => MessageDigest::sha256(),
        };
        let mut signer = openssl::sign::Signer::new(digest, &key).expect("a signer");
        signer
            .update(self.string_to_sign().as_bytes())
            .expect("signed");
        let signature = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            signer.sign_to_vec().expect("a signature"),
        );
        self.body_with(&version.to_string(), &signature, certificate_url)
    }

    /// The body with these signature members, as given.
    pub fn body_with(&self, version: &str, signature: &str, certificate_url: &str) -> Vec<u8> {
        let mut members = vec![
            ("Type", self.kind.to_owned()),
            ("MessageId", self.message_id.clone()),
        ];
        members.extend(self.token.clone().map(|t| ("Token", t)));
        members.push(("TopicArn", self.topic.clone()));
        members.extend(self.subject.clone().map(|s| ("Subject", s)));
        members.push(("Message", self.message.clone()));
        members.extend(self.subscribe_url.clone().map(|u| ("SubscribeURL", u)));
        members.extend([
            ("Timestamp", self.timestamp.clone()),
            ("SignatureVersion", version.to_owned()),
            ("Signature", signature.to_owned()),
            ("SigningCertURL", certificate_url.to_owned()),
        ]);
        let lines: Vec<String> = members
            .iter()
            .map(|(name, value)| {
                format!("  \"{name}\" : {}", serde_json::Value::from(value.as_str()))
            })
            .collect();
        format!("{{\n{}\n}}", lines.join(",\n")).into_bytes()
    }
}

/// The headers SNS sends with `message`.
pub fn sns_headers(message: &SnsMessage) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "text/plain; charset=UTF-8".to_owned()),
        ("x-amz-sns-message-type", message.kind.to_owned()),
        ("x-amz-sns-message-id", message.message_id.clone()),
        ("x-amz-sns-topic-arn", message.topic.clone()),
    ]
}
