//! Scaled workloads' replica counts into the timeline's buckets, recorded and simulated.
//!
//! Both series are step functions in recorded time: the recorded one from the trace's offsets,
//! the simulated one from the driver's wall-clock offsets multiplied by the speed, as the
//! timeline's samples are.

use std::time::Duration;

use super::input::{ObservedReplicas, ReplicaPoint};
use super::model::{MAX_REPLICA_CHANGES, ReplicaChange, WorkloadReplicas};
use super::timeline::{millis, recorded};

/// One series in recorded milliseconds, in time order.
fn series(points: &[ReplicaPoint], to_recorded: impl Fn(Duration) -> Duration) -> Vec<(u64, u64)> {
    let mut series: Vec<_> = points
        .iter()
        .map(|point| (millis(to_recorded(point.offset)), point.replicas))
        .collect();
    // Stable: of two points at one instant the later one observed holds.
    series.sort_by_key(|&(offset, _)| offset);
    series
}

/// Per bucket of `width_ms`, `buckets` of them: the value at the bucket's end, i.e. the last
/// point within it, else the value carried from before (0 before the first point).
fn per_bucket(series: &[(u64, u64)], buckets: usize, width_ms: u64) -> Vec<u64> {
    let width_ms = width_ms.max(1);
    let mut points = series.iter().peekable();
    let mut value = 0;
    (0..buckets)
        .map(|bucket| {
            let bucket = u64::try_from(bucket).unwrap_or(u64::MAX);
            while let Some(&(_, replicas)) =
                points.next_if(|(offset, _)| offset / width_ms <= bucket)
            {
                value = replicas;
            }
            value
        })
        .collect()
}

/// Replicas times seconds from 0 to `span_ms`.
fn replica_seconds(series: &[(u64, u64)], span_ms: u64) -> f64 {
    let mut total_ms = 0.0;
    for (i, &(offset, replicas)) in series.iter().enumerate() {
        let until = series
            .get(i + 1)
            .map_or(span_ms, |&(next, _)| next.min(span_ms));
        total_ms += replicas as f64 * until.saturating_sub(offset) as f64;
    }
    total_ms / 1000.0
}

/// The simulated count's changes of a live workload: its creation (from 0) and deletion
/// (to 0) are the driver's replay, not a scaler's decision.
fn changes(series: &[(u64, u64)]) -> (Vec<ReplicaChange>, u64) {
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    for pair in series.windows(2) {
        let [(_, from), (offset_ms, to)] = *pair else {
            continue;
        };
        if from == to || from == 0 || to == 0 {
            continue;
        }
        if kept.len() < MAX_REPLICA_CHANGES {
            kept.push(ReplicaChange {
                offset_ms,
                from,
                to,
            });
        } else {
            dropped = dropped.saturating_add(1);
        }
    }
    (kept, dropped)
}

/// Each observed workload over `buckets` timeline buckets of `width_ms`; scale events only
/// when `scaler_decides` (with the recording deciding, every change is the driver's replay).
pub(super) fn workloads(
    observed: &[ObservedReplicas],
    speed: f64,
    buckets: usize,
    width_ms: u64,
    scaler_decides: bool,
) -> Vec<WorkloadReplicas> {
    let span_ms = u64::try_from(buckets)
        .unwrap_or(u64::MAX)
        .saturating_mul(width_ms);
    observed
        .iter()
        .map(|workload| {
            let recorded_series = series(&workload.recorded, |offset| offset);
            let simulated_series = series(&workload.simulated, |wall| recorded(wall, speed));
            let (scale_events, scale_events_dropped) = if scaler_decides {
                changes(&simulated_series)
            } else {
                (Vec::new(), 0)
            };
            WorkloadReplicas {
                name: workload.workload.clone(),
                recorded: per_bucket(&recorded_series, buckets, width_ms),
                simulated: per_bucket(&simulated_series, buckets, width_ms),
                recorded_replica_seconds: replica_seconds(&recorded_series, span_ms),
                simulated_replica_seconds: replica_seconds(&simulated_series, span_ms),
                scale_events,
                scale_events_dropped,
            }
        })
        .collect()
}

/// A replica source as reports and the CLI name it.
pub(crate) fn replica_source_name(source: crate::ReplicaSource) -> &'static str {
    match source {
        crate::ReplicaSource::Recorded => "recorded",
        crate::ReplicaSource::Hpa => "hpa",
        crate::ReplicaSource::Unspecified => "unspecified",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn point(ms: u64, replicas: u64) -> ReplicaPoint {
        ReplicaPoint {
            offset: Duration::from_millis(ms),
            replicas,
        }
    }

    fn web() -> ObservedReplicas {
        ObservedReplicas {
            workload: "Deployment/shop/web".to_owned(),
            // Recorded time: 2 from 0, 4 from 2.5 s.
            recorded: vec![point(0, 2), point(2_500, 4)],
            // Wall clock at 2x: created at 0 with 2, the HPA to 3 at 0.5 s wall (1 s
            // recorded) and to 5 at 1.5 s wall (3 s recorded), deleted at 1.9 s (3.8 s).
            simulated: vec![point(0, 2), point(500, 3), point(1_500, 5), point(1_900, 0)],
        }
    }

    #[test]
    fn buckets_hold_the_value_at_their_end_in_recorded_time() {
        let workloads = workloads(&[web()], 2.0, 5, 1_000, true);
        let scaled = &workloads[0];
        assert_eq!(scaled.name, "Deployment/shop/web");
        assert_eq!(scaled.recorded, [2, 2, 4, 4, 4]);
        assert_eq!(scaled.simulated, [2, 3, 3, 0, 0]);
    }

    #[test]
    fn replica_seconds_integrate_over_the_timeline_span() {
        let scaled = &workloads(&[web()], 2.0, 5, 1_000, true)[0];
        // 2 * 2.5 s + 4 * 2.5 s.
        assert!((scaled.recorded_replica_seconds - 15.0).abs() < 1e-9);
        // 2 * 1 s + 3 * 2 s + 5 * 0.8 s + 0.
        assert!((scaled.simulated_replica_seconds - 12.0).abs() < 1e-9);
    }

    #[test]
    fn scale_events_leave_out_creation_and_deletion_and_the_recordings_changes() {
        let scaled = &workloads(&[web()], 2.0, 5, 1_000, true)[0];
        assert_eq!(
            scaled.scale_events,
            [
                ReplicaChange {
                    offset_ms: 1_000,
                    from: 2,
                    to: 3
                },
                ReplicaChange {
                    offset_ms: 3_000,
                    from: 3,
                    to: 5
                },
            ]
        );
        let recorded_decides = &workloads(&[web()], 2.0, 5, 1_000, false)[0];
        assert!(recorded_decides.scale_events.is_empty());
    }

    #[test]
    fn scale_events_past_the_bound_are_counted() {
        let simulated = (0..MAX_REPLICA_CHANGES as u64 + 3)
            .map(|i| point(i * 10, 1 + i % 2))
            .collect();
        let flapping = ObservedReplicas {
            workload: "Deployment/shop/flap".to_owned(),
            recorded: Vec::new(),
            simulated,
        };
        let flap = &workloads(&[flapping], 1.0, 1, 1_000, true)[0];
        assert_eq!(flap.scale_events.len(), MAX_REPLICA_CHANGES);
        // One change fewer than points, the first thousand kept.
        assert_eq!(flap.scale_events_dropped, 2);
        assert_eq!(flap.recorded, [0]);
    }
}
