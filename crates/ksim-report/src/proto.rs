//! The report to and from its gRPC form.
//!
//! Both ways are provided because the CLI receives the proto and writes the same files the
//! driver would. The round trip is lossless except that the proto's durations are kept to the
//! microsecond (percentiles) or millisecond (offsets), as in the JSON.

use std::{collections::BTreeMap, time::Duration};

use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::{millis, timestamp};

use super::input::NodeCount;
use super::model::{Bucket, DurationPercentiles, Report};
use super::percentiles;

impl Report {
    /// The gRPC form; artifacts are left empty for the caller to fill in.
    pub fn to_proto(&self) -> pb::Report {
        pb::Report {
            simulation_id: self.simulation_id.clone(),
            complete: self.complete,
            timeline: self.timeline.iter().map(bucket_to_proto).collect(),
            pod_pending_time: Some(self.pod_pending_time),
            lateness: Some(self.lateness),
            object_errors: self.object_errors.clone(),
            artifacts: None,
            events_applied: self.events_applied,
            peak_nodes: self.peak_nodes,
            node_changes: self.node_changes.clone(),
            speed: self.speed,
            bucket_width: Some(duration_to_proto(Duration::from_millis(self.bucket_ms))),
            fidelity: self.fidelity.clone(),
            configuration: self.configuration.clone(),
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
            object_errors: report.object_errors.clone(),
            node_changes: report.node_changes.clone(),
            fidelity: report.fidelity.clone(),
            configuration: report.configuration.clone(),
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
    fn the_configuration_keeps_its_words_and_an_older_one_reads() {
        let mut report = fixtures::report();
        let configuration = report.configuration.as_mut().unwrap();
        configuration.scheduler_given = Some(crate::SchedulerConfig {
            source: "scheduler.yaml".into(),
            yaml: "kind: KubeSchedulerConfiguration".into(),
        });
        configuration.karpenter = Some(crate::KarpenterRun {
            version: "v1.14.1".into(),
        });
        let json = serde_json::to_value(&report).unwrap();
        let written = &json["configuration"];
        // Karpenter as its release and a flag's source as its word, as before.
        assert_eq!(written["karpenter"], "v1.14.1", "{written}");
        assert_eq!(written["autoscaler_flags"][0]["source"], "run", "{written}");
        assert_eq!(
            written["scheduler_given"]["yaml"],
            "kind: KubeSchedulerConfiguration"
        );
        assert!(
            written.get("autoscaler_recorded_source").is_none(),
            "{written}"
        );
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);

        // One written before the scheduler's fields took the proto's names, and before
        // `source`: the given file and flag read, the flag's source unknown.
        let older: crate::AppliedConfiguration = serde_json::from_str(
            r#"{"scheduler":{"source":"s.yaml","given_yaml":"kind: K","as_run_yaml":"k"},
                "autoscaler":true,"speed":10.0,"autoscaler_flags":[{"name":"expander",
                "given":"price","as_run":"price","from_defaults":false,"floored":false}],
                "provider":null}"#,
        )
        .unwrap();
        let given = older.scheduler_given.unwrap();
        assert_eq!(
            (given.source.as_str(), given.yaml.as_str()),
            ("s.yaml", "kind: K")
        );
        assert_eq!(
            older.autoscaler_flags[0].source(),
            crate::AutoscalerFlagSource::Unspecified
        );
        assert_eq!(older.karpenter, None);
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
        assert_eq!(
            report.object_errors[0].operation(),
            crate::ObjectOperation::Unspecified
        );
        let unknown = &report.node_changes[0];
        assert_eq!(unknown.kind(), crate::NodeChangeKind::Unspecified);
        assert_eq!(ksim_proto::json::to_millis(unknown.offset.as_ref()), 0);
        // And written: an unknown kind as unspecified, not dropped, and read back so.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["node_changes"][0]["kind"], "unspecified", "{json}");
        assert_eq!(json["node_changes"][1]["cause"], "unspecified", "{json}");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read.node_changes[0].kind, 0);
        assert_eq!(
            duration_from_proto(Some(&prost_types::Duration {
                seconds: -1,
                nanos: 0
            })),
            Duration::ZERO
        );
    }
}
