//! The report as the driver keeps it and as `report.json` holds it.
//!
//! JSON conventions: times are unix ms (`time_ms`), whole durations integer ms (`offset_ms`),
//! and distribution percentiles fractional ms (`p99_ms: 12.345`) because lateness is often
//! sub-millisecond; they are kept to the microsecond.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use ksim_proto::ksim::driver::v1::{
    AutoscalerOutage, ClusterState, Costs, DelaySamples, DurationPercentiles, Fidelity,
    FidelityBucket, FidelityPending, FidelitySeries, GroupCost, NodeChange, NodeChangeCause,
    NodeChangeKind, ObjectError, ObjectOperation, PendingSplit, Provisioning, ReplicaChange,
    ReplicaSource, UsageReplay, WaitReason, WorkloadLimits, WorkloadReplicas, WorkloadScaling,
    WorkloadUsage,
};
pub use ksim_proto::ksim::env::v1::{
    AppliedConfiguration, AutoscalerFlag, AutoscalerFlagNotApplied, AutoscalerFlagSource,
    AutoscalerSimulationFlag, ControllerManagerFlag, KarpenterRun, ProviderConfig, SchedulerConfig,
};

use super::input::{NodeCount, PodPhaseCounts, ResourceUsage};

/// How a simulation went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub simulation_id: String,
    /// Whether the simulation had ended when the report was made.
    pub complete: bool,
    /// Trace events applied.
    pub events_applied: u64,
    /// Most virtual nodes at once over all groups (the highest bucket total).
    pub peak_nodes: u64,
    /// The replay speed. Offsets, the bucket width and pending times are recorded time: the
    /// wall-clock value multiplied by it. Defaulted for reports from before it was kept (1x).
    #[serde(default = "one")]
    pub speed: f64,
    /// Width of each timeline bucket, recorded time (see [`crate::bucket_width`]).
    #[serde(default = "a_second")]
    pub bucket_ms: u64,
    /// One bucket per `bucket_ms` of recorded time, in order.
    pub timeline: Vec<Bucket>,
    /// Per pod: first seen until Running, recorded time.
    pub pod_pending_time: DurationPercentiles,
    /// Per applied event and CronJob run: actual minus scheduled time; the driver's own delay,
    /// wall clock.
    pub lateness: DurationPercentiles,
    pub object_errors: Vec<ObjectError>,
    /// Nodes that joined or left the simulation's groups after the replay start, in time
    /// order. Defaulted: reports written before it was recorded have none.
    #[serde(default)]
    pub node_changes: Vec<NodeChange>,
    /// The recorded cluster beside the simulated one, when the trace held it. Defaulted:
    /// reports written before it was compared have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
    /// The scheduler and cluster-autoscaler configuration the simulation ran with, as given and
    /// as run; set by the driver when its environment applied one. Defaulted: reports written
    /// before it was kept have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<AppliedConfiguration>,
    /// What the cluster cost and how long pods waited, recorded time (see [`crate::costs`]).
    /// Defaulted: reports written before it was kept have zeros.
    #[serde(default)]
    pub costs: Costs,
    /// Why pods waited, most frequent first. Defaulted like `costs`.
    #[serde(default)]
    pub waits: Vec<WaitReason>,
    /// Why Karpenter disrupted nodes (source `disrupted`: Empty, Underutilized, ...) or kept
    /// them (`kept`: Unconsolidatable and DisruptionBlocked), counted per NodePool (`owner`),
    /// most frequent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_disruptions: Vec<WaitReason>,
    /// When cluster-autoscaler was down during the replay, in time order: it made no decisions
    /// then. `None`: unknown (no environment, or one that does not list them); also the
    /// default for reports written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_outages: Option<Vec<AutoscalerOutage>>,
    /// The provisioning model the run's node and pod start times came from. `None` in
    /// reports written before models existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
    /// How the replay gave its pods usage; `None` when the trace held none (and in reports
    /// written before usage was replayed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageReplay>,
    /// Who decided the replica counts of workloads HPAs scale; `None` when the trace held no
    /// HPA (and in reports written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_scaling: Option<WorkloadScaling>,
    /// Where the pending time of the pods that ran went, recorded time. Defaulted: reports
    /// written before it was kept have zeros.
    #[serde(default)]
    pub pending_split: PendingSplit,
    /// Per pod that ran: bound to Running, recorded time.
    #[serde(default)]
    pub pod_start_time: DurationPercentiles,
    /// Per node that joined a group during the replay: the Node existing to Ready, recorded
    /// time.
    #[serde(default)]
    pub node_ready_time: DurationPercentiles,
    /// Why cluster-autoscaler kept nodes it did not remove, per unremovable reason (see
    /// `nodes_kept`). `None`: the run had no autoscaler to read; also the default for reports
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_kept: Option<crate::NodesKept>,
    /// Conditions of this run known to make its figures differ from what the recorded cluster
    /// would show, one sentence each. Defaulted: reports written before it was kept have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The rules the replayed trace was transformed by before the replay, in order, one line
    /// each as its header records them: the figures are those of the transformed trace. Empty
    /// for a trace never transformed; also the default for reports written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_transforms: Vec<String>,
}

/// Most workloads a report lists usage against requests for.
pub const MAX_USAGE_WORKLOADS: usize = 100;

/// Most workloads a report lists limits for.
pub const MAX_LIMITED_WORKLOADS: usize = 100;

/// Scale events kept per workload: an HPA flapping for hours must not grow the report
/// without bound.
pub const MAX_REPLICA_CHANGES: usize = 1_000;

fn one() -> f64 {
    1.0
}

fn a_second() -> u64 {
    1000
}

/// One bucket of the replay's timeline; counts are as at the end of the bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Start of the bucket since the replay start, recorded time.
    pub offset_ms: u64,
    /// Start of the bucket, unix ms.
    pub time_ms: i64,
    /// Virtual nodes per node group.
    pub nodes: BTreeMap<String, NodeCount>,
    pub pods: PodPhaseCounts,
    /// Pods Pending and not bound to a node.
    pub unscheduled: u64,
    /// Nodes cluster-autoscaler added during the bucket.
    pub scale_ups: u64,
    /// Nodes cluster-autoscaler removed during the bucket.
    pub scale_downs: u64,
    /// Requested against allocatable, as at the end of the bucket. Defaulted: reports
    /// written before it was kept have zeros.
    #[serde(default)]
    pub usage: ResourceUsage,
}

impl Bucket {
    /// Nodes over all groups.
    pub fn nodes_total(&self) -> u64 {
        self.nodes.values().map(|count| count.nodes).sum()
    }
}
