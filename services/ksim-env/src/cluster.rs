//! The cluster a local environment simulates on: the embedded control plane, or an existing
//! cluster named by a kubeconfig and context.

use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use ksim_localenv::ControlPlane;
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// The simulation holding the driver's Lease, and where its root stands: what the environment
/// can verify of a run from the apiserver, whoever calls it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub simulation: String,
    pub root: RootState,
}

/// The `SimulationRoot` the driver creates after it applied the run's configuration, and
/// deletes (foreground, waited for) before its cleanup restores the environment's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootState {
    Absent,
    Live,
    Deleting,
}

/// The live holder of the driver's Lease in `namespace` and its root; `None` when no
/// simulation holds it.
pub async fn lease_holder(client: &Client, namespace: &str) -> anyhow::Result<Option<LeaseHolder>> {
    let running = ksim_kube::simulation::running(client, namespace)
        .await
        .with_context(|| {
            format!(
                "reading the driver's lease {namespace}/{} and its simulation's root",
                ksim_kube::simulation::DRIVER_LEASE
            )
        })?;
    Ok(running.map(|running| LeaseHolder {
        simulation: running.simulation,
        root: match running.root {
            None => RootState::Absent,
            Some(root) if root.metadata.deletion_timestamp.is_some() => RootState::Deleting,
            Some(_) => RootState::Live,
        },
    }))
}

#[derive(Debug)]
pub enum Cluster {
    Embedded(Box<ControlPlane>),
    /// `kubeconfig` is the file every service is given; with a `--context` it is a copy in the
    /// state directory whose current context is that one, so that the state file names one
    /// file that reaches the cluster (`export KUBECONFIG=...`).
    Existing {
        kubeconfig: PathBuf,
    },
}

impl Cluster {
    /// The embedded control plane when neither is given, else the existing cluster.
    pub async fn start(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
        state_dir: &Path,
    ) -> anyhow::Result<Self> {
        if kubeconfig.is_none() && context.is_none() {
            let control_plane = ControlPlane::start()
                .await
                .context("starting the local control plane")?;
            return Ok(Self::Embedded(Box::new(control_plane)));
        }
        let kubeconfig = match context {
            None => kubeconfig
                .map(Path::to_owned)
                .context("no kubeconfig given")?,
            Some(context) => pin_context(kubeconfig, context, state_dir)?,
        };
        Ok(Self::Existing { kubeconfig })
    }

    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            Self::Embedded(control_plane) => control_plane.kubeconfig_path(),
            Self::Existing { kubeconfig } => kubeconfig,
        }
    }

    pub fn control_plane(&self) -> Option<&ControlPlane> {
        match self {
            Self::Embedded(control_plane) => Some(control_plane),
            Self::Existing { .. } => None,
        }
    }

    pub fn control_plane_mut(&mut self) -> Option<&mut ControlPlane> {
        match self {
            Self::Embedded(control_plane) => Some(control_plane),
            Self::Existing { .. } => None,
        }
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        if let Self::Embedded(control_plane) = self {
            return Ok(control_plane.client());
        }
        let path = self.kubeconfig_path();
        let kubeconfig =
            Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using {}", path.display()))?;
        Ok(Client::try_from(config)?)
    }

    /// Creates `name` unless it exists.
    pub async fn ensure_namespace(&self, name: &str) -> anyhow::Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client().await?);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
            Err(error) => Err(error).with_context(|| format!("creating namespace {name}")),
        }
    }
}

/// Writes `<state_dir>/kubeconfig` (mode 0600: it holds credentials): the given kubeconfig (or
/// KUBECONFIG / ~/.kube/config) with `context` as its current context.
fn pin_context(
    kubeconfig: Option<&Path>,
    context: &str,
    state_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let mut config =
        match kubeconfig {
            Some(path) => Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?,
            None => Kubeconfig::read()
                .context("reading the kubeconfig (KUBECONFIG or ~/.kube/config)")?,
        };
    if !config.contexts.iter().any(|named| named.name == context) {
        let known: Vec<&str> = config
            .contexts
            .iter()
            .map(|named| named.name.as_str())
            .collect();
        anyhow::bail!(
            "no context {context:?} in the kubeconfig (it has: {})",
            known.join(", ")
        );
    }
    config.current_context = Some(context.to_owned());
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let path = state_dir.join("kubeconfig");
    // JSON is YAML, so every kubeconfig reader takes it.
    let text = serde_json::to_string_pretty(&config)?;
    write_private(&path, text.as_bytes())?;
    Ok(path)
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: secret}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u}
"#;

    #[test]
    fn context_is_pinned_in_a_private_copy() {
        let dir = tempfile::tempdir().unwrap();
        let original = dir.path().join("config");
        std::fs::write(&original, KUBECONFIG).unwrap();
        let state = dir.path().join("state");
        let pinned = pin_context(Some(&original), "b", &state).unwrap();
        let config = Kubeconfig::read_from(&pinned).unwrap();
        assert_eq!(config.current_context.as_deref(), Some("b"));
        assert_eq!(config.clusters.len(), 2);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&pinned).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let error = pin_context(Some(&original), "c", &state).unwrap_err();
        assert!(error.to_string().contains("no context \"c\""), "{error}");
    }
}
