//! Nearest-rank percentiles and the millisecond form they are reported in.

use std::time::Duration;

use super::model::Percentiles;

impl Percentiles {
    /// Nearest-rank percentiles: the p-th percentile of n sorted samples is the sample at
    /// 1-based rank ceil(p/100 * n), so every reported value is one that was observed.
    pub fn of(samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let Some(max) = sorted.last() else {
            return Self::default();
        };
        Self {
            count: sorted.len() as u64,
            p50_ms: millis(nearest_rank(&sorted, 50)),
            p90_ms: millis(nearest_rank(&sorted, 90)),
            p99_ms: millis(nearest_rank(&sorted, 99)),
            max_ms: millis(*max),
        }
    }
}

/// The `percent`-th percentile of non-empty sorted samples.
fn nearest_rank(sorted: &[Duration], percent: usize) -> Duration {
    // Integer ceil(percent * n / 100) avoids float rounding at exact ranks (p90 of 10 is rank 9).
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Fractional milliseconds, rounded to the microsecond (what the JSON keeps).
pub(super) fn millis(duration: Duration) -> f64 {
    (duration.as_nanos() as f64 / 1000.0).round() / 1000.0
}

/// The duration of fractional milliseconds, to the microsecond; negative or NaN gives zero.
pub(super) fn duration_of_millis(ms: f64) -> Duration {
    let micros = (ms * 1000.0).round();
    if micros.is_finite() && micros > 0.0 {
        // `as` saturates, which is the right answer for absurdly large values.
        Duration::from_micros(micros as u64)
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    #[test]
    fn nearest_rank_of_one_to_a_hundred() {
        let mut samples = ms(1..=100);
        samples.reverse(); // order of input must not matter
        let p = Percentiles::of(&samples);
        assert_eq!(p.count, 100);
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms),
            (50.0, 90.0, 99.0, 100.0)
        );
    }

    #[test]
    fn nearest_rank_picks_observed_samples_on_small_inputs() {
        // n = 10: p50 rank 5, p90 rank 9, p99 rank ceil(9.9) = 10.
        let p = Percentiles::of(&ms([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]));
        assert_eq!((p.p50_ms, p.p90_ms, p.p99_ms), (50.0, 90.0, 100.0));
        // n = 1: every percentile is the one sample.
        let p = Percentiles::of(&ms([7]));
        assert_eq!((p.count, p.p50_ms, p.p99_ms, p.max_ms), (1, 7.0, 7.0, 7.0));
        // n = 3: p50 rank ceil(1.5) = 2.
        assert_eq!(Percentiles::of(&ms([3, 1, 2])).p50_ms, 2.0);
    }

    #[test]
    fn empty_is_all_zero() {
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
        assert_eq!(Percentiles::of(&[]).count, 0);
    }

    #[test]
    fn sub_millisecond_values_keep_microseconds() {
        let p = Percentiles::of(&[Duration::from_nanos(12_345_678)]);
        assert_eq!(p.p50_ms, 12.346);
        assert_eq!(duration_of_millis(12.346), Duration::from_micros(12_346));
        assert_eq!(duration_of_millis(-1.0), Duration::ZERO);
        assert_eq!(duration_of_millis(f64::NAN), Duration::ZERO);
    }
}
