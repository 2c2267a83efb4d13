//! The report to and from its gRPC form.
//!
//! Both ways are provided because the CLI receives the proto and writes the same files the
//! driver would. The round trip is lossless except that the proto's durations are kept to the
//! microsecond (percentiles) or millisecond (offsets), as in the JSON, and an unknown
//! operation or node change kind reads back as `None`.

use std::{collections::BTreeMap, time::Duration};

use ksim_proto::ksim::{driver::v1 as pb, env::v1 as env};
use ksim_trace::time::{millis, timestamp};

use super::input::{ClusterState, NodeChangeKind, NodeCount};
use super::model::{
    AutoscalerFlag, Bucket, Configuration, DurationPercentiles, Fidelity, FidelityBucket,
    NodeChangeCause, PendingFidelity, ProviderConfiguration, Report, ReportedError,
    ReportedNodeChange, SchedulerConfiguration,
};
use super::percentiles;
use crate::{Gvk, Operation, Target};

impl Report {
    /// The gRPC form; artifacts are left empty for the caller to fill in.
    pub fn to_proto(&self) -> pb::Report {
        pb::Report {
            simulation_id: self.simulation_id.clone(),
            complete: self.complete,
            timeline: self.timeline.iter().map(bucket_to_proto).collect(),
            pod_pending_time: Some(self.pod_pending_time),
            lateness: Some(self.lateness),
            object_errors: self.object_errors.iter().map(error_to_proto).collect(),
            artifacts: None,
            events_applied: self.events_applied,
            peak_nodes: self.peak_nodes,
            node_changes: self.node_changes.iter().map(node_change_to_proto).collect(),
            speed: self.speed,
            bucket_width: Some(duration_to_proto(Duration::from_millis(self.bucket_ms))),
            fidelity: self.fidelity.as_ref().map(fidelity_to_proto),
            configuration: self.configuration.as_ref().map(Configuration::to_proto),
            costs: Some(self.costs.clone()),
            waits: self.waits.clone(),
            node_disruptions: self.node_disruptions.clone(),
            autoscaler_outages: self.autoscaler_outages.as_ref().map(|outages| {
                pb::AutoscalerOutages {
                    outages: outages.clone(),
                }
            }),
            provisioning: self.provisioning.clone(),
            usage: self.usage.clone(),
            workload_scaling: self.workload_scaling.clone(),
            pending_split: Some(self.pending_split),
            pod_start_time: Some(self.pod_start_time),
            node_ready_time: Some(self.node_ready_time),
            nodes_kept: self.nodes_kept.clone(),
            warnings: self.warnings.clone(),
            trace_transforms: self.trace_transforms.clone(),
        }
    }

    /// The report of its gRPC form; the proto's artifacts are not part of it.
    pub fn from_proto(report: &pb::Report) -> Self {
        Self {
            simulation_id: report.simulation_id.clone(),
            complete: report.complete,
            events_applied: report.events_applied,
            peak_nodes: report.peak_nodes,
            // Reports from drivers that did not send them were 1x with 1 s buckets.
            speed: if report.speed > 0.0 {
                report.speed
            } else {
                1.0
            },
            bucket_ms: match report.bucket_width.as_ref() {
                Some(width) => {
                    u64::try_from(duration_from_proto(Some(width)).as_millis()).unwrap_or(1000)
                }
                None => 1000,
            },
            timeline: report.timeline.iter().map(bucket_from_proto).collect(),
            pod_pending_time: percentiles_from_proto(report.pod_pending_time.as_ref()),
            lateness: percentiles_from_proto(report.lateness.as_ref()),
            object_errors: report.object_errors.iter().map(error_from_proto).collect(),
            node_changes: report
                .node_changes
                .iter()
                .map(node_change_from_proto)
                .collect(),
            fidelity: report.fidelity.as_ref().map(fidelity_from_proto),
            configuration: report.configuration.as_ref().map(Configuration::from_proto),
            costs: report.costs.clone().unwrap_or_default(),
            waits: report.waits.clone(),
            node_disruptions: report.node_disruptions.clone(),
            autoscaler_outages: report
                .autoscaler_outages
                .as_ref()
                .map(|outages| outages.outages.clone()),
            usage: report.usage.clone(),
            workload_scaling: report.workload_scaling.clone(),
            provisioning: report.provisioning.clone(),
            pending_split: report.pending_split.unwrap_or_default(),
            pod_start_time: percentiles_from_proto(report.pod_start_time.as_ref()),
            node_ready_time: percentiles_from_proto(report.node_ready_time.as_ref()),
            nodes_kept: report.nodes_kept.clone(),
            warnings: report.warnings.clone(),
            trace_transforms: report.trace_transforms.clone(),
        }
    }
}

impl Configuration {
    pub fn to_proto(&self) -> env::AppliedConfiguration {
        env::AppliedConfiguration {
            scheduler_given: self.scheduler.as_ref().map(|s| env::SchedulerConfig {
                source: s.source.clone(),
                yaml: s.given_yaml.clone(),
            }),
            scheduler_as_run_yaml: self
                .scheduler
                .as_ref()
                .map(|s| s.as_run_yaml.clone())
                .unwrap_or_default(),
            autoscaler: self.autoscaler,
            speed: self.speed,
            autoscaler_flags: self
                .autoscaler_flags
                .iter()
                .map(|flag| env::AutoscalerFlag {
                    name: flag.name.clone(),
                    given: flag.given.clone(),
                    as_run: flag.as_run.clone(),
                    from_defaults: flag.from_defaults,
                    floored: flag.floored,
                    source: flag_source_to_proto(&flag.source).into(),
                })
                .collect(),
            provider: self.provider.as_ref().map(|p| env::ProviderConfig {
                source: p.source.clone(),
                yaml: p.yaml.clone(),
            }),
            autoscaler_recorded_source: self.autoscaler_recorded_source.clone(),
            autoscaler_not_applied: self.autoscaler_not_applied.clone(),
            autoscaler_simulation_flags: self.autoscaler_simulation_flags.clone(),
            controller_manager_flags: self.controller_manager_flags.clone(),
            karpenter: self.karpenter.as_ref().map(|version| env::KarpenterRun {
                version: version.clone(),
            }),
        }
    }

    pub fn from_proto(applied: &env::AppliedConfiguration) -> Self {
        Self {
            scheduler: applied
                .scheduler_given
                .as_ref()
                .map(|given| SchedulerConfiguration {
                    source: given.source.clone(),
                    given_yaml: given.yaml.clone(),
                    as_run_yaml: applied.scheduler_as_run_yaml.clone(),
                }),
            autoscaler: applied.autoscaler,
            speed: applied.speed,
            autoscaler_flags: applied
                .autoscaler_flags
                .iter()
                .map(|flag| AutoscalerFlag {
                    name: flag.name.clone(),
                    given: flag.given.clone(),
                    as_run: flag.as_run.clone(),
                    from_defaults: flag.from_defaults,
                    floored: flag.floored,
                    source: flag_source_word(flag.source()).to_owned(),
                })
                .collect(),
            provider: applied.provider.as_ref().map(|p| ProviderConfiguration {
                source: p.source.clone(),
                yaml: p.yaml.clone(),
            }),
            autoscaler_recorded_source: applied.autoscaler_recorded_source.clone(),
            autoscaler_not_applied: applied.autoscaler_not_applied.clone(),
            autoscaler_simulation_flags: applied.autoscaler_simulation_flags.clone(),
            controller_manager_flags: applied.controller_manager_flags.clone(),
            karpenter: applied.karpenter.as_ref().map(|run| run.version.clone()),
        }
    }
}

fn fidelity_to_proto(fidelity: &Fidelity) -> pb::Fidelity {
    let state = |state: &ClusterState| pb::ClusterState {
        ready_nodes: state.ready_nodes.clone().into_iter().collect(),
        pods_running: state.pods_running,
        pods_pending: state.pods_pending,
    };
    pb::Fidelity {
        bucket_width: Some(duration_to_proto(Duration::from_millis(fidelity.bucket_ms))),
        buckets: fidelity
            .buckets
            .iter()
            .map(|bucket| pb::FidelityBucket {
                offset: Some(duration_to_proto(Duration::from_millis(bucket.offset_ms))),
                recorded: Some(state(&bucket.recorded)),
                simulated: Some(state(&bucket.simulated)),
            })
            .collect(),
        series: fidelity.series.clone(),
        pending: Some(pb::FidelityPending {
            recorded: fidelity.pending.recorded,
            simulated: Some(fidelity.pending.simulated),
            recorded_running_pod_seconds: fidelity.pending.recorded_running_pod_seconds,
            simulated_running_pod_seconds: fidelity.pending.simulated_running_pod_seconds,
        }),
    }
}

fn fidelity_from_proto(fidelity: &pb::Fidelity) -> Fidelity {
    let state = |state: Option<&pb::ClusterState>| {
        state.map_or_else(ClusterState::default, |state| ClusterState {
            ready_nodes: state.ready_nodes.clone().into_iter().collect(),
            pods_running: state.pods_running,
            pods_pending: state.pods_pending,
        })
    };
    Fidelity {
        bucket_ms: duration_millis(fidelity.bucket_width.as_ref()),
        buckets: fidelity
            .buckets
            .iter()
            .map(|bucket| FidelityBucket {
                offset_ms: duration_millis(bucket.offset.as_ref()),
                recorded: state(bucket.recorded.as_ref()),
                simulated: state(bucket.simulated.as_ref()),
            })
            .collect(),
        series: fidelity.series.clone(),
        pending: fidelity
            .pending
            .as_ref()
            .map_or_else(PendingFidelity::default, |pending| PendingFidelity {
                recorded: pending
                    .recorded
                    .as_ref()
                    .map(|p| percentiles_from_proto(Some(p))),
                simulated: percentiles_from_proto(pending.simulated.as_ref()),
                recorded_running_pod_seconds: pending.recorded_running_pod_seconds,
                simulated_running_pod_seconds: pending.simulated_running_pod_seconds,
            }),
    }
}

/// Nodes per group as progress messages and timeline buckets carry them.
pub fn node_counts_to_proto(nodes: &BTreeMap<String, NodeCount>) -> Vec<pb::NodeGroupCount> {
    nodes
        .iter()
        .map(|(group, count)| pb::NodeGroupCount {
            node_group: group.clone(),
            nodes: count.nodes,
            ready_nodes: count.ready,
        })
        .collect()
}

fn bucket_to_proto(bucket: &Bucket) -> pb::TimelineBucket {
    pb::TimelineBucket {
        offset: Some(duration_to_proto(Duration::from_millis(bucket.offset_ms))),
        time: Some(timestamp(bucket.time_ms)),
        nodes: node_counts_to_proto(&bucket.nodes),
        pods: Some(bucket.pods),
        unscheduled_pods: bucket.unscheduled,
        autoscaler_scale_ups: bucket.scale_ups,
        autoscaler_scale_downs: bucket.scale_downs,
        usage: Some(bucket.usage),
    }
}

fn bucket_from_proto(bucket: &pb::TimelineBucket) -> Bucket {
    Bucket {
        offset_ms: duration_millis(bucket.offset.as_ref()),
        time_ms: bucket.time.as_ref().map(millis).unwrap_or_default(),
        nodes: bucket
            .nodes
            .iter()
            .map(|count| {
                let nodes = NodeCount {
                    nodes: count.nodes,
                    ready: count.ready_nodes,
                    // Priced nodes only price the report as it is built.
                    ..NodeCount::default()
                };
                (count.node_group.clone(), nodes)
            })
            .collect(),
        pods: bucket.pods.unwrap_or_default(),
        unscheduled: bucket.unscheduled_pods,
        scale_ups: bucket.autoscaler_scale_ups,
        scale_downs: bucket.autoscaler_scale_downs,
        usage: bucket.usage.unwrap_or_default(),
    }
}

/// A distribution the proto left out reads as one of no samples.
fn percentiles_from_proto(p: Option<&DurationPercentiles>) -> DurationPercentiles {
    p.copied().unwrap_or_else(|| percentiles::of(&[]))
}

fn error_to_proto(error: &ReportedError) -> pb::ObjectError {
    let operation = match error.operation {
        Some(Operation::Apply) => pb::ObjectOperation::Apply,
        Some(Operation::Delete) => pb::ObjectOperation::Delete,
        Some(Operation::CronRun) => pb::ObjectOperation::CronRun,
        None => pb::ObjectOperation::Unspecified,
    };
    pb::ObjectError {
        gvk: Some((&error.target.gvk).into()),
        namespace: error.target.namespace.clone().unwrap_or_default(),
        name: error.target.name.clone(),
        operation: operation.into(),
        event_index: error.event_index,
        trace_offset: Some(duration_to_proto(Duration::from_millis(
            error.trace_offset_ms,
        ))),
        message: error.message.clone(),
    }
}

fn error_from_proto(error: &pb::ObjectError) -> ReportedError {
    let operation = match pb::ObjectOperation::try_from(error.operation) {
        Ok(pb::ObjectOperation::Apply) => Some(Operation::Apply),
        Ok(pb::ObjectOperation::Delete) => Some(Operation::Delete),
        Ok(pb::ObjectOperation::CronRun) => Some(Operation::CronRun),
        Ok(pb::ObjectOperation::Unspecified) | Err(_) => None,
    };
    ReportedError {
        target: Target {
            gvk: error
                .gvk
                .as_ref()
                .map(Gvk::from)
                .unwrap_or_else(|| Gvk::new("", "", "")),
            // The proto spells "cluster-scoped" as an empty namespace.
            namespace: Some(error.namespace.clone()).filter(|ns| !ns.is_empty()),
            name: error.name.clone(),
        },
        operation,
        event_index: error.event_index,
        trace_offset_ms: duration_millis(error.trace_offset.as_ref()),
        message: error.message.clone(),
    }
}

fn node_change_to_proto(change: &ReportedNodeChange) -> pb::NodeChange {
    let kind = match change.kind {
        Some(NodeChangeKind::Added) => pb::NodeChangeKind::Added,
        Some(NodeChangeKind::Removed) => pb::NodeChangeKind::Removed,
        None => pb::NodeChangeKind::Unspecified,
    };
    let cause = match change.cause {
        NodeChangeCause::Autoscaler => pb::NodeChangeCause::Autoscaler,
        NodeChangeCause::Pool => pb::NodeChangeCause::Pool,
        NodeChangeCause::Reregistration => pb::NodeChangeCause::Reregistration,
    };
    pb::NodeChange {
        offset: Some(duration_to_proto(Duration::from_millis(change.offset_ms))),
        group: change.group.clone(),
        node: change.node.clone(),
        kind: kind.into(),
        cause: cause.into(),
    }
}

fn node_change_from_proto(change: &pb::NodeChange) -> ReportedNodeChange {
    ReportedNodeChange {
        offset_ms: duration_millis(change.offset.as_ref()),
        group: change.group.clone(),
        node: change.node.clone(),
        kind: node_change_kind(change),
        cause: node_change_cause(change),
    }
}

/// Who made a change in the proto; an older driver's (unspecified) counted them all as the
/// autoscaler's.
pub(super) fn node_change_cause(change: &pb::NodeChange) -> NodeChangeCause {
    match pb::NodeChangeCause::try_from(change.cause) {
        Ok(pb::NodeChangeCause::Pool) => NodeChangeCause::Pool,
        Ok(pb::NodeChangeCause::Reregistration) => NodeChangeCause::Reregistration,
        Ok(pb::NodeChangeCause::Autoscaler | pb::NodeChangeCause::Unspecified) | Err(_) => {
            NodeChangeCause::Autoscaler
        }
    }
}

/// The kind of a change in the proto; `None` if unspecified or unknown.
pub(super) fn node_change_kind(change: &pb::NodeChange) -> Option<NodeChangeKind> {
    match pb::NodeChangeKind::try_from(change.kind) {
        Ok(pb::NodeChangeKind::Added) => Some(NodeChangeKind::Added),
        Ok(pb::NodeChangeKind::Removed) => Some(NodeChangeKind::Removed),
        Ok(pb::NodeChangeKind::Unspecified) | Err(_) => None,
    }
}

pub(super) fn duration_to_proto(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(duration.as_secs()).unwrap_or(i64::MAX),
        // Below 1e9, so it fits.
        nanos: duration.subsec_nanos() as i32,
    }
}

/// A proto duration as a std one; negative or missing is zero (nothing reported is negative).
pub(super) fn duration_from_proto(duration: Option<&prost_types::Duration>) -> Duration {
    match duration {
        Some(d) if d.seconds >= 0 && d.nanos >= 0 => {
            Duration::new(d.seconds.unsigned_abs(), d.nanos.unsigned_abs())
        }
        _ => Duration::ZERO,
    }
}

fn duration_millis(duration: Option<&prost_types::Duration>) -> u64 {
    u64::try_from(duration_from_proto(duration).as_millis()).unwrap_or(u64::MAX)
}

/// The report's word for where a CA flag's value came from; empty when unknown.
pub fn flag_source_word(source: env::AutoscalerFlagSource) -> &'static str {
    match source {
        env::AutoscalerFlagSource::Unspecified => "",
        env::AutoscalerFlagSource::CaDefault => "ca-default",
        env::AutoscalerFlagSource::Recording => "recording",
        env::AutoscalerFlagSource::Environment => "environment",
        env::AutoscalerFlagSource::Run => "run",
    }
}

fn flag_source_to_proto(word: &str) -> env::AutoscalerFlagSource {
    match word {
        "ca-default" => env::AutoscalerFlagSource::CaDefault,
        "recording" => env::AutoscalerFlagSource::Recording,
        "environment" => env::AutoscalerFlagSource::Environment,
        "run" => env::AutoscalerFlagSource::Run,
        _ => env::AutoscalerFlagSource::Unspecified,
    }
}

/// A replica source as reports and the CLI name it.
pub(crate) fn replica_source_name(source: pb::ReplicaSource) -> &'static str {
    match source {
        pb::ReplicaSource::Recorded => "recorded",
        pb::ReplicaSource::Hpa => "hpa",
        pb::ReplicaSource::Unspecified => "unspecified",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn durations_and_times_convert_exactly() {
        let report = fixtures::report();
        let proto = report.to_proto();
        assert_eq!(proto.peak_nodes, 3);
        assert_eq!(proto.events_applied, 1234);
        assert!(proto.artifacts.is_none());

        let bucket = &proto.timeline[1];
        assert_eq!(
            bucket.offset,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 0
            })
        );
        let time = bucket.time.unwrap();
        assert_eq!(
            (time.seconds, time.nanos),
            (fixtures::STARTED_AT_MS / 1000 + 1, 0)
        );
        assert_eq!(bucket.nodes.len(), 2);
        assert_eq!(bucket.nodes[1].node_group, "group-b");
        assert_eq!((bucket.nodes[1].nodes, bucket.nodes[1].ready_nodes), (2, 2));
        assert_eq!(bucket.autoscaler_scale_ups, 2);
        assert_eq!(bucket.pods.unwrap().running, 2);
        let usage = bucket.usage.unwrap();
        assert_eq!(
            (usage.used_cpu_millis, usage.used_memory_bytes),
            (900, 2 << 30)
        );

        // Sub-millisecond lateness keeps its microseconds.
        let lateness = proto.lateness.unwrap();
        assert_eq!(lateness.count, 3);
        assert_eq!(
            lateness.p50,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 1_500_000
            })
        );
        assert_eq!(
            lateness.p99,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 12_345_000
            })
        );
        let pending = proto.pod_pending_time.unwrap();
        assert_eq!(
            pending.max,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 100_000_000
            })
        );

        let error = &proto.object_errors[0];
        assert_eq!(error.gvk.as_ref().unwrap().kind, "Pod");
        assert_eq!(error.namespace, "sim-42-default");
        assert_eq!(error.operation, i32::from(pb::ObjectOperation::Apply));
        assert_eq!(
            error.trace_offset,
            Some(prost_types::Duration {
                seconds: 61,
                nanos: 500_000_000
            })
        );
        assert_eq!(proto.object_errors[1].namespace, "", "cluster-scoped");
        assert_eq!(
            proto.object_errors[1].operation,
            i32::from(pb::ObjectOperation::Delete)
        );

        // Node changes keep their millisecond offsets, in the timeline's replay time.
        assert_eq!(proto.node_changes.len(), 3);
        let joined = &proto.node_changes[0];
        assert_eq!(
            joined.offset,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 150_000_000
            })
        );
        assert_eq!(
            (joined.group.as_str(), joined.node.as_str()),
            ("group-b", "group-b-x")
        );
        assert_eq!(joined.kind, i32::from(pb::NodeChangeKind::Added));
        assert_eq!(
            proto.node_changes[2].kind,
            i32::from(pb::NodeChangeKind::Removed)
        );

        assert_eq!(Report::from_proto(&proto), report);
    }

    #[test]
    fn autoscaler_outages_round_trip_and_unknown_is_absent() {
        let mut report = fixtures::report();
        assert_eq!(report.to_proto().autoscaler_outages, None);
        report.autoscaler_outages = Some(vec![crate::AutoscalerOutage {
            offset: Some(ksim_proto::json::of_millis(1_500)),
            duration: Some(ksim_proto::json::of_millis(37_250)),
            ongoing: true,
        }]);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["autoscaler_outages"],
            serde_json::json!([{"offset_ms": 1_500, "duration_ms": 37_250, "ongoing": true}])
        );
        let proto = report.to_proto();
        let outage = &proto.autoscaler_outages.as_ref().unwrap().outages[0];
        assert_eq!(
            outage.duration,
            Some(prost_types::Duration {
                seconds: 37,
                nanos: 250_000_000
            })
        );
        assert_eq!(Report::from_proto(&proto), report);
    }

    #[test]
    fn usage_replay_counts_round_trip_and_none_is_absent() {
        let mut report = fixtures::report();
        assert_eq!(report.to_proto().usage, None);
        report.usage = Some(crate::UsageReplay {
            samples: 40,
            ignored_samples: 3,
            interval: Some(ksim_proto::json::of_millis(15_000)),
            matched: 10,
            shared: 6,
            defaulted: 2,
            oom_kills: 4,
            throttled_cpu_seconds: 2.5,
            pressure_evictions: 1,
            workloads: vec![crate::WorkloadLimits {
                name: "Deployment/shop/web".to_owned(),
                oom_kills: 4,
                throttled_cpu_seconds: 2.5,
                pressure_evictions: 1,
            }],
            usage_vs_requests: vec![crate::WorkloadUsage {
                name: "Deployment/shop/web".to_owned(),
                samples: 20,
                p95_cpu_millis: 1900,
                p95_memory_bytes: 19 << 20,
                requested_cpu_millis: 750,
                requested_memory_bytes: 768 << 20,
            }],
        });
        let proto = report.to_proto();
        let listed = &proto.usage.as_ref().unwrap().usage_vs_requests[0];
        assert_eq!(
            (listed.p95_cpu_millis, listed.requested_memory_bytes),
            (1900, 768 << 20)
        );
        assert_eq!(proto.usage.as_ref().unwrap().interval.unwrap().seconds, 15);
        assert_eq!(proto.usage.as_ref().unwrap().workloads[0].oom_kills, 4);
        assert_eq!(Report::from_proto(&proto), report);
        // report.json keeps the interval in whole milliseconds under its old name.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["usage"]["interval_ms"], 15_000, "{json}");
        assert!(json["usage"].get("interval").is_none(), "{json}");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn scaled_workloads_replicas_round_trip() {
        let mut report = fixtures::report();
        report.workload_scaling = Some(fixtures::workload_scaling());
        let proto = report.to_proto();
        let workload = &proto.workload_scaling.as_ref().unwrap().workloads[0];
        assert_eq!(workload.simulated, [2, 3, 8]);
        assert_eq!(workload.scale_events[1].to, 8);
        assert_eq!(workload.scale_events_dropped, 5);
        assert_eq!(Report::from_proto(&proto), report);
    }

    #[test]
    fn the_provisioning_model_round_trips_and_unknown_is_absent() {
        let mut report = fixtures::report();
        assert_eq!(report.to_proto().provisioning, None);
        report.provisioning = Some(crate::Provisioning {
            name: "prod".into(),
            source: "ksim trace calibrate prod.ksimtrace".into(),
            origin: "learned".into(),
            summary: "prod (...): node registration p50 40s".into(),
            yaml: "name: prod\n".into(),
            delays: vec![crate::DelaySamples {
                scope: "nodes/gpu".into(),
                delay: "registration".into(),
                samples: 6,
            }],
        });
        let proto = report.to_proto();
        assert_eq!(proto.provisioning.as_ref().unwrap().origin, "learned");
        assert_eq!(Report::from_proto(&proto), report);
    }

    #[test]
    fn warnings_go_through_the_proto_and_the_json_and_none_are_absent() {
        let mut report = fixtures::report();
        assert!(report.to_proto().warnings.is_empty());
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("warnings").is_none(), "{json}");
        report.warnings = vec!["node group gpu answers GetOptions".into()];
        let proto = report.to_proto();
        assert_eq!(proto.warnings, report.warnings);
        assert_eq!(Report::from_proto(&proto), report);
        let json = serde_json::to_string(&report).unwrap();
        let read: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(read.warnings, report.warnings);
    }

    #[test]
    fn trace_transforms_go_through_the_proto_and_the_json_and_none_are_absent() {
        let mut report = fixtures::report();
        assert!(report.to_proto().trace_transforms.is_empty());
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("trace_transforms").is_none(), "{json}");
        report.trace_transforms = vec![
            r#"rule 1 (line 2) "web at half": scaleResources requests.cpu x0.5 where kind == "Deployment""#.into(),
            "rule 2 (line 5): scaleReplicas 2".into(),
        ];
        let proto = report.to_proto();
        assert_eq!(proto.trace_transforms, report.trace_transforms);
        assert_eq!(Report::from_proto(&proto), report);
        let json = serde_json::to_string(&report).unwrap();
        let read: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(read.trace_transforms, report.trace_transforms);
    }

    #[test]
    fn controller_manager_flags_round_trip_and_none_are_absent_from_the_json() {
        let mut report = fixtures::report();
        let json = serde_json::to_value(&report).unwrap();
        assert!(
            json["configuration"]
                .get("controller_manager_flags")
                .is_none(),
            "{json}"
        );
        // A report from before them reads.
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);
        let flag = crate::ControllerManagerFlag {
            name: "horizontal-pod-autoscaler-sync-period".into(),
            given: "15s".into(),
            as_run: "1.5s".into(),
        };
        report
            .configuration
            .as_mut()
            .unwrap()
            .controller_manager_flags = vec![flag.clone()];
        let proto = report.to_proto();
        let listed = &proto
            .configuration
            .as_ref()
            .unwrap()
            .controller_manager_flags;
        assert_eq!(
            (listed[0].name.as_str(), listed[0].as_run.as_str()),
            ("horizontal-pod-autoscaler-sync-period", "1.5s")
        );
        assert_eq!(Report::from_proto(&proto), report);
        let json = serde_json::to_string(&report).unwrap();
        let read: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(read.configuration.unwrap().controller_manager_flags, [flag]);
    }

    #[test]
    fn the_proto_messages_report_json_holds_keep_its_names_and_omissions() {
        let mut report = fixtures::report();
        report.costs.groups = vec![crate::GroupCost {
            group: "m5".into(),
            node_hours: 2.5,
            ..Default::default()
        }];
        report.provisioning = Some(crate::Provisioning {
            name: "learned".into(),
            ..Default::default()
        });
        let mut scaling = fixtures::workload_scaling();
        scaling.workloads[0].scale_events.clear();
        report.workload_scaling = Some(scaling);
        let json = serde_json::to_value(&report).unwrap();

        // Distributions in fractional milliseconds, to the microsecond, as before.
        assert_eq!(
            json["lateness"],
            serde_json::json!({"count": 3, "p50_ms": 1.5, "p90_ms": 12.345, "p99_ms": 12.345,
                "max_ms": 12.345})
        );
        assert_eq!(json["pod_pending_time"]["p90_ms"], 90.0, "{json}");
        let group = &json["costs"]["groups"][0];
        assert_eq!(group["node_hours"], 2.5, "{group}");
        // No price is null, as before; no instance types is left out, as before.
        assert!(group["price_per_hour"].is_null(), "{group}");
        assert!(group.get("instance_types").is_none(), "{group}");
        assert!(json["provisioning"].get("delays").is_none(), "{json}");
        assert_eq!(json["provisioning"]["name"], "learned");
        assert_eq!(json["workload_scaling"]["source"], "hpa");
        let workload = &json["workload_scaling"]["workloads"][0];
        assert!(workload.get("scale_events").is_none(), "{workload}");
        assert_eq!(workload["scale_events_dropped"], 5, "{workload}");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);

        // A group written before `instance_types`, and limits before `pressure_evictions`,
        // read with their defaults.
        let group: crate::GroupCost = serde_json::from_str(
            r#"{"group":"m5","instance_type":"m5.xlarge","node_hours":1.0,"price_per_hour":null,
                "cost":null,"scale_ups":1,"scale_downs":0}"#,
        )
        .unwrap();
        assert!(group.instance_types.is_empty());
        assert_eq!(group.scale_ups, 1);
        let limits: crate::WorkloadLimits = serde_json::from_str(
            r#"{"name":"Deployment/a/b","oom_kills":2,"throttled_cpu_seconds":0.5}"#,
        )
        .unwrap();
        assert_eq!((limits.oom_kills, limits.pressure_evictions), (2, 0));
    }

    #[test]
    fn from_proto_tolerates_missing_fields() {
        let proto = pb::Report {
            timeline: vec![pb::TimelineBucket::default()],
            object_errors: vec![pb::ObjectError {
                operation: 42,
                ..pb::ObjectError::default()
            }],
            node_changes: vec![
                pb::NodeChange {
                    kind: 42,
                    ..pb::NodeChange::default()
                },
                pb::NodeChange::default(),
            ],
            ..pb::Report::default()
        };
        let report = Report::from_proto(&proto);
        assert_eq!(report.timeline, [Bucket::default()]);
        assert_eq!(report.lateness, percentiles::of(&[]));
        assert_eq!(report.object_errors[0].operation, None);
        assert_eq!(report.object_errors[0].target.namespace, None);
        let unknown = &report.node_changes[0];
        assert_eq!((unknown.kind, unknown.offset_ms), (None, 0));
        assert_eq!(report.node_changes[1].kind, None, "unspecified");
        // And back: an unknown kind is sent as unspecified, not dropped.
        assert_eq!(
            report.to_proto().node_changes[0].kind,
            i32::from(pb::NodeChangeKind::Unspecified)
        );
        assert_eq!(
            duration_from_proto(Some(&prost_types::Duration {
                seconds: -1,
                nanos: 0
            })),
            Duration::ZERO
        );
    }
}
