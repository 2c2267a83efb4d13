//! The report as the driver keeps it, sends it and `report.json` holds it: the driver's proto
//! messages, with serde (`ksim-proto`'s build.rs; `ksim_proto::json` for the forms the file has
//! always had).
//!
//! JSON conventions: times are unix ms (`time_ms`), whole durations integer ms (`offset_ms`),
//! and distribution percentiles fractional ms (`p99_ms: 12.345`) because lateness is often
//! sub-millisecond; they are kept to the microsecond.

pub use ksim_proto::ksim::driver::v1::{
    Accelerators, AutoscalerOutage, AutoscalerOutages, ClusterState, Costs, DelaySamples,
    DisruptionOutcome, Disruptions, DurationPercentiles, Fidelity, FidelityBucket, FidelityPending,
    FidelitySeries, FilterRejection, GpuModelSummary, GpuPodCount, GpuUsage, GroupCost, NodeChange,
    NodeChangeCause, NodeChangeKind, NodeGroupCount, NodeScore, ObjectError, ObjectOperation,
    PendingSplit, PluginScore, PodExplanation, Provisioning, ReplicaChange, ReplicaSource, Report,
    SchedulingAttempt, TimelineBucket, UsageReplay, WaitReason, WorkloadAvailability,
    WorkloadLimits, WorkloadReplicas, WorkloadScaling, WorkloadUsage,
};
pub use ksim_proto::ksim::env::v1::{
    AppliedConfiguration, AutoscalerFlag, AutoscalerFlagNotApplied, AutoscalerFlagSource,
    AutoscalerSimulationFlag, ControllerManagerFlag, KarpenterRun, ProviderConfig, SchedulerConfig,
};

/// Most workloads a report lists usage against requests for.
pub const MAX_USAGE_WORKLOADS: usize = 100;

/// Most workloads a report lists limits for.
pub const MAX_LIMITED_WORKLOADS: usize = 100;

/// Scale events kept per workload: an HPA flapping for hours must not grow the report
/// without bound.
pub const MAX_REPLICA_CHANGES: usize = 1_000;

/// Nodes of a bucket over all groups.
pub fn nodes_total(bucket: &TimelineBucket) -> u64 {
    bucket.nodes.iter().map(|count| count.nodes).sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;
    use ksim_proto::json::of_millis;

    #[test]
    fn the_timeline_keeps_its_json_form_both_ways() {
        let mut report = fixtures::report();
        // Priced and launching nodes, which progress and most groups leave at 0.
        report.timeline[2].nodes[0].priced_nodes = 1;
        report.timeline[2].nodes[0].price_micros_per_hour = 96_000;
        report.timeline[2].nodes[0].launching_nodes = 2;
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["bucket_ms"], 1000);
        assert!(json.get("artifacts").is_none(), "{json}");
        let bucket = &json["timeline"][1];
        assert_eq!(bucket["offset_ms"], 1000);
        assert_eq!(bucket["time_ms"], fixtures::STARTED_AT_MS + 1000);
        // Nodes by group, the counts a group does not have left out, as before.
        assert_eq!(
            bucket["nodes"]["group-b"],
            serde_json::json!({"nodes": 2, "ready": 2})
        );
        assert_eq!(bucket["scale_ups"], 2, "{bucket}");
        assert_eq!(bucket["unscheduled"], report.timeline[1].unscheduled_pods);
        assert_eq!(bucket["pods"]["running"], 2);
        assert_eq!(
            json["timeline"][2]["nodes"]["group-a"],
            serde_json::json!({"nodes": 1, "ready": 1, "priced": 1,
                "price_micros_per_hour": 96_000, "launching": 2})
        );
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn a_report_json_without_speed_or_bucket_width_was_1x_in_1_s_buckets() {
        let mut json = serde_json::to_value(fixtures::report()).unwrap();
        let held = json.as_object_mut().unwrap();
        held.remove("speed");
        held.remove("bucket_ms");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read.speed, 1.0);
        assert_eq!(read.bucket_width, Some(of_millis(1000)));
    }

    #[test]
    fn an_unknown_node_change_kind_is_written_unspecified_and_read_so() {
        let mut report = fixtures::report();
        report.node_changes[0].kind = 42;
        report.node_changes[1].cause = 0;
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["node_changes"][0]["kind"], "unspecified", "{json}");
        assert_eq!(json["node_changes"][1]["cause"], "unspecified", "{json}");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read.node_changes[0].kind(), NodeChangeKind::Unspecified);
    }

    #[test]
    fn autoscaler_outages_are_a_list_and_unknown_is_absent() {
        let mut report = fixtures::report();
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("autoscaler_outages").is_none(), "{json}");
        report.autoscaler_outages = Some(AutoscalerOutages {
            outages: vec![AutoscalerOutage {
                offset: Some(of_millis(1_500)),
                duration: Some(of_millis(37_250)),
                ongoing: true,
            }],
        });
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json["autoscaler_outages"],
            serde_json::json!([{"offset_ms": 1_500, "duration_ms": 37_250, "ongoing": true}])
        );
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn the_usage_replay_keeps_its_interval_in_milliseconds() {
        let mut report = fixtures::report();
        report.usage = Some(UsageReplay {
            samples: 40,
            interval: Some(of_millis(15_000)),
            workloads: vec![WorkloadLimits {
                name: "Deployment/shop/web".to_owned(),
                oom_kills: 4,
                ..WorkloadLimits::default()
            }],
            ..UsageReplay::default()
        });
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["usage"]["interval_ms"], 15_000, "{json}");
        assert!(json["usage"].get("interval").is_none(), "{json}");
        assert!(json["usage"].get("usage_vs_requests").is_none(), "{json}");
        let read: Report = serde_json::from_value(json).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn no_warnings_transforms_or_controller_flags_are_left_out_and_some_read_back() {
        let mut report = fixtures::report();
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("warnings").is_none(), "{json}");
        assert!(json.get("trace_transforms").is_none(), "{json}");
        let configuration = &json["configuration"];
        assert!(configuration.get("controller_manager_flags").is_none());
        report.warnings = vec!["node group gpu answers GetOptions".into()];
        report.trace_transforms = vec!["rule 2 (line 5): scaleReplicas 2".into()];
        report
            .configuration
            .as_mut()
            .unwrap()
            .controller_manager_flags = vec![ControllerManagerFlag {
            name: "horizontal-pod-autoscaler-sync-period".into(),
            given: "15s".into(),
            as_run: "1.5s".into(),
        }];
        let json = serde_json::to_string(&report).unwrap();
        let read: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(read, report);
    }

    #[test]
    fn the_proto_messages_report_json_holds_keep_its_names_and_omissions() {
        let mut report = fixtures::report();
        report.costs.as_mut().unwrap().groups = vec![GroupCost {
            group: "m5".into(),
            node_hours: 2.5,
            ..Default::default()
        }];
        report.provisioning = Some(Provisioning {
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
        let group: GroupCost = serde_json::from_str(
            r#"{"group":"m5","instance_type":"m5.xlarge","node_hours":1.0,"price_per_hour":null,
                "cost":null,"scale_ups":1,"scale_downs":0}"#,
        )
        .unwrap();
        assert!(group.instance_types.is_empty());
        assert_eq!(group.scale_ups, 1);
        let limits: WorkloadLimits = serde_json::from_str(
            r#"{"name":"Deployment/a/b","oom_kills":2,"throttled_cpu_seconds":0.5}"#,
        )
        .unwrap();
        assert_eq!((limits.oom_kills, limits.pressure_evictions), (2, 0));
    }

    #[test]
    fn the_configuration_keeps_its_words_and_an_older_one_reads() {
        let mut report = fixtures::report();
        let configuration = report.configuration.as_mut().unwrap();
        configuration.scheduler_given = Some(SchedulerConfig {
            source: "scheduler.yaml".into(),
            yaml: "kind: KubeSchedulerConfiguration".into(),
        });
        configuration.karpenter = Some(KarpenterRun {
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
        let older: AppliedConfiguration = serde_json::from_str(
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
            AutoscalerFlagSource::Unspecified
        );
        assert_eq!(older.karpenter, None);
    }
}
