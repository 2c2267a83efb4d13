//! What a run's injected disruptions cost: per workload its ready replicas against its desired
//! ones from the first disruption to the end of the run, and per disruption how long the
//! workloads took to be whole again. Observed in wall-clock time, reported in recorded time.

use std::time::Duration;

use ksim_proto::json::of_millis;

use crate::{
    DisruptionOutcome, Disruptions, NodeChange, NodeChangeCause, NodeChangeKind,
    WorkloadAvailability,
    input::{ObservedAvailability, ObservedDisruptions, ReadyPoint},
    timeline::{millis, recorded},
};

/// Counts in each disruption that began the nodes added by the autoscalers from its start to
/// its end (`end`, recorded, when it has none): `changes` are the report's node changes, in
/// recorded time.
pub fn count_nodes_added(disruptions: &mut Disruptions, changes: &[NodeChange], end: Duration) {
    let recorded_of = |offset: Option<&prost_types::Duration>| {
        offset.and_then(|offset| Duration::try_from(*offset).ok())
    };
    for outcome in &mut disruptions.outcomes {
        if !outcome.error.is_empty() {
            continue;
        }
        let from = recorded_of(outcome.offset.as_ref()).unwrap_or_default();
        let until = recorded_of(outcome.recovered_offset.as_ref()).unwrap_or(end);
        outcome.nodes_added = changes
            .iter()
            .filter(|change| {
                change.kind() == NodeChangeKind::Added
                    && change.cause() == NodeChangeCause::Autoscaler
                    && recorded_of(change.offset.as_ref())
                        .is_some_and(|at| from <= at && at <= until)
            })
            .count() as u64;
    }
}

/// The report's disruptions from what the replay observed, up to `end` (wall clock since the
/// replay start, the last sample's offset).
pub fn disruptions(observed: &ObservedDisruptions, end: Duration, speed: f64) -> Disruptions {
    let begun: Vec<Duration> = observed
        .disruptions
        .iter()
        .filter(|disruption| disruption.error.is_empty())
        .map(|disruption| disruption.offset)
        .collect();
    let first = begun.iter().min().copied();
    let proto = |wall: Duration| of_millis(millis(recorded(wall, speed)));
    let workloads = match first {
        Some(first) => observed
            .workloads
            .iter()
            .filter_map(|workload| availability(workload, first, end, speed, observed))
            .collect(),
        None => Vec::new(),
    };
    let outcomes = observed
        .disruptions
        .iter()
        .map(|disruption| {
            let (time_to_recovery, recovered) = if disruption.error.is_empty() {
                recovery(&observed.workloads, disruption.offset, end)
            } else {
                (None, true)
            };
            DisruptionOutcome {
                kind: disruption.kind.clone(),
                node_group: disruption.node_group.clone(),
                zone: disruption.zone.clone(),
                offset: Some(proto(disruption.offset)),
                nodes: disruption.nodes.clone(),
                recovered_offset: disruption.recovered.map(proto),
                time_to_recovery: time_to_recovery.map(proto),
                recovered,
                error: disruption.error.clone(),
                evictions_blocked: disruption.evictions_blocked,
                pods_lost: disruption.pods_lost,
                recorded_node: disruption.recorded_node.clone(),
                stuck_drains: disruption.stuck_drains.clone(),
                // Counted from the report's node changes ([`count_nodes_added`]).
                nodes_added: 0,
            }
        })
        .collect();
    Disruptions {
        seed: observed.seed,
        outcomes,
        workloads,
        pods_evicted: first.map_or(0, |first| {
            observed
                .evictions
                .iter()
                .filter(|(at, _)| *at >= first)
                .count() as u64
        }),
        evictions_blocked: observed.blocked.len() as u64,
    }
}

/// The point in force at `at`: the last at or before it.
fn at_time(points: &[ReadyPoint], at: Duration) -> Option<ReadyPoint> {
    points.iter().take_while(|p| p.offset <= at).last().copied()
}

fn below(point: &ReadyPoint) -> bool {
    point.ready < point.desired
}

/// One workload over `[from, end]`; `None` for one that wanted no replicas in that span.
fn availability(
    workload: &ObservedAvailability,
    from: Duration,
    end: Duration,
    speed: f64,
    observed: &ObservedDisruptions,
) -> Option<WorkloadAvailability> {
    // The span starts at the disruption, or where the workload was first seen after it.
    let start_point = at_time(&workload.points, from)
        .map(|point| ReadyPoint {
            offset: from,
            ..point
        })
        .or_else(|| workload.points.iter().find(|p| p.offset <= end).copied())?;
    let start = start_point.offset;
    let later = workload
        .points
        .iter()
        .filter(|p| p.offset > start && p.offset <= end)
        .copied();
    let steps: Vec<ReadyPoint> = std::iter::once(start_point).chain(later).collect();
    if steps.iter().all(|p| p.desired == 0) {
        return None;
    }
    let mut below_for = Duration::ZERO;
    for (index, point) in steps.iter().enumerate() {
        let until = steps.get(index + 1).map_or(end, |next| next.offset);
        if below(point) {
            below_for += until.saturating_sub(point.offset);
        }
    }
    let span = end.saturating_sub(start);
    let share_below = if span.is_zero() {
        0.0
    } else {
        below_for.as_secs_f64() / span.as_secs_f64()
    };
    Some(WorkloadAvailability {
        name: workload.workload.clone(),
        desired: start_point.desired,
        lowest_ready: steps.iter().map(|p| p.ready).min().unwrap_or(0),
        time_below_desired: Some(of_millis(millis(recorded(below_for, speed)))),
        availability: (1.0 - share_below).clamp(0.0, 1.0),
        pods_evicted: in_span(&observed.evictions, workload, from),
        evictions_blocked: in_span(&observed.blocked, workload, from),
    })
}

/// How many of `pods` (when, workload) are the workload's from `from` on.
fn in_span(pods: &[(Duration, String)], workload: &ObservedAvailability, from: Duration) -> u64 {
    pods.iter()
        .filter(|(at, name)| *at >= from && *name == workload.workload)
        .count() as u64
}

/// How long the workloads a disruption at `from` pushed below their desired ready replicas
/// took to be whole again: those whole at `from` that dropped below after it, timed from
/// `from` until the last of them was back (each the first time after its first drop; `None`
/// when none dropped, or one was not back by `end`), and whether each was whole at `end`.
/// A workload below already at `from` (a rollout, a pod that never fits) or not there yet is
/// left out: in a busy cluster some workload is below at most instants, and that churn must
/// neither end the measure nor hold it.
fn recovery(
    workloads: &[ObservedAvailability],
    from: Duration,
    end: Duration,
) -> (Option<Duration>, bool) {
    let mut slowest = Some(Duration::ZERO);
    let mut dropped_any = false;
    let mut whole_at_end = true;
    for workload in workloads {
        // Not there yet, or below already.
        if at_time(&workload.points, from).is_none_or(|p| below(&p)) {
            continue;
        }
        let mut dropped = false;
        let mut back = None;
        for point in workload
            .points
            .iter()
            .filter(|p| p.offset > from && p.offset <= end)
        {
            if below(point) {
                dropped = true;
            } else if dropped && back.is_none() {
                back = Some(point.offset.saturating_sub(from));
            }
        }
        if !dropped {
            continue;
        }
        dropped_any = true;
        whole_at_end &= at_time(&workload.points, end).is_some_and(|p| !below(&p));
        slowest = slowest.zip(back).map(|(slowest, back)| slowest.max(back));
    }
    (slowest.filter(|_| dropped_any), whole_at_end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::input::ObservedDisruption;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn point(at: u64, desired: u64, ready: u64) -> ReadyPoint {
        ReadyPoint {
            offset: secs(at),
            desired,
            ready,
        }
    }

    fn observed() -> ObservedDisruptions {
        ObservedDisruptions {
            seed: 3,
            disruptions: vec![
                ObservedDisruption {
                    kind: "node-failure".into(),
                    node_group: "m5".into(),
                    zone: String::new(),
                    offset: secs(10),
                    nodes: vec!["m5-1".into()],
                    recovered: Some(secs(40)),
                    ..ObservedDisruption::default()
                },
                ObservedDisruption {
                    kind: "node-failure".into(),
                    node_group: "m5".into(),
                    zone: String::new(),
                    offset: secs(90),
                    nodes: Vec::new(),
                    recovered: None,
                    error: "the run ended before it".into(),
                    ..ObservedDisruption::default()
                },
                ObservedDisruption {
                    kind: "spot-interruption".into(),
                    node_group: "west".into(),
                    offset: secs(30),
                    nodes: vec!["west-1".into()],
                    recovered: Some(secs(42)),
                    evictions_blocked: 1,
                    pods_lost: 1,
                    ..ObservedDisruption::default()
                },
            ],
            workloads: vec![
                // Two replicas, one lost at 15 s, back at 25 s.
                ObservedAvailability {
                    workload: "Deployment/shop/web".into(),
                    points: vec![
                        point(0, 2, 0),
                        point(2, 2, 2),
                        point(15, 2, 1),
                        point(25, 2, 2),
                    ],
                },
                // Never below.
                ObservedAvailability {
                    workload: "Deployment/shop/db".into(),
                    points: vec![point(0, 1, 1)],
                },
                // Wants nothing: left out.
                ObservedAvailability {
                    workload: "Deployment/shop/off".into(),
                    points: vec![point(0, 0, 0)],
                },
            ],
            evictions: vec![
                (secs(5), "Deployment/shop/web".into()),
                (secs(14), "Deployment/shop/web".into()),
            ],
            blocked: vec![(secs(31), "Deployment/shop/web".into())],
        }
    }

    #[test]
    fn the_nodes_the_autoscalers_added_while_each_lasted_are_counted() {
        let change = |at: u64, kind: NodeChangeKind, cause: NodeChangeCause| {
            let mut change = NodeChange {
                offset: Some(of_millis(at * 1000)),
                node: format!("n-{at}"),
                ..NodeChange::default()
            };
            change.set_kind(kind);
            change.set_cause(cause);
            change
        };
        let changes = [
            // In the failure's window only (100 s to 400 s recorded at 10x).
            change(150, NodeChangeKind::Added, NodeChangeCause::Autoscaler),
            // Not the autoscalers': a fixed group's, a node back under its name, a removal.
            change(200, NodeChangeKind::Added, NodeChangeCause::Pool),
            change(360, NodeChangeKind::Added, NodeChangeCause::Reregistration),
            change(350, NodeChangeKind::Removed, NodeChangeCause::Autoscaler),
            // The spot interruption's (300 s to 420 s).
            change(410, NodeChangeKind::Added, NodeChangeCause::Autoscaler),
        ];
        let mut report = disruptions(&observed(), secs(60), 10.0);
        count_nodes_added(&mut report, &changes, secs(600));
        let added: Vec<(&str, u64)> = report
            .outcomes
            .iter()
            .map(|outcome| (outcome.error.as_str(), outcome.nodes_added))
            .collect();
        assert_eq!(
            added,
            [("", 1), ("the run ended before it", 0), ("", 1)],
            "{report:?}"
        );
    }

    #[test]
    fn availability_counts_from_the_first_disruption_in_recorded_time() {
        let report = disruptions(&observed(), secs(60), 10.0);
        assert_eq!(report.seed, 3);
        let web = &report.workloads[0];
        assert_eq!(web.name, "Deployment/shop/web");
        assert_eq!((web.desired, web.lowest_ready), (2, 1));
        // 10 s below of the 50 s from the disruption to the end, at 10x.
        assert_eq!(web.time_below_desired, Some(of_millis(100_000)));
        assert!(
            (web.availability - 0.8).abs() < 1e-9,
            "{}",
            web.availability
        );
        // The eviction before the disruption is not its.
        assert_eq!(web.pods_evicted, 1);
        assert_eq!(report.pods_evicted, 1);
        assert_eq!((web.evictions_blocked, report.evictions_blocked), (1, 1));
        let db = &report.workloads[1];
        assert_eq!((db.lowest_ready, db.availability), (1, 1.0));
        assert_eq!(
            report.workloads.len(),
            2,
            "a workload that wants nothing is left out"
        );
    }

    #[test]
    fn recovery_is_timed_from_the_disruption_to_the_workloads_whole_again() {
        let report = disruptions(&observed(), secs(60), 10.0);
        let failure = &report.outcomes[0];
        assert_eq!(failure.offset, Some(of_millis(100_000)));
        assert_eq!(failure.recovered_offset, Some(of_millis(400_000)));
        assert_eq!(failure.time_to_recovery, Some(of_millis(150_000)));
        assert!(failure.recovered);
        let missed = &report.outcomes[1];
        assert_eq!(missed.error, "the run ended before it");
        assert_eq!(missed.time_to_recovery, None);
        let spot = &report.outcomes[2];
        assert_eq!((spot.evictions_blocked, spot.pods_lost), (1, 1));
        assert_eq!(spot.recovered_offset, Some(of_millis(420_000)));
    }

    #[test]
    fn churn_elsewhere_neither_ends_nor_holds_the_recovery() {
        let mut observed = observed();
        observed.workloads.extend([
            // Below already when the failure came (a pod that never fits): not its doing.
            ObservedAvailability {
                workload: "Deployment/shop/stuck".into(),
                points: vec![point(0, 3, 2)],
            },
            // Whole at the failure, then a short rollout dip of its own before web's drop.
            ObservedAvailability {
                workload: "Deployment/shop/api".into(),
                points: vec![point(0, 1, 1), point(12, 1, 0), point(13, 1, 1)],
            },
            // Created after the failure began: starting, not dropped.
            ObservedAvailability {
                workload: "Deployment/shop/late".into(),
                points: vec![point(20, 1, 0), point(50, 1, 1)],
            },
        ]);
        let report = disruptions(&observed, secs(60), 1.0);
        let failure = &report.outcomes[0];
        // Until web, the last of those it dropped, was back: 15 s, not api's 3 s, not late's.
        assert_eq!(failure.time_to_recovery, Some(of_millis(15_000)));
        assert!(failure.recovered, "stuck was below before and after");
    }

    #[test]
    fn a_workload_still_down_at_the_end_has_not_recovered() {
        let mut observed = observed();
        observed.workloads[0].points.truncate(3);
        let report = disruptions(&observed, secs(60), 1.0);
        let failure = &report.outcomes[0];
        assert_eq!((failure.time_to_recovery, failure.recovered), (None, false));
        assert_eq!(
            report.workloads[0].time_below_desired,
            Some(of_millis(45_000))
        );
    }

    #[test]
    fn without_a_disruption_that_began_no_workload_is_judged() {
        let mut observed = observed();
        observed
            .disruptions
            .retain(|disruption| !disruption.error.is_empty());
        let report = disruptions(&observed, secs(60), 1.0);
        assert!(report.workloads.is_empty());
        assert_eq!(report.pods_evicted, 0);
    }
}
