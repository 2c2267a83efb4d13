//! Nearest-rank percentiles of durations, as the report keeps them (`DurationPercentiles`;
//! report.json writes them in fractional milliseconds, `ksim_proto::json`).

use std::time::Duration;

use super::model::DurationPercentiles;

/// Nearest-rank percentiles: the p-th percentile of n sorted samples is the sample at 1-based
/// rank ceil(p/100 * n), so every reported value is one that was observed. No samples: count
/// 0 and every value zero (present, as a report read back from JSON has them).
pub fn of(samples: &[Duration]) -> DurationPercentiles {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    // No reported duration is near what a proto duration cannot hold.
    let at = |percent| {
        let duration = nearest_rank(&sorted, percent);
        prost_types::Duration::try_from(to_microsecond(duration)).ok()
    };
    DurationPercentiles {
        count: sorted.len() as u64,
        p50: at(50),
        p90: at(90),
        p99: at(99),
        max: at(100),
    }
}

/// Fractional milliseconds of one of the percentiles, to the microsecond (what report.json
/// writes); absent is 0.
pub fn ms(duration: Option<&prost_types::Duration>) -> f64 {
    ksim_proto::json::to_fractional_millis(duration)
}

/// The `percent`-th percentile of sorted samples (the 100th is the largest); zero for none.
fn nearest_rank(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Integer ceil(percent * n / 100) avoids float rounding at exact ranks (p90 of 10 is rank 9).
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Rounded to the microsecond, what report.json keeps: a report is the same read back.
fn to_microsecond(duration: Duration) -> Duration {
    let micros = (duration.as_nanos() + 500) / 1000;
    Duration::from_micros(u64::try_from(micros).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    fn figures(p: &DurationPercentiles) -> (u64, f64, f64, f64, f64) {
        (
            p.count,
            ms(p.p50.as_ref()),
            ms(p.p90.as_ref()),
            ms(p.p99.as_ref()),
            ms(p.max.as_ref()),
        )
    }

    #[test]
    fn nearest_rank_of_one_to_a_hundred() {
        let mut samples = millis(1..=100);
        samples.reverse(); // order of input must not matter
        assert_eq!(figures(&of(&samples)), (100, 50.0, 90.0, 99.0, 100.0));
    }

    #[test]
    fn nearest_rank_picks_observed_samples_on_small_inputs() {
        // n = 10: p50 rank 5, p90 rank 9, p99 rank ceil(9.9) = 10.
        let p = of(&millis([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]));
        assert_eq!(figures(&p), (10, 50.0, 90.0, 100.0, 100.0));
        // n = 1: every percentile is the one sample.
        assert_eq!(figures(&of(&millis([7]))), (1, 7.0, 7.0, 7.0, 7.0));
        // n = 3: p50 rank ceil(1.5) = 2.
        assert_eq!(ms(of(&millis([3, 1, 2])).p50.as_ref()), 2.0);
    }

    #[test]
    fn empty_is_all_zero_and_present() {
        let empty = of(&[]);
        assert_eq!(figures(&empty), (0, 0.0, 0.0, 0.0, 0.0));
        assert!(empty.p50.is_some() && empty.max.is_some());
    }

    #[test]
    fn values_are_kept_to_the_microsecond_and_read_back_the_same() {
        let p = of(&[Duration::from_nanos(12_345_678)]);
        assert_eq!(ms(p.p50.as_ref()), 12.346);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(
            serde_json::from_str::<DurationPercentiles>(&json).unwrap(),
            p
        );
    }
}
