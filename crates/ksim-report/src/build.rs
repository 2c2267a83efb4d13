//! Observations into the report.

use std::time::Duration;

use super::input::{Observations, ObservedNodeChange, ObservedOutage};
use super::model::{
    AutoscalerOutage, AutoscalerOutages, NodeChange, ObjectError, ObjectOperation, PendingSplit,
    ReplicaSource, Report, nodes_total,
};
use ksim_proto::json::{of_millis, to_millis};

use super::timeline::{self, bucket_width, effective_speed, millis, recorded};
use super::{accelerators, attribution, costs, disruptions, fidelity, percentiles, replicas};

/// The report of what was observed; see [`timeline`] for the buckets and [`percentiles::of`]
/// for the percentiles.
pub fn build(obs: &Observations) -> Report {
    let timeline = timeline::buckets(obs);
    let bucket_ms = millis(bucket_width(obs.speed));
    let costs = costs::costs(obs, &timeline, bucket_ms);
    let pending: Vec<_> = obs
        .pending_times
        .iter()
        .map(|&wall| recorded(wall, obs.speed))
        .collect();
    let workload_scaling = obs.workload_scaling.clone().map(|mut scaling| {
        scaling.workloads = replicas::workloads(
            &obs.replicas,
            obs.speed,
            timeline.len(),
            bucket_ms,
            scaling.source() == ReplicaSource::Hpa,
        );
        scaling
    });
    let node_changes = node_changes(&obs.node_changes, obs.speed);
    let mut warnings = obs.warnings.clone();
    if let Some(provisioning) = &obs.provisioning {
        warnings.extend(fidelity::few_samples_warnings(
            &provisioning.delays,
            &node_changes,
            pending.len() as u64,
        ));
    }
    let end = recorded(replay_end(obs), obs.speed);
    let disruptions = obs.disruptions.as_ref().map(|observed| {
        let mut disruptions = disruptions::disruptions(observed, replay_end(obs), obs.speed);
        disruptions::count_nodes_added(&mut disruptions, &node_changes, end);
        disruptions
    });
    let accelerators = accelerators::accelerators(obs, &timeline, &costs, bucket_ms);
    Report {
        simulation_id: obs.simulation_id.clone(),
        complete: obs.complete,
        events_applied: obs.events_applied,
        peak_nodes: timeline.iter().map(nodes_total).max().unwrap_or(0),
        speed: effective_speed(obs.speed),
        bucket_width: Some(of_millis(bucket_ms)),
        timeline,
        pod_pending_time: Some(percentiles::of(&pending)),
        lateness: Some(percentiles::of(&obs.lateness)),
        object_errors: obs
            .object_errors
            .iter()
            .map(|error| ObjectError {
                gvk: Some((&error.target.gvk).into()),
                // The proto spells "cluster-scoped" as an empty namespace.
                namespace: error.target.namespace.clone().unwrap_or_default(),
                name: error.target.name.clone(),
                operation: ObjectOperation::from(error.operation).into(),
                event_index: error.event_index,
                trace_offset: Some(of_millis(millis(error.trace_offset))),
                message: error.message.clone(),
            })
            .collect(),
        node_changes,
        fidelity: fidelity::compare(obs),
        configuration: obs.configuration.clone(),
        costs: Some(costs),
        waits: costs::waits(&obs.waits),
        node_disruptions: costs::waits(&obs.node_disruptions),
        autoscaler_outages: obs
            .autoscaler_outages
            .as_ref()
            .map(|outages| AutoscalerOutages {
                outages: autoscaler_outages(outages, replay_end(obs), obs.speed),
            }),
        provisioning: obs.provisioning.clone(),
        usage: obs.usage.clone(),
        workload_scaling,
        pending_split: Some(pending_split(obs)),
        pod_start_time: Some(percentiles::of(
            &obs.pending_splits
                .iter()
                .map(|split| recorded(split.start, obs.speed))
                .collect::<Vec<_>>(),
        )),
        node_ready_time: Some(percentiles::of(
            &obs.node_ready_times
                .iter()
                .map(|&wall| recorded(wall, obs.speed))
                .collect::<Vec<_>>(),
        )),
        // Where the files are is for whoever writes them to say.
        artifacts: None,
        nodes_kept: obs.nodes_kept.clone(),
        warnings,
        trace_transforms: obs.trace_transforms.clone(),
        disruptions,
        accelerators,
        explanations: explanations(obs),
    }
}

/// The explained pods, their attempts in recorded time.
fn explanations(obs: &Observations) -> Vec<crate::PodExplanation> {
    let mut pods = obs.explanations.clone();
    for attempt in pods.iter_mut().flat_map(|pod| pod.attempts.iter_mut()) {
        let wall = Duration::from_millis(to_millis(attempt.offset.as_ref()));
        attempt.offset = Some(of_millis(millis(recorded(wall, obs.speed))));
    }
    pods
}

/// The pods' pending pod-seconds by cause, recorded time.
fn pending_split(obs: &Observations) -> PendingSplit {
    let seconds = |wall: Duration| recorded(wall, obs.speed).as_secs_f64();
    obs.pending_splits
        .iter()
        .fold(PendingSplit::default(), |mut sum, split| {
            sum.pods += 1;
            sum.scheduling_pod_seconds += seconds(split.scheduling);
            sum.node_boot_pod_seconds += seconds(split.node_boot);
            sum.start_pod_seconds += seconds(split.start);
            sum
        })
}

/// The last moment the driver observed, wall clock since the start: an outage still open
/// counts to here.
fn replay_end(obs: &Observations) -> Duration {
    obs.samples
        .last()
        .map(|sample| sample.offset)
        .unwrap_or_default()
}

/// In time order, in recorded time, each cut to the replay's end (CA missing after the end
/// cost the run nothing).
fn autoscaler_outages(
    outages: &[ObservedOutage],
    end: Duration,
    speed: f64,
) -> Vec<AutoscalerOutage> {
    let mut outages: Vec<&ObservedOutage> = outages.iter().collect();
    outages.sort_by_key(|outage| outage.down);
    outages
        .into_iter()
        .map(|outage| {
            let down = outage.down.min(end);
            let up = outage.up.unwrap_or(end).clamp(down, end);
            AutoscalerOutage {
                offset: Some(of_millis(millis(recorded(down, speed)))),
                duration: Some(of_millis(millis(recorded(up - down, speed)))),
                ongoing: outage.up.is_none(),
            }
        })
        .collect()
}

/// In time order (the watch delivers them in order; stable, so ties keep it), to the
/// millisecond in recorded time like the timeline's offsets.
fn node_changes(changes: &[ObservedNodeChange], speed: f64) -> Vec<NodeChange> {
    let mut changes: Vec<&ObservedNodeChange> = changes.iter().collect();
    changes.sort_by_key(|change| change.offset);
    let causes = attribution::causes(&changes);
    changes
        .into_iter()
        .zip(causes)
        .map(|(change, cause)| NodeChange {
            offset: Some(of_millis(millis(recorded(change.offset, speed)))),
            group: change.group.clone(),
            node: change.node.clone(),
            kind: change.kind.into(),
            cause: cause.into(),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::super::percentiles::ms;
    use super::*;

    #[test]
    fn a_fast_replay_reports_recorded_time() {
        let mut obs = fixtures::observations();
        obs.speed = 10.0;
        obs.explanations = vec![crate::PodExplanation {
            namespace: "shop".into(),
            name: "web-1".into(),
            owner: "Deployment/web".into(),
            attempts: vec![crate::SchedulingAttempt {
                offset: Some(of_millis(1_500)),
                node: "node-1".into(),
                ..Default::default()
            }],
        }];
        let report = build(&obs);
        // An attempt 1.5 s into a 10x replay ran 15 s into the recording.
        let attempt = &report.explanations[0].attempts[0];
        assert_eq!(to_millis(attempt.offset.as_ref()), 15_000);
        assert_eq!(report.speed, 10.0);
        assert_eq!(to_millis(report.bucket_width.as_ref()), 1000);
        let slow = fixtures::report();
        let p90 = |report: &Report| ms(report.pod_pending_time.unwrap().p90.as_ref());
        assert_eq!(p90(&report), p90(&slow) * 10.0);
        // Lateness is the driver's delay: wall clock at any speed.
        assert_eq!(report.lateness, slow.lateness);
        for (fast, slow) in report.node_changes.iter().zip(&slow.node_changes) {
            assert_eq!(
                to_millis(fast.offset.as_ref()),
                to_millis(slow.offset.as_ref()) * 10
            );
        }
        assert_eq!(slow.speed, 1.0);
    }

    #[test]
    fn report_of_the_fixture() {
        let report = fixtures::report();
        assert_eq!(report.simulation_id, "sim-42");
        assert!(report.complete);
        assert_eq!(report.events_applied, 1234);
        // Second 1 and 2 have group-a 1 + group-b 2; the end has 1 + 1.
        assert_eq!(report.peak_nodes, 3);
        assert_eq!(report.timeline.len(), 4);
        assert_eq!(ms(report.pod_pending_time.unwrap().p90.as_ref()), 90.0);
        let lateness = report.lateness.unwrap();
        assert_eq!(lateness.count, 3);
        assert_eq!(ms(lateness.p50.as_ref()), 1.5);
        assert_eq!(report.object_errors.len(), 4);
        let first = &report.object_errors[0];
        assert_eq!(first.operation(), ObjectOperation::Apply);
        assert_eq!(to_millis(first.trace_offset.as_ref()), 61_500);
        assert_eq!(first.name, "web-0");
    }

    #[test]
    fn peak_is_the_highest_total_not_the_sum_of_group_peaks() {
        // group-a peaks at 3 in second 0, group-b at 3 in second 1; never 6 at once.
        let mut obs = Observations::default();
        for (ms, a, b) in [(0, 3, 0), (1_000, 1, 3), (2_000, 1, 1)] {
            obs.samples.push(super::super::input::Sample {
                offset: Duration::from_millis(ms),
                nodes: [("a", a), ("b", b)]
                    .into_iter()
                    .map(|(group, nodes)| {
                        (
                            group.to_owned(),
                            super::super::input::NodeCount {
                                nodes,
                                ..Default::default()
                            },
                        )
                    })
                    .collect(),
                ..Default::default()
            });
        }
        assert_eq!(build(&obs).peak_nodes, 4);
    }

    #[test]
    fn node_changes_are_in_time_order_on_the_timeline_clock() {
        use super::super::input::ScaleEvent;
        use crate::NodeChangeKind;
        let change = |ms, node: &str, kind| ObservedNodeChange {
            offset: Duration::from_micros(ms),
            group: "m5".into(),
            node: node.into(),
            kind,
            instance_type: String::new(),
            owner: None,
        };
        let obs = Observations {
            // At 10x the resize and its node are 2.5 s into the replay, 25 s into the trace:
            // both land in the timeline's bucket of second 2.
            scale_events: vec![ScaleEvent {
                offset: Duration::from_millis(2_500),
                group: "m5".into(),
                delta: 1,
            }],
            node_changes: vec![
                change(2_500_900, "m5-b", NodeChangeKind::Added),
                change(700_000, "m5-a", NodeChangeKind::Removed),
            ],
            ..Observations::default()
        };
        let report = build(&obs);
        let offsets: Vec<(u64, &str)> = report
            .node_changes
            .iter()
            .map(|c| (to_millis(c.offset.as_ref()), c.node.as_str()))
            .collect();
        // Sorted, and cut (not rounded) to the millisecond like the timeline.
        assert_eq!(offsets, [(700, "m5-a"), (2_500, "m5-b")]);
        assert_eq!(report.node_changes[1].kind(), NodeChangeKind::Added);
        assert_eq!(report.node_changes[1].group, "m5");
        let second =
            usize::try_from(to_millis(report.node_changes[1].offset.as_ref()) / 1000).unwrap();
        assert_eq!(report.timeline[second].autoscaler_scale_ups, 1);
        assert_eq!(
            to_millis(report.timeline[second].offset.as_ref()),
            2_000,
            "the bucket's offset is on the same clock"
        );
    }

    #[test]
    fn autoscaler_outages_are_recorded_time_and_an_open_one_counts_to_the_end() {
        let secs = Duration::from_secs;
        let mut obs = fixtures::observations();
        obs.speed = 10.0;
        let end = obs.samples.last().unwrap().offset;
        obs.autoscaler_outages = Some(vec![
            ObservedOutage {
                down: end - secs(1),
                up: None,
            },
            ObservedOutage {
                down: Duration::from_millis(500),
                up: Some(Duration::from_millis(1_700)),
            },
        ]);
        let outages = build(&obs).autoscaler_outages.unwrap().outages;
        let at = |ms| Some(of_millis(ms));
        assert_eq!(
            outages,
            [
                AutoscalerOutage {
                    offset: at(5_000),
                    duration: at(12_000),
                    ongoing: false,
                },
                AutoscalerOutage {
                    offset: at(millis(end - secs(1)) * 10),
                    duration: at(10_000),
                    ongoing: true,
                },
            ]
        );
    }

    #[test]
    fn pending_time_by_cause_and_start_and_ready_times_are_recorded_time() {
        let mut obs = fixtures::observations();
        obs.speed = 2.0;
        let secs = Duration::from_secs;
        obs.pending_splits = vec![
            crate::PodPendingSplit {
                scheduling: secs(1),
                node_boot: secs(30),
                start: secs(2),
            },
            crate::PodPendingSplit {
                scheduling: secs(3),
                node_boot: Duration::ZERO,
                start: secs(4),
            },
        ];
        obs.node_ready_times = vec![secs(5)];
        let report = build(&obs);
        assert_eq!(
            report.pending_split,
            Some(PendingSplit {
                pods: 2,
                scheduling_pod_seconds: 8.0,
                node_boot_pod_seconds: 60.0,
                start_pod_seconds: 12.0
            })
        );
        // report.json keeps its names for them.
        assert_eq!(
            serde_json::to_value(report.pending_split).unwrap(),
            serde_json::json!({"pods": 2, "scheduling": 8.0, "node_boot": 60.0, "start": 12.0})
        );
        let start = report.pod_start_time.unwrap();
        assert_eq!(start.count, 2);
        assert_eq!(ms(start.max.as_ref()), 8_000.0);
        assert_eq!(ms(report.node_ready_time.unwrap().p50.as_ref()), 10_000.0);
    }

    #[test]
    fn unknown_outages_stay_unknown_and_none_are_none() {
        let mut obs = fixtures::observations();
        assert_eq!(build(&obs).autoscaler_outages, None);
        obs.autoscaler_outages = Some(Vec::new());
        assert_eq!(
            build(&obs).autoscaler_outages,
            Some(AutoscalerOutages::default())
        );
    }

    #[test]
    fn scaled_workloads_share_the_timelines_buckets() {
        let mut obs = fixtures::observations();
        let point = |ms, replicas| crate::ReplicaPoint {
            offset: Duration::from_millis(ms),
            replicas,
        };
        obs.replicas = vec![crate::ObservedReplicas {
            workload: "Deployment/shop/web".into(),
            recorded: vec![point(0, 2), point(2_000, 4)],
            simulated: vec![point(0, 2), point(1_000, 6)],
        }];
        // Observed but no HPA in the trace: nothing to report.
        assert_eq!(build(&obs).workload_scaling, None);
        obs.workload_scaling = Some(crate::WorkloadScaling {
            source: ReplicaSource::Hpa as i32,
            ..crate::WorkloadScaling::default()
        });
        let report = build(&obs);
        let scaling = report.workload_scaling.unwrap();
        let web = &scaling.workloads[0];
        assert_eq!(report.timeline.len(), 4);
        assert_eq!(web.recorded, [2, 2, 4, 4]);
        assert_eq!(web.simulated, [2, 6, 6, 6]);
        assert_eq!(web.scale_events.len(), 1);
        assert_eq!(web.scale_events[0].offset_ms, 1_000);
    }

    #[test]
    fn nothing_observed_is_an_empty_report() {
        let report = build(&Observations {
            simulation_id: "s".into(),
            ..Observations::default()
        });
        assert_eq!(
            report,
            Report {
                simulation_id: "s".into(),
                speed: 1.0,
                bucket_width: Some(of_millis(1000)),
                pod_pending_time: Some(percentiles::of(&[])),
                lateness: Some(percentiles::of(&[])),
                pod_start_time: Some(percentiles::of(&[])),
                node_ready_time: Some(percentiles::of(&[])),
                costs: Some(crate::Costs::default()),
                pending_split: Some(PendingSplit::default()),
                ..Report::default()
            }
        );
        assert_eq!(report.peak_nodes, 0);
    }
}
