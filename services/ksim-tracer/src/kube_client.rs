//! Connecting like kubectl: an explicit kubeconfig and context, else in-cluster, else the
//! default kubeconfig.

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub struct Connected {
    pub client: kube::Client,
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
) -> anyhow::Result<Connected> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("finding a cluster (in-cluster or kubeconfig)")?,
    };
    let cluster_url = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("connecting to the Kubernetes API")?;
    Ok(Connected {
        client,
        cluster_url,
    })
}
