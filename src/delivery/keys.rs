//! The names a delivery is keyed by, each a type of its own: a destination's name, and a
//! destination's key — its source's name and its own, which only together name it (two
//! sources may each have a destination `app`). A swapped pair does not compile.

use crate::provider::SourceName;
use std::fmt;

/// A destination's name, unique within its source (`[[sources.destinations]] name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestinationName(String);

impl DestinationName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DestinationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A destination as the outbox, the gates and the dispatcher key it: its source's name
/// and its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestinationKey {
    pub source: SourceName,
    pub destination: DestinationName,
}

impl DestinationKey {
    pub fn new(source: SourceName, destination: DestinationName) -> Self {
        Self {
            source,
            destination,
        }
    }

    /// The key of a row as the database holds it (`source`, `destination` columns).
    pub fn stored(source: String, destination: String) -> Self {
        Self::new(
            SourceName::stored(source),
            DestinationName::new(destination),
        )
    }

    /// Its source's name.
    pub fn source(&self) -> &str {
        self.source.as_str()
    }

    /// Its own name.
    pub fn name(&self) -> &str {
        self.destination.as_str()
    }
}

/// `source/destination`, as the logs and the console name a destination.
impl fmt::Display for DestinationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.source, self.destination)
    }
}
