//! The retention check: a dedupe store whose records expire before the last copy of an
//! event can arrive is a cache of recent successes, not a guarantee. The effective replay
//! horizon is the widest of the configured `retention.replay_horizon` and every source's
//! horizon (its scheme's documented retry and resend window, or its own
//! `replay_horizon`); `retention.events` must be strictly longer.

use crate::duration::HumanDuration;
use std::fmt;

/// One number of the audit and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    pub name: String,
    pub value: HumanDuration,
    pub origin: String,
}

/// The numbers and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionCheck {
    /// `retention.events`.
    pub events: HumanDuration,
    /// Every horizon considered.
    pub horizons: Vec<CheckLine>,
    /// The operator API's Idempotency-Key window.
    pub operator_keys: HumanDuration,
    /// How long the audit trail of operator actions is kept.
    pub audit_trail: HumanDuration,
}

impl RetentionCheck {
    /// The widest horizon (zero when there is none).
    pub fn effective_horizon(&self) -> Option<&CheckLine> {
        self.horizons.iter().max_by_key(|line| line.value)
    }

    /// Whether event rows outlive every copy that can still arrive.
    pub fn passes(&self) -> bool {
        self.effective_horizon()
            .is_none_or(|horizon| self.events > horizon.value)
    }
}

impl fmt::Display for RetentionCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<52} {:>8}  from", "number", "value")?;
        let events = CheckLine {
            name: "event retention (retention.events)".to_owned(),
            value: self.events,
            origin: "configuration".to_owned(),
        };
        let keys = CheckLine {
            name: "operator Idempotency-Keys (retention.operator_keys)".to_owned(),
            value: self.operator_keys,
            origin: "configuration (at least 24h)".to_owned(),
        };
        let trail = CheckLine {
            name: "audit trail of operator actions (retention.audit)".to_owned(),
            value: self.audit_trail,
            origin: "configuration (at least 7d)".to_owned(),
        };
        for line in std::iter::once(&events)
            .chain(&self.horizons)
            .chain([&keys, &trail])
        {
            writeln!(
                f,
                "{:<52} {:>8}  {}",
                line.name,
                line.value.to_string(),
                line.origin
            )?;
        }
        match self.effective_horizon() {
            Some(horizon) if self.passes() => write!(
                f,
                "ok: events are kept {} > the effective replay horizon {} ({})",
                self.events, horizon.value, horizon.name
            ),
            Some(horizon) => write!(
                f,
                "REFUSED: events are kept {} but a copy can still arrive after {} ({}): \
                 raise retention.events above it, or a late duplicate would find no stored answer",
                self.events, horizon.value, horizon.name
            ),
            None => write!(f, "ok: no replay horizon applies"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, value: &str) -> CheckLine {
        CheckLine {
            name: name.to_owned(),
            value: HumanDuration::parse(value).unwrap(),
            origin: "test".to_owned(),
        }
    }

    #[test]
    fn the_widest_horizon_decides_and_equality_is_refused() {
        let mut audit = RetentionCheck {
            events: HumanDuration::parse("35d").unwrap(),
            horizons: vec![
                line("configured", "7d"),
                line("stripe", "30d"),
                line("github", "3d"),
            ],
            operator_keys: HumanDuration::parse("24h").unwrap(),
            audit_trail: HumanDuration::parse("400d").unwrap(),
        };
        assert_eq!(audit.effective_horizon().unwrap().name, "stripe");
        assert!(audit.passes());
        audit.events = HumanDuration::parse("30d").unwrap();
        assert!(!audit.passes(), "the window must be strictly longer");
        let text = audit.to_string();
        assert!(
            text.contains("REFUSED") && text.contains("30d") && text.contains("stripe"),
            "{text}"
        );
    }
}
