//! The pool as a service: its flags, and the one way to start it, used by `main`, tests,
//! benchmarks and anything embedding a pool.

use std::sync::Arc;

use anyhow::Context;
use ksim_grpc::{GrpcServer, Running, ServeArgs};
use ksim_kube::KubeArgs;

use crate::{
    config::{MetricsApiConfig, PoolConfig},
    grpc::VirtualNodePoolService,
    metrics_api,
    pool::Pool,
};

/// The ksim virtual node pool: virtual nodes the real control plane believes.
#[derive(Debug, clap::Parser)]
#[command(name = "ksim-vnode", version)]
pub struct Args {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub pool: PoolConfig,
    #[command(flatten)]
    pub metrics_api: MetricsApiConfig,
}

impl Args {
    /// The whole process: logs, connect, adopt the stored groups, serve until SIGTERM.
    pub async fn run(self) -> anyhow::Result<()> {
        let _telemetry = ksim_grpc::init_telemetry("ksim-vnode", &self.serve.log)?;
        let client = self
            .kube
            .connect()
            .await
            .context("connecting to the Kubernetes API")?
            .client;
        let (pool_name, namespace) = (self.pool.pool_name.clone(), self.pool.namespace.clone());
        let pool = start_pool(client.clone(), self.pool).await?;
        let _metrics_api = metrics_api::start_if_enabled(
            client,
            pool.clone(),
            &pool_name,
            &namespace,
            &self.metrics_api,
        )
        .await
        .context("starting the metrics API")?;
        server(&pool, self.serve).serve().await?;
        Ok(())
    }
}

/// A pool serving its API from this process; dropping it stops the server and the pool.
#[derive(Debug)]
pub struct Service {
    pub pool: Arc<Pool>,
    pub server: Running,
}

impl Service {
    pub fn url(&self) -> String {
        self.server.grpc_url()
    }
}

/// Starts a pool on `client` and serves it with `serve` (e.g. [`ServeArgs::ephemeral`]).
pub async fn start(
    client: kube::Client,
    config: PoolConfig,
    serve: ServeArgs,
) -> anyhow::Result<Service> {
    let pool = start_pool(client, config).await?;
    let server = server(&pool, serve).spawn().await?;
    Ok(Service { pool, server })
}

async fn start_pool(client: kube::Client, config: PoolConfig) -> anyhow::Result<Arc<Pool>> {
    let pool = Pool::start(client, config)
        .await
        .context("starting the node pool")?;
    Ok(Arc::new(pool))
}

fn server(pool: &Arc<Pool>, serve: ServeArgs) -> GrpcServer {
    let mut server = GrpcServer::new(serve);
    pool.metrics().register(server.metrics_registry());
    server.add_service(VirtualNodePoolService::new(pool.clone()).into_server())
}
