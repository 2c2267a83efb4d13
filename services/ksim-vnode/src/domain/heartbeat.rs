//! Lease renewal timing: how often, with what jitter and phase, and how to measure the rate.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::node::stable_hash;

/// Largest share of an interval that jitter removes.
const MAX_JITTER_FRACTION: f64 = 0.1;

/// The shortest lease `SetNodeLease` takes: renewed every 25 ms, about what one pool's
/// heartbeat ticks can keep up with.
pub const MIN_LEASE: Duration = Duration::from_millis(100);
/// The longest lease `SetNodeLease` takes.
pub const MAX_LEASE: Duration = Duration::from_secs(3600);

/// Why a lease asked for is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("lease duration {0:?} is outside [100ms, 1h]")]
    OutOfRange(Duration),
    #[error(
        "lease duration of {seconds} s and {nanos} ns is not a valid duration (negative, or nanoseconds beyond a second)"
    )]
    Invalid { seconds: i64, nanos: i32 },
}

/// A lease asked for as seconds and nanoseconds (protobuf's Duration): `None` when both are
/// zero (the pool's own lease), else a duration inside [`MIN_LEASE`, `MAX_LEASE`].
pub fn requested_lease(seconds: i64, nanos: i32) -> Result<Option<Duration>, LeaseError> {
    if seconds == 0 && nanos == 0 {
        return Ok(None);
    }
    let invalid = LeaseError::Invalid { seconds, nanos };
    let whole = u64::try_from(seconds).map_err(|_| invalid.clone())?;
    let fraction = u32::try_from(nanos)
        .ok()
        .filter(|nanos| *nanos < 1_000_000_000)
        .ok_or(invalid)?;
    check_lease(Duration::new(whole, fraction)).map(Some)
}

/// `lease` if it is inside [`MIN_LEASE`, `MAX_LEASE`].
pub fn check_lease(lease: Duration) -> Result<Duration, LeaseError> {
    if (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        Ok(lease)
    } else {
        Err(LeaseError::OutOfRange(lease))
    }
}

/// The lease's `leaseDurationSeconds`: whole seconds, rounded up so a short lease still says
/// at least one.
pub fn lease_seconds(lease: Duration) -> i32 {
    let seconds = lease
        .as_secs()
        .saturating_add(u64::from(lease.subsec_nanos() > 0));
    i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
}

/// How often to renew a node lease: a quarter of its duration, the kubelet's ratio, which leaves
/// three missed renewals before the lease expires.
pub fn renew_interval(lease_duration: Duration) -> Duration {
    lease_duration / 4
}

/// `interval` shortened by up to 10%, scaled by `unit_random` in `[0, 1)`. Never lengthened: a
/// late renewal brings the node closer to NotReady, an early one only costs a write. Values
/// outside the range are clamped.
pub fn jittered(interval: Duration, unit_random: f64) -> Duration {
    let unit = if unit_random.is_nan() {
        0.0
    } else {
        unit_random.clamp(0.0, 1.0)
    };
    interval.saturating_sub(interval.mul_f64(MAX_JITTER_FRACTION * unit))
}

/// A phase in `[0, interval)` derived from the node name, so nodes created together renew
/// spread over the interval instead of in one burst, and keep their phase across restarts.
pub fn initial_offset(node_name: &str, interval: Duration) -> Duration {
    let interval_nanos = interval.as_nanos();
    if interval_nanos == 0 {
        return Duration::ZERO;
    }
    let offset = u128::from(stable_hash(&["lease-phase", node_name])) % interval_nanos;
    // offset < interval, which fits a Duration.
    Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX))
}

/// Renewals per second over a sliding window, counted in one-second buckets so memory depends
/// on the window, not on the renewal rate.
#[derive(Clone, Debug)]
pub struct RenewalRate {
    window_seconds: u64,
    /// Instant of the first record; bucket `n` covers `[origin + n s, origin + (n + 1) s)`.
    origin: Option<Instant>,
    /// (bucket number, count), oldest first, at most `window_seconds` long.
    buckets: VecDeque<(u64, u64)>,
}

impl RenewalRate {
    /// A window shorter than a second is widened to one second.
    pub fn new(window: Duration) -> Self {
        let window_seconds = window
            .as_secs()
            .saturating_add(u64::from(window.subsec_nanos() > 0));
        let window_seconds = window_seconds.max(1);
        RenewalRate {
            window_seconds,
            origin: None,
            buckets: VecDeque::with_capacity(
                usize::try_from(window_seconds).unwrap_or(0).min(3600),
            ),
        }
    }

    /// Counts one renewal at `at`. Records older than the window are dropped.
    pub fn record(&mut self, at: Instant) {
        let origin = *self.origin.get_or_insert(at);
        let bucket = at.saturating_duration_since(origin).as_secs();
        let newest = self.buckets.back().map_or(0, |&(number, _)| number);
        if bucket.saturating_add(self.window_seconds) <= newest {
            return;
        }
        match self
            .buckets
            .iter_mut()
            .rev()
            .find(|(number, _)| *number <= bucket)
        {
            Some((number, count)) if *number == bucket => *count += 1,
            _ => {
                // Late records within the window land in the right place; new seconds append.
                let position = self.buckets.partition_point(|&(number, _)| number < bucket);
                self.buckets.insert(position, (bucket, 1));
            }
        }
        while let Some(&(oldest, _)) = self.buckets.front() {
            let newest = self.buckets.back().map_or(oldest, |&(number, _)| number);
            if oldest.saturating_add(self.window_seconds) > newest {
                break;
            }
            self.buckets.pop_front();
        }
    }

    /// Average renewals per second over the window ending at `now` (the current, partial second
    /// included). Before a full window has passed, averages over the time since the first
    /// record, but over at least one second so a burst at start-up does not read as a huge rate.
    pub fn per_second(&self, now: Instant) -> f64 {
        let Some(origin) = self.origin else {
            return 0.0;
        };
        let elapsed = now.saturating_duration_since(origin);
        let current = elapsed.as_secs();
        let oldest = (current + 1).saturating_sub(self.window_seconds);
        let count: u64 = self
            .buckets
            .iter()
            .filter(|&&(number, _)| number >= oldest && number <= current)
            .map(|&(_, count)| count)
            .sum();
        let span = elapsed.as_secs_f64() - oldest as f64;
        count as f64 / span.max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_interval_is_a_quarter_of_the_lease() {
        assert_eq!(
            renew_interval(Duration::from_secs(40)),
            Duration::from_secs(10)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(10)),
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn a_lease_asked_for_is_the_pools_own_when_zero_and_refused_outside_its_range() {
        assert_eq!(requested_lease(0, 0), Ok(None));
        assert_eq!(requested_lease(2, 0), Ok(Some(Duration::from_secs(2))));
        assert_eq!(
            requested_lease(0, 100_000_000),
            Ok(Some(Duration::from_millis(100)))
        );
        assert_eq!(
            requested_lease(3600, 0),
            Ok(Some(Duration::from_secs(3600)))
        );
        assert_eq!(
            requested_lease(0, 99_999_999),
            Err(LeaseError::OutOfRange(Duration::from_nanos(99_999_999)))
        );
        assert_eq!(
            requested_lease(3600, 1),
            Err(LeaseError::OutOfRange(Duration::new(3600, 1)))
        );
        for (seconds, nanos) in [(-1, 0), (0, -5), (1, 1_000_000_000), (i64::MIN, 0)] {
            assert_eq!(
                requested_lease(seconds, nanos),
                Err(LeaseError::Invalid { seconds, nanos }),
                "{seconds} s {nanos} ns"
            );
        }
        assert!(check_lease(Duration::ZERO).is_err());
    }

    #[test]
    fn a_leases_seconds_round_up_to_at_least_one() {
        assert_eq!(lease_seconds(Duration::from_secs(40)), 40);
        assert_eq!(lease_seconds(Duration::from_millis(2500)), 3);
        assert_eq!(lease_seconds(Duration::from_millis(100)), 1);
        assert_eq!(lease_seconds(Duration::ZERO), 1);
        assert_eq!(lease_seconds(Duration::MAX), i32::MAX);
    }

    #[test]
    fn jitter_only_shortens_by_at_most_ten_percent() {
        let interval = Duration::from_secs(10);
        assert_eq!(jittered(interval, 0.0), interval);
        assert_eq!(jittered(interval, 0.5), Duration::from_millis(9500));
        let shortest = jittered(interval, 0.999_999);
        assert!(
            shortest > Duration::from_secs(9) && shortest < interval,
            "{shortest:?}"
        );
        for _ in 0..1000 {
            let value = jittered(interval, fastrand::f64());
            assert!(
                value <= interval && value >= Duration::from_secs(9),
                "{value:?}"
            );
        }
    }

    #[test]
    fn jitter_clamps_out_of_range_input() {
        let interval = Duration::from_secs(10);
        assert_eq!(jittered(interval, -1.0), interval);
        assert_eq!(jittered(interval, f64::NAN), interval);
        assert_eq!(jittered(interval, 7.0), Duration::from_secs(9));
        assert_eq!(jittered(Duration::ZERO, 0.5), Duration::ZERO);
    }

    #[test]
    fn initial_offset_is_stable_and_inside_the_interval() {
        let interval = Duration::from_secs(10);
        let offset = initial_offset("m5-large-17", interval);
        assert_eq!(initial_offset("m5-large-17", interval), offset);
        assert!(offset < interval);
        assert_eq!(initial_offset("anything", Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn initial_offsets_spread_across_the_interval() {
        // 1000 sequential names over 10 one-second slots: each slot should get roughly 100.
        let interval = Duration::from_secs(10);
        let mut slots = [0u32; 10];
        for index in 0..1000 {
            let offset = initial_offset(&format!("m5-large-{index}"), interval);
            assert!(offset < interval);
            slots[usize::try_from(offset.as_secs()).unwrap()] += 1;
        }
        for (slot, count) in slots.iter().enumerate() {
            assert!(
                (60..=140).contains(count),
                "slot {slot} got {count}: {slots:?}"
            );
        }
    }

    #[test]
    fn empty_rate_is_zero() {
        let rate = RenewalRate::new(Duration::from_secs(10));
        assert_eq!(rate.per_second(Instant::now()), 0.0);
    }

    #[test]
    fn steady_rate_is_measured() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_secs(10));
        // 50 renewals per second for 30 seconds, spread inside each second.
        for second in 0..30u64 {
            for k in 0..50u64 {
                rate.record(start + Duration::from_millis(second * 1000 + k * 20));
            }
        }
        let now = start + Duration::from_millis(29_990);
        let measured = rate.per_second(now);
        assert!((measured - 50.0).abs() < 1.5, "{measured}");
        assert!(rate.buckets.len() <= 10, "{} buckets", rate.buckets.len());
    }

    #[test]
    fn rate_falls_to_zero_after_the_window() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_secs(5));
        for k in 0..100u64 {
            rate.record(start + Duration::from_millis(k * 10));
        }
        assert!(rate.per_second(start + Duration::from_secs(3)) > 0.0);
        assert_eq!(rate.per_second(start + Duration::from_secs(6)), 0.0);
    }

    #[test]
    fn rate_shortly_after_start_uses_at_least_one_second() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_secs(10));
        for _ in 0..100 {
            rate.record(start);
        }
        assert_eq!(rate.per_second(start + Duration::from_millis(100)), 100.0);
        // 100 renewals over the 4 seconds since they started.
        assert_eq!(rate.per_second(start + Duration::from_secs(4)), 25.0);
    }

    #[test]
    fn rate_window_slides() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_secs(10));
        // 100/s for the first 10 s, then 10/s for the next 10 s.
        for second in 0..20u64 {
            let per_second = if second < 10 { 100 } else { 10 };
            for k in 0..per_second {
                rate.record(
                    start
                        + Duration::from_secs(second)
                        + Duration::from_millis(k * 1000 / per_second),
                );
            }
        }
        let measured = rate.per_second(start + Duration::from_millis(19_999));
        assert!((measured - 10.0).abs() < 0.5, "{measured}");
    }

    #[test]
    fn late_records_inside_the_window_count_and_older_ones_are_dropped() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_secs(3));
        rate.record(start);
        rate.record(start + Duration::from_millis(5_500));
        // Out of order but still inside the window [3 s, 6 s).
        rate.record(start + Duration::from_millis(4_200));
        // Older than the window: ignored.
        rate.record(start + Duration::from_millis(1_500));
        let buckets: Vec<(u64, u64)> = rate.buckets.iter().copied().collect();
        assert_eq!(buckets, [(4, 1), (5, 1)]);
        let measured = rate.per_second(start + Duration::from_millis(5_999));
        assert!((measured - 2.0 / 2.999).abs() < 1e-3, "{measured}");
    }

    #[test]
    fn huge_window_does_not_overflow() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::MAX);
        rate.record(start);
        rate.record(start + Duration::from_secs(5));
        assert_eq!(rate.per_second(start + Duration::from_secs(10)), 0.2);
    }

    #[test]
    fn sub_second_window_is_widened_to_one_second() {
        let start = Instant::now();
        let mut rate = RenewalRate::new(Duration::from_millis(200));
        for _ in 0..5 {
            rate.record(start);
        }
        for _ in 0..3 {
            rate.record(start + Duration::from_millis(1_200));
        }
        // Only the current one-second bucket is in the window.
        assert_eq!(rate.per_second(start + Duration::from_millis(1_500)), 3.0);
        assert_eq!(rate.buckets.len(), 1);
    }
}
