//! The tracer as a service: its flags, and the one way to start it, used by `main`, tests,
//! benchmarks and anything embedding a tracer.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use ksim_grpc::{GrpcServer, Running, ServeArgs};
use ksim_kube::{Connected, KubeArgs};
use tokio::{
    sync::mpsc,
    task::{JoinHandle, JoinSet},
};

use crate::{
    config::TracerArgs, grpc::TraceStoreService, imports::Imports, store::Store, usage, watch,
};

/// The ksim tracer store: a durable, bounded record of a cluster's object changes.
#[derive(Debug, clap::Parser)]
#[command(name = "ksim-tracer", version)]
pub struct Args {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub tracer: TracerArgs,
}

impl Args {
    /// The whole process: logs, recover the log, connect, record and serve until SIGTERM.
    pub async fn run(self) -> anyhow::Result<()> {
        let _telemetry = ksim_grpc::init_telemetry("ksim-tracer", &self.serve.log)?;
        // The log is opened (and recovered) before connecting: a broken data directory is
        // reported as such even when the cluster is unreachable.
        let store = open_store(&self.tracer).await?;
        let connected = self.kube.connect().await?;
        let recording = Recording::start(store, connected, &self.tracer)?;
        let served = recording.server(self.serve).serve().await;
        // Whatever the fsync policy, a clean stop loses nothing.
        recording.sync()?;
        served?;
        Ok(())
    }
}

/// A tracer recording and serving from this process. [`Service::shutdown`] syncs the log;
/// dropping it stops the server and the watches without waiting.
#[derive(Debug)]
pub struct Service {
    pub recording: Recording,
    pub server: Running,
}

impl Service {
    pub fn url(&self) -> String {
        self.server.grpc_url()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.recording.store
    }

    /// Stops serving, then syncs the log: nothing recorded is lost.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let served = self.server.shutdown().await;
        self.recording.sync()?;
        Ok(served?)
    }
}

/// Records the cluster of `connected` into the log under `tracer.data_dir`, and serves it.
pub async fn start(
    connected: Connected,
    tracer: &TracerArgs,
    serve: ServeArgs,
) -> anyhow::Result<Service> {
    let store = open_store(tracer).await?;
    let recording = Recording::start(store, connected, tracer)?;
    let server = recording.server(serve).spawn().await?;
    Ok(Service { recording, server })
}

/// A recording under way: the store, its import directory, and the tasks that fill and
/// maintain it (the recording rules themselves are [`crate::domain::recorder::Recorder`]).
#[derive(Debug)]
pub struct Recording {
    pub store: Arc<Store>,
    imports: Imports,
    origin: String,
    /// Exports spill here: the data directory has room for the log, unlike a tmpfs /tmp.
    data_dir: PathBuf,
    tasks: Vec<JoinHandle<()>>,
    _watches: JoinSet<()>,
}

impl Recording {
    fn start(store: Arc<Store>, connected: Connected, tracer: &TracerArgs) -> anyhow::Result<Self> {
        let imports = Imports::new(
            tracer.data_dir.join("imports"),
            tracer.max_import_bytes,
            format!("ksim-tracer {}", env!("CARGO_PKG_VERSION")),
        )?;
        let (observations, receiver) = mpsc::channel(4096);
        let mut tasks = vec![
            store.clone().run_recorder(receiver),
            store.clone().run_maintenance(tracer.fsync_interval),
        ];
        if let Some(interval) = tracer.usage_interval() {
            tasks.push(usage::spawn(
                connected.client.clone(),
                interval,
                store.usage().clone(),
                observations.clone(),
            ));
        }
        let watches = watch::spawn(
            connected.client,
            store.kinds(),
            observations,
            store.statuses().clone(),
            tracer.retry_interval,
        );
        Ok(Self {
            store,
            imports,
            origin: connected.cluster_url.to_string(),
            data_dir: tracer.data_dir.clone(),
            tasks,
            _watches: watches,
        })
    }

    fn server(&self, serve: ServeArgs) -> GrpcServer {
        GrpcServer::new(serve).add_service(
            TraceStoreService::new(
                self.store.clone(),
                self.imports.clone(),
                self.origin.clone(),
            )
            .spill_dir(self.data_dir.clone())
            .into_server(),
        )
    }

    fn sync(&self) -> anyhow::Result<()> {
        self.store.sync().context("syncing the log on shutdown")
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn open_store(tracer: &TracerArgs) -> anyhow::Result<Arc<Store>> {
    let config = tracer.tracer_config()?;
    let log_config = tracer.log_config();
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
    Ok(store)
}
