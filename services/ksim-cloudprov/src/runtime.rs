//! The provider as a service: its flags, and the one way to start it, used by `main`, tests,
//! benchmarks and anything embedding a provider.

use std::sync::Arc;

use anyhow::Context;
use ksim_grpc::{GrpcServer, Running, ServeArgs};
use ksim_kube::KubeArgs;
use tokio::task::JoinSet;

use crate::{
    apiserver::ApiCluster,
    config::ProviderArgs,
    grpc::CloudProviderService,
    index::Index,
    provider::{Provider, Settings},
    watches,
};

/// The ksim cloud provider: cluster-autoscaler scales Deployments of virtual-node seats.
#[derive(Debug, clap::Parser)]
#[command(name = "ksim-cloudprov", version)]
pub struct Args {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Check the --provider-config file and exit (0 when it can be taken) without serving:
    /// how a tool asks the provider itself to judge a configuration.
    #[arg(long)]
    pub check_config: bool,
}

impl Args {
    /// The whole process: logs, settings, connect, watch, serve until SIGTERM.
    pub async fn run(self) -> anyhow::Result<()> {
        if self.check_config {
            self.provider.settings()?;
            return Ok(());
        }
        let _telemetry = ksim_grpc::init_telemetry("ksim-cloudprov", &self.serve.log)?;
        let settings = self.provider.settings()?;
        let client = self
            .kube
            .connect()
            .await
            .context("connecting to the Kubernetes API")?
            .client;
        let watched = Watched::start(client, settings, self.provider.default_max_size);
        server(watched.provider.clone(), self.serve).serve().await?;
        Ok(())
    }
}

/// The provider and the watches that feed its index, not yet served: a test serves one
/// provider over several transports in turn.
#[derive(Debug)]
pub struct Watched {
    pub provider: Arc<Provider<ApiCluster>>,
    /// Aborted on drop.
    pub watches: JoinSet<()>,
}

impl Watched {
    /// `default_max_size` is the max size of a group whose Deployment does not set one.
    pub fn start(client: kube::Client, settings: Settings, default_max_size: i32) -> Self {
        let index = Index::new(default_max_size);
        let watches = watches::spawn(client.clone(), index.clone());
        let provider = Arc::new(Provider::new(index, ApiCluster::new(client), settings));
        Self { provider, watches }
    }

    /// Serves the provider with `serve` from this process until the handle drops.
    pub async fn serve(&self, serve: ServeArgs) -> Result<Running, ksim_grpc::Error> {
        spawn(self.provider.clone(), serve).await
    }
}

/// A provider serving its API from this process; dropping it stops the server and the watches.
#[derive(Debug)]
pub struct Service {
    pub watched: Watched,
    pub server: Running,
}

impl Service {
    pub fn url(&self) -> String {
        self.server.grpc_url()
    }
}

pub async fn start(
    client: kube::Client,
    settings: Settings,
    default_max_size: i32,
    serve: ServeArgs,
) -> anyhow::Result<Service> {
    let watched = Watched::start(client, settings, default_max_size);
    let server = watched.serve(serve).await?;
    Ok(Service { watched, server })
}

/// Serves `provider` from this process until the handle drops.
pub async fn spawn(
    provider: Arc<Provider<ApiCluster>>,
    serve: ServeArgs,
) -> Result<Running, ksim_grpc::Error> {
    server(provider, serve).spawn().await
}

fn server(provider: Arc<Provider<ApiCluster>>, serve: ServeArgs) -> GrpcServer {
    GrpcServer::new(serve).add_service(CloudProviderService::new(provider).into_server())
}
