//! A small simulation shared by the report's tests.

use std::collections::BTreeMap;
use std::time::Duration;

use super::build::build;
use super::input::{
    GroupPrice, NeverRan, NodeCount, ObjectErrorRecord, Observations, ObservedNodeChange,
    PodPhaseCounts, RecordedState, ResourceUsage, Sample, ScaleEvent,
};
use super::model::Report;
use crate::{ClusterState, Gvk, NodeChangeKind, Operation, Target};

/// 2026-01-01T00:00:00Z.
pub const STARTED_AT_MS: i64 = 1_767_225_600_000;

/// Four seconds, two node groups, one second without a sample, one resize each way and the
/// nodes it added and removed, four object errors, and the recorded cluster.
pub fn observations() -> Observations {
    let sample = |ms, nodes: &[(&str, u64)], pods, unscheduled| Sample {
        offset: Duration::from_millis(ms),
        nodes: nodes
            .iter()
            .map(|(group, n)| {
                (
                    (*group).to_owned(),
                    NodeCount {
                        nodes: *n,
                        ready: *n,
                        ..NodeCount::default()
                    },
                )
            })
            .collect(),
        pods,
        unscheduled,
        usage: ResourceUsage {
            requested_cpu_millis: 1500,
            allocatable_cpu_millis: 3860,
            requested_memory_bytes: 3 << 30,
            allocatable_memory_bytes: 14 << 30,
            used_cpu_millis: 900,
            used_memory_bytes: 2 << 30,
        },
        gpus: Vec::new(),
        pending_gpu_pods: 0,
    };
    let error =
        |kind: Gvk, namespace: Option<&str>, name: &str, operation, index, ms, message: &str| {
            ObjectErrorRecord {
                target: Target {
                    gvk: kind,
                    namespace: namespace.map(str::to_owned),
                    name: name.into(),
                },
                operation,
                event_index: index,
                trace_offset: Duration::from_millis(ms),
                message: message.into(),
            }
        };
    let pod = Gvk::new("", "v1", "Pod");
    let role = Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRole");
    Observations {
        simulation_id: "sim-42".into(),
        complete: true,
        started_at_ms: STARTED_AT_MS,
        speed: 1.0,
        samples: vec![
            sample(
                0,
                &[("group-a", 1)],
                PodPhaseCounts {
                    pending: 5,
                    ..PodPhaseCounts::default()
                },
                5,
            ),
            sample(
                900,
                &[("group-a", 1)],
                PodPhaseCounts {
                    pending: 5,
                    ..PodPhaseCounts::default()
                },
                5,
            ),
            sample(
                1_200,
                &[("group-a", 1), ("group-b", 2)],
                PodPhaseCounts {
                    pending: 3,
                    running: 2,
                    ..PodPhaseCounts::default()
                },
                3,
            ),
            sample(
                3_100,
                &[("group-a", 1), ("group-b", 1)],
                PodPhaseCounts {
                    running: 4,
                    succeeded: 1,
                    failed: 1,
                    ..PodPhaseCounts::default()
                },
                0,
            ),
        ],
        scale_events: vec![
            ScaleEvent {
                offset: Duration::from_millis(1_500),
                group: "group-b".into(),
                delta: 2,
            },
            ScaleEvent {
                offset: Duration::from_millis(2_500),
                group: "group-b".into(),
                delta: -1,
            },
        ],
        node_changes: vec![
            node_change(1_150, "group-b-x", NodeChangeKind::Added),
            node_change(1_180, "group-b-y", NodeChangeKind::Added),
            node_change(2_600, "group-b-x", NodeChangeKind::Removed),
        ],
        pending_times: (1..=100).map(Duration::from_millis).collect(),
        gpu_pending_times: Vec::new(),
        gpu_pods: 0,
        gpu_owners: std::collections::BTreeSet::new(),
        lateness: [1_500, 250, 12_345]
            .into_iter()
            .map(Duration::from_micros)
            .collect(),
        object_errors: vec![
            error(
                pod.clone(),
                Some("sim-42-default"),
                "web-0",
                Operation::Apply,
                7,
                61_500,
                "admission webhook denied it\nwith details",
            ),
            error(role, None, "reader", Operation::Delete, 9, 0, "forbidden"),
            error(
                pod.clone(),
                Some("sim-42-default"),
                "web-1",
                Operation::Apply,
                10,
                62_000,
                "third",
            ),
            error(
                pod,
                Some("sim-42-default"),
                "web-2",
                Operation::Apply,
                11,
                62_000,
                "fourth",
            ),
        ],
        events_applied: 1234,
        // The recording had group-b's second node from 0.5 s, the replay from 1 s.
        recorded: Some(vec![
            recorded(0, &[("group-a", 1), ("group-b", 1)], 0, 2),
            recorded(500, &[("group-a", 1), ("group-b", 2)], 2, 0),
        ]),
        // Ten recorded pods waited 20 ms to 200 ms.
        recorded_pending: Some((1..=10).map(|i| Duration::from_millis(20 * i)).collect()),
        configuration: Some(crate::AppliedConfiguration {
            scheduler_given: None,
            autoscaler: true,
            speed: 1.0,
            autoscaler_flags: vec![crate::AutoscalerFlag {
                name: "expander".into(),
                given: "price".into(),
                as_run: "price".into(),
                from_defaults: false,
                floored: false,
                source: crate::AutoscalerFlagSource::Run.into(),
            }],
            provider: Some(crate::ProviderConfig {
                source: "prices.yaml".into(),
                yaml: "pricing: {instanceTypes: {m5.large: 0.096}}".into(),
            }),
            ..Default::default()
        }),
        prices: BTreeMap::from([(
            "group-a".to_owned(),
            GroupPrice {
                instance_type: "m5.large".into(),
                per_hour: Some(0.096),
            },
        )]),
        never_ran: vec![NeverRan {
            waited: Duration::from_millis(700),
            bound: false,
            gpus: false,
            gpus_asked: 0,
        }],
        pods_evicted: 1,
        pods_preempted: 0,
        explanations: Vec::new(),
        waits: vec![crate::WaitReason {
            source: "scheduler".into(),
            reason: "Insufficient cpu".into(),
            owner: "Deployment/web".into(),
            count: 3,
        }],
        node_disruptions: vec![crate::WaitReason {
            source: "disrupted".into(),
            reason: "Empty".into(),
            owner: "group-b".into(),
            count: 2,
        }],
        autoscaler_outages: None,
        provisioning: None,
        usage: None,
        workload_scaling: None,
        replicas: Vec::new(),
        pending_splits: Vec::new(),
        node_ready_times: Vec::new(),
        warnings: Vec::new(),
        trace_transforms: Vec::new(),
        disruptions: None,
        nodes_kept: None,
    }
}

fn recorded(ms: u64, nodes: &[(&str, u64)], running: u64, pending: u64) -> RecordedState {
    RecordedState {
        offset: Duration::from_millis(ms),
        state: ClusterState {
            ready_nodes: nodes.iter().map(|(g, n)| ((*g).to_owned(), *n)).collect(),
            pods_running: running,
            pods_pending: pending,
        },
    }
}

fn node_change(ms: u64, node: &str, kind: NodeChangeKind) -> ObservedNodeChange {
    ObservedNodeChange {
        offset: Duration::from_millis(ms),
        group: "group-b".into(),
        node: node.into(),
        kind,
        instance_type: String::new(),
        owner: Some(crate::GroupOwner::Seats),
    }
}

pub fn report() -> Report {
    build(&observations())
}

/// The HPAs decided: one scaled workload over three buckets, two scale events.
pub fn workload_scaling() -> crate::WorkloadScaling {
    crate::WorkloadScaling {
        source: crate::ReplicaSource::Hpa as i32,
        reason: "given".to_owned(),
        hpas: 1,
        scaled_workloads: 1,
        not_replayed: 2,
        workloads: vec![crate::WorkloadReplicas {
            name: "Deployment/shop/web".to_owned(),
            recorded: vec![2, 4, 4],
            simulated: vec![2, 3, 8],
            recorded_replica_seconds: 10.0,
            simulated_replica_seconds: 13.0,
            scale_events: vec![
                crate::ReplicaChange {
                    offset_ms: 1_000,
                    from: 2,
                    to: 3,
                },
                crate::ReplicaChange {
                    offset_ms: 2_500,
                    from: 3,
                    to: 8,
                },
            ],
            scale_events_dropped: 5,
        }],
    }
}
