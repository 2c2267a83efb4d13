//! What the driver observes during a replay: the report is built from this alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Simulated pods by phase: the proto's message.
pub use ksim_proto::ksim::driver::v1::PodPhaseCounts;
/// What the pods bound to the simulation's nodes request, what those nodes allocate, and what
/// the usage replay last gave the replayed pods to use: the proto's message.
pub use ksim_proto::ksim::driver::v1::ResourceUsage;

use crate::{Operation, Target};

/// Everything the driver observed about one simulation.
///
/// Durations serialize as serde's default `{secs, nanos}`: this is the driver's own record,
/// kept lossless; the report's JSON is the human-facing one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observations {
    pub simulation_id: String,
    /// Whether the simulation had ended when these were taken.
    pub complete: bool,
    /// Unix ms of the replay start (wall clock).
    pub started_at_ms: i64,
    /// The replay speed; the report multiplies the wall-clock offsets and pending times below
    /// by it. 0 (observations saved before it was kept) means 1x.
    #[serde(default)]
    pub speed: f64,
    /// Taken once per [`crate::sample_interval`], in time order.
    pub samples: Vec<Sample>,
    /// Cluster-autoscaler resizes seen on node groups.
    pub scale_events: Vec<ScaleEvent>,
    /// Nodes that joined or left the simulation's groups after the replay start. Defaulted:
    /// observations saved before it was recorded have none.
    #[serde(default)]
    pub node_changes: Vec<ObservedNodeChange>,
    /// Per pod: first seen until Running.
    pub pending_times: Vec<Duration>,
    /// The same for the pods that asked for GPUs. Defaulted: observations saved before it
    /// was kept have none.
    #[serde(default)]
    pub gpu_pending_times: Vec<Duration>,
    /// Pods that asked for GPUs, and their owners as the waits name them (`Kind/name`).
    #[serde(default)]
    pub gpu_pods: u64,
    #[serde(default)]
    pub gpu_owners: BTreeSet<String>,
    /// Per applied event and CronJob run: actual minus scheduled time.
    pub lateness: Vec<Duration>,
    pub object_errors: Vec<ObjectErrorRecord>,
    pub events_applied: u64,
    /// The recorded cluster, from the trace, when it holds it: the report compares it with
    /// the samples above. Defaulted: observations saved before it was kept have none.
    #[serde(default)]
    pub recorded: Option<Vec<RecordedState>>,
    /// Per recorded pod created and started inside the replayed window: its creation to its
    /// first container's start, recorded time; `None` when the trace records no creation
    /// times. Defaulted: observations saved before it was kept have none.
    #[serde(default)]
    pub recorded_pending: Option<Vec<Duration>>,
    /// The configuration the environment ran the simulation with, if it applied one.
    #[serde(default)]
    pub configuration: Option<crate::AppliedConfiguration>,
    /// Per node group: its instance type and the cloud provider's price per node-hour.
    #[serde(default)]
    pub prices: BTreeMap<String, GroupPrice>,
    /// Per pod that never ran: how long it waited (wall clock, until deleted or the end).
    #[serde(default)]
    pub never_ran: Vec<NeverRan>,
    /// Pods evicted while the replay ran (the API, a taint, the kubelet).
    #[serde(default)]
    pub pods_evicted: u64,
    /// Pods the scheduler preempted.
    #[serde(default)]
    pub pods_preempted: u64,
    /// Why explained pods went where they did, as the scheduler wrote it; attempts at their
    /// wall-clock offsets since the start (the report turns them into recorded time).
    /// Defaulted: observations saved before it was kept have none.
    #[serde(default)]
    pub explanations: Vec<crate::PodExplanation>,
    /// Why pods waited, as the scheduler's and CA's events said.
    #[serde(default)]
    pub waits: Vec<crate::WaitReason>,
    /// Why Karpenter disrupted nodes or kept them, from its events: source `disrupted` or
    /// `kept`, owner the NodePool (the group).
    #[serde(default)]
    pub node_disruptions: Vec<crate::WaitReason>,
    /// When cluster-autoscaler was down during the replay, as the environment listed it.
    /// `None`: unknown (no environment, or one that does not list them), which is not "none".
    /// Defaulted: observations saved before it was kept do not know.
    #[serde(default)]
    pub autoscaler_outages: Option<Vec<ObservedOutage>>,
    /// The provisioning model the run used. Defaulted: observations saved before it was kept
    /// do not know.
    #[serde(default)]
    pub provisioning: Option<crate::Provisioning>,
    /// How the replay gave its pods usage; `None` when the trace held none. Defaulted like
    /// `provisioning`.
    #[serde(default)]
    pub usage: Option<crate::UsageReplay>,
    /// Who decided replica counts; `None` when the trace held no HPA. Defaulted like `usage`.
    #[serde(default)]
    pub workload_scaling: Option<crate::WorkloadScaling>,
    /// Per workload an HPA scales, its replicas as recorded and as the simulated cluster ran
    /// them; the report puts them in `workload_scaling`. Defaulted like `usage`.
    #[serde(default)]
    pub replicas: Vec<ObservedReplicas>,
    /// Per pod that ran, where its pending time went (wall clock). Defaulted: observations
    /// saved before it was kept have none.
    #[serde(default)]
    pub pending_splits: Vec<PodPendingSplit>,
    /// Per node that joined a group during the replay: from the Node existing to Ready (wall).
    #[serde(default)]
    pub node_ready_times: Vec<Duration>,
    /// Why cluster-autoscaler kept nodes, folded by the driver from CA's gauge (already in
    /// recorded time). `None`: no autoscaler was read; also for observations saved before it.
    #[serde(default)]
    pub nodes_kept: Option<crate::NodesKept>,
    /// The run's warnings (see `Report::warnings`), as the driver decided them. Defaulted:
    /// observations saved before it was kept have none.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The rules the replayed trace was transformed by (see `Report::trace_transforms`), from
    /// its header. Defaulted like `warnings`.
    #[serde(default)]
    pub trace_transforms: Vec<String>,
    /// The run's injected disruptions and what the workloads did over them; `None` for a run
    /// without. Defaulted like `warnings`.
    #[serde(default)]
    pub disruptions: Option<ObservedDisruptions>,
}

/// A run's injected disruptions and its workloads' ready replicas, wall clock since the replay
/// start (the report's `Disruptions` is in recorded time).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObservedDisruptions {
    /// The seed the nodes were chosen with.
    pub seed: u64,
    /// In the spec's order.
    pub disruptions: Vec<ObservedDisruption>,
    /// Per Deployment and StatefulSet of the simulation.
    pub workloads: Vec<ObservedAvailability>,
    /// Per pod evicted: when, and its workload as recorded (`Kind/namespace/name`).
    pub evictions: Vec<(Duration, String)>,
    /// Per pod whose eviction a PodDisruptionBudget refused: when first, and its workload as
    /// recorded.
    #[serde(default)]
    pub blocked: Vec<(Duration, String)>,
}

/// One disruption as the replay applied it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedDisruption {
    /// `node-failure`, `zone-outage`, `stockout`, `spot-interruption`, `node-pool-upgrade` or
    /// `recorded-failure`.
    pub kind: String,
    /// The group it hit; a zone outage's groups, comma-separated.
    pub node_group: String,
    /// A zone outage's zone; empty for the other kinds.
    #[serde(default)]
    pub zone: String,
    /// When it began, or was to begin if it did not.
    pub offset: Duration,
    /// The nodes it took.
    pub nodes: Vec<String>,
    /// When it ended (the nodes brought back, the capacity returned); `None`: not within the
    /// run.
    pub recovered: Option<Duration>,
    /// Why it took no node; empty when it did.
    pub error: String,
    /// A spot interruption's or upgrade's pods whose eviction a PodDisruptionBudget refused.
    #[serde(default)]
    pub evictions_blocked: u64,
    /// A spot interruption's pods still on its node when the instance went; an upgrade's
    /// deleted when a drain ran out of time.
    #[serde(default)]
    pub pods_lost: u64,
    /// A recorded failure's node in the recording; empty for the other kinds.
    #[serde(default)]
    pub recorded_node: String,
    /// A node-pool upgrade's nodes whose drain ran out of time.
    #[serde(default)]
    pub stuck_drains: Vec<String>,
}

/// One workload's desired and ready replicas over time: a step function, each point holding
/// until the next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedAvailability {
    /// As recorded: `Kind/namespace/name`.
    pub workload: String,
    pub points: Vec<ReadyPoint>,
}

/// A workload's `spec.replicas` and ready replicas from `offset` on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyPoint {
    pub offset: Duration,
    pub desired: u64,
    pub ready: u64,
}

/// One scaled workload's `spec.replicas` over time: each series is a step function, a point
/// holding until the next (0: the workload does not exist).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedReplicas {
    /// As recorded: `Kind/namespace/name`.
    pub workload: String,
    /// From the trace; offsets since the window's start, recorded time (like
    /// [`RecordedState`]).
    pub recorded: Vec<ReplicaPoint>,
    /// Watched in the simulated cluster; offsets since the replay start, wall clock (like
    /// [`Sample`]). A value seen before the start counts from 0.
    pub simulated: Vec<ReplicaPoint>,
}

/// A replica count from `offset` on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaPoint {
    pub offset: Duration,
    pub replicas: u64,
}

/// Where one pod's pending time went, wall clock; the three add up to its pending time (the
/// report's `PendingSplit` sums them over the pods, in recorded time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodPendingSplit {
    /// First seen to bound, less `node_boot`.
    pub scheduling: Duration,
    /// Cluster-autoscaler's TriggeredScaleUp for it to bound.
    pub node_boot: Duration,
    /// Bound to Running.
    pub start: Duration,
}

/// One time cluster-autoscaler was down, wall clock since the replay start (the report's
/// `AutoscalerOutage` is in recorded time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedOutage {
    /// Found down; zero when it was already down at the start.
    pub down: Duration,
    /// Serving again; `None`: still down when the observations were taken.
    pub up: Option<Duration>,
}

/// A node group's price.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupPrice {
    /// Its nodes' `node.kubernetes.io/instance-type`, empty when they have none.
    pub instance_type: String,
    /// The cloud provider's price per node-hour; `None`: it has none.
    pub per_hour: Option<f64>,
}

/// A pod that never ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeverRan {
    /// From first seen until deleted or the end, wall clock.
    pub waited: Duration,
    /// Whether it was ever bound to a node.
    pub bound: bool,
    /// Whether it asked for GPUs. Defaulted: observations saved before it was kept.
    #[serde(default)]
    pub gpus: bool,
    /// The GPUs it asked: its `nvidia.com/gpu`, or its claims' devices (a share one); 0 when
    /// unknown (claims not seen, or of allocation mode `All`).
    #[serde(default)]
    pub gpus_asked: u64,
}

/// The recorded cluster from one moment on, as the trace's samples give it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordedState {
    /// Since the trace window's start: recorded time, like a trace event's offset.
    pub offset: Duration,
    pub state: crate::ClusterState,
}

/// The cluster at one moment of the replay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Since the replay start, wall clock.
    pub offset: Duration,
    /// Virtual nodes per node group.
    pub nodes: BTreeMap<String, NodeCount>,
    pub pods: PodPhaseCounts,
    /// Pods Pending and not bound to a node.
    pub unscheduled: u64,
    /// Requested against allocatable; defaulted for samples taken before it was kept.
    #[serde(default)]
    pub usage: ResourceUsage,
    /// GPUs per model, in model order; empty when no node has GPUs (and in samples taken
    /// before they were kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::GpuUsage>,
    /// Pods Pending and unbound that ask for GPUs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending_gpu_pods: u64,
}

/// Nodes of one group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCount {
    /// Registered nodes.
    pub nodes: u64,
    /// Nodes whose Ready condition is True.
    pub ready: u64,
    /// How many of its nodes carry a price of their own (Karpenter's nodes: the price of the
    /// offering it launched, `eks-node-viewer/instance-price`), and their price per hour
    /// together, in millionths.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priced: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub price_micros_per_hour: u64,
    /// Instances asked for whose Node has not registered yet (a seat cluster-autoscaler added,
    /// booting by the provisioning model): a cloud bills an instance from its launch, so they
    /// count in node-hours, as Karpenter's nodes do from theirs.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub launching: u64,
    /// Registered nodes with GPUs, and the price per hour of those of them that carry one of
    /// their own, in millionths.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_nodes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_price_micros_per_hour: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A cluster-autoscaler resize of a node group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScaleEvent {
    /// Since the replay start.
    pub offset: Duration,
    pub group: String,
    /// Nodes added (positive) or removed (negative).
    pub delta: i64,
}

/// A virtual node joining or leaving one of the simulation's node groups during the replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedNodeChange {
    /// Since the replay start.
    pub offset: Duration,
    pub group: String,
    pub node: String,
    pub kind: crate::NodeChangeKind,
    /// Its `node.kubernetes.io/instance-type`; empty when it has none (or for observations
    /// saved before it was kept).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_type: String,
    /// Who sizes the node's group, from its `ksim.io/group-owner` label. Defaulted: a node
    /// without the label, or observations saved before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<GroupOwner>,
}

/// Who sizes a node group (`ksim.io/group-owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupOwner {
    /// A fixed-size group of the pool: no autoscaler resizes it.
    Pool,
    /// A seat Deployment, resized by cluster-autoscaler through the cloud provider.
    Seats,
    /// A Karpenter NodePool (`karpenter.sh/nodepool`): Karpenter launches and removes its
    /// nodes one by one.
    Karpenter,
}

/// An object the cluster refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectErrorRecord {
    pub target: Target,
    pub operation: Operation,
    /// Index of the trace event that carried the object, from 0.
    pub event_index: u64,
    /// Scheduled time of that event, from the trace window start.
    pub trace_offset: Duration,
    pub message: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::fixtures;
    use super::*;

    #[test]
    fn observations_saved_before_node_changes_still_read() {
        let observations = fixtures::observations();
        let mut json = serde_json::to_value(&observations).unwrap();
        assert_eq!(json["node_changes"][2]["kind"], "removed");
        json.as_object_mut().unwrap().remove("node_changes");
        let back: Observations = serde_json::from_value(json).unwrap();
        assert_eq!(
            back,
            Observations {
                node_changes: Vec::new(),
                ..observations
            }
        );
    }
}
