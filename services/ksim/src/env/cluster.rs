//! The cluster a local environment simulates on: the embedded control plane, or an existing
//! cluster named by a kubeconfig and context.

use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Namespace},
    jiff::{SignedDuration, Timestamp},
};
use ksim_testenv::ControlPlane;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// The driver's single-simulation Lease (ksim-driver's `cluster::lease`), in its namespace.
const DRIVER_LEASE: &str = "ksim-driver";

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

/// The holder of a lease that has not expired at `now`, as the driver reads it.
pub fn live_holder(lease: &Lease, now: Timestamp) -> Option<String> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
    let expires = renewed
        .checked_add(SignedDuration::from_secs(seconds))
        .ok()?;
    (expires > now).then_some(holder)
}

/// The live holder of the driver's Lease in `namespace` and its root; `None` when no
/// simulation holds it.
pub async fn lease_holder(client: &Client, namespace: &str) -> anyhow::Result<Option<LeaseHolder>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt(DRIVER_LEASE)
        .await
        .with_context(|| format!("reading the driver's lease {namespace}/{DRIVER_LEASE}"))?;
    let Some(simulation) = lease.and_then(|lease| live_holder(&lease, Timestamp::now())) else {
        return Ok(None);
    };
    let gvk = GroupVersionKind::gvk("ksim.io", "v1alpha1", "SimulationRoot");
    let roots: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "simulationroots"),
    );
    let name = format!("sim-{simulation}");
    let root = match roots.get_opt(&name).await {
        Ok(root) => root,
        // No CRD yet: no simulation has created a root.
        Err(error) if ksim_kube::is_not_found(&error) => None,
        Err(error) => {
            return Err(error).with_context(|| format!("reading simulation root {name}"));
        }
    };
    let root = match root {
        None => RootState::Absent,
        Some(root) if root.metadata.deletion_timestamp.is_some() => RootState::Deleting,
        Some(_) => RootState::Live,
    };
    Ok(Some(LeaseHolder { simulation, root }))
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

    #[test]
    fn a_lease_is_held_until_its_duration_has_passed_since_renewal() {
        use k8s_openapi::{
            api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime,
        };
        let renewed: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let lease = |holder: Option<&str>| Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(15),
                ..Default::default()
            }),
        };
        let at = |s: i64| renewed.checked_add(SignedDuration::from_secs(s)).unwrap();
        assert_eq!(
            live_holder(&lease(Some("sim-a")), at(14)),
            Some("sim-a".to_owned())
        );
        assert_eq!(live_holder(&lease(Some("sim-a")), at(15)), None);
        // Released: the driver writes no holder.
        assert_eq!(live_holder(&lease(None), at(1)), None);
        assert_eq!(live_holder(&lease(Some("")), at(1)), None);
    }

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
