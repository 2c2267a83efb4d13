//! The tracer as its users run it: the real binary, against a real control plane, spoken to
//! over gRPC. Killed with SIGKILL where a test needs a crash.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use ksim_grpc::BoundAddrs;
use ksim_localenv::{ControlPlane, wait};
use ksim_proto::ksim::trace::v1::{self as pb, trace_store_client::TraceStoreClient};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

pub const DEADLINE: Duration = Duration::from_secs(60);

/// A number no earlier start of this process used: each start logs to a file of its own.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A real control plane and a tracer recording it with `--fsync=always`, its data in a
/// directory of its own that lives as long as the tracer.
pub struct Recorded {
    pub control_plane: ControlPlane,
    pub tracer: Tracer,
    _data: tempfile::TempDir,
}

impl Recorded {
    /// `config` is the tracer's recording rules; `None` records its default kinds.
    pub async fn start(config: Option<&str>) -> Self {
        let control_plane = ControlPlane::start().await.unwrap();
        let data = tempfile::tempdir().unwrap();
        let tracer = Tracer::start(
            control_plane.kubeconfig_path(),
            &data.path().join("tracer"),
            config,
            &["--fsync=always"],
        )
        .await;
        Self {
            control_plane,
            tracer,
            _data: data,
        }
    }
}

/// Creates namespace `name`, as its owner would before the workloads recorded in it.
pub async fn create_namespace(client: &kube::Client, name: &str) {
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    kube::Api::all(client.clone())
        .create(&kube::api::PostParams::default(), &namespace)
        .await
        .unwrap();
}

#[derive(Debug)]
pub struct Tracer {
    child: Child,
    pub address: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
}

impl Tracer {
    /// Starts the tracer on port 0 and waits until its gRPC API answers at the address it
    /// reports in its bound-addresses file.
    pub async fn start(
        kubeconfig: &Path,
        data_dir: &Path,
        config: Option<&str>,
        extra: &[&str],
    ) -> Tracer {
        let addrs_file = data_dir.with_extension("addrs");
        let _ = std::fs::remove_file(&addrs_file);
        let log_path = data_dir.with_extension(format!("{}.log", unique()));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_ksim-tracer"));
        command
            .arg("--grpc-addr=127.0.0.1:0")
            .arg("--admin-addr=127.0.0.1:0")
            .arg(format!("--bound-addrs-file={}", addrs_file.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg("--retry-interval=1s")
            .args(extra)
            .env("RUST_LOG", "info,ksim_tracer=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(config) = config {
            let path = data_dir.with_extension("config.yaml");
            std::fs::write(&path, config).unwrap();
            command.arg(format!("--config={}", path.display()));
        }
        let mut tracer = Tracer {
            child: command.spawn().unwrap(),
            address: String::new(),
            data_dir: data_dir.to_owned(),
            log_path,
        };
        if let Err(error) = tracer.answering(&addrs_file).await {
            panic!("{error}\n{}", tracer.log_tail());
        }
        tracer
    }

    /// Waits until the tracer has bound its ports and its gRPC API answers; an error at once
    /// if the tracer exits first.
    async fn answering(&mut self, addrs_file: &Path) -> Result<(), String> {
        let started = tokio::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("the tracer exited ({status})"));
            }
            if self.address.is_empty()
                && let Some(addrs) = BoundAddrs::read(addrs_file)
            {
                self.address = format!("http://{}", addrs.grpc);
            }
            let answered = if self.address.is_empty() {
                Err("its ports are not bound yet".to_owned())
            } else {
                match TraceStoreClient::connect(self.address.clone()).await {
                    Ok(mut client) => client
                        .stats(pb::StatsRequest::default())
                        .await
                        .map_err(|e| e.to_string()),
                    Err(error) => Err(error.to_string()),
                }
            };
            match answered {
                Ok(_) => return Ok(()),
                Err(last) if started.elapsed() >= DEADLINE => {
                    return Err(format!(
                        "the tracer's gRPC API did not answer in {DEADLINE:?}: {last}"
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    pub async fn client(&self) -> TraceStoreClient<Channel> {
        TraceStoreClient::connect(self.address.clone())
            .await
            .unwrap()
    }

    pub async fn tracked_kinds(&self) -> Vec<pb::TrackedKind> {
        let mut client = self.client().await;
        let listed = client
            .list_tracked_kinds(pb::ListTrackedKindsRequest {})
            .await
            .unwrap();
        listed.into_inner().kinds
    }

    /// Waits until every listed kind is watched (its initial list recorded).
    pub async fn wait_watching(&self, kinds: &[&str]) {
        let client = self.client().await;
        let kinds: Vec<String> = kinds.iter().map(|k| (*k).to_owned()).collect();
        wait::until("the tracked kinds are watched", DEADLINE, || {
            let mut client = client.clone();
            let kinds = kinds.clone();
            async move {
                let listed = client
                    .list_tracked_kinds(pb::ListTrackedKindsRequest {})
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                let watching = |kind: &String| {
                    listed.kinds.iter().any(|k| {
                        k.config
                            .as_ref()
                            .and_then(|c| c.gvk.as_ref())
                            .is_some_and(|g| g.kind == *kind)
                            && k.state() == pb::TrackedKindState::Watching
                    })
                };
                if kinds.iter().all(watching) {
                    Ok(())
                } else {
                    Err(format!("{listed:?}"))
                }
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.log_tail()));
    }

    /// The whole export as one trace, decoded.
    pub async fn export(
        &self,
        request: pb::ExportRequest,
    ) -> Result<ksim_trace::Trace, tonic::Status> {
        let bytes = self.export_bytes(request).await?;
        Ok(ksim_trace::read_trace(&bytes)
            .unwrap_or_else(|e| panic!("the export is not a valid trace: {e}")))
    }

    pub async fn export_bytes(&self, request: pb::ExportRequest) -> Result<Vec<u8>, tonic::Status> {
        let mut stream = self.client().await.export(request).await?.into_inner();
        let mut bytes = Vec::new();
        let mut summary = None;
        while let Some(chunk) = stream.message().await? {
            assert_eq!(
                chunk.offset,
                bytes.len() as u64,
                "chunks arrive in order with their offsets"
            );
            bytes.extend_from_slice(&chunk.data);
            summary = chunk.summary.or(summary);
        }
        assert!(summary.is_some(), "the last chunk carries the summary");
        Ok(bytes)
    }

    /// SIGKILL: no shutdown hook runs, nothing is flushed.
    pub async fn kill9(mut self) -> PathBuf {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
        self.data_dir.clone()
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// (timestamp, "apply"/"delete", kind, namespace/name) of every object change in a trace.
pub fn changes(trace: &ksim_trace::Trace) -> Vec<(i64, &'static str, String, String)> {
    let mut out = Vec::new();
    for event in &trace.events {
        for (verb, objects) in [("apply", &event.applied), ("delete", &event.deleted)] {
            for object in objects {
                let kind = object
                    .gvk
                    .as_ref()
                    .map(|g| g.kind.clone())
                    .unwrap_or_default();
                out.push((
                    event.timestamp_ms,
                    verb,
                    kind,
                    format!("{}/{}", object.namespace, object.name),
                ));
            }
        }
    }
    out
}

pub fn object_json(trace: &ksim_trace::Trace, kind: &str, name: &str) -> Vec<serde_json::Value> {
    trace
        .events
        .iter()
        .flat_map(|e| &e.applied)
        .filter(|o| o.name == name && o.gvk.as_ref().is_some_and(|g| g.kind == kind))
        .map(|o| serde_json::from_slice(&o.object_json).unwrap())
        .collect()
}
