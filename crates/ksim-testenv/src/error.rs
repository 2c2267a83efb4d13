use std::path::PathBuf;

/// Why a local control plane or cluster-autoscaler could not be started or reached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "control-plane binary {binary} not found in {dir}: run deploy/control-plane/build.sh \
         or point KSIM_CONTROL_PLANE_BIN_DIR at a directory holding etcd, kube-apiserver, \
         kube-controller-manager and kube-scheduler"
    )]
    MissingBinary { binary: &'static str, dir: PathBuf },
    #[error(
        "cluster-autoscaler binary not found at {path}: run deploy/cluster-autoscaler/build.sh \
         or point KSIM_CLUSTER_AUTOSCALER_BIN_DIR at a directory holding cluster-autoscaler"
    )]
    MissingClusterAutoscaler { path: PathBuf },
    #[error("cannot find a cache directory: set KSIM_CACHE_DIR or HOME")]
    NoCacheDir,
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
