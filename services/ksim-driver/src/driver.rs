//! The driver's operations, independent of gRPC: start, look up, cancel and report on
//! simulations. One simulation runs at a time: in this process (checked first, so a second
//! request gets a clear answer at once) and per cluster (the Lease).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::now_ms;
use tracing::Instrument;

use crate::{
    cluster::{
        ClusterError,
        lease::{LeaseError, SimulationLease},
        namespaces,
        nodepools::{self, NodePoolError},
        root::{self, FoundRoot},
    },
    domain::{
        provisioning::learn,
        report,
        run::ResolvedRun,
        spec::{NodeGroup, SimulationSpec, SpecError},
        warnings,
    },
    mesh::MeshError,
    replay::{
        cleanup::{Created, cleanup},
        handle::{Handle, is_terminal},
        run::{RunContext, run, write_outcome},
        source::{LoadError, load},
    },
};

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("simulation {0} is running; cancel it or wait for it to end")]
    Busy(String),
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error("no simulation {0:?}")]
    NotFound(String),
    #[error(
        "simulation {id} is still {state} {waited:?} after the cancel: its cleanup has not ended; \
         GetSimulation or WatchSimulation shows when it does"
    )]
    CancelPending {
        id: String,
        state: String,
        waited: Duration,
    },
    /// The driver's own namespace, where the lease and seat Deployments live.
    #[error(transparent)]
    Namespace(ClusterError),
    /// The environment refused the configuration (its code and words), or could not be asked.
    #[error("configuration: {message}")]
    Configuration { code: tonic::Code, message: String },
    #[error(
        "configuration: this driver has no environment to run a scheduler or cluster-autoscaler \
         configuration with (--environment-url; `ksim up` sets it)"
    )]
    NoEnvironment,
    #[error(
        "spec.disruptions: this driver has no environment to run kube-controller-manager's node \
         lifecycle controller at the replay's speed with (--environment-url; `ksim up` sets it)"
    )]
    DisruptionsWithoutEnvironment,
    /// A NodePool the apiserver (Karpenter's validation) refuses, or a cluster without them.
    #[error(transparent)]
    NodePool(#[from] NodePoolError),
}

#[derive(Debug, Clone)]
pub struct Driver {
    ctx: RunContext,
    simulations: Arc<Mutex<BTreeMap<String, Arc<Handle>>>>,
}

impl Driver {
    pub fn new(ctx: RunContext) -> Self {
        Self {
            ctx,
            simulations: Arc::default(),
        }
    }

    /// Checks the spec and the trace, takes the lease, and starts the run. Returns the
    /// simulation PENDING.
    pub async fn start(
        &self,
        spec: Option<pb::SimulationSpec>,
    ) -> Result<pb::Simulation, DriverError> {
        let spec = SimulationSpec::from_proto(spec)?;
        if let Some(running) = self.running() {
            return Err(DriverError::Busy(running));
        }
        let has_environment = self.ctx.mesh.has_environment();
        if !has_environment && spec.configuration.is_some() {
            return Err(DriverError::NoEnvironment);
        }
        if !has_environment && spec.has_disruptions() {
            return Err(DriverError::DisruptionsWithoutEnvironment);
        }
        let trace = load(&spec.source, &self.ctx.mesh).await?;
        // Decided once, here; the phases read it.
        let resolved = ResolvedRun::resolve(spec, trace, has_environment, learn);
        tracing::info!(
            model = %resolved.provisioning.model.name,
            origin = ?resolved.provisioning.origin,
            replicas = resolved.replicas.source.name(),
            "run resolved"
        );
        // The real binaries judge the configuration before anything is created.
        if let Some(environment) = &resolved.environment {
            self.ctx
                .mesh
                .check_configuration(environment.clone())
                .await
                .map_err(|error| match error {
                    MeshError::Call { status, .. } => DriverError::Configuration {
                        code: status.code(),
                        message: status.message().to_owned(),
                    },
                    other => DriverError::Configuration {
                        code: tonic::Code::Unavailable,
                        message: other.to_string(),
                    },
                })?;
        }
        // Karpenter's validation judges the NodePools before anything is created.
        for group in &resolved.spec.node_groups {
            if let NodeGroup::Karpenter { name, nodepool } = group {
                nodepools::check(&self.ctx.client, name, nodepool).await?;
            }
        }
        let id = new_id();
        namespaces::ensure(&self.ctx.client, &self.ctx.settings.namespace)
            .await
            .map_err(DriverError::Namespace)?;
        let lease = SimulationLease::acquire(
            &self.ctx.client,
            &self.ctx.settings.namespace,
            &id,
            self.ctx.settings.lease_duration,
        )
        .await?;
        let handle = Arc::new(Handle::new(pb::Simulation {
            id: id.clone(),
            state: pb::SimulationState::Pending.into(),
            create_time: Some(ksim_trace::time::timestamp(now_ms())),
            spec: Some(resolved.spec.echo.clone()),
            progress: Some(pb::SimulationProgress {
                state: pb::SimulationState::Pending.into(),
                events_total: resolved.trace.events.len() as u64,
                ..Default::default()
            }),
            ..Default::default()
        }));
        // Two requests may both have passed the check above; the lease let only one through
        // per cluster, and this keeps it to one per process too.
        if let Err(busy) = self.register(&handle) {
            let _ = lease.release().await;
            return Err(busy);
        }
        tracing::info!(
            simulation = id,
            events = resolved.trace.events.len(),
            "simulation accepted"
        );
        let span = tracing::info_span!("simulation", simulation.id = %id);
        tokio::spawn(run(self.ctx.clone(), handle.clone(), resolved, lease).instrument(span));
        Ok(handle.simulation())
    }

    /// A simulation this process knows, else one that ended before it started, from the files
    /// kept in the report directory.
    pub fn get(&self, id: &str) -> Result<Arc<Handle>, DriverError> {
        if let Some(handle) = self.lock().get(id).cloned() {
            return Ok(handle);
        }
        self.stored(id)
            .ok_or_else(|| DriverError::NotFound(id.to_owned()))
    }

    /// An ended simulation as its files describe it; `None` without a report file.
    fn stored(&self, id: &str) -> Option<Arc<Handle>> {
        // Ids are `<hex>-<hex>`; anything else never names a directory of ours.
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return None;
        }
        let dir = self.ctx.settings.report_dir.join(id);
        let (report, outcome) = match report::read_files(&dir) {
            Ok(files) => files,
            Err(error) => {
                tracing::warn!(%error, simulation = id, "reading a stored report");
                return None;
            }
        };
        let mut report = report?;
        let state = outcome
            .as_ref()
            .and_then(|o| pb::SimulationState::from_str_name(&o.state))
            .unwrap_or(pb::SimulationState::Unspecified);
        let handle = Handle::new(pb::Simulation {
            id: id.to_owned(),
            state: state.into(),
            error_message: outcome
                .as_ref()
                .map(|o| o.error_message.clone())
                .unwrap_or_default(),
            end_time: outcome.map(|o| ksim_trace::time::timestamp(o.end_time_ms)),
            ..Default::default()
        });
        report.artifacts = Some(report::Artifacts::of(&report, &dir).to_proto());
        handle.set_report(report);
        Some(Arc::new(handle))
    }

    /// Answers at once for the simulations a previous driver process left running (their
    /// roots are still in the cluster): each is listed RUNNING, with the report it saved so
    /// far, until [`Self::end_adopted`] ends it. Awaited before the API is served, so a run the
    /// cluster holds is never NOT_FOUND; a StartSimulation meanwhile is refused as busy.
    pub async fn adopt_left(&self) -> Vec<(Arc<Handle>, FoundRoot)> {
        let found = match root::list(&self.ctx.client).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "listing simulation roots left by a previous driver");
                return Vec::new();
            }
        };
        let mut simulations = self.lock();
        let mut adopted = Vec::new();
        for left in found {
            if simulations.contains_key(&left.id) {
                continue;
            }
            let handle = Arc::new(Handle::new(pb::Simulation {
                id: left.id.clone(),
                state: pb::SimulationState::Running.into(),
                ..Default::default()
            }));
            handle.set_report(self.left_report(&left.id));
            simulations.insert(left.id.clone(), handle.clone());
            adopted.push((handle, left));
        }
        adopted
    }

    /// Ends each adopted simulation as FAILED: once no live lease says another driver still
    /// runs it, it is cleaned up as its own cleanup would have (autoscaler groups retired,
    /// namespaces, root and pool groups deleted, lease released). One another driver runs is
    /// forgotten here. Returns the ids it ended.
    pub async fn end_adopted(&self, adopted: Vec<(Arc<Handle>, FoundRoot)>) -> Vec<String> {
        let mut ended = Vec::new();
        for (handle, left) in adopted {
            if self.still_running_elsewhere(&left.id).await {
                tracing::warn!(
                    simulation = left.id,
                    "its lease is still renewed: another driver runs it; left alone"
                );
                self.lock().remove(&left.id);
                continue;
            }
            self.end_left(&handle, left).await;
            ended.push(handle.id.clone());
        }
        ended
    }

    /// The report of a simulation a stopped driver left: the one it saved while it ran (its
    /// first warning says how far it goes), else one that says no figure was saved rather
    /// than showing zeros as if measured.
    fn left_report(&self, id: &str) -> pb::Report {
        self.stored(id)
            .and_then(|stored| stored.report())
            .unwrap_or_else(|| pb::Report {
                simulation_id: id.to_owned(),
                complete: false,
                warnings: vec![warnings::NOTHING_SAVED.to_owned()],
                ..Default::default()
            })
    }

    /// Whether a live lease of `id` is renewed by someone for longer than a lease duration.
    async fn still_running_elsewhere(&self, id: &str) -> bool {
        let (client, namespace) = (&self.ctx.client, &self.ctx.settings.namespace);
        let deadline = tokio::time::Instant::now() + self.ctx.settings.lease_duration * 2;
        loop {
            match SimulationLease::live_holder(client, namespace).await {
                Ok(Some(holder)) if holder == id => {}
                _ => return false,
            }
            if tokio::time::Instant::now() >= deadline {
                return true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn end_left(&self, handle: &Handle, left: FoundRoot) {
        let id = left.id.clone();
        tracing::info!(simulation = id, groups = ?left.pool_groups, "cleaning up a simulation a previous driver left");
        let created = Created {
            root: Some(left.root),
            pool_groups: left.pool_groups,
            // Its NodePools go with the root; their nodes are Karpenter's to remove.
            nodepools: Vec::new(),
            autoscaled: left.autoscaled,
            // It may have left the environment running its configuration; restoring what
            // already runs as started restarts nothing.
            configured: self.ctx.mesh.has_environment(),
            // It may have failed nodes (runs with disruptions need an environment); bringing
            // back none and restoring the pool's own lease change nothing.
            node_lifecycle: self.ctx.mesh.has_environment(),
        };
        let cleaned = cleanup(&self.ctx, handle, &created).await;
        let lease = SimulationLease::of(
            &self.ctx.client,
            &self.ctx.settings.namespace,
            &id,
            self.ctx.settings.lease_duration,
        );
        // Held by someone else (or by nobody) is fine: only its own holder may release it.
        let _ = lease.release().await;
        handle.set_report(self.left_report(&id));
        let message = "the driver running it stopped before it ended; a restarted driver removed what it left";
        handle.fail(match cleaned {
            Ok(()) => message.to_owned(),
            Err(problem) => format!("{message}, except: {problem}"),
        });
        handle.set_state(pb::SimulationState::Failed);
        write_outcome(&self.ctx, handle);
        tracing::info!(
            simulation = id,
            error = handle.error_message(),
            "left simulation ended"
        );
    }

    /// Cancels and waits (up to `wait`) for the cleanup to finish; a simulation not ended by
    /// then is an error that says so.
    pub async fn cancel(&self, id: &str, wait: Duration) -> Result<pb::Simulation, DriverError> {
        let handle = self.get(id)?;
        cancel_and_wait(&handle, wait).await
    }

    /// The final report once the simulation ended, else one built from what it saw so far.
    pub fn report(&self, id: &str) -> Result<pb::Report, DriverError> {
        let handle = self.get(id)?;
        if let Some(report) = handle.report() {
            return Ok(report);
        }
        Ok(match handle.live() {
            Some(live) => report::build(&live.observations(id, false)),
            None => pb::Report {
                simulation_id: id.to_owned(),
                ..Default::default()
            },
        })
    }

    /// Adds `handle` unless a simulation is running ([`DriverError::Busy`]).
    fn register(&self, handle: &Arc<Handle>) -> Result<(), DriverError> {
        let mut simulations = self.lock();
        if let Some(running) = running_in(&simulations) {
            return Err(DriverError::Busy(running));
        }
        simulations.insert(handle.id.clone(), handle.clone());
        forget_oldest_finished(&mut simulations, self.ctx.settings.keep_finished);
        Ok(())
    }

    fn running(&self) -> Option<String> {
        running_in(&self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Handle>>> {
        self.simulations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Cancels `handle` and waits (up to `wait`) for it to end.
async fn cancel_and_wait(handle: &Handle, wait: Duration) -> Result<pb::Simulation, DriverError> {
    handle.cancel.cancel();
    let mut changes = handle.subscribe();
    let _ = tokio::time::timeout(
        wait,
        changes.wait_for(|simulation| is_terminal(simulation.state())),
    )
    .await;
    let simulation = handle.simulation();
    if is_terminal(simulation.state()) {
        Ok(simulation)
    } else {
        Err(DriverError::CancelPending {
            id: handle.id.clone(),
            state: simulation.state().as_str_name().to_owned(),
            waited: wait,
        })
    }
}

fn running_in(simulations: &BTreeMap<String, Arc<Handle>>) -> Option<String> {
    simulations
        .values()
        .find(|handle| !is_terminal(handle.state()))
        .map(|handle| handle.id.clone())
}

/// Forgets all but the `keep` newest finished simulations, so a long-lived driver's memory
/// stays bounded. Ids sort by start time.
fn forget_oldest_finished(simulations: &mut BTreeMap<String, Arc<Handle>>, keep: usize) {
    let finished: Vec<String> = simulations
        .iter()
        .filter(|(_, handle)| is_terminal(handle.state()))
        .map(|(id, _)| id.clone())
        .collect();
    let excess = finished.len().saturating_sub(keep);
    for id in finished.into_iter().take(excess) {
        simulations.remove(&id);
    }
}

/// Short, sortable by start time, and a valid label value and name part: `<ms hex>-<random>`.
fn new_id() -> String {
    format!("{:x}-{:04x}", now_ms(), fastrand::u16(..))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tonic::Status;

    use super::*;

    fn handle(id: &str, state: pb::SimulationState) -> (String, Arc<Handle>) {
        let handle = Handle::new(pb::Simulation {
            id: id.to_owned(),
            ..Default::default()
        });
        handle.set_state(state);
        (id.to_owned(), Arc::new(handle))
    }

    #[tokio::test]
    async fn a_cancel_answers_the_ended_simulation_or_says_it_has_not_ended() {
        let (_, stuck) = handle("0a-0001", pb::SimulationState::Running);
        let error = cancel_and_wait(&stuck, Duration::from_millis(10))
            .await
            .unwrap_err();
        assert!(stuck.cancel.is_cancelled());
        assert!(
            matches!(error, DriverError::CancelPending { .. }),
            "{error}"
        );
        assert_eq!(Status::from(error).code(), tonic::Code::DeadlineExceeded);

        let (_, ending) = handle("0b-0001", pb::SimulationState::Running);
        let run = ending.clone();
        tokio::spawn(async move {
            run.cancel.cancelled().await;
            run.set_state(pb::SimulationState::Cancelled);
        });
        let simulation = cancel_and_wait(&ending, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(simulation.state(), pb::SimulationState::Cancelled);
    }

    #[test]
    fn only_the_newest_finished_simulations_are_kept() {
        use pb::SimulationState::{Cancelled, Failed, Running, Succeeded};
        let mut simulations: BTreeMap<_, _> = [
            handle("0a-0001", Succeeded),
            handle("0b-0001", Failed),
            handle("0c-0001", Cancelled),
            handle("0d-0001", Succeeded),
            handle("0e-0001", Running),
        ]
        .into();
        forget_oldest_finished(&mut simulations, 2);
        let ids: Vec<&str> = simulations.keys().map(String::as_str).collect();
        assert_eq!(ids, ["0c-0001", "0d-0001", "0e-0001"]);

        forget_oldest_finished(&mut simulations, 0);
        let ids: Vec<&str> = simulations.keys().map(String::as_str).collect();
        assert_eq!(ids, ["0e-0001"], "a running simulation is never forgotten");
    }
}
