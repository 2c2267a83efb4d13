//! `ksim-tracer`: records a real cluster's object changes and serves them as traces. Wiring only.

use anyhow::Context;
use clap::Parser;
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_tracer::{
    config::TracerArgs, grpc::TraceStoreService, imports::Imports, store::Store, watch,
};
use tokio::sync::mpsc;

/// The ksim tracer store: a durable, bounded record of a cluster's object changes.
#[derive(Debug, Parser)]
#[command(name = "ksim-tracer", version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
    #[command(flatten)]
    tracer: TracerArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = ksim_grpc::init_telemetry("ksim-tracer", &args.serve.log)?;
    let config = args.tracer.tracer_config()?;
    let log_config = args.tracer.log_config();
    let kinds = config.tracked_kinds.clone();
    let (store, recovery) =
        tokio::task::spawn_blocking(move || Store::open(log_config, kinds, config.redact_env))
            .await?
            .context("opening the tracer's log")?;
    tracing::info!(
        segments = recovery.segments,
        entries = recovery.entries,
        truncated_bytes = recovery.truncated_bytes,
        "log recovered"
    );
    for warning in &recovery.warnings {
        tracing::warn!(%warning, "log recovery");
    }
    let imports = Imports::new(
        args.tracer.data_dir.join("imports"),
        args.tracer.max_import_bytes,
        format!("ksim-tracer {}", env!("CARGO_PKG_VERSION")),
    )?;

    let client = ksim_kube::connect(
        args.tracer.kubeconfig.as_deref(),
        args.tracer.context.as_deref(),
    )
    .await?;
    let origin = client.cluster_url.to_string();
    let (observations, receiver) = mpsc::channel(4096);
    let _recorder = store.clone().run_recorder(receiver);
    let _maintenance = store.clone().run_maintenance(args.tracer.fsync_interval);
    let _watches = watch::spawn(
        client.client,
        store.kinds(),
        observations,
        store.statuses().clone(),
        args.tracer.retry_interval,
    );

    let served = GrpcServer::new(args.serve)
        .add_service(TraceStoreService::new(store.clone(), imports, origin).into_server())
        .serve()
        .await;
    // Whatever the fsync policy, a clean stop loses nothing.
    store.sync().context("syncing the log on shutdown")?;
    served?;
    Ok(())
}
