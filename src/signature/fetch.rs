//! A URL a scheme asks the intake to fetch before or after verifying a request (Amazon
//! SNS's signing certificate, its subscription confirmation): a leaf the scheme trait and
//! the schemes share.

use std::sync::Arc;

/// An HTTPS URL to fetch for a source: a signing certificate, or a subscription to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub url: String,
    /// PEM certificates trusted as roots for this fetch beside the system's (`ca_file`).
    pub roots: Option<Arc<[u8]>>,
}
