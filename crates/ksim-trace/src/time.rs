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
}
