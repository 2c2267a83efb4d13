//! The connection flags of every service, flattened into each one's clap parser.

use std::path::PathBuf;

use crate::{ConnectError, Connected, connect};

/// Which cluster a service talks to, chosen like kubectl: an explicit kubeconfig and context,
/// else the in-cluster service account, else `$KUBECONFIG` or `~/.kube/config`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubeArgs {
    /// Kubeconfig of the cluster; default: in-cluster, then $KUBECONFIG or ~/.kube/config.
    #[arg(long, env = "KSIM_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "KSIM_CONTEXT")]
    pub context: Option<String>,
}

impl KubeArgs {
    /// A kubeconfig file, its current context.
    pub fn file(kubeconfig: impl Into<PathBuf>) -> Self {
        Self {
            kubeconfig: Some(kubeconfig.into()),
            context: None,
        }
    }

    pub async fn connect(&self) -> Result<Connected, ConnectError> {
        connect(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }
}
