//! [`ConfigError`]: a configuration that cannot run, naming the key at fault. (Refused
//! requests are each module's own error enum, turned into problem+json at the HTTP edge,
//! `routes::problem`.)

/// A configuration that could not be loaded or is not safe to run.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}
