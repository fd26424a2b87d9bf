//! The signed time, for the schemes that sign one: how a provider writes it, how a request's
//! value is read back, and the tolerance it is held to in both directions. One room, so
//! every timestamped scheme reads, checks and writes the time alike.

use super::{json_content_type, SignatureError, Unverified};
use chrono::{DateTime, SecondsFormat, Utc};
use std::time::Duration;

/// How a provider writes the signed time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// A whole number of seconds since the Unix epoch (`1627207200`).
    UnixSeconds,
    /// A whole number of milliseconds since the Unix epoch (WorkOS, HubSpot).
    UnixMillis,
    /// An RFC 3339 date and time (`2021-07-25T10:00:00Z`; any offset, fractions taken).
    Rfc3339,
}

impl TimeFormat {
    /// The signed time in `value`, in Unix seconds.
    pub(super) fn parse(self, header: &str, value: &[u8]) -> Result<i64, SignatureError> {
        match self {
            Self::UnixSeconds => parse_timestamp(header, value),
            Self::UnixMillis => Ok(parse_timestamp(header, value)?.div_euclid(1000)),
            Self::Rfc3339 => std::str::from_utf8(value)
                .ok()
                .and_then(|text| DateTime::parse_from_rfc3339(text.trim()).ok())
                .map(|time| time.timestamp())
                .ok_or_else(|| SignatureError::malformed(header, "not an RFC 3339 date and time")),
        }
    }

    /// A Unix time counted in this format's unit, in seconds (milliseconds rounded down).
    pub(super) fn seconds(self, count: i64) -> i64 {
        match self {
            Self::UnixMillis => count.div_euclid(1000),
            Self::UnixSeconds | Self::Rfc3339 => count,
        }
    }

    /// Refuses a signed time, counted in this format's unit, further than `tolerance` from
    /// `now` in either direction: to the millisecond for [`TimeFormat::UnixMillis`]
    /// (HubSpot's library counts milliseconds too), else to the second.
    pub(super) fn check(
        self,
        signed_at: i64,
        now: DateTime<Utc>,
        tolerance: Duration,
    ) -> Result<(), SignatureError> {
        let (skew, holds, per_second) = match self {
            Self::UnixMillis => {
                let skew = now.timestamp_millis().saturating_sub(signed_at);
                let limit = i64::try_from(tolerance.as_millis()).unwrap_or(i64::MAX);
                (skew, skew.saturating_abs() <= limit, 1000)
            }
            Self::UnixSeconds | Self::Rfc3339 => {
                let skew = now.timestamp().saturating_sub(signed_at);
                (skew, skew.unsigned_abs() <= tolerance.as_secs(), 1)
            }
        };
        match holds {
            true => Ok(()),
            false => Err(SignatureError::OutOfTolerance {
                signed_at: signed_at.div_euclid(per_second),
                skew_secs: skew / per_second,
                tolerance_secs: tolerance.as_secs(),
            }),
        }
    }

    /// `now` as the provider writes it.
    pub(super) fn write(self, now: DateTime<Utc>) -> String {
        match self {
            Self::UnixSeconds => now.timestamp().to_string(),
            Self::UnixMillis => now.timestamp_millis().to_string(),
            Self::Rfc3339 => now.to_rfc3339_opts(SecondsFormat::Secs, true),
        }
    }
}

/// Parses a signed Unix timestamp header value (a whole number, whatever it counts).
pub(super) fn parse_timestamp(header: &str, value: &[u8]) -> Result<i64, SignatureError> {
    std::str::from_utf8(value)
        .ok()
        .map(str::trim)
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or_else(|| SignatureError::malformed(header, "not a whole number of seconds"))
}

/// Refuses a signed timestamp (Unix seconds) further than `tolerance` from `now`, in
/// either direction.
pub(super) fn check_tolerance(
    signed_at: i64,
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    TimeFormat::UnixSeconds.check(signed_at, now, tolerance)
}

/// For a scheme that signs `"{timestamp}{body}"` with a private key (Discord, SendGrid):
/// the signature header's raw value, the timestamp header's, and the time it says.
pub(super) fn signature_and_timestamp<'r>(
    request: &Unverified<'r>,
    signature: &str,
    timestamp: &str,
) -> Result<(&'r [u8], &'r [u8], i64), SignatureError> {
    let signed = request.required(signature)?;
    let value = request.required(timestamp)?;
    Ok((signed, value, parse_timestamp(timestamp, value)?))
}

/// The headers of a scheme that signs `"{timestamp}{body}"` with a private key (Discord,
/// SendGrid), at `now`: the timestamp, the content type, and the signature `sign` makes of
/// the message (none when the key it holds does not parse).
pub(super) fn timestamp_signed_headers(
    (signature, timestamp): (&str, &str),
    body: &[u8],
    now: DateTime<Utc>,
    sign: impl FnOnce(&[u8]) -> Option<String>,
) -> Vec<(String, String)> {
    let at = TimeFormat::UnixSeconds.write(now);
    let message = [at.as_bytes(), body].concat();
    let mut headers = vec![(timestamp.to_owned(), at), json_content_type()];
    if let Some(signed) = sign(&message) {
        headers.push((signature.to_owned(), signed));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_applies_in_both_directions() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let five_minutes = Duration::from_secs(300);
        assert!(check_tolerance(1_000_000 - 300, now, five_minutes).is_ok());
        assert!(check_tolerance(1_000_000 + 300, now, five_minutes).is_ok());
        assert!(check_tolerance(1_000_000 - 301, now, five_minutes).is_err());
        assert!(check_tolerance(1_000_000 + 301, now, five_minutes).is_err());
        assert!(check_tolerance(i64::MIN, now, five_minutes).is_err());
        assert!(check_tolerance(i64::MAX, now, five_minutes).is_err());
    }

    #[test]
    fn millisecond_tolerance_counts_to_the_millisecond() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let five_minutes = Duration::from_secs(300);
        let at = 1_000_000_000;
        let check = |signed_at| TimeFormat::UnixMillis.check(signed_at, now, five_minutes);
        assert!(check(at - 300_000).is_ok());
        assert!(check(at + 300_000).is_ok());
        assert!(check(at - 300_001).is_err());
        assert!(check(at + 300_001).is_err());
        assert!(check(i64::MIN).is_err());
    }

    #[test]
    fn each_format_reads_what_it_writes() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        for format in [
            TimeFormat::UnixSeconds,
            TimeFormat::UnixMillis,
            TimeFormat::Rfc3339,
        ] {
            let written = format.write(now);
            assert_eq!(format.parse("t", written.as_bytes()), Ok(1_700_000_000));
        }
        assert_eq!(TimeFormat::UnixMillis.seconds(-1), -1);
        assert_eq!(TimeFormat::UnixMillis.seconds(1_999), 1);
    }
}
