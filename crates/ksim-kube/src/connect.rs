//! Connecting like kubectl: an explicit kubeconfig and context, else in-cluster, else the
//! default kubeconfig.

use std::path::{Path, PathBuf};

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading kubeconfig {path}: {source}")]
    ReadKubeconfig {
        path: PathBuf,
        source: KubeconfigError,
    },
    #[error("using the kubeconfig: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    #[error("finding a cluster (in-cluster or kubeconfig): {0}")]
    Infer(#[from] InferConfigError),
    #[error("connecting to the Kubernetes API: {0}")]
    Client(#[from] kube::Error),
}

pub struct Connected {
    pub client: kube::Client,
    /// The same cluster without kube's default retries of 429, 503 and 504: for the eviction
    /// API, whose 429 is an answer (a PodDisruptionBudget refused), which the default retries
    /// would hold back for minutes.
    pub unretried: kube::Client,
    pub cluster_url: http::Uri,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("cluster_url", &self.cluster_url)
            .finish_non_exhaustive()
    }
}

pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Connected, ConnectError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|source| ConnectError::ReadKubeconfig {
                    path: path.to_owned(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    let cluster_url = config.cluster_url.clone();
    let mut without_retries = config.clone();
    without_retries.default_retry = false;
    let unretried = kube::Client::try_from(without_retries)?;
    let client = kube::Client::try_from(config)?;
    Ok(Connected {
        client,
        unretried,
        cluster_url,
    })
}
