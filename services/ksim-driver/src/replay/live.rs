//! A running simulation's observations: what the observer sees, what the operation queue did, and the
//! samples taken so far (one per timeline bucket). Reports and progress messages are built from it.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, Mutex, PoisonError, atomic::Ordering},
    time::Duration,
};

use ksim_proto::ksim::{driver::v1 as pb, env::v1::GetUnremovableNodesResponse};

use super::{disruptions::Played, progress::Progress};
use crate::{
    cluster::{
        availability::AvailabilityWatch, observer::Observer, replicas::ReplicaWatch,
        usage_replay::UsageCounts,
    },
    domain::report::{self, GroupPrice, Observations, RecordedState, Sample, node_group_counts},
    domain::{explain, nodes_kept::NodesKeptFold, warnings},
};

#[derive(Debug)]
pub struct Live {
    pub observer: Arc<Observer>,
    pub progress: Arc<Progress>,
    samples: Mutex<Vec<Sample>>,
    pub started_at_ms: i64,
    pub events_total: u64,
    /// Scaled trace position per wall-clock second: the speed.
    pub speed: f64,
    /// The recorded cluster the trace holds, for the report's fidelity.
    recorded: Option<Vec<RecordedState>>,
    /// The recorded pods' pending times, for the report's fidelity.
    recorded_pending: Option<Vec<Duration>>,
    /// The scheduler and CA configuration the environment ran the simulation with.
    configuration: Option<ksim_report::AppliedConfiguration>,
    /// The provisioning model the run uses.
    provisioning: Option<ksim_report::Provisioning>,
    /// Per node group: its instance type and price.
    prices: BTreeMap<String, GroupPrice>,
    /// cluster-autoscaler's unremovable counts read so far; `None` in a run without CA.
    nodes_kept: Mutex<Option<NodesKeptFold>>,
    /// What the report warns of (`domain::warnings`).
    warnings: Vec<String>,
    /// The rules the trace was transformed by, from its header: the report names them.
    trace_transforms: Vec<String>,
    /// The usage replay's counts, when the trace holds usage: what it started from, and the
    /// counters its task adds to.
    usage: Option<(ksim_report::UsageReplay, Arc<UsageCounts>)>,
    workload_scaling: Option<ksim_report::WorkloadScaling>,
    /// Scaled workloads' replicas, recorded and watched, when the trace holds HPAs.
    replicas: Option<Arc<ReplicaWatch>>,
    /// The run's disruptions as played and the workloads watched over them; `None` for a run
    /// without.
    disruptions: Option<LiveDisruptions>,
    /// The run explains pods: the namespace prefix its pods' namespaces carry, which the
    /// report's explanations drop. `None`: it explains none.
    explain_prefix: Option<String>,
    /// Whether reports so far may still be saved: false once the final one is written. Held
    /// while one is saved, so the final one never goes under a late partial one.
    saving: Mutex<bool>,
}

/// A run's disruptions: the seed, what the player did, and the workloads' ready replicas.
#[derive(Debug)]
pub struct LiveDisruptions {
    pub seed: u64,
    pub played: Played,
    pub workloads: AvailabilityWatch,
}

impl LiveDisruptions {
    fn observed(&self, observer: &Observer) -> report::ObservedDisruptions {
        let prefix = self.workloads.namespace_prefix();
        report::ObservedDisruptions {
            seed: self.seed,
            disruptions: self.played.observed(),
            workloads: self.workloads.observed(),
            // As the workloads are named: `Kind/<recorded namespace>/name`.
            evictions: as_recorded(observer.evictions(), &prefix),
            blocked: as_recorded(self.played.blocked(), &prefix),
        }
    }
}

/// Pods (when, simulated namespace, `Kind/name` owner) as their workloads are named in the
/// report, `Kind/<recorded namespace>/name`; those of other namespaces left out.
fn as_recorded(pods: Vec<(Duration, String, String)>, prefix: &str) -> Vec<(Duration, String)> {
    pods.into_iter()
        .filter_map(|(at, namespace, owner)| {
            let recorded = namespace.strip_prefix(prefix)?;
            let (kind, name) = owner.split_once('/')?;
            Some((at, format!("{kind}/{recorded}/{name}")))
        })
        .collect()
}

impl Live {
    pub fn new(
        observer: Arc<Observer>,
        progress: Arc<Progress>,
        started_at_ms: i64,
        events_total: u64,
        speed: f64,
        recorded: Option<Vec<RecordedState>>,
    ) -> Self {
        Self {
            observer,
            progress,
            samples: Mutex::new(Vec::new()),
            started_at_ms,
            events_total,
            speed,
            recorded,
            recorded_pending: None,
            configuration: None,
            provisioning: None,
            warnings: Vec::new(),
            trace_transforms: Vec::new(),
            prices: BTreeMap::new(),
            nodes_kept: Mutex::new(None),
            usage: None,
            workload_scaling: None,
            replicas: None,
            disruptions: None,
            explain_prefix: None,
            saving: Mutex::new(true),
        }
    }

    /// The run explains pods, in namespaces named `<namespace_prefix>-<recorded>`: the
    /// scheduler's explanations go in the report.
    pub fn with_explanations(mut self, namespace_prefix: &str) -> Self {
        self.explain_prefix = Some(format!("{namespace_prefix}-"));
        self
    }

    /// The explained pods, their attempts at wall-clock offsets since the start; an
    /// explanation that cannot be read is left out (and logged).
    fn explanations(&self) -> Vec<ksim_report::PodExplanation> {
        let Some(prefix) = &self.explain_prefix else {
            return Vec::new();
        };
        self.observer
            .explanations()
            .into_iter()
            .filter_map(|pod| {
                let attempts = explain::attempts(&pod.text, self.started_at_ms)
                    .inspect_err(|error| {
                        tracing::debug!(%error, pod = %pod.name, "an explanation left out");
                    })
                    .ok()?;
                Some(ksim_report::PodExplanation {
                    namespace: pod
                        .namespace
                        .strip_prefix(prefix.as_str())
                        .unwrap_or(&pod.namespace)
                        .to_owned(),
                    name: pod.name,
                    owner: pod.owner,
                    attempts,
                })
            })
            .collect()
    }

    /// The run plays disruptions: what they did goes in the report.
    pub fn with_disruptions(mut self, disruptions: LiveDisruptions) -> Self {
        self.disruptions = Some(disruptions);
        self
    }

    /// The recorded pods' pending times (`domain::recorded::recorded_pending`).
    pub fn with_recorded_pending(mut self, pending: Option<Vec<Duration>>) -> Self {
        self.recorded_pending = pending;
        self
    }

    /// Who decided replica counts, when the trace holds HPAs.
    pub fn with_workload_scaling(mut self, scaling: Option<ksim_report::WorkloadScaling>) -> Self {
        self.workload_scaling = scaling;
        self
    }

    /// The scaled workloads' replicas are watched.
    pub fn with_replicas(mut self, replicas: Option<Arc<ReplicaWatch>>) -> Self {
        self.replicas = replicas;
        self
    }

    /// The run replays usage: `base` says from what, `counts` what it did so far.
    pub fn with_usage(mut self, base: ksim_report::UsageReplay, counts: Arc<UsageCounts>) -> Self {
        self.usage = Some((base, counts));
        self
    }

    /// Reads of cluster-autoscaler's unremovable counts are to be folded (a run with CA).
    pub fn with_nodes_kept(self, fold: NodesKeptFold) -> Self {
        *self
            .nodes_kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(fold);
        self
    }

    /// One read of cluster-autoscaler's unremovable counts, taken now (`now_ms`, unix).
    pub fn add_nodes_kept(&self, now_ms: i64, reading: &GetUnremovableNodesResponse) {
        let offset = Duration::from_millis(u64::try_from(now_ms - self.started_at_ms).unwrap_or(0));
        if let Some(fold) = self
            .nodes_kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            fold.add(offset, reading);
        }
    }

    /// The node groups' prices, for the report's costs.
    pub fn with_prices(mut self, prices: BTreeMap<String, GroupPrice>) -> Self {
        self.prices = prices;
        self
    }

    /// The configuration the environment applied, for the report.
    pub fn with_configuration(
        mut self,
        configuration: Option<ksim_report::AppliedConfiguration>,
    ) -> Self {
        self.configuration = configuration;
        self
    }

    /// The provisioning model the run uses, for the report.
    pub fn with_provisioning(mut self, provisioning: ksim_report::Provisioning) -> Self {
        self.provisioning = Some(provisioning);
        self
    }

    /// The report's warnings, decided when the replay starts.
    pub fn with_warnings(mut self, warnings: Vec<String>) -> Self {
        self.warnings = warnings;
        self
    }

    /// The rules the trace was transformed by, as its header records them, for the report.
    pub fn with_trace_transforms(mut self, transforms: Vec<String>) -> Self {
        self.trace_transforms = transforms;
        self
    }

    /// Takes a sample now and returns the progress message it makes.
    pub fn sample(&self) -> pb::SimulationProgress {
        let mut sample = self.observer.sample();
        if let Some((_, counts)) = &self.usage {
            // The usage replay's last round, as set (see `UsageCounts`).
            sample.usage.used_cpu_millis = counts.used_cpu_millis.load(Ordering::Relaxed);
            sample.usage.used_memory_bytes = counts.used_memory_bytes.load(Ordering::Relaxed);
        }
        let progress = self.progress_of(&sample);
        self.samples
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(sample);
        progress
    }

    pub fn observations(&self, simulation_id: &str, complete: bool) -> Observations {
        let snapshot = self.progress.snapshot();
        let (pods_evicted, pods_preempted) = self.observer.disruptions();
        let (gpu_pending_times, gpu_pods, gpu_owners) = self.observer.gpu_pods();
        let explanations = self.explanations();
        let pending_times = self.observer.pending_times();
        let mut warnings = self.warnings.clone();
        warnings.extend(self.observer.device_warnings());
        if self.explain_prefix.is_some() && explanations.is_empty() && !pending_times.is_empty() {
            warnings.push(warnings::no_explanations());
        }
        Observations {
            simulation_id: simulation_id.to_owned(),
            complete,
            started_at_ms: self.started_at_ms,
            speed: self.speed,
            samples: self
                .samples
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            scale_events: self.observer.scale_events(),
            node_changes: self.observer.node_changes(),
            pending_times,
            gpu_pending_times,
            gpu_pods,
            gpu_owners,
            lateness: self.progress.lateness(),
            object_errors: self.progress.errors(),
            events_applied: snapshot.events_applied,
            recorded: self.recorded.clone(),
            recorded_pending: self.recorded_pending.clone(),
            configuration: self.configuration.clone(),
            prices: self.prices.clone(),
            never_ran: self.observer.never_ran(),
            pods_evicted,
            pods_preempted,
            waits: self.observer.waits(),
            node_disruptions: self.observer.node_disruptions(),
            // Asked of the environment once, for the final report (`run::final_report`).
            autoscaler_outages: None,
            provisioning: self.provisioning.clone(),
            workload_scaling: self.workload_scaling.clone(),
            replicas: self
                .replicas
                .as_ref()
                .map(|replicas| replicas.observed())
                .unwrap_or_default(),
            usage: self.usage.as_ref().map(|(base, counts)| {
                let mut used = ksim_report::UsageReplay {
                    matched: counts.matched.load(Ordering::Relaxed),
                    shared: counts.shared.load(Ordering::Relaxed),
                    defaulted: counts.defaulted.load(Ordering::Relaxed),
                    ..base.clone()
                };
                counts
                    .limits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .into_report(self.speed, &mut used);
                used
            }),
            pending_splits: self.observer.pending_splits(),
            node_ready_times: self.observer.node_ready_times(),
            nodes_kept: self
                .nodes_kept
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .and_then(|fold| fold.report(self.speed)),
            warnings,
            explanations,
            trace_transforms: self.trace_transforms.clone(),
            disruptions: self
                .disruptions
                .as_ref()
                .map(|disruptions| disruptions.observed(&self.observer)),
        }
    }

    /// Writes the report so far into `dir`, its first warning saying how far it goes, unless
    /// [`Self::stop_saving`] was called: if this driver stops, a restarted one serves it.
    pub fn save_partial(&self, simulation_id: &str, dir: &Path) {
        let saving = self.saving.lock().unwrap_or_else(PoisonError::into_inner);
        if !*saving {
            return;
        }
        let mut observations = self.observations(simulation_id, false);
        let elapsed = u64::try_from(ksim_trace::time::now_ms() - self.started_at_ms).unwrap_or(0);
        let covered = Duration::from_millis(elapsed).mul_f64(self.speed.max(0.0));
        observations
            .warnings
            .insert(0, warnings::saved_mid_run(covered));
        if let Err(error) = report::write_files(&report::build(&observations), dir) {
            tracing::warn!(%error, "saving the report so far");
        }
    }

    /// No report so far is saved after this returns (one being saved has been written): the
    /// final one follows.
    pub fn stop_saving(&self) {
        *self.saving.lock().unwrap_or_else(PoisonError::into_inner) = false;
    }

    fn progress_of(&self, sample: &Sample) -> pb::SimulationProgress {
        let snapshot = self.progress.snapshot();
        let duration = |d: Duration| prost_types::Duration::try_from(d).ok();
        pb::SimulationProgress {
            state: pb::SimulationState::Running.into(),
            events_applied: snapshot.events_applied,
            events_total: self.events_total,
            last_event_lateness: duration(snapshot.last_lateness),
            nodes: node_group_counts(&sample.nodes),
            pods: Some(sample.pods),
            unscheduled_pods: sample.unscheduled,
            observe_time: Some(ksim_trace::time::timestamp(ksim_trace::time::now_ms())),
            // Checked: a panic here used to leave the simulation RUNNING for good.
            trace_position: Duration::try_from_secs_f64(sample.offset.as_secs_f64() * self.speed)
                .ok()
                .and_then(duration),
            object_errors: snapshot.object_errors,
        }
    }
}
