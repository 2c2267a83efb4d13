//! The real Karpenter with its KWOK cloud provider, built by deploy/karpenter/build.sh, run
//! against a [`ControlPlane`].
//!
//! ```no_run
//! # async fn example(control_plane: &ksim_testenv::ControlPlane) -> Result<(), ksim_testenv::Error> {
//! use ksim_testenv::Karpenter;
//! let karpenter = Karpenter::builder(control_plane).start().await?;
//! # Ok(()) }
//! ```
//!
//! `start` installs the release's CRDs (NodePool, NodeClaim, NodeOverlay, CapacityBuffer and
//! the KWOK provider's KWOKNodeClass), waits until they are served, starts the operator and
//! returns once its readiness probe answers. Karpenter's KWOK provider creates the Node objects
//! of the NodeClaims it launches itself; nothing here makes them Ready (that is a kubelet's
//! part, the pool's in a simulation). Dropping the handle kills the process.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};

use crate::{ControlPlane, Error, binaries::bin_dir, free_port, process::Process};

const VERSIONS_ENV: &str = include_str!("../../../deploy/karpenter/versions.env");
const NAME: &str = "karpenter";
const BIN_DIR_ENV: &str = "KSIM_KARPENTER_BIN_DIR";
/// Where build.sh puts the release's CRDs, beside the binary.
const CRDS_DIR: &str = "crds";
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The Karpenter release pinned in deploy/karpenter/versions.env, e.g. `v1.14.1`.
pub fn karpenter_version() -> &'static str {
    crate::binaries::pinned(VERSIONS_ENV, "KARPENTER_VERSION").unwrap_or("unknown")
}

/// The Karpenter executable and the CRDs of its release.
#[derive(Debug, Clone)]
pub struct KarpenterBinary {
    dir: PathBuf,
}

impl KarpenterBinary {
    /// `KSIM_KARPENTER_BIN_DIR` if set, otherwise the cache that build.sh fills for the
    /// pinned release.
    pub fn locate() -> Result<Self, Error> {
        let dir = bin_dir(BIN_DIR_ENV, &format!("karpenter-{}", karpenter_version()))?;
        Self::in_dir(&dir)
    }

    /// `dir/karpenter` and `dir/crds/`, which must exist.
    pub fn in_dir(dir: &Path) -> Result<Self, Error> {
        if !dir.join(NAME).is_file() || !dir.join(CRDS_DIR).is_dir() {
            return Err(Error::MissingKarpenter {
                dir: dir.to_owned(),
                version: karpenter_version().to_owned(),
            });
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(NAME)
    }

    /// The release's CRD manifests, sorted by file name.
    pub fn crd_files(&self) -> Result<Vec<PathBuf>, Error> {
        let dir = self.dir.join(CRDS_DIR);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(Error::io("cannot list", &dir))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        files.sort();
        Ok(files)
    }
}

/// Options for [`Karpenter`]; see [`Karpenter::builder`].
#[derive(Clone)]
pub struct KarpenterBuilder {
    binary: Option<KarpenterBinary>,
    client: Client,
    kubeconfig: PathBuf,
    dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    ready_timeout: Duration,
}

impl std::fmt::Debug for KarpenterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KarpenterBuilder")
            .field("binary", &self.binary)
            .field("kubeconfig", &self.kubeconfig)
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl KarpenterBuilder {
    /// Use this binary instead of [`KarpenterBinary::locate`].
    pub fn binary(mut self, binary: KarpenterBinary) -> Self {
        self.binary = Some(binary);
        self
    }

    /// An environment variable for the operator, which takes its options from flags or their
    /// variables alike (`BATCH_IDLE_DURATION`, `INSTANCE_TYPES_FILE_PATH`, ...); after the
    /// defaults, so it overrides them.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// How long the CRDs and the operator's readiness may take.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Installs the CRDs, starts the operator and waits until it is ready.
    pub async fn start(self) -> Result<Karpenter, Error> {
        let binary = match self.binary.clone() {
            Some(binary) => binary,
            None => KarpenterBinary::locate()?,
        };
        let dir = self
            .dir
            .clone()
            .ok_or_else(|| Error::InvalidArgument("the control plane is stopped".into()))?;
        let started = Instant::now();
        install_crds(&self.client, &binary, self.ready_timeout).await?;

        let health_port = free_port()?;
        let metrics_port = free_port()?;
        let mut env = vec![
            (
                "KUBECONFIG".to_owned(),
                self.kubeconfig.display().to_string(),
            ),
            // One operator, outside any cluster: no lease to win, no webhooks (the KWOK
            // provider has none).
            ("DISABLE_LEADER_ELECTION".to_owned(), "true".to_owned()),
            ("HEALTH_PROBE_PORT".to_owned(), health_port.to_string()),
            ("METRICS_PORT".to_owned(), metrics_port.to_string()),
        ];
        env.extend(self.env.iter().cloned());
        let mut process = Process::spawn_with_env(NAME, &binary.path(), &[], &env, &dir)?
            .with_url(format!("http://127.0.0.1:{metrics_port}"));

        let health = SocketAddr::from((Ipv4Addr::LOCALHOST, health_port));
        loop {
            process.check_running()?;
            let last_seen = match crate::autoscaler::http_get(health, "/readyz", 1 << 16).await {
                Ok((200, _)) => {
                    tracing::debug!(elapsed = ?started.elapsed(), pid = process.pid(), "karpenter ready");
                    return Ok(Karpenter { process });
                }
                Ok((status, body)) => format!("/readyz answered {status}: {body}"),
                Err(error) => error.to_string(),
            };
            if started.elapsed() > self.ready_timeout {
                return Err(Error::NotReady {
                    component: NAME,
                    seconds: self.ready_timeout.as_secs(),
                    log_tail: format!("(its probe: {last_seen})\n{}", process.log_tail()),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// Server-side applies the release's CRDs and waits until the apiserver serves each
/// (`Established`).
pub async fn install_crds(
    client: &Client,
    binary: &KarpenterBinary,
    timeout: Duration,
) -> Result<(), Error> {
    let mut names = Vec::new();
    for file in binary.crd_files()? {
        let yaml = std::fs::read_to_string(&file).map_err(Error::io("cannot read", &file))?;
        for object in crate::manifests::apply(client, &yaml).await? {
            names.extend(object.metadata.name);
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let started = Instant::now();
    for name in names {
        loop {
            let crd = crds.get_opt(&name).await?;
            let established = crd
                .as_ref()
                .and_then(|crd| crd.status.as_ref())
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if started.elapsed() > timeout {
                return Err(Error::NotReady {
                    component: "Karpenter's CRDs",
                    seconds: timeout.as_secs(),
                    log_tail: format!(
                        "CRD {name} is not Established: {:?}",
                        crd.and_then(|crd| crd.status)
                    ),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
    Ok(())
}

/// A running Karpenter operator; killed (by its PID) when dropped.
#[derive(Debug)]
pub struct Karpenter {
    process: Process,
}

impl Karpenter {
    /// A Karpenter for `control_plane`, with its log in the control plane's directory and the
    /// admin kubeconfig.
    pub fn builder(control_plane: &ControlPlane) -> KarpenterBuilder {
        KarpenterBuilder {
            binary: None,
            client: control_plane.client(),
            kubeconfig: control_plane.kubeconfig_path().to_owned(),
            dir: control_plane.dir().map(Path::to_owned),
            env: Vec::new(),
            // The CRDs are served within seconds; the operator starts its informers first.
            ready_timeout: Duration::from_secs(120),
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Its metrics endpoint (`http://127.0.0.1:<port>`).
    pub fn metrics_url(&self) -> Option<&str> {
        self.process.url()
    }

    /// Its log (JSON lines).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The last lines of the log, for assertion messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// An error, with the end of the log, if it has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        self.process.check_running()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_pinned_release_is_a_version() {
        assert!(
            karpenter_version().starts_with("v1."),
            "{}",
            karpenter_version()
        );
    }

    #[test]
    fn a_directory_without_the_binary_names_the_build_script() {
        let dir = tempfile::tempdir().unwrap();
        let message = KarpenterBinary::in_dir(dir.path()).unwrap_err().to_string();
        assert!(message.contains("deploy/karpenter/build.sh"), "{message}");
        assert!(message.contains(BIN_DIR_ENV), "{message}");
    }
}
