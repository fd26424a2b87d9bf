//! Shared by the signature test binaries: headers as a verifier receives them.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

/// `headers` as an actix `HeaderMap`, repeats kept in order.
pub fn header_map(headers: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_bytes(value.as_bytes()).expect("header value"),
        );
    }
    map
}
