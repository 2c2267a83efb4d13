//! The driver's settings, from flags or the environment.

use std::{num::NonZeroUsize, path::PathBuf, time::Duration};

use crate::mesh::{Mesh, MeshError};

#[derive(Debug, Clone, clap::Args)]
pub struct DriverArgs {
    /// URL of the virtual node pool's gRPC API.
    #[arg(long, env = "KSIM_POOL_URL")]
    pub pool_url: String,

    /// URL of the tracer store's gRPC API; needed for simulations of stored traces.
    #[arg(long, env = "KSIM_TRACER_URL")]
    pub tracer_url: Option<String>,

    /// URL of the cloud provider's gRPC API; when set, the driver checks that
    /// cluster-autoscaler is offered the simulation's Deployment-backed groups.
    #[arg(long, env = "KSIM_CLOUDPROV_URL")]
    pub cloudprov_url: Option<String>,

    /// URL of the local environment's API (`ksim up`): it runs the scheduler and
    /// cluster-autoscaler with a simulation's configuration, and CA's durations divided by the
    /// replay speed. Without it, a simulation with a configuration is refused.
    #[arg(long, env = "KSIM_ENVIRONMENT_URL")]
    pub environment_url: Option<String>,

    /// Namespace of the driver's Lease and of seat Deployments (the pool's and the cloud
    /// provider's namespace).
    #[arg(long, env = "KSIM_NAMESPACE", default_value = "ksim-system")]
    pub namespace: String,

    /// Directory the reports are written to, one subdirectory per simulation.
    #[arg(long, env = "KSIM_REPORT_DIR", default_value = "ksim-reports")]
    pub report_dir: PathBuf,

    /// How long the single-simulation Lease stays valid without renewal.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,

    /// Requests in flight to the apiserver at once (each object's operations run one at a
    /// time, in trace order; different objects' in parallel). Flat out, the tuned local
    /// control plane completes about a quarter more of a replay's writes a second with 128 in
    /// flight than with 32 (docs/benchmarks-archive.md, "Replay at the ceiling").
    #[arg(long, default_value = "128")]
    pub max_in_flight: NonZeroUsize,

    /// Finished simulations remembered for GetSimulation and GetReport; older ones are
    /// forgotten (their report files stay in the report directory).
    #[arg(long, default_value_t = 32)]
    pub keep_finished: usize,
}

impl DriverArgs {
    pub fn mesh(&self) -> Result<Mesh, MeshError> {
        Mesh::new(
            &self.pool_url,
            self.tracer_url.as_deref(),
            self.cloudprov_url.as_deref(),
            self.environment_url.as_deref(),
        )
    }

    pub fn settings(&self) -> Settings {
        Settings {
            namespace: self.namespace.clone(),
            report_dir: self.report_dir.clone(),
            lease_duration: self.lease_duration,
            max_in_flight: self.max_in_flight,
            keep_finished: self.keep_finished,
            ready_deadline: Duration::from_secs(120),
            cleanup_deadline: Duration::from_secs(180),
        }
    }
}

/// What a simulation run needs to know of the driver's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub report_dir: PathBuf,
    pub lease_duration: Duration,
    /// Requests in flight at once.
    pub max_in_flight: NonZeroUsize,
    /// Finished simulations kept in memory.
    pub keep_finished: usize,
    /// How long node groups get to become Ready before the simulation fails.
    pub ready_deadline: Duration,
    /// How long garbage collection gets to remove the simulation's objects; for its
    /// namespaces, how long it may go without removing a namespace or a pod.
    pub cleanup_deadline: Duration,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        driver: DriverArgs,
    }

    #[test]
    fn requests_in_flight_default_to_128_and_zero_is_refused() {
        let parsed = Flags::try_parse_from(["driver", "--pool-url", "http://pool"]).unwrap();
        assert_eq!(parsed.driver.settings().max_in_flight.get(), 128);

        let error = Flags::try_parse_from([
            "driver",
            "--pool-url",
            "http://pool",
            "--max-in-flight",
            "0",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("--max-in-flight"), "{error}");
        assert!(error.contains("zero"), "{error}");
    }
}
