//! The tracer as its users run it: the real binary, against a real control plane, spoken to
//! over gRPC. Killed with SIGKILL where a test needs a crash.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use ksim_proto::ksim::trace::v1::{self as pb, trace_store_client::TraceStoreClient};
use ksim_testenv::{free_port, wait};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

pub const DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct Tracer {
    child: Child,
    pub address: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
}

/// How many times the tracer is started before a taken port fails the test. Its ports are free
/// when chosen but bound only after it opens its watches, whose connections take local ports
/// from the same range.
const START_ATTEMPTS: u32 = 3;

impl Tracer {
    /// Starts the tracer and waits until its gRPC API answers; on fresh ports again if it
    /// exits because one was taken meanwhile.
    pub async fn start(
        kubeconfig: &Path,
        data_dir: &Path,
        config: Option<&str>,
        extra: &[&str],
    ) -> Tracer {
        let mut attempt = 1;
        loop {
            let mut tracer = Self::spawn(kubeconfig, data_dir, config, extra);
            match tracer.answering().await {
                Ok(()) => return tracer,
                Err(_)
                    if attempt < START_ATTEMPTS
                        && tracer.log_tail().contains("Address already in use") =>
                {
                    attempt += 1;
                }
                Err(error) => panic!("{error}\n{}", tracer.log_tail()),
            }
        }
    }

    fn spawn(kubeconfig: &Path, data_dir: &Path, config: Option<&str>, extra: &[&str]) -> Tracer {
        let port = free_port().unwrap();
        let admin = free_port().unwrap();
        let log_path = data_dir.with_extension(format!("{port}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_ksim-tracer"));
        command
            .arg(format!("--grpc-addr=127.0.0.1:{port}"))
            .arg(format!("--admin-addr=127.0.0.1:{admin}"))
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
        Tracer {
            child: command.spawn().unwrap(),
            address: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_owned(),
            log_path,
        }
    }

    /// Waits until the gRPC API answers; an error at once if the tracer exits first.
    async fn answering(&mut self) -> Result<(), String> {
        let started = tokio::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("the tracer exited ({status})"));
            }
            let answered = match TraceStoreClient::connect(self.address.clone()).await {
                Ok(mut client) => client
                    .stats(pb::StatsRequest::default())
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error.to_string()),
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
