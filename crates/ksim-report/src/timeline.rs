//! Samples and scale events into one bucket per second.

use std::collections::BTreeMap;

use super::input::Observations;
use super::model::Bucket;

/// One bucket per whole second from 0 to the last second holding a sample or a scale event
/// (so no resize is dropped), none without either.
///
/// A bucket holds the last sample within its second; a second without a sample carries the
/// previous bucket's counts forward (zero before the first sample). Scale events are summed
/// per bucket: added nodes into `scale_ups`, removed nodes into `scale_downs`.
pub(super) fn buckets(obs: &Observations) -> Vec<Bucket> {
    // Samples should arrive in order; a stable sort makes "last" mean latest regardless.
    let mut samples: Vec<_> = obs.samples.iter().collect();
    samples.sort_by_key(|sample| sample.offset);

    let mut scaling: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for event in &obs.scale_events {
        let (ups, downs) = scaling.entry(event.offset.as_secs()).or_default();
        if event.delta >= 0 {
            *ups = ups.saturating_add(event.delta.unsigned_abs());
        } else {
            *downs = downs.saturating_add(event.delta.unsigned_abs());
        }
    }

    let last_sample = samples.last().map(|sample| sample.offset.as_secs());
    let last_scale = scaling.keys().next_back().copied();
    let Some(last) = last_sample.max(last_scale) else {
        return Vec::new();
    };

    let mut samples = samples.into_iter().peekable();
    let mut carried = Bucket::default();
    let mut buckets = Vec::new();
    for second in 0..=last {
        let mut latest = None;
        while let Some(sample) = samples.next_if(|sample| sample.offset.as_secs() <= second) {
            latest = Some(sample);
        }
        if let Some(sample) = latest {
            carried.nodes.clone_from(&sample.nodes);
            carried.pods = sample.pods;
            carried.unscheduled = sample.unscheduled;
        }
        let offset_ms = second.saturating_mul(1000);
        let (scale_ups, scale_downs) = scaling.get(&second).copied().unwrap_or_default();
        buckets.push(Bucket {
            offset_ms,
            time_ms: obs
                .started_at_ms
                .saturating_add(i64::try_from(offset_ms).unwrap_or(i64::MAX)),
            scale_ups,
            scale_downs,
            ..carried.clone()
        });
    }
    buckets
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::super::input::{NodeCount, PodCounts, Sample, ScaleEvent};
    use super::*;

    fn sample(ms: u64, group_nodes: &[(&str, u64)], running: u64) -> Sample {
        Sample {
            offset: Duration::from_millis(ms),
            nodes: group_nodes
                .iter()
                .map(|(group, nodes)| {
                    let count = NodeCount {
                        nodes: *nodes,
                        ready: *nodes,
                    };
                    ((*group).to_owned(), count)
                })
                .collect(),
            pods: PodCounts {
                running,
                ..PodCounts::default()
            },
            unscheduled: running / 2,
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
        let running: Vec<u64> = buckets.iter().map(|b| b.pods.running).collect();
        assert_eq!(running, [1, 3, 3, 3, 8]);
        let totals: Vec<u64> = buckets.iter().map(Bucket::nodes_total).collect();
        assert_eq!(totals, [1, 3, 3, 3, 5]);
        assert_eq!(buckets[3].unscheduled, 1);
        assert_eq!(buckets[3].offset_ms, 3_000);
        assert_eq!(buckets[3].time_ms, 1_003_000);
        assert_eq!(buckets[4].nodes["b"], NodeCount { nodes: 4, ready: 4 });
    }

    #[test]
    fn out_of_order_samples_still_take_the_latest() {
        let obs = Observations {
            samples: vec![sample(900, &[], 9), sample(100, &[], 1)],
            ..Observations::default()
        };
        assert_eq!(buckets(&obs)[0].pods.running, 9);
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
            buckets[0],
            Bucket {
                offset_ms: 0,
                ..Bucket::default()
            }
        );
        assert_eq!(buckets[1].nodes_total(), 0);
        assert_eq!(buckets[2].nodes_total(), 2);
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
            .map(|b| (b.scale_ups, b.scale_downs))
            .collect();
        assert_eq!(scaling, [(5, 1), (0, 6), (0, 0), (5, 0)]);
        // The extension carries the last counts forward.
        assert_eq!(buckets[3].nodes_total(), 1);
    }

    #[test]
    fn nothing_observed_gives_no_buckets() {
        assert!(buckets(&Observations::default()).is_empty());
    }
}
