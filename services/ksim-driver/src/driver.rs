//! The driver's operations, independent of gRPC: start, look up, cancel and report on
//! simulations. One simulation runs at a time: in this process (checked first, so a second
//! request gets a clear answer at once) and per cluster (the Lease).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use k8s_openapi::api::core::v1::Namespace;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::time::now_ms;
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use tracing::Instrument;

use crate::{
    cluster::lease::{LeaseError, SimulationLease},
    domain::{
        report,
        spec::{SimulationSpec, SpecError},
    },
    replay::{
        handle::{Handle, is_terminal},
        run::{RunContext, run},
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
    #[error("preparing namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        source: kube::Error,
    },
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
        let trace = load(&spec.source, &self.ctx.mesh).await?;
        let id = new_id();
        self.ensure_namespace().await?;
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
            spec: Some(spec.echo.clone()),
            progress: Some(pb::SimulationProgress {
                state: pb::SimulationState::Pending.into(),
                events_total: trace.events.len() as u64,
                ..Default::default()
            }),
            ..Default::default()
        }));
        // Two requests may both have passed the check above; the lease let only one through
        // per cluster, and this keeps it to one per process too.
        if let Err(running) = self.register(&handle) {
            let _ = lease.release().await;
            return Err(DriverError::Busy(running));
        }
        tracing::info!(
            simulation = id,
            events = trace.events.len(),
            "simulation accepted"
        );
        let span = tracing::info_span!("simulation", simulation.id = %id);
        tokio::spawn(run(self.ctx.clone(), handle.clone(), spec, trace, lease).instrument(span));
        Ok(handle.simulation())
    }

    pub fn get(&self, id: &str) -> Result<Arc<Handle>, DriverError> {
        self.lock()
            .get(id)
            .cloned()
            .ok_or_else(|| DriverError::NotFound(id.to_owned()))
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
            Some(live) => report::build(&live.observations(id, false)).to_proto(),
            None => pb::Report {
                simulation_id: id.to_owned(),
                ..Default::default()
            },
        })
    }

    fn register(&self, handle: &Arc<Handle>) -> Result<(), String> {
        let mut simulations = self.lock();
        if let Some(running) = running_in(&simulations) {
            return Err(running);
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

    async fn ensure_namespace(&self) -> Result<(), DriverError> {
        let namespace = &self.ctx.settings.namespace;
        let api: Api<Namespace> = Api::all(self.ctx.client.clone());
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(source) => Err(DriverError::Namespace {
                namespace: namespace.clone(),
                source,
            }),
        }
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
