//! The driver as a service: its flags, and the one way to start it, used by `main`, tests,
//! benchmarks and anything embedding a driver.

use anyhow::Context;
use ksim_grpc::{GrpcServer, Running, ServeArgs};
use ksim_kube::KubeArgs;

use crate::{
    config::{DriverArgs, Settings},
    driver::Driver,
    grpc::DriverService,
    mesh::Mesh,
    metrics::ReplayMetrics,
    replay::context::RunContext,
};

/// The ksim driver: replays a recorded trace on a simulated cluster and reports how it behaved.
#[derive(Debug, clap::Parser)]
#[command(name = "ksim-driver", version)]
pub struct Args {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub driver: DriverArgs,
}

impl Args {
    /// The whole process: logs, connect, end what a killed predecessor left, serve until SIGTERM.
    pub async fn run(self) -> anyhow::Result<()> {
        let _telemetry = ksim_grpc::init_telemetry("ksim-driver", &self.serve.log)?;
        let connected = self
            .kube
            .connect()
            .await
            .context("connecting to the simulated cluster")?;
        let mesh = self.driver.mesh()?;
        let clients = Clients {
            client: connected.client,
            evictions: connected.unretried,
        };
        let (driver, metrics) = new_driver(clients, mesh, self.driver.settings()).await;
        server(driver, &metrics, self.serve).serve().await?;
        Ok(())
    }
}

/// A driver serving its API from this process; dropping it stops the server (a run in
/// progress is ended by the next driver, as after a crash).
#[derive(Debug)]
pub struct Service {
    pub driver: Driver,
    pub server: Running,
}

impl Service {
    pub fn url(&self) -> String {
        self.server.grpc_url()
    }
}

/// The driver's clients of the simulated cluster.
#[derive(Clone)]
#[allow(missing_debug_implementations)] // kube::Client has no Debug.
pub struct Clients {
    pub client: kube::Client,
    /// For the eviction API: without kube's default retries, so a PodDisruptionBudget's 429
    /// comes back at once ([`ksim_kube::Connected::unretried`]).
    pub evictions: kube::Client,
}

/// Starts a driver acting on the clients' cluster through the services of `mesh`.
pub async fn start(
    clients: Clients,
    mesh: Mesh,
    settings: Settings,
    serve: ServeArgs,
) -> anyhow::Result<Service> {
    let (driver, metrics) = new_driver(clients, mesh, settings).await;
    let server = server(driver.clone(), &metrics, serve).spawn().await?;
    Ok(Service { driver, server })
}

/// A driver, with the recovery of a previous process's simulations under way: they are
/// listed first (so the API answers for them from its first request), then ended meanwhile.
async fn new_driver(clients: Clients, mesh: Mesh, settings: Settings) -> (Driver, ReplayMetrics) {
    let metrics = ReplayMetrics::default();
    let driver = Driver::new(RunContext {
        client: clients.client,
        evictions: clients.evictions,
        mesh,
        settings,
        metrics: metrics.clone(),
    });
    // Bounded: an apiserver that does not answer must not keep the API from being served.
    let adopted = tokio::time::timeout(ADOPT_TIMEOUT, driver.adopt_left())
        .await
        .unwrap_or_else(|_| {
            tracing::warn!("listing the simulations a previous driver left timed out");
            Vec::new()
        });
    // Simulations a previous driver process left (killed mid-run) are ended and cleaned up.
    let recovering = driver.clone();
    tokio::spawn(async move {
        let ended = recovering.end_adopted(adopted).await;
        if !ended.is_empty() {
            tracing::warn!(?ended, "ended the simulations a previous driver left");
        }
    });
    (driver, metrics)
}

/// How long listing the simulations a previous driver left may delay serving.
const ADOPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn server(driver: Driver, metrics: &ReplayMetrics, serve: ServeArgs) -> GrpcServer {
    let mut server = GrpcServer::new(serve);
    metrics.register(server.metrics_registry());
    server.add_service(DriverService::new(driver).into_server())
}
