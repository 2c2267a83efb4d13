//! `ksim-driver`: replays traces on a simulated cluster and reports on them. Wiring only.

use anyhow::Context;
use clap::Parser;
use ksim_driver::{
    config::DriverArgs, driver::Driver, grpc::DriverService, mesh::Mesh, metrics::ReplayMetrics,
    replay::run::RunContext,
};
use ksim_grpc::{GrpcServer, ServeArgs};

/// The ksim driver: replays a recorded trace on a simulated cluster and reports how it behaved.
#[derive(Debug, Parser)]
#[command(name = "ksim-driver", version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    driver: DriverArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = ksim_grpc::init_telemetry("ksim-driver", &args.serve.log)?;
    let client = ksim_kube::connect(
        args.driver.kubeconfig.as_deref(),
        args.driver.context.as_deref(),
    )
    .await
    .context("connecting to the simulated cluster")?
    .client;
    let mesh = Mesh::new(
        &args.driver.pool_url,
        args.driver.tracer_url.as_deref(),
        args.driver.cloudprov_url.as_deref(),
    )?;
    let metrics = ReplayMetrics::default();
    let driver = Driver::new(RunContext {
        client,
        mesh,
        settings: args.driver.settings(),
        metrics: metrics.clone(),
    });
    // Simulations a previous driver process left (killed mid-run) are ended and cleaned up.
    let recovering = driver.clone();
    tokio::spawn(async move {
        let ended = recovering.recover().await;
        if !ended.is_empty() {
            tracing::warn!(?ended, "ended the simulations a previous driver left");
        }
    });
    let mut server = GrpcServer::new(args.serve);
    metrics.register(server.metrics_registry());
    server
        .add_service(DriverService::new(driver).into_server())
        .serve()
        .await?;
    Ok(())
}
