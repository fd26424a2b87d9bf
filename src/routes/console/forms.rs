//! A console form's body: its fields, read in order.

/// A form body's fields, in order (repeated names kept: checkboxes).
pub fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(body).into_owned().collect()
}

/// The first value of `name`.
pub fn field<'f>(fields: &'f [(String, String)], name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value.as_str())
}
