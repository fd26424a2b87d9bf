//! A request as the `curl` command that sends it, what an engineer pastes into a
//! terminal: the console's "copy as curl" of a stored webhook (its stored headers, whose
//! credentials were redacted when stored and stay so) and `inlet sign`'s freshly signed
//! one. The body goes through `printf` (or `base64 -d` when it is not text) into
//! `--data-binary`, so that the bytes sent are the bytes signed — `curl -d @file` would
//! strip the newlines and break the signature.

use base64::Engine;

/// Headers curl sets itself, or that describe the hop rather than the request.
const LEFT_OUT: [&str; 6] = [
    "host",
    "content-length",
    "connection",
    "accept-encoding",
    "transfer-encoding",
    "expect",
];

/// The command that posts `body` with `headers` to `url`.
pub fn command(url: &str, headers: &[(String, String)], body: &[u8]) -> String {
    // Text goes as it is; bytes a terminal would not paste back unchanged (not UTF-8, or a
    // control character other than a newline: NUL, CR, TAB…) go as base64.
    let pastable = std::str::from_utf8(body)
        .ok()
        .filter(|text| !text.chars().any(|c| c.is_control() && c != '\n'));
    let input = match pastable {
        Some(text) => format!("printf '%s' {}", quote(text)),
        None => format!(
            "printf '%s' {} | base64 -d",
            quote(&base64::engine::general_purpose::STANDARD.encode(body))
        ),
    };
    let mut lines = vec![
        format!("{input} |"),
        format!("curl -sS -X POST {}", quote(url)),
    ];
    for (name, value) in headers {
        if !LEFT_OUT.contains(&name.to_ascii_lowercase().as_str()) {
            lines.push(format!("  -H {}", quote(&format!("{name}: {value}"))));
        }
    }
    lines.push("  --data-binary @-".to_owned());
    lines.join(" \\\n")
}

/// `text` in single quotes for a POSIX shell: a quote inside becomes `'\''`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_sends_the_same_bytes_and_headers() {
        let headers = vec![
            ("Host".to_owned(), "hooks.example.com".to_owned()),
            ("stripe-signature".to_owned(), "t=1,v1=ab".to_owned()),
            ("x-note".to_owned(), "it's".to_owned()),
        ];
        let shown = command(
            "https://hooks.example.com/webhooks/stripe",
            &headers,
            br#"{"a":"b'c"}"#,
        );
        assert_eq!(
            shown,
            "printf '%s' '{\"a\":\"b'\\''c\"}' | \\\n\
             curl -sS -X POST 'https://hooks.example.com/webhooks/stripe' \\\n  \
             -H 'stripe-signature: t=1,v1=ab' \\\n  -H 'x-note: it'\\''s' \\\n  \
             --data-binary @-"
        );
        let binary = command("http://h/webhooks/x", &[], &[0xff, 0x00]);
        assert!(
            binary.starts_with("printf '%s' '/wA=' | base64 -d |"),
            "{binary}"
        );
    }
}
