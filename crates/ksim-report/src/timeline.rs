//! Samples and scale events into buckets of recorded time.
//!
//! The driver samples in wall-clock time since the replay start; a report speaks recorded time
//! (the wall-clock offset multiplied by the speed), so a 10x replay of an hour-long trace has a
//! timeline an hour long, like the 1x replay of it.

use std::collections::BTreeMap;
use std::time::Duration;

use ksim_proto::json::{of_millis, to_millis};
use ksim_trace::time::timestamp;

use super::error::ReportError;
use super::input::{NodeCount, Observations};
use super::model::{NodeGroupCount, Report, TimelineBucket};

/// The shortest wall-clock time between two samples: finer would cost the observer more than
/// it tells.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Speeds a replay may run at (the driver's spec check, the CLI's flags): beyond them every
/// event of a trace lands in the same instant (or in a later year), and recorded offsets stop
/// fitting a Duration.
pub const MIN_SPEED: f64 = 0.001;
pub const MAX_SPEED: f64 = 1000.0;

/// A bucket's width at speeds where one second of recorded time can be sampled.
const BUCKET: Duration = Duration::from_secs(1);

/// The speed a report computes with: observations from before the speed was kept, or a
/// default value, say 0, which means 1x.
pub fn effective_speed(speed: f64) -> f64 {
    if speed.is_finite() && speed > 0.0 {
        speed
    } else {
        1.0
    }
}

/// The width of a timeline bucket in recorded time: a second, or what the shortest sampling
/// interval covers at `speed` when that is more (10 s at 100x).
pub fn bucket_width(speed: f64) -> Duration {
    recorded(MIN_SAMPLE_INTERVAL, speed).max(BUCKET)
}

/// How often the driver samples, in wall-clock time: once per bucket.
pub fn sample_interval(speed: f64) -> Duration {
    Duration::try_from_secs_f64(bucket_width(speed).as_secs_f64() / effective_speed(speed))
        .unwrap_or(BUCKET)
}

/// A wall-clock duration of the replay in recorded time.
pub fn recorded(wall: Duration, speed: f64) -> Duration {
    Duration::try_from_secs_f64(wall.as_secs_f64() * effective_speed(speed))
        .unwrap_or(Duration::MAX)
}

/// One bucket per [`bucket_width`] of recorded time from 0 to the last bucket holding a sample
/// or a scale event (so no resize is dropped), none without either.
///
/// A bucket holds the last sample within it; a bucket without a sample carries the previous
/// bucket's counts forward (zero before the first sample). Scale events are summed per bucket:
/// added nodes into `scale_ups`, removed nodes into `scale_downs`.
pub(super) fn buckets(obs: &Observations) -> Vec<TimelineBucket> {
    let width_ms = millis(bucket_width(obs.speed)).max(1);
    let index = |wall: Duration| millis(recorded(wall, obs.speed)) / width_ms;
    // Samples should arrive in order; a stable sort makes "last" mean latest regardless.
    let mut samples: Vec<_> = obs.samples.iter().collect();
    samples.sort_by_key(|sample| sample.offset);

    let mut scaling: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for event in &obs.scale_events {
        let (ups, downs) = scaling.entry(index(event.offset)).or_default();
        if event.delta >= 0 {
            *ups = ups.saturating_add(event.delta.unsigned_abs());
        } else {
            *downs = downs.saturating_add(event.delta.unsigned_abs());
        }
    }

    let last_sample = samples.last().map(|sample| index(sample.offset));
    let last_scale = scaling.keys().next_back().copied();
    let Some(last) = last_sample.max(last_scale) else {
        return Vec::new();
    };

    let speed = effective_speed(obs.speed);
    let mut samples = samples.into_iter().peekable();
    // As at the end of the last bucket with a sample, zero before the first.
    let mut carried = TimelineBucket {
        pods: Some(Default::default()),
        usage: Some(Default::default()),
        ..TimelineBucket::default()
    };
    let mut buckets = Vec::new();
    for bucket in 0..=last {
        let mut latest = None;
        while let Some(sample) = samples.next_if(|sample| index(sample.offset) <= bucket) {
            latest = Some(sample);
        }
        if let Some(sample) = latest {
            carried.nodes = node_group_counts(&sample.nodes);
            carried.pods = Some(sample.pods);
            carried.unscheduled_pods = sample.unscheduled;
            carried.usage = Some(sample.usage);
            carried.gpus.clone_from(&sample.gpus);
            carried.pending_gpu_pods = sample.pending_gpu_pods;
        }
        let offset_ms = bucket.saturating_mul(width_ms);
        // The wall clock moved 1/speed as far.
        let wall_ms = (offset_ms as f64 / speed) as i64;
        let (scale_ups, scale_downs) = scaling.get(&bucket).copied().unwrap_or_default();
        buckets.push(TimelineBucket {
            offset: Some(of_millis(offset_ms)),
            time: Some(timestamp(obs.started_at_ms.saturating_add(wall_ms))),
            autoscaler_scale_ups: scale_ups,
            autoscaler_scale_downs: scale_downs,
            ..carried.clone()
        });
    }
    buckets
}

/// Nodes per group as progress messages and timeline buckets carry them, in the groups' order.
pub fn node_group_counts(nodes: &BTreeMap<String, NodeCount>) -> Vec<NodeGroupCount> {
    nodes
        .iter()
        .map(|(group, count)| NodeGroupCount {
            node_group: group.clone(),
            nodes: count.nodes,
            ready_nodes: count.ready,
            priced_nodes: count.priced,
            price_micros_per_hour: count.price_micros_per_hour,
            launching_nodes: count.launching,
            gpu_nodes: count.gpu_nodes,
            gpu_price_micros_per_hour: count.gpu_price_micros_per_hour,
        })
        .collect()
}

/// Refuses a timeline ksim does not make: entry i at i x the bucket width, a width some speed
/// gives. A report read back (a file, a driver's answer) is untrusted, and what comparing one
/// costs grows with the span its last offset claims (5 s buckets up to it): checked, that span
/// is bounded by its entries.
pub fn check_timeline(report: &Report) -> Result<(), ReportError> {
    let (min_ms, max_ms) = (
        millis(bucket_width(MIN_SPEED)),
        millis(bucket_width(MAX_SPEED)),
    );
    let bucket_ms = to_millis(report.bucket_width.as_ref());
    if !(min_ms..=max_ms).contains(&bucket_ms) {
        return Err(ReportError::BucketWidth {
            bucket_ms,
            min_ms,
            max_ms,
        });
    }
    for (index, bucket) in report.timeline.iter().enumerate() {
        let expected_ms = u64::try_from(index)
            .unwrap_or(u64::MAX)
            .saturating_mul(bucket_ms);
        let offset_ms = to_millis(bucket.offset.as_ref());
        if offset_ms != expected_ms {
            return Err(ReportError::TimelineEntry {
                index,
                offset_ms,
                expected_ms,
                bucket_ms,
            });
        }
    }
    Ok(())
}

/// A report's bucket width in milliseconds.
pub fn bucket_ms(report: &Report) -> u64 {
    to_millis(report.bucket_width.as_ref())
}

/// A bucket's offset from the replay start in milliseconds, recorded time.
pub fn offset_ms(bucket: &TimelineBucket) -> u64 {
    to_millis(bucket.offset.as_ref())
}

/// A std duration as a proto one.
pub(crate) fn duration_to_proto(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below 1e9, so it fits.
        nanos: duration.subsec_nanos() as i32,
    }
}

/// A proto duration as a std one; negative or missing is zero (nothing reported is negative).
pub(crate) fn duration_from_proto(duration: Option<&prost_types::Duration>) -> Duration {
    match duration {
        Some(d) if d.seconds >= 0 && d.nanos >= 0 => {
            Duration::new(d.seconds.unsigned_abs(), d.nanos.unsigned_abs())
        }
        _ => Duration::ZERO,
    }
}

/// Whole milliseconds, saturating.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::super::input::{PodPhaseCounts, ResourceUsage, Sample, ScaleEvent};
    use super::super::model::nodes_total;
    use super::*;
    use ksim_trace::time::millis as millis_of;

    fn sample(ms: u64, group_nodes: &[(&str, u64)], running: u64) -> Sample {
        Sample {
            offset: Duration::from_millis(ms),
            nodes: group_nodes
                .iter()
                .map(|(group, nodes)| {
                    let count = NodeCount {
                        nodes: *nodes,
                        ready: *nodes,
                        ..NodeCount::default()
                    };
                    ((*group).to_owned(), count)
                })
                .collect(),
            pods: PodPhaseCounts {
                running,
                ..PodPhaseCounts::default()
            },
            unscheduled: running / 2,
            usage: ResourceUsage::default(),
            gpus: Vec::new(),
            pending_gpu_pods: 0,
        }
    }

    fn scale(ms: u64, group: &str, delta: i64) -> ScaleEvent {
        ScaleEvent {
            offset: Duration::from_millis(ms),
            group: group.to_owned(),
            delta,
        }
    }

    #[test]
    fn buckets_are_recorded_time_whatever_the_speed() {
        assert_eq!(bucket_width(1.0), Duration::from_secs(1));
        assert_eq!(bucket_width(10.0), Duration::from_secs(1));
        assert_eq!(bucket_width(100.0), Duration::from_secs(10));
        assert_eq!(bucket_width(0.5), Duration::from_secs(1));
        assert_eq!(sample_interval(1.0), Duration::from_secs(1));
        assert_eq!(sample_interval(10.0), Duration::from_millis(100));
        assert_eq!(sample_interval(100.0), Duration::from_millis(100));
        assert_eq!(sample_interval(0.5), Duration::from_secs(2));
        // Unknown (0) or nonsense speeds count as 1x.
        assert_eq!(bucket_width(0.0), Duration::from_secs(1));
        assert_eq!(sample_interval(f64::NAN), Duration::from_secs(1));

        // At 10x, samples 100 ms apart (wall) land in consecutive 1 s buckets (recorded), and
        // a resize at 0.45 s wall is in the bucket of recorded second 4.
        let obs = Observations {
            speed: 10.0,
            started_at_ms: 1_000_000,
            samples: (0..=5)
                .map(|i| sample(i * 100, &[("a", i + 1)], i))
                .collect(),
            scale_events: vec![scale(450, "a", 1)],
            ..Observations::default()
        };
        let buckets = buckets(&obs);
        let offsets: Vec<u64> = buckets.iter().map(offset_ms).collect();
        assert_eq!(offsets, [0, 1_000, 2_000, 3_000, 4_000, 5_000]);
        let totals: Vec<u64> = buckets.iter().map(nodes_total).collect();
        assert_eq!(totals, [1, 2, 3, 4, 5, 6]);
        assert_eq!(buckets[4].autoscaler_scale_ups, 1);
        // Its wall-clock start: 400 ms after the replay start.
        assert_eq!(buckets[4].time.as_ref().map(millis_of), Some(1_000_400));
    }

    #[test]
    fn last_sample_wins_and_gaps_carry_forward() {
        let obs = Observations {
            started_at_ms: 1_000_000,
            samples: vec![
                sample(0, &[("a", 1)], 1),
                sample(1_200, &[("a", 2)], 2),
                sample(1_900, &[("a", 3)], 3),
                // second 2 and 3 have no sample
                sample(4_100, &[("a", 1), ("b", 4)], 8),
            ],
            ..Observations::default()
        };
        let buckets = buckets(&obs);
        assert_eq!(buckets.len(), 5);
        let running: Vec<u64> = buckets.iter().map(|b| b.pods.unwrap().running).collect();
        assert_eq!(running, [1, 3, 3, 3, 8]);
        let totals: Vec<u64> = buckets.iter().map(nodes_total).collect();
        assert_eq!(totals, [1, 3, 3, 3, 5]);
        assert_eq!(buckets[3].unscheduled_pods, 1);
        assert_eq!(offset_ms(&buckets[3]), 3_000);
        assert_eq!(buckets[3].time.as_ref().map(millis_of), Some(1_003_000));
        assert_eq!(
            buckets[4].nodes[1],
            NodeGroupCount {
                node_group: "b".into(),
                nodes: 4,
                ready_nodes: 4,
                ..Default::default()
            }
        );
    }

    #[test]
    fn out_of_order_samples_still_take_the_latest() {
        let obs = Observations {
            samples: vec![sample(900, &[], 9), sample(100, &[], 1)],
            ..Observations::default()
        };
        assert_eq!(buckets(&obs)[0].pods.unwrap().running, 9);
    }

    #[test]
    fn seconds_before_the_first_sample_are_zero() {
        let obs = Observations {
            samples: vec![sample(2_500, &[("a", 2)], 4)],
            ..Observations::default()
        };
        let buckets = buckets(&obs);
        assert_eq!(buckets.len(), 3);
        assert_eq!(
            (offset_ms(&buckets[0]), &buckets[0].nodes, buckets[0].pods),
            (0, &Vec::new(), Some(PodPhaseCounts::default()))
        );
        assert_eq!(nodes_total(&buckets[1]), 0);
        assert_eq!(nodes_total(&buckets[2]), 2);
    }

    #[test]
    fn scale_events_are_summed_per_bucket() {
        let obs = Observations {
            samples: vec![sample(0, &[("a", 1)], 0), sample(1_000, &[("a", 1)], 0)],
            scale_events: vec![
                scale(100, "a", 2),
                scale(900, "b", 3),
                scale(950, "a", -1),
                scale(1_500, "a", -2),
                scale(1_600, "b", -4),
                // After the last sample: extends the timeline instead of being dropped.
                scale(3_000, "a", 5),
            ],
            ..Observations::default()
        };
        let buckets = buckets(&obs);
        let scaling: Vec<(u64, u64)> = buckets
            .iter()
            .map(|b| (b.autoscaler_scale_ups, b.autoscaler_scale_downs))
            .collect();
        assert_eq!(scaling, [(5, 1), (0, 6), (0, 0), (5, 0)]);
        // The extension carries the last counts forward.
        assert_eq!(nodes_total(&buckets[3]), 1);
    }

    #[test]
    fn a_timeline_ksim_made_passes_and_one_claiming_a_longer_span_is_refused() {
        let obs = Observations {
            speed: 100.0,
            samples: vec![sample(0, &[("a", 1)], 1), sample(2_500, &[("a", 2)], 2)],
            ..Observations::default()
        };
        let report = crate::build(&obs);
        assert_eq!(report.timeline.len(), 26);
        check_timeline(&report).unwrap();
        check_timeline(&crate::fixtures::report()).unwrap();
        check_timeline(&Report::default()).unwrap_err();

        // What `ksim compare` was given: an entry at 10^10 ms after one at 0 (two million
        // 5 s buckets to compare), and one at 2^62 ms.
        for far in [10_000_000_000, 1 << 62] {
            let mut report = crate::fixtures::report();
            report.timeline[1].offset = Some(of_millis(far));
            let error = check_timeline(&report).unwrap_err().to_string();
            assert_eq!(
                error,
                format!(
                    "timeline entry 1 is at {far} ms, not 1000 ms: a report's entries are one \
                     bucket (1000 ms) apart from 0"
                )
            );
        }
        // A width no speed gives would stretch every entry's span instead.
        let report = Report {
            bucket_width: Some(of_millis(1 << 62)),
            ..crate::fixtures::report()
        };
        assert_eq!(
            check_timeline(&report).unwrap_err().to_string(),
            format!(
                "bucket_ms {} is not a bucket width ksim makes (1000 to 100000 ms)",
                1_u64 << 62
            )
        );
    }

    #[test]
    fn nothing_observed_gives_no_buckets() {
        assert!(buckets(&Observations::default()).is_empty());
    }
}
