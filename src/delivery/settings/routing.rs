//! Routing by event type: a destination's `events` filter says which event types it
//! receives. A pattern is an exact type (`invoice.paid`), a prefix ending in `*`
//! (`payment_intent.*`), or `*` alone (every type). No filter means every event, typed or
//! not; a filter never matches an event without a type, so untyped events go only to
//! destinations without one. Patterns that could never match are refused at startup.

use crate::error::ConfigError;
use crate::identity::MAX_IDENTITY_BYTES;
use std::fmt;

/// The wildcard, allowed only as a pattern's last character.
const WILDCARD: char = '*';

/// One `events` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// `invoice.paid`: this type only.
    Exact(String),
    /// `payment_intent.*` (stored without the `*`), or `*` alone (an empty prefix): every
    /// type that starts with it.
    Prefix(String),
}

impl Pattern {
    /// The pattern `text`, or why no event type could ever match it.
    fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("is empty: name an event type (invoice.paid), a prefix \
                        (payment_intent.*) or * for every type"
                .to_owned());
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "'{}' holds whitespace or a control character, which no provider's event \
                 type does",
                text.escape_default()
            ));
        }
        let (literal, prefix) = match text.strip_suffix(WILDCARD) {
            Some(literal) => (literal, true),
            None => (text, false),
        };
        if literal.contains(WILDCARD) {
            return Err(format!(
                "'{text}': * is a wildcard only at the end of a pattern (a prefix such as \
                 payment_intent.*); elsewhere no event type could match it"
            ));
        }
        if literal.len() > MAX_IDENTITY_BYTES {
            return Err(format!(
                "is {} bytes: an event type is at most {MAX_IDENTITY_BYTES} bytes, so it \
                 could never match",
                text.len()
            ));
        }
        Ok(if prefix {
            Self::Prefix(literal.to_owned())
        } else {
            Self::Exact(literal.to_owned())
        })
    }

    fn matches(&self, event_type: &str) -> bool {
        match self {
            Self::Exact(exact) => event_type == exact,
            Self::Prefix(prefix) => event_type.starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(exact) => f.write_str(exact),
            Self::Prefix(prefix) => write!(f, "{prefix}{WILDCARD}"),
        }
    }
}

/// Which events a destination receives: every one (no `events` key), or those whose type
/// one of the patterns matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventTypeFilter(Option<Vec<Pattern>>);

impl EventTypeFilter {
    /// The filter of `key` (`sources[0].destinations[1].events`) as written; `typed` says
    /// whether the source's events can carry a type at all.
    pub fn parse(
        key: &str,
        patterns: Option<Vec<String>>,
        typed: bool,
    ) -> Result<Self, ConfigError> {
        let Some(patterns) = patterns else {
            return Ok(Self(None));
        };
        if patterns.is_empty() {
            return Err(ConfigError::new(
                key,
                "names no event type, so this destination would receive nothing: remove \
                 `events` to receive every event",
            ));
        }
        if !typed {
            return Err(ConfigError::new(
                key,
                "this source's events carry no type (its scheme reads none and the source \
                 sets no event_type), so no event could match: remove `events`, or set the \
                 source's event_type",
            ));
        }
        let mut parsed: Vec<Pattern> = Vec::with_capacity(patterns.len());
        for (i, text) in patterns.iter().enumerate() {
            let entry = format!("{key}[{i}]");
            let pattern = Pattern::parse(text).map_err(|m| ConfigError::new(&entry, m))?;
            if parsed.contains(&pattern) {
                return Err(ConfigError::new(entry, format!("'{text}' is listed twice")));
            }
            parsed.push(pattern);
        }
        Ok(Self(Some(parsed)))
    }

    /// Whether an event of `event_type` goes to this destination. An untyped event goes
    /// only where there is no filter: no pattern, not even `*`, names it.
    pub fn matches(&self, event_type: Option<&str>) -> bool {
        match &self.0 {
            None => true,
            Some(patterns) => event_type.is_some_and(|t| patterns.iter().any(|p| p.matches(t))),
        }
    }

    /// Whether some events are left out (an `events` key is set).
    pub fn is_filtered(&self) -> bool {
        self.0.is_some()
    }
}

/// `every event`, or the patterns as written: `payment_intent.*, invoice.paid`.
impl fmt::Display for EventTypeFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(patterns) = &self.0 else {
            return f.write_str("every event");
        };
        for (i, pattern) in patterns.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{pattern}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &str = "sources[0].destinations[1].events";

    fn filter(patterns: &[&str]) -> EventTypeFilter {
        let patterns = patterns.iter().map(|p| (*p).to_owned()).collect();
        EventTypeFilter::parse(KEY, Some(patterns), true).expect("a valid filter")
    }

    fn refused(patterns: &[&str], typed: bool) -> ConfigError {
        let patterns = patterns.iter().map(|p| (*p).to_owned()).collect();
        EventTypeFilter::parse(KEY, Some(patterns), typed).expect_err("refused")
    }

    #[test]
    fn exact_prefix_and_any() {
        let routes = filter(&["payment_intent.*", "invoice.paid"]);
        assert!(routes.matches(Some("payment_intent.succeeded")));
        assert!(routes.matches(Some("payment_intent.")));
        assert!(routes.matches(Some("invoice.paid")));
        assert!(!routes.matches(Some("invoice.paid.late")));
        assert!(!routes.matches(Some("invoice.payment_failed")));
        assert!(!routes.matches(Some("payment_intent")));
        assert!(!routes.matches(Some("charge.payment_intent.x")));
        let any = filter(&["*"]);
        assert!(any.matches(Some("ping")) && any.matches(Some("2")));
        assert_eq!(routes.to_string(), "payment_intent.*, invoice.paid");
    }

    #[test]
    fn untyped_events_go_only_where_there_is_no_filter() {
        let every = EventTypeFilter::parse(KEY, None, false).expect("no filter is valid");
        assert!(!every.is_filtered());
        assert!(every.matches(None) && every.matches(Some("invoice.paid")));
        assert_eq!(every.to_string(), "every event");
        assert!(!filter(&["*"]).matches(None));
        assert!(!filter(&["invoice.paid"]).matches(None));
    }

    #[test]
    fn patterns_that_can_never_match_name_their_key() {
        let long = "x".repeat(MAX_IDENTITY_BYTES + 1);
        let long_prefix = format!("{long}*");
        for (patterns, key) in [
            (vec!["invoice.paid", ""], "events[1]"),
            (vec!["*.succeeded"], "events[0]"),
            (vec!["payment_*.succeeded"], "events[0]"),
            (vec!["**"], "events[0]"),
            (vec!["a", "b", "invoice paid"], "events[2]"),
            (vec!["invoice.paid\n"], "events[0]"),
            (vec![long.as_str()], "events[0]"),
            (vec![long_prefix.as_str()], "events[0]"),
            (vec!["invoice.*", "a", "invoice.*"], "events[2]"),
        ] {
            let error = refused(&patterns, true);
            assert_eq!(
                error.key,
                format!("sources[0].destinations[1].{key}"),
                "{patterns:?}: {}",
                error.message
            );
        }
        let longest = "x".repeat(MAX_IDENTITY_BYTES);
        assert!(filter(&[&longest, &format!("{longest}*")]).is_filtered());
    }

    #[test]
    fn an_empty_list_or_an_untyped_source_is_refused_with_the_fix() {
        let error = refused(&[], true);
        assert_eq!(error.key, KEY);
        assert!(
            error.message.contains("remove `events`"),
            "{}",
            error.message
        );
        let error = refused(&["*"], false);
        assert_eq!(error.key, KEY);
        assert!(error.message.contains("event_type"), "{}", error.message);
    }

    proptest! {
        #[test]
        fn a_prefix_matches_exactly_the_types_that_start_with_it(prefix in "[a-z._]{1,12}", kind in "[a-z._]{0,16}") {
            let routes = filter(&[&format!("{prefix}*")]);
            prop_assert_eq!(routes.matches(Some(&kind)), kind.starts_with(&prefix));
            let exact = filter(&[&prefix]);
            prop_assert_eq!(exact.matches(Some(&kind)), kind == prefix);
        }
    }
}
