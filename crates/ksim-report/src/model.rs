//! The report as the driver keeps it and as `report.json` holds it.
//!
//! JSON conventions: times are unix ms (`time_ms`), whole durations integer ms (`offset_ms`),
//! and distribution percentiles fractional ms (`p99_ms: 12.345`) because lateness is often
//! sub-millisecond; they are kept to the microsecond.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::input::{ClusterState, NodeChangeKind, NodeCount, PodCounts, Usage};
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
    pub pod_pending_time: Percentiles,
    /// Per applied event and CronJob run: actual minus scheduled time; the driver's own delay,
    /// wall clock.
    pub lateness: Percentiles,
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
    pub autoscaler_outages: Option<Vec<ReportedOutage>>,
    /// The provisioning model the run's node and pod start times came from. `None` in
    /// reports written before models existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisioningUsed>,
    /// How the replay gave its pods usage; `None` when the trace held none (and in reports
    /// written before usage was replayed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageReplayed>,
    /// Who decided the replica counts of workloads HPAs scale; `None` when the trace held no
    /// HPA (and in reports written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_scaling: Option<WorkloadScaling>,
    /// Where the pending time of the pods that ran went, recorded time. Defaulted: reports
    /// written before it was kept have zeros.
    #[serde(default)]
    pub pending_split: PendingPodSeconds,
    /// Per pod that ran: bound to Running, recorded time.
    #[serde(default)]
    pub pod_start_time: Percentiles,
    /// Per node that joined a group during the replay: the Node existing to Ready, recorded
    /// time.
    #[serde(default)]
    pub node_ready_time: Percentiles,
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

/// The pending pod-seconds of the pods that ran, by what they waited for, recorded time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingPodSeconds {
    pub pods: u64,
    /// The scheduler, and cluster-autoscaler until it asked for a node.
    pub scheduling: f64,
    /// A node cluster-autoscaler asked for booting.
    pub node_boot: f64,
    /// The pod starting on its node.
    pub start: f64,
}

/// The provisioning model a run used and how it got it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisioningUsed {
    pub name: String,
    /// Where its figures came from (the model's own source line).
    pub source: String,
    /// `given` (the run's), `learned` (from the trace's recording) or `default` (the built-in
    /// model for a trace without recorded nodes).
    pub origin: String,
    /// One line: the default delays.
    pub summary: String,
    /// The whole model, as a model file.
    pub yaml: String,
    /// Each node delay of the model with how many samples it holds (0: percentiles or fixed,
    /// no finite sample set), so the report can warn when the replay drew one more often.
    /// Defaulted: reports written before it was kept list none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delays: Vec<DelaySamples>,
}

/// One delay of a provisioning model and the samples it was given as.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelaySamples {
    /// Whose: `nodes` (the default), `nodes/<group>` (a group's own) or `pods` (the default
    /// pod delays, listed only when no owner has delays of its own).
    pub scope: String,
    /// `registration`, `ready` or `termination` for nodes; `start` for pods.
    pub delay: String,
    /// Samples it holds; 0: given as percentiles or fixed.
    pub samples: u64,
}

/// How a replay gave its pods the recorded usage (see the driver's `domain::usage`). Counts
/// are pod updates: one per running pod per interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReplayed {
    /// Usage samples of pods the trace holds.
    pub samples: u64,
    /// Samples of pods the trace holds no lifecycle for, ignored.
    pub ignored_samples: u64,
    /// How often usage was set, recorded time.
    pub interval_ms: u64,
    /// Updates from the matched recorded pod's own usage.
    pub matched: u64,
    /// Updates from a share of the owner's recorded total.
    pub shared: u64,
    /// Updates from the stated default, the pod's requests.
    pub defaulted: u64,
    /// Containers OOM-killed for memory above their limit. Defaulted: older reports.
    #[serde(default)]
    pub oom_kills: u64,
    /// CPU-seconds wanted above CPU limits and throttled, recorded time.
    #[serde(default)]
    pub throttled_cpu_seconds: f64,
    /// Pods evicted by their node's memory pressure. Defaulted: older reports.
    #[serde(default)]
    pub pressure_evictions: u64,
    /// Per workload with any, most OOM kills first (at most [`MAX_LIMITED_WORKLOADS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadLimits>,
    /// Per recorded owner, its p95 usage per pod against its requests per pod, from the trace
    /// (the driver's `domain::rightsizing`); most CPU first, at most [`MAX_USAGE_WORKLOADS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage_vs_requests: Vec<WorkloadUsage>,
}

/// Most workloads a report lists usage against requests for.
pub const MAX_USAGE_WORKLOADS: usize = 100;

/// What one recorded workload's pods used, p95 over the trace's samples of per-pod totals,
/// against what each requests (summed over its template's containers; 0 when the trace holds
/// no template).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadUsage {
    /// `Kind/namespace/name` as recorded.
    pub name: String,
    /// Per-pod totals the percentiles are over.
    pub samples: u64,
    pub p95_cpu_millis: u64,
    pub p95_memory_bytes: u64,
    pub requested_cpu_millis: u64,
    pub requested_memory_bytes: u64,
}

/// Most workloads a report lists limits for.
pub const MAX_LIMITED_WORKLOADS: usize = 100;

/// What limits did to one workload's pods.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadLimits {
    /// `Kind/namespace/name` as recorded.
    pub name: String,
    pub oom_kills: u64,
    /// Recorded time.
    pub throttled_cpu_seconds: f64,
    /// Its pods evicted by their node's memory pressure. Defaulted: older reports.
    #[serde(default)]
    pub pressure_evictions: u64,
}

/// Who decided a replay's replica counts (see the driver's `domain::autoscaled`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadScaling {
    /// `recorded` or `hpa`.
    pub source: String,
    /// "given", or the default and its reason.
    pub reason: String,
    /// HPAs the trace holds.
    pub hpas: u64,
    /// Workloads they scale.
    pub scaled_workloads: u64,
    /// Recorded replica changes not replayed (hpa), or HPA operations not replayed
    /// (recorded).
    pub not_replayed: u64,
    /// Per scaled workload, its replicas recorded and simulated, by name. Defaulted: reports
    /// written before it was kept have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadReplicas>,
}

/// One scaled workload's `spec.replicas`, recorded and simulated, in recorded time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReplicas {
    /// As recorded: `Kind/namespace/name`.
    pub name: String,
    /// Per timeline bucket (the same buckets, index for index): the recorded count at the
    /// bucket's end (its last value within the bucket, carried forward; 0 while the workload
    /// does not exist). The last value rather than a mean, as the timeline keeps its last sample.
    pub recorded: Vec<u64>,
    /// Per timeline bucket: the simulated count at the bucket's end, as `recorded`.
    pub simulated: Vec<u64>,
    /// Replicas times recorded seconds over the timeline's span, recorded.
    pub recorded_replica_seconds: f64,
    /// The same for what the simulated cluster ran.
    pub simulated_replica_seconds: f64,
    /// Changes of the simulated count while the HPAs decided (none when the recording did),
    /// at most [`MAX_REPLICA_CHANGES`], in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scale_events: Vec<ReplicaChange>,
    /// Changes past [`MAX_REPLICA_CHANGES`], counted, not kept.
    #[serde(default)]
    pub scale_events_dropped: u64,
}

/// Scale events kept per workload: an HPA flapping for hours must not grow the report
/// without bound.
pub const MAX_REPLICA_CHANGES: usize = 1_000;

/// One change of a workload's simulated `spec.replicas`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaChange {
    /// Since the replay start, recorded time.
    pub offset_ms: u64,
    pub from: u64,
    pub to: u64,
}

/// One time cluster-autoscaler was down, recorded time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedOutage {
    /// Since the replay start, like the timeline's offsets.
    pub offset_ms: u64,
    /// How long it was down; one still down at the end counts to the end.
    pub duration_ms: u64,
    /// Still down at the end.
    pub ongoing: bool,
}

/// What a team pays and waits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Per node group, in name order.
    pub groups: Vec<GroupCost>,
    /// Registered nodes times recorded time, over all groups.
    pub node_hours: f64,
    /// Cost of the groups with a price; `None` when none has one.
    pub cost: Option<f64>,
    /// Groups without a price: their node-hours are not in `cost`.
    pub unpriced_groups: Vec<String>,
    /// Pending pod-seconds, recorded time, pods that never ran included.
    pub pending_pod_seconds: f64,
    pub pods_never_scheduled: u64,
    pub pods_evicted: u64,
    pub pods_preempted: u64,
    /// Requested over allocatable CPU of the simulation's nodes: mean over the buckets with
    /// nodes, and peak.
    pub cpu_requested_mean: f64,
    pub cpu_requested_peak: f64,
    pub memory_requested_mean: f64,
    pub memory_requested_peak: f64,
}

/// One node group's share of the costs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupCost {
    pub group: String,
    pub instance_type: String,
    pub node_hours: f64,
    /// `None`: the cloud provider has no price for its instance type.
    pub price_per_hour: Option<f64>,
    pub cost: Option<f64>,
    /// Nodes the autoscaler asked for: cluster-autoscaler's seat resizes, or the nodes
    /// Karpenter launched for a NodePool.
    pub scale_ups: u64,
    /// Nodes it gave back, likewise.
    pub scale_downs: u64,
    /// Nodes that joined during the replay, by instance type: a Karpenter NodePool's choices.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_types: BTreeMap<String, u64>,
}

/// One reason pods waited, for one owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WaitReason {
    /// `scheduler`, `autoscaler` (cluster-autoscaler) or `karpenter`.
    pub source: String,
    /// Without node counts: `Insufficient cpu`, `TriggeredScaleUp`, ...
    pub reason: String,
    /// `Kind/name` of the pods' owner (`Pod/name` for a bare pod).
    pub owner: String,
    pub count: u64,
}

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

/// A kube-controller-manager flag as given (its default, in recorded time) and as run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerManagerFlag {
    pub name: String,
    pub given: String,
    pub as_run: String,
}

/// A recorded CA flag a run did not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoscalerFlagNotApplied {
    /// As recorded, `--name=value`.
    pub flag: String,
    pub reason: String,
}

/// A flag ksim runs CA with differently from production, for the simulation to work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoscalerSimulationFlag {
    pub name: String,
    pub value: String,
    pub reason: String,
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
    pub pods: PodCounts,
    /// Pods Pending and not bound to a node.
    pub unscheduled: u64,
    /// Nodes cluster-autoscaler added during the bucket.
    pub scale_ups: u64,
    /// Nodes cluster-autoscaler removed during the bucket.
    pub scale_downs: u64,
    /// Requested against allocatable, as at the end of the bucket. Defaulted: reports
    /// written before it was kept have zeros.
    #[serde(default)]
    pub usage: Usage,
}

impl Bucket {
    /// Nodes over all groups.
    pub fn nodes_total(&self) -> u64 {
        self.nodes.values().map(|count| count.nodes).sum()
    }
}

/// A distribution of durations, nearest-rank percentiles in fractional milliseconds; all zero
/// when there were no samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
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
    pub series: Vec<SeriesFidelity>,
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
    pub recorded: Option<Percentiles>,
    /// Per simulated pod: first seen to Running (the report's `pod_pending_time`).
    pub simulated: Percentiles,
    /// Running pods times seconds over the compared buckets, each bucket counting its
    /// full width at its end's count (as `fidelity.csv` sums them).
    pub recorded_running_pod_seconds: f64,
    pub simulated_running_pod_seconds: f64,
}

impl Fidelity {
    /// The series named `name`, if compared.
    pub fn series(&self, name: &str) -> Option<&SeriesFidelity> {
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

/// How close one simulated series came to the recorded one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesFidelity {
    pub name: String,
    /// Buckets compared.
    pub buckets: u64,
    /// Mean of |simulated - recorded|.
    pub mean_abs_error: f64,
    pub max_abs_error: u64,
    /// Share of buckets (0 to 1) within tolerance: +-1 node, or 5% of the recorded pods.
    pub within_tolerance: f64,
    pub recorded_peak: u64,
    pub simulated_peak: u64,
}
