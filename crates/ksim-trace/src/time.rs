//! Trace times are milliseconds since the Unix epoch; the API and the header carry
//! `google.protobuf.Timestamp`. These convert between the two and read the clock.

/// The earliest time a trace's records may carry: the epoch. Times are written as RFC 3339,
/// which has no way to say "before 1970" that every reader takes.
pub const MIN_MS: i64 = 0;
/// The latest: 9999-12-31T23:59:59.999Z, the last instant RFC 3339 (and so Kubernetes and
/// `ksim trace inspect`) can write.
pub const MAX_MS: i64 = 253_402_300_799_999;

/// Whether `ms` lies in [`MIN_MS`]..=[`MAX_MS`], the times a trace ksim writes may hold.
pub fn in_range(ms: i64) -> bool {
    (MIN_MS..=MAX_MS).contains(&ms)
}

/// Now, in milliseconds since the epoch (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The timestamp of `ms` milliseconds since the epoch (negative values count back).
pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        // rem_euclid keeps this in 0..1000, so the product fits an i32.
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// Milliseconds since the epoch of a timestamp, truncated; out-of-range values saturate.
pub fn millis(timestamp: &prost_types::Timestamp) -> i64 {
    timestamp
        .seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(timestamp.nanos) / 1_000_000)
}

/// `text` as an RFC 3339 time, in milliseconds since the epoch: `Ok(None)` when it is not
/// written as one (a caller may read it as a duration), an error saying what is wrong with it
/// when it is written as one that a trace cannot hold or that names no time.
pub fn parse_rfc3339_ms(text: &str) -> Result<Option<i64>, String> {
    match humantime::parse_rfc3339_weak(text) {
        // Within 1970 to 9999 (humantime's range, and a trace's), so the conversion holds.
        Ok(time) => Ok(time
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|since| i64::try_from(since.as_millis()).ok())),
        Err(humantime::TimestampError::OutOfRange) => {
            let year = text.get(..4).and_then(|year| year.parse::<u32>().ok());
            Err(if year.is_some_and(|year| year < 1970) {
                format!(
                    "{text} is before 1970-01-01T00:00:00Z; a trace holds times from 1970 to the end of 9999"
                )
            } else {
                format!(
                    "{text} has a field out of range (month 01-12, a day of that month, hour 00-23, minute and second 00-59) or is after 9999"
                )
            })
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_trip_including_before_the_epoch() {
        for ms in [0, 1, 999, 1_000, 1_767_225_600_123, -1, -1_001] {
            assert_eq!(millis(&timestamp(ms)), ms, "{ms}");
        }
        assert_eq!(
            timestamp(-1),
            prost_types::Timestamp {
                seconds: -1,
                nanos: 999_000_000
            }
        );
        assert_eq!(
            millis(&prost_types::Timestamp {
                seconds: i64::MAX,
                nanos: 0
            }),
            i64::MAX
        );
    }

    #[test]
    fn the_range_is_the_epoch_to_the_end_of_9999() {
        assert!(in_range(0) && in_range(MAX_MS) && in_range(1_767_225_600_000));
        assert!(!in_range(-1) && !in_range(MAX_MS + 1) && !in_range(i64::MAX));
        // 9999-12-31T23:59:59.999Z is the last millisecond of year 9999.
        assert_eq!(MAX_MS + 1, 253_402_300_800 * 1000);
    }

    #[test]
    fn rfc_3339_times_out_of_a_traces_range_say_why() {
        assert_eq!(
            parse_rfc3339_ms("2026-01-05T00:00:00.250Z"),
            Ok(Some(1_767_571_200_250))
        );
        assert_eq!(parse_rfc3339_ms("10m"), Ok(None));
        let before = parse_rfc3339_ms("1969-12-31T23:30:00Z").unwrap_err();
        assert!(
            before.contains("is before 1970-01-01T00:00:00Z"),
            "{before}"
        );
        let field = parse_rfc3339_ms("2026-13-01T00:00:00Z").unwrap_err();
        assert!(field.contains("month 01-12"), "{field}");
    }
}
