//! `ksim-vnode`: serves the virtual node pool. Wiring only.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_vnode::{config::PoolConfig, grpc::VirtualNodePoolService, pool::Pool};

/// The ksim virtual node pool: virtual nodes the real control plane believes.
#[derive(Debug, Parser)]
#[command(name = "ksim-vnode", version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    pool: PoolConfig,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = ksim_grpc::init_telemetry("ksim-vnode", &args.serve.log)?;
    // KUBECONFIG, ~/.kube/config or the in-cluster service account, like kubectl.
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let pool = Arc::new(
        Pool::start(client, args.pool)
            .await
            .context("starting the node pool")?,
    );
    let mut server = GrpcServer::new(args.serve);
    pool.metrics().register(server.metrics_registry());
    server
        .add_service(VirtualNodePoolService::new(pool).into_server())
        .serve()
        .await?;
    Ok(())
}
