//! The `ksim.env.v1.Environment` API: request checks and the mapping of
//! [`ConfigurationError`] to status codes, over the environment's
//! [`Components`](crate::configuration::Components).

use std::{sync::Arc, time::SystemTime};

use ksim_localenv::autoscaler::{ClusterAutoscaler, metrics_at};
use ksim_proto::ksim::env::v1::{
    self as pb,
    environment_server::{Environment, EnvironmentServer},
};
use ksim_report::{MAX_SPEED, MIN_SPEED};
use tokio::sync::Mutex;
use tonic::{Request, Response, Status};

use crate::configuration::{
    Change, Components, ConfigurationError, MAX_METRICS_BYTES, may_change, outages_since,
    unremovable_nodes,
};

impl From<ConfigurationError> for Status {
    fn from(error: ConfigurationError) -> Self {
        match error {
            ConfigurationError::Refused(message) => Status::invalid_argument(message),
            ConfigurationError::NotNow(message) => Status::failed_precondition(message),
            ConfigurationError::Unreachable(message) => Status::unavailable(message),
            ConfigurationError::Failed(message) => Status::internal(message),
        }
    }
}

/// The `ksim.env.v1.Environment` API over an environment's components.
#[derive(Debug, Clone)]
pub struct EnvironmentService {
    components: Arc<Mutex<Components>>,
}

impl EnvironmentService {
    pub fn new(components: Arc<Mutex<Components>>) -> Self {
        Self { components }
    }

    pub fn into_server(self) -> EnvironmentServer<Self> {
        EnvironmentServer::new(self)
    }
}

/// The run, its speed within the driver's and the CLI's bounds (0 means 1): Check and Apply
/// refuse alike, before anything is judged or restarted, and no duration is divided by a speed
/// that would overflow it.
fn run_of(run: Option<pb::Run>) -> Result<pb::Run, Status> {
    let mut run = run.ok_or_else(|| Status::invalid_argument("run: is required"))?;
    // Before any flag is parsed or file written: an oversized one is refused, not echoed.
    if let Some(configuration) = &run.configuration {
        ksim_grpc::input::check_configuration("run.configuration", configuration)?;
    }
    run.speed = match run.speed {
        0.0 => 1.0,
        speed if (MIN_SPEED..=MAX_SPEED).contains(&speed) => speed,
        speed => {
            return Err(Status::invalid_argument(format!(
                "run.speed: must be between {MIN_SPEED} and {MAX_SPEED} (0 means 1), got {speed}"
            )));
        }
    };
    Ok(run)
}

#[tonic::async_trait]
impl Environment for EnvironmentService {
    async fn check_configuration(
        &self,
        request: Request<pb::CheckConfigurationRequest>,
    ) -> Result<Response<pb::CheckConfigurationResponse>, Status> {
        let run = run_of(request.into_inner().run)?;
        let mut components = self.components.lock().await;
        let setup = components.check(&run).await?;
        Ok(Response::new(pb::CheckConfigurationResponse {
            configuration: Some(components.describe(&setup)),
        }))
    }

    async fn apply_configuration(
        &self,
        request: Request<pb::ApplyConfigurationRequest>,
    ) -> Result<Response<pb::ApplyConfigurationResponse>, Status> {
        let run = run_of(request.into_inner().run)?;
        let mut components = self.components.lock().await;
        let holder = components.lease_holder().await?;
        may_change(
            Change::Apply,
            holder.as_ref(),
            components.applied_for.as_deref(),
        )
        .map_err(ConfigurationError::from)?;
        let wanted = components.check(&run).await?;
        // Before the restart: one that fails half-way was still this holder's one call.
        if let Some(holder) = holder {
            components.applied_for = Some(holder.simulation);
        }
        components.converge(wanted).await?;
        Ok(Response::new(pb::ApplyConfigurationResponse {
            configuration: Some(components.describe(&components.running)),
        }))
    }

    async fn list_autoscaler_outages(
        &self,
        request: Request<pb::ListAutoscalerOutagesRequest>,
    ) -> Result<Response<pb::ListAutoscalerOutagesResponse>, Status> {
        let since = match request.into_inner().since {
            Some(since) => Some(SystemTime::try_from(since).map_err(|error| {
                Status::invalid_argument(format!("since: not a time: {error}"))
            })?),
            None => None,
        };
        let components = self.components.lock().await;
        Ok(Response::new(pb::ListAutoscalerOutagesResponse {
            outages: outages_since(&components.outages, since),
            cloud_provider_outages: outages_since(&components.provider_outages, since),
        }))
    }

    async fn get_unremovable_nodes(
        &self,
        _request: Request<pb::GetUnremovableNodesRequest>,
    ) -> Result<Response<pb::GetUnremovableNodesResponse>, Status> {
        // Read without the lock: a slow CA must not hold up a configuration's restart.
        let address = self
            .components
            .lock()
            .await
            .autoscaler
            .as_ref()
            .map(ClusterAutoscaler::address)
            .ok_or_else(|| {
                Status::failed_precondition("no cluster-autoscaler runs in this environment")
            })?;
        let text = metrics_at(address, MAX_METRICS_BYTES)
            .await
            .map_err(|error| Status::unavailable(error.to_string()))?;
        Ok(Response::new(unremovable_nodes(&text)?))
    }

    async fn restore_defaults(
        &self,
        _request: Request<pb::RestoreDefaultsRequest>,
    ) -> Result<Response<pb::RestoreDefaultsResponse>, Status> {
        let mut components = self.components.lock().await;
        let holder = components.lease_holder().await?;
        may_change(
            Change::Restore,
            holder.as_ref(),
            components.applied_for.as_deref(),
        )
        .map_err(ConfigurationError::from)?;
        let defaults = components.defaults.clone();
        components.converge(defaults).await?;
        Ok(Response::new(pb::RestoreDefaultsResponse {
            configuration: Some(components.describe(&components.running)),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_speed_outside_the_drivers_bounds_is_refused_naming_it() {
        let run = |speed| {
            Some(pb::Run {
                speed,
                ..Default::default()
            })
        };
        for speed in [1e-300, 0.0009, 1000.5, 1e300, -1.0, f64::NAN, f64::INFINITY] {
            let status = run_of(run(speed)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{speed}");
            assert!(status.message().starts_with("run.speed: "), "{status:?}");
        }
        assert_eq!(run_of(run(0.0)).unwrap().speed, 1.0);
        for speed in [MIN_SPEED, 2.5, MAX_SPEED] {
            assert_eq!(run_of(run(speed)).unwrap().speed, speed);
        }
    }

    /// Each refusal reaches the caller with the code that says what it can do about it.
    #[test]
    fn each_configuration_error_has_its_status_code() {
        for (error, code) in [
            (
                ConfigurationError::Refused("r".into()),
                tonic::Code::InvalidArgument,
            ),
            (
                ConfigurationError::NotNow("n".into()),
                tonic::Code::FailedPrecondition,
            ),
            (
                ConfigurationError::Unreachable("u".into()),
                tonic::Code::Unavailable,
            ),
            (
                ConfigurationError::Failed("f".into()),
                tonic::Code::Internal,
            ),
        ] {
            let message = error.to_string();
            let status = Status::from(error);
            assert_eq!(status.code(), code);
            assert_eq!(status.message(), message);
        }
    }
}
