//! Why a local control plane, cluster-autoscaler or metrics-server could not be started or
//! reached.

use std::path::PathBuf;

/// Why a local control plane, cluster-autoscaler or metrics-server could not be started or
/// reached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "control-plane binary {binary} not found in {dir}: run deploy/control-plane/build.sh \
         or point KSIM_CONTROL_PLANE_BIN_DIR at a directory holding etcd, kube-apiserver, \
         kube-controller-manager and ksim-scheduler (and kubectl, for `ksim kubectl`)"
    )]
    MissingBinary { binary: &'static str, dir: PathBuf },
    #[error(
        "cluster-autoscaler {version} not found at {path}: run deploy/cluster-autoscaler/build.sh \
         {version} (for the pinned release, KSIM_CLUSTER_AUTOSCALER_BIN_DIR may instead name a \
         directory holding cluster-autoscaler)"
    )]
    MissingClusterAutoscaler { path: PathBuf, version: String },
    #[error(
        "metrics-server {version} not found at {path}: run deploy/metrics-server/build.sh (or \
         point KSIM_METRICS_SERVER_BIN_DIR at a directory holding metrics-server)"
    )]
    MissingMetricsServer { path: PathBuf, version: String },
    #[error(
        "Karpenter {version} not found in {dir} (its karpenter binary and crds/): run \
         deploy/karpenter/build.sh {version} (or, for the pinned release, point \
         KSIM_KARPENTER_BIN_DIR at a directory holding them)"
    )]
    MissingKarpenter { dir: PathBuf, version: String },
    #[error(
        "APIService {api_service} was not Available after {seconds} s (last seen: {last_seen}); \
         last log lines:\n{log_tail}"
    )]
    ApiServiceNotAvailable {
        api_service: &'static str,
        seconds: u64,
        last_seen: String,
        log_tail: String,
    },
    #[error("metrics-server failed to start (log: {log}): {source}")]
    MetricsServerStart {
        log: PathBuf,
        #[source]
        source: Box<Error>,
    },
    #[error("scheduler configuration {file}: kube-scheduler refuses it: {message}")]
    SchedulerConfig { file: PathBuf, message: String },
    #[error("cannot find a cache directory: set KSIM_CACHE_DIR or HOME")]
    NoCacheDir,
    #[error(
        "the Go builds still running beside the tests (lock {lock}) did not end within {minutes} \
         minutes"
    )]
    BuildsUnfinished { lock: PathBuf, minutes: u64 },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no free loopback port: {0}")]
    NoFreePort(#[source] std::io::Error),
    #[error("cannot generate certificates: {0}")]
    Pki(#[from] rcgen::Error),
    #[error("invalid manifest: {0}")]
    Manifest(String),
    #[error("cannot write kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("invalid client configuration: {0}")]
    ClientConfig(#[from] kube::config::KubeconfigError),
    #[error("{component} exited before it was ready ({status}); last log lines:\n{log_tail}")]
    Exited {
        component: &'static str,
        status: std::process::ExitStatus,
        log_tail: String,
    },
    #[error("{component} was not ready after {seconds} s; last log lines:\n{log_tail}")]
    NotReady {
        component: &'static str,
        seconds: u64,
        log_tail: String,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("GET {url} failed: {reason}")]
    Http { url: String, reason: String },
    #[error("cluster-autoscaler failed to start (files kept in {dir}): {source}")]
    AutoscalerStart {
        dir: PathBuf,
        #[source]
        source: Box<Error>,
    },
    #[error("control plane failed to start (files kept in {dir}): {source}")]
    Start {
        dir: PathBuf,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// Whether a component exited because a port it was given was taken (Go's net package
    /// says "bind: address already in use"), so a start on other ports may succeed.
    pub fn is_port_taken(&self) -> bool {
        match self {
            Self::Exited { log_tail, .. } => log_tail.contains("bind: address already in use"),
            Self::Start { source, .. } => source.is_port_taken(),
            _ => false,
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn exited(log_tail: &str) -> Error {
        Error::Exited {
            component: "kube-apiserver",
            status: std::process::ExitStatus::from_raw(256),
            log_tail: log_tail.to_owned(),
        }
    }

    #[test]
    fn only_an_exit_on_a_taken_port_counts_as_one() {
        let taken = exited(
            "E1121 failed to listen on 127.0.0.1:41234: listen tcp 127.0.0.1:41234: \
             bind: address already in use",
        );
        assert!(taken.is_port_taken());
        let wrapped = Error::Start {
            dir: PathBuf::from("/tmp/x"),
            source: Box::new(taken),
        };
        assert!(wrapped.is_port_taken());
        assert!(!exited("Error: unknown flag: --no-such-flag").is_port_taken());
        let not_ready = Error::NotReady {
            component: "etcd",
            seconds: 1,
            log_tail: "bind: address already in use".to_owned(),
        };
        assert!(!not_ready.is_port_taken());
    }
}
