//! The local environment as its clients see it: `ksim-env` (the service that starts the
//! cluster, the four ksim services and the node autoscaler, supervises them and serves
//! `ksim.env.v1.Environment`) started as a process ([`process`]), the `env.json` through which
//! commands find a running one ([`state`]), the services' places on its ports ([`services`]),
//! and what its Karpenter offers ([`instance_types`]).

pub mod instance_types;
pub mod process;
pub mod services;
pub mod state;

use std::path::{Path, PathBuf};

pub use process::{EnvironmentOptions, EnvironmentProcess};

/// Why an environment could not be found, read, started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    #[error("neither KSIM_STATE_DIR, XDG_STATE_HOME nor HOME is set")]
    NoStateDir,
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a ksim environment file: {source}")]
    NotAnEnvironmentFile {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("finding the running executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error(
        "{binary} not found next to this program (in {searched}); build it with `cargo build --workspace`"
    )]
    MissingBinary { binary: String, searched: String },
    #[error("{0}")]
    File(#[from] ksim_grpc::files::FileError),
    #[error("--instance-type {path}: {source}")]
    InstanceType {
        path: PathBuf,
        #[source]
        source: ksim_nodes::skeleton::SkeletonError,
    },
    #[error("the provider config {file}: {message}")]
    ProviderConfig { file: String, message: String },
    #[error("--instance-type: {0}")]
    InstanceTypes(#[from] ksim_nodes::karpenter::InstanceTypeError),
    #[error("the environment (ksim-env) exited before it was up ({status}); end of {log}:\n{tail}")]
    ExitedEarly {
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },
    #[error("the environment (ksim-env) was not up after {seconds} s; end of {log}:\n{tail}")]
    NotUp {
        seconds: u64,
        log: PathBuf,
        tail: String,
    },
}

impl EnvironmentError {
    /// The error of `action` ("reading", "creating") on `path`, for `map_err`.
    pub fn io<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> Self + 'a {
        move |source| Self::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}
