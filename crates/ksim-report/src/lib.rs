//! The simulation report: what the driver observed, turned into a per-second timeline,
//! percentiles and the objects the cluster refused; written as JSON, CSV and an SVG chart, sent
//! as a proto, and summarised for a terminal. Pure: no cluster, no server, no clock.
//!
//! - [`input`]: what the driver observes ([`Observations`]).
//! - [`build()`]: observations into a [`Report`] (buckets in `timeline`, percentiles, and
//!   recorded against simulated in `fidelity` when the trace held the recorded cluster);
//!   `attribution` says who made each node change (the autoscaler, the pool, a re-registration).
//! - The report is the driver's proto message (`model`): what the driver sends is what
//!   `report.json` holds, one model with serde on the generated types.
//! - [`write_files`] (with [`to_csv`] and [`render_svg`]) and [`summary`]; [`repeat_summary`]
//!   for the runs of `ksim run --repeat`.
//! - [`Gvk`], [`Target`], [`Operation`]: the objects it speaks of.
//!
//! The driver builds reports; the CLI receives them and prints them.

use ksim_proto::ksim::driver::v1::SimulationState;

/// Whether a simulation in `state` has ended: nothing about it changes any more.
pub fn is_terminal(state: SimulationState) -> bool {
    matches!(
        state,
        SimulationState::Succeeded | SimulationState::Failed | SimulationState::Cancelled
    )
}

mod accelerators;
mod attribution;
mod build;
mod compare;
mod costs;
mod csv;
mod disruptions;
mod error;
mod explain;
mod fidelity;
mod files;
mod html;
pub mod input;
mod model;
mod nodes_kept;
mod noise;
mod object;
mod percentiles;
mod repeat;
mod replicas;
mod summary;
mod svg;
mod timeline;

#[cfg(test)]
mod fixtures;

pub use build::build;
pub use compare::{ComparedFigure, Comparison, FIGURES, availability, compare, compare_repeated};
pub use csv::{fidelity_to_csv, to_csv};
pub use explain::{ExplainError, PodSelector, compare_explained, explanation_text, select};
pub use fidelity::{FIDELITY_BUCKET, group_series};
pub use files::{
    Artifacts, CSV_FILE, FIDELITY_CSV_FILE, FIDELITY_SVG_FILE, JSON_FILE, OUTCOME_FILE, Outcome,
    REPLICAS_CSV_FILE, ReportError, SVG_FILE, read_files, write_files, write_outcome,
};
pub use html::{ChartLibrary, HtmlError, render_comparison_html, render_html};
pub use input::{
    GroupOwner, GroupPrice, NeverRan, NodeCount, ObjectErrorRecord, Observations,
    ObservedAvailability, ObservedDisruption, ObservedDisruptions, ObservedNodeChange,
    ObservedOutage, ObservedReplicas, PodPendingSplit, PodPhaseCounts, ReadyPoint, RecordedState,
    ReplicaPoint, ResourceUsage, Sample, ScaleEvent,
};
pub use model::{
    Accelerators, AppliedConfiguration, AutoscalerFlag, AutoscalerFlagNotApplied,
    AutoscalerFlagSource, AutoscalerOutage, AutoscalerOutages, AutoscalerSimulationFlag,
    ClusterState, ControllerManagerFlag, Costs, DelaySamples, DisruptionOutcome, Disruptions,
    DurationPercentiles, Fidelity, FidelityBucket, FidelityPending, FidelitySeries,
    FilterRejection, GpuModelSummary, GpuPodCount, GpuUsage, GroupCost, KarpenterRun,
    MAX_LIMITED_WORKLOADS, MAX_REPLICA_CHANGES, MAX_USAGE_WORKLOADS, NodeChange, NodeChangeCause,
    NodeChangeKind, NodeGroupCount, NodeScore, ObjectError, ObjectOperation, PendingSplit,
    PluginScore, PodExplanation, ProviderConfig, Provisioning, ReplicaChange, ReplicaSource,
    Report, SchedulerConfig, SchedulingAttempt, TimelineBucket, UsageReplay, WaitReason,
    WorkloadAvailability, WorkloadLimits, WorkloadReplicas, WorkloadScaling, WorkloadUsage,
    nodes_total,
};
pub use nodes_kept::{NodesKept, NodesKeptReason, nodes_kept_line};
pub use noise::Noise;
pub use object::{Gvk, Operation, Target};
pub use repeat::{RepeatRun, RepeatSummary, Spread, repeat_summary};
pub use summary::{autoscaler_nodes, autoscaler_totals, summary, summary_ended};
pub use svg::{render_comparison_svg, render_fidelity_svg, render_svg};
pub use timeline::{
    MAX_SPEED, MIN_SAMPLE_INTERVAL, MIN_SPEED, bucket_ms, bucket_width, check_timeline,
    node_group_counts, offset_ms, recorded, sample_interval,
};
