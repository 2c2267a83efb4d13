//! The report as the driver keeps it and as `report.json` holds it.
//!
//! JSON conventions: times are unix ms (`time_ms`), whole durations integer ms (`offset_ms`),
//! and distribution percentiles fractional ms (`p99_ms: 12.345`) because lateness is often
//! sub-millisecond; they are kept to the microsecond.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use ksim_proto::ksim::driver::v1::{
    AutoscalerOutage, Costs, DelaySamples, DurationPercentiles, FidelitySeries, GroupCost,
    PendingSplit, Provisioning, ReplicaChange, ReplicaSource, UsageReplay, WaitReason,
    WorkloadLimits, WorkloadReplicas, WorkloadScaling, WorkloadUsage,
};
pub use ksim_proto::ksim::env::v1::{
    AutoscalerFlagNotApplied, AutoscalerSimulationFlag, ControllerManagerFlag,
};

use super::input::{ClusterState, NodeChangeKind, NodeCount, PodPhaseCounts, ResourceUsage};
use crate::{Operation, Target};

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
    pub object_errors: Vec<ReportedError>,
    /// Nodes that joined or left the simulation's groups after the replay start, in time
    /// order. Defaulted: reports written before it was recorded have none.
    #[serde(default)]
    pub node_changes: Vec<ReportedNodeChange>,
    /// The recorded cluster beside the simulated one, when the trace held it. Defaulted:
    /// reports written before it was compared have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<Fidelity>,
    /// The scheduler and cluster-autoscaler configuration the simulation ran with, as given and
    /// as run; set by the driver when its environment applied one. Defaulted: reports written
    /// before it was kept have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<Configuration>,
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

/// The configuration under test, as given (recorded time) and as run (at the replay speed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Configuration {
    /// The scheduler configuration file as given; `None`: the scheduler's defaults.
    pub scheduler: Option<SchedulerConfiguration>,
    /// Whether cluster-autoscaler ran.
    pub autoscaler: bool,
    /// The speed CA's durations were divided by.
    pub speed: f64,
    /// CA's flags a configuration may set, each with where its value came from.
    pub autoscaler_flags: Vec<AutoscalerFlag>,
    /// The cloud provider's configuration (pricing, per-group options) it ran with; `None`:
    /// none. Defaulted for reports written before it was kept.
    #[serde(default)]
    pub provider: Option<ProviderConfiguration>,
    /// Where the recorded cluster's CA flags came from; empty: none were recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub autoscaler_recorded_source: String,
    /// The recorded CA flags the run did not apply, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub autoscaler_not_applied: Vec<AutoscalerFlagNotApplied>,
    /// The flags ksim ran CA with differently from production, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub autoscaler_simulation_flags: Vec<AutoscalerSimulationFlag>,
    /// kube-controller-manager's HPA controller flags as given (recorded time) and as run;
    /// empty unless the run's HPAs decided replica counts, and in reports from before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controller_manager_flags: Vec<ControllerManagerFlag>,
    /// Karpenter's release when it ran as the node autoscaler (its own defaults, the run's
    /// NodePools); `None`: it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub karpenter: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderConfiguration {
    /// Where it came from (a file name).
    pub source: String,
    pub yaml: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerConfiguration {
    /// Where it came from (a file name).
    pub source: String,
    pub given_yaml: String,
    /// Complete, with kube-scheduler's defaults, as it wrote it.
    pub as_run_yaml: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoscalerFlag {
    pub name: String,
    pub given: String,
    pub as_run: String,
    /// Not given by the run (kept for readers older than `source`).
    pub from_defaults: bool,
    /// Divided below the shortest value CA runs it with, so it runs at that.
    pub floored: bool,
    /// Where its value came from: `ca-default`, `recording`, `environment` or `run`; empty in
    /// reports written before it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
}

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

/// An object the cluster refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedError {
    pub target: Target,
    /// `None` only for a report read from a proto that left the operation unspecified.
    pub operation: Option<Operation>,
    /// Index of the trace event that carried the object, from 0.
    pub event_index: u64,
    /// Scheduled time of that event, from the trace window start.
    pub trace_offset_ms: u64,
    pub message: String,
}

/// A node that joined or left a group during the replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedNodeChange {
    /// Since the replay start in recorded time, like the timeline's offsets.
    pub offset_ms: u64,
    pub group: String,
    pub node: String,
    /// `None` only for a report read from a proto that left the kind unspecified.
    pub kind: Option<NodeChangeKind>,
    /// Who made it. Defaulted: reports written before it was kept counted every change as
    /// the autoscaler's.
    #[serde(default)]
    pub cause: NodeChangeCause,
}

/// Who added or removed a node (see the `attribution` module).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeChangeCause {
    /// cluster-autoscaler, through the cloud provider's autoscaler groups.
    #[default]
    Autoscaler,
    /// The pool, in a fixed-size group no autoscaler resizes.
    Pool,
    /// The same node gone and back under its name: the pool registering it again (after a
    /// restart), not a scale-down and a scale-up.
    Reregistration,
}

/// How close the simulated cluster came to the recorded one (see [`crate::fidelity`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fidelity {
    /// Width of each bucket, recorded time.
    pub bucket_ms: u64,
    /// Both clusters as at the end of each bucket, in order; buckets where either side had
    /// not been sampled yet are left out.
    pub buckets: Vec<FidelityBucket>,
    /// `nodes`, then `nodes/<group>` per group seen on either side, `pods_running`,
    /// `pods_pending`.
    pub series: Vec<FidelitySeries>,
    /// Pending time and running pod-seconds on both sides. Defaulted: reports written before
    /// it was kept have zeros and no recorded pending time.
    #[serde(default)]
    pub pending: PendingFidelity,
}

/// How long pods waited and how much ran, recorded against simulated, in recorded time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingFidelity {
    /// Per recorded pod created and started inside the replayed window: its creation to its
    /// first container's start. `None`: the trace records no creation times (traces recorded
    /// before they were kept, SimKube traces).
    pub recorded: Option<DurationPercentiles>,
    /// Per simulated pod: first seen to Running (the report's `pod_pending_time`).
    pub simulated: DurationPercentiles,
    /// Running pods times seconds over the compared buckets, each bucket counting its
    /// full width at its end's count (as `fidelity.csv` sums them).
    pub recorded_running_pod_seconds: f64,
    pub simulated_running_pod_seconds: f64,
}

impl Fidelity {
    /// The series named `name`, if compared.
    pub fn series(&self, name: &str) -> Option<&FidelitySeries> {
        self.series.iter().find(|series| series.name == name)
    }
}

/// One bucket of the comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FidelityBucket {
    /// Start of the bucket since the replay start, recorded time.
    pub offset_ms: u64,
    pub recorded: ClusterState,
    pub simulated: ClusterState,
}
