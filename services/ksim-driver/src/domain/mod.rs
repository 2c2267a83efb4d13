//! The driver's pure core: no Kubernetes client, no gRPC, no clock.
//!
//! - [`plan`] turns a trace into timed steps of object operations, rewritten by [`rewrite`]
//!   (prefixed namespaces, the simulation root as owner, pods kept on virtual nodes) with pod
//!   lifetimes from [`lifetimes`]; [`launches`] matches each started pod to its recorded launch.
//! - [`autoscaled`] decides who sets scaled workloads' replica counts, the recording or the
//!   simulated HPAs, and edits the plan for it.
//! - [`hpa`] knows HPA objects: their kind, and their windows divided by the speed.
//! - [`spec`] checks a simulation spec whole, naming the field at fault; [`nodepool`] reads
//!   the Karpenter NodePools a spec gives.
//! - [`waits`] reads why pods waited from the scheduler's and CA's events.
//! - [`bare_pods`] decides which clone replaces a bare pod the simulation removed.
//! - [`provisioning`] chooses a run's provisioning model: given, learned from the trace, or
//!   the published default.
//! - [`run`] resolves a run once at its start (the recorded autoscaler's flags, who decides
//!   replica counts, what the environment runs, the model); the phases read it.
//! - [`warnings`] decides what a run's report warns of (CA 1.35+'s startup time of 0 for a
//!   group that answers GetOptions, when the model gives its nodes a ready delay).
//! - [`outages`] puts cluster-autoscaler's outages on the replay's clock for the report.
//! - [`nodes_kept`] folds cluster-autoscaler's unremovable counts, read during the replay,
//!   into why nodes stayed: per reason the peak and the first reading.
//! - [`ownership`] decides what a replay may change or delete: only what it created.
//! - [`rightsizing`] puts each recorded workload's p95 usage per pod against its requests.
//! - [`gpus`] counts the GPUs per model: allocatable, allocated, and fragmented for the GPU
//!   pods pending.
//! - [`report`] (the `ksim-report` crate) turns what the driver observed into the report.

pub mod autoscaled;
pub mod bare_pods;
pub mod cron;
pub mod disruptions;
pub mod explain;
pub mod gpus;
pub mod hpa;
pub mod launches;
pub mod lifetimes;
pub mod nodepool;
pub mod nodes_kept;
pub mod outages;
pub mod ownership;
pub mod plan;
pub mod provisioning;
pub mod recorded;
pub mod recorded_failures;
pub mod rewrite;
pub mod rightsizing;
pub mod run;
pub mod spec;
pub mod usage;
pub mod waits;
pub mod warnings;

/// The report model lives in its own crate, shared with the CLI; the objects it speaks of too.
pub use ksim_report::{self as report, Gvk, Operation, Target};

/// The simulation root object every replayed object and namespace is owned by, so deleting it
/// garbage-collects the whole simulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The simulation's id, on its namespaces, its cluster-scoped objects and every pod template
/// it replays (so on its pods); a namespaced object is known by its namespace.
pub const SIMULATION_LABEL: &str = "ksim.io/simulation";

/// Field manager of the driver's server-side applies.
pub const FIELD_MANAGER: &str = "ksim-driver";
