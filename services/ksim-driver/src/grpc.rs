//! `ksim.driver.v1.Driver` over a [`Driver`]: requests in, simulations out, errors mapped to
//! gRPC status codes.

use std::{pin::Pin, time::Duration};

use ksim_grpc::input::{
    TEXT_MAX, VALUE_MAX, check_configuration, check_len, check_name, check_trace_filter,
};
use ksim_proto::ksim::driver::v1 as pb;
use tokio_stream::{Stream, wrappers::ReceiverStream};
use tonic::{Request, Response, Status};

use crate::{
    cluster::{lease::LeaseError, nodepools::NodePoolError},
    driver::{Driver, DriverError},
    mesh::MeshError,
    replay::{handle::is_terminal, source::LoadError},
};

const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_secs(1);
const MIN_WATCH_INTERVAL: Duration = Duration::from_millis(100);
/// How long CancelSimulation waits for the cleanup before answering with the state so far.
const CANCEL_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct DriverService {
    driver: Driver,
}

impl DriverService {
    pub fn new(driver: Driver) -> Self {
        Self { driver }
    }

    pub fn into_server(self) -> pb::driver_server::DriverServer<Self> {
        pb::driver_server::DriverServer::new(self)
    }
}

impl From<DriverError> for Status {
    fn from(error: DriverError) -> Self {
        let message = error.to_string();
        match error {
            DriverError::Spec(_)
            | DriverError::Load(LoadError::Malformed(_) | LoadError::BadUsage(_)) => {
                Status::invalid_argument(message)
            }
            DriverError::Load(LoadError::Export(MeshError::Call { status, .. })) => {
                Status::new(status.code(), message)
            }
            DriverError::Load(LoadError::Export(MeshError::NotConfigured(_))) => {
                Status::failed_precondition(message)
            }
            DriverError::Load(_) => Status::unavailable(message),
            DriverError::Busy(_) | DriverError::Lease(LeaseError::Held { .. }) => {
                Status::failed_precondition(message)
            }
            DriverError::NotFound(_) => Status::not_found(message),
            // The environment's code: INVALID_ARGUMENT for what the binaries refuse.
            DriverError::Configuration { code, .. } => Status::new(code, message),
            DriverError::NoEnvironment | DriverError::DisruptionsWithoutEnvironment => {
                Status::failed_precondition(message)
            }
            DriverError::CancelPending { .. } => Status::deadline_exceeded(message),
            DriverError::NodePool(error) if error.is_invalid() => Status::invalid_argument(message),
            DriverError::NodePool(NodePoolError::NoKarpenter) => {
                Status::failed_precondition(message)
            }
            DriverError::NodePool(NodePoolError::Exists { .. }) => Status::already_exists(message),
            DriverError::NodePool(_) => Status::unavailable(message),
            DriverError::Lease(LeaseError::Api { .. }) | DriverError::Namespace { .. } => {
                Status::unavailable(message)
            }
        }
    }
}

fn required_id(id: &str) -> Result<&str, Status> {
    check_name("id", id)?;
    if id.is_empty() {
        Err(Status::invalid_argument("id: is required"))
    } else {
        Ok(id)
    }
}

/// A spec's strings within bounds, before any is parsed, looked up or echoed.
fn check_spec(spec: &pb::SimulationSpec) -> Result<(), Status> {
    use pb::{node_group_spec::Kind, simulation_spec::TraceSource};
    check_name("spec.namespace_prefix", &spec.namespace_prefix)?;
    if let Some(TraceSource::StoredTrace(stored)) = &spec.trace_source {
        check_name("spec.stored_trace.trace_id", &stored.trace_id)?;
        if let Some(filter) = &stored.filter {
            check_trace_filter("spec.stored_trace.filter", filter)?;
        }
    }
    for group in &spec.node_groups {
        match &group.kind {
            Some(Kind::PoolManaged(group)) => {
                check_name("spec.node_groups.pool_managed.name", &group.name)?;
                check_len(
                    "spec.node_groups.pool_managed.node_skeleton_yaml",
                    &group.node_skeleton_yaml,
                    TEXT_MAX,
                )?;
            }
            Some(Kind::Deployment(group)) => {
                check_name("spec.node_groups.deployment.name", &group.name)?;
                check_len(
                    "spec.node_groups.deployment.node_skeleton_yaml",
                    &group.node_skeleton_yaml,
                    TEXT_MAX,
                )?;
            }
            Some(Kind::Karpenter(group)) => check_len(
                "spec.node_groups.karpenter.nodepool_yaml",
                &group.nodepool_yaml,
                TEXT_MAX,
            )?,
            None => {}
        }
    }
    if let Some(configuration) = &spec.configuration {
        check_configuration("spec.configuration", configuration)?;
    }
    if let Some(provisioning) = &spec.provisioning {
        check_len("spec.provisioning.source", &provisioning.source, VALUE_MAX)?;
        check_len("spec.provisioning.yaml", &provisioning.yaml, TEXT_MAX)?;
    }
    Ok(())
}

type ProgressStream =
    Pin<Box<dyn Stream<Item = Result<pb::WatchSimulationResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::driver_server::Driver for DriverService {
    async fn start_simulation(
        &self,
        request: Request<pb::StartSimulationRequest>,
    ) -> Result<Response<pb::StartSimulationResponse>, Status> {
        let spec = request.into_inner().spec;
        if let Some(spec) = &spec {
            check_spec(spec)?;
        }
        let simulation = self.driver.start(spec).await?;
        Ok(Response::new(pb::StartSimulationResponse {
            simulation: Some(simulation),
        }))
    }

    type WatchSimulationStream = ProgressStream;

    async fn watch_simulation(
        &self,
        request: Request<pb::WatchSimulationRequest>,
    ) -> Result<Response<Self::WatchSimulationStream>, Status> {
        let request = request.into_inner();
        let handle = self.driver.get(required_id(&request.id)?)?;
        let interval = match request.interval {
            None => DEFAULT_WATCH_INTERVAL,
            Some(interval) => Duration::try_from(interval)
                .map_err(|_| Status::invalid_argument("interval: must not be negative"))?
                .max(MIN_WATCH_INTERVAL),
        };
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut changes = handle.subscribe();
            loop {
                let simulation = handle.simulation();
                let mut progress = simulation.progress.clone().unwrap_or_default();
                progress.state = simulation.state;
                let message = pb::WatchSimulationResponse {
                    progress: Some(progress),
                };
                if sender.send(Ok(message)).await.is_err() || is_terminal(simulation.state()) {
                    return;
                }
                // Wake for the next tick, or at once when the state becomes terminal.
                let _ = tokio::time::timeout(
                    interval,
                    changes.wait_for(|simulation| is_terminal(simulation.state())),
                )
                .await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn get_simulation(
        &self,
        request: Request<pb::GetSimulationRequest>,
    ) -> Result<Response<pb::GetSimulationResponse>, Status> {
        let handle = self.driver.get(required_id(&request.get_ref().id)?)?;
        Ok(Response::new(pb::GetSimulationResponse {
            simulation: Some(handle.simulation()),
        }))
    }

    async fn cancel_simulation(
        &self,
        request: Request<pb::CancelSimulationRequest>,
    ) -> Result<Response<pb::CancelSimulationResponse>, Status> {
        let id = required_id(&request.get_ref().id)?;
        let simulation = self.driver.cancel(id, CANCEL_WAIT).await?;
        Ok(Response::new(pb::CancelSimulationResponse {
            simulation: Some(simulation),
        }))
    }

    async fn get_report(
        &self,
        request: Request<pb::GetReportRequest>,
    ) -> Result<Response<pb::GetReportResponse>, Status> {
        let report = self.driver.report(required_id(&request.get_ref().id)?)?;
        Ok(Response::new(pb::GetReportResponse {
            report: Some(report),
        }))
    }
}
