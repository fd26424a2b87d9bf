//! Durations as operators write them: `500ms`, `5s`, `30m`, `12h`, `35d`.
//!
//! Hand-written rather than `humantime`: the grammar is five units and whole numbers, and
//! `Display` prints the largest exact unit (`35d`, not `1month 4days 13h…`), which is
//! what the retention check and its error messages show.

use crate::error::ConfigError;
use std::fmt;
use std::time::Duration;

/// A duration written as `500ms`, `5s`, `30m`, `12h` or `35d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("'{text}' has no unit (use ms, s, m, h or d)"))?;
        let (number, unit) = text.split_at(split);
        let number: u64 = number
            .parse()
            .map_err(|_| format!("'{text}' does not start with a whole number"))?;
        let millis_per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => {
                return Err(format!(
                    "'{text}' has unknown unit '{unit}' (use ms, s, m, h or d)"
                ))
            }
        };
        number
            .checked_mul(millis_per_unit)
            .map(|ms| Self(Duration::from_millis(ms)))
            .ok_or_else(|| format!("'{text}' is too large"))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        let units = [
            (86_400_000, "d"),
            (3_600_000, "h"),
            (60_000, "m"),
            (1_000, "s"),
        ];
        for (size, unit) in units {
            if ms >= size && ms.is_multiple_of(size) {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

/// The setting `key`: `value` when given, else `default`, as a duration.
pub fn setting(
    key: &str,
    value: Option<&str>,
    default: &str,
) -> Result<HumanDuration, ConfigError> {
    HumanDuration::parse(value.unwrap_or(default)).map_err(|m| ConfigError::new(key, m))
}

/// [`setting`] as a `std::time::Duration`.
pub fn span(key: &str, value: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    setting(key, value, default).map(|d| d.0)
}
