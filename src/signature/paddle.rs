//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]`, HMAC-SHA256 over
//! `"{ts}:{body}"` keyed with the endpoint's secret key (`pdl_ntfset_…`) as written. Every
//! `h1` is tried (Paddle sends one per active secret while a secret rotates); unknown
//! keys are ignored. Event id and type come from the JSON body (`event_id`, `event_type`).

use super::timestamped::SignatureList;
use super::TimeFormat;
use crate::secret::MinLength;

pub static PADDLE: SignatureList = SignatureList {
    header: "Paddle-Signature",
    separator: ';',
    written_separator: ";",
    timestamp_key: Some("ts"),
    signature_key: "h1",
    joiner: b":",
    time: TimeFormat::UnixSeconds,
    // Paddle issues `pdl_ntfset_`, the notification setting's id and a random part.
    secret: Some(MinLength {
        prefix: "pdl_ntfset_",
        prefix_required: false,
        min: 32,
        rule: "a Paddle secret key has at least 32 characters after pdl_ntfset_, \
               as Paddle issues them",
    }),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_without_a_timestamp_or_a_signature_are_refused() {
        assert!(PADDLE
            .parse_header(format!("h1={}", "aa".repeat(32)).as_bytes())
            .is_err());
        assert!(PADDLE.parse_header(b"ts=12").is_err());
        assert!(PADDLE.parse_header(b"ts=12;h1=00").is_err());
        assert!(PADDLE.parse_header(b"ts=x;h1=00").is_err());
        assert!(PADDLE.parse_header(b"ts=1;ts=2;h1=00").is_err());
        assert!(PADDLE.parse_header(b"").is_err());
        assert!(PADDLE.parse_header(&[0xff, 0xfe]).is_err());
    }
}
