//! The real Karpenter with its KWOK cloud provider, built by deploy/karpenter/build.sh, run
//! against a [`ControlPlane`].
//!
//! ```no_run
//! # async fn example(control_plane: &ksim_localenv::ControlPlane) -> Result<(), ksim_localenv::Error> {
//! use ksim_localenv::Karpenter;
//! let karpenter = Karpenter::builder(control_plane).start().await?;
//! # Ok(()) }
//! ```
//!
//! `start` installs the release's CRDs (NodePool, NodeClaim, NodeOverlay, CapacityBuffer and
//! the KWOK provider's KWOKNodeClass), waits until they are served, starts the operator and
//! returns once its readiness probe answers. Karpenter's KWOK provider creates the Node objects
//! of the NodeClaims it launches itself; nothing here makes them Ready (that is a kubelet's
//! part, the pool's in a simulation). Dropping the handle kills the process.
//!
//! Without [`KarpenterBuilder::instance_types`] the provider offers its built-in list (144
//! made-up types in four `test-zone-*` zones); with it, the types and prices ksim's node
//! skeletons describe ([`ksim_nodes::karpenter`]).

use std::{
    io::Write,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use ksim_nodes::karpenter::InstanceType;
use kube::{Api, Client};

use crate::{
    ControlPlane, Error,
    binaries::{bin_dir, cached_bin_dir},
    free_port,
    process::Process,
};

const VERSIONS_ENV: &str = include_str!("../../../deploy/karpenter/versions.env");
const NAME: &str = "karpenter";
const BIN_DIR_ENV: &str = "KSIM_KARPENTER_BIN_DIR";
/// Where build.sh puts the release's CRDs, beside the binary.
const CRDS_DIR: &str = "crds";
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// The KWOK provider's option naming its instance-type file.
const INSTANCE_TYPES_ENV: &str = "INSTANCE_TYPES_FILE_PATH";
/// The instance-type file written into the control plane's directory.
pub const INSTANCE_TYPES_FILE: &str = "karpenter-instance-types.json";

/// The releases deploy/test.sh builds and the version tests run against, pinned release first.
pub fn tested_karpenter_versions() -> Vec<&'static str> {
    crate::binaries::pinned(VERSIONS_ENV, "KARPENTER_TESTED_VERSIONS")
        .map(|versions| versions.split_whitespace().collect())
        .unwrap_or_default()
}

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
        Self::locate_release(karpenter_version())
    }

    /// Release `version` (e.g. `v1.13.0`) as `deploy/karpenter/build.sh VERSION` caches it.
    /// `KSIM_KARPENTER_BIN_DIR` stands in for the pinned release only.
    pub fn locate_release(version: &str) -> Result<Self, Error> {
        let cached = format!("karpenter-{version}");
        let dir = if version == karpenter_version() {
            bin_dir(BIN_DIR_ENV, &cached)?
        } else {
            cached_bin_dir(&cached)?
        };
        Self::in_release_dir(&dir, version)
    }

    /// `dir/karpenter` and `dir/crds/`, which must exist.
    pub fn in_dir(dir: &Path) -> Result<Self, Error> {
        Self::in_release_dir(dir, karpenter_version())
    }

    fn in_release_dir(dir: &Path, version: &str) -> Result<Self, Error> {
        if !dir.join(NAME).is_file() || !dir.join(CRDS_DIR).is_dir() {
            return Err(Error::MissingKarpenter {
                dir: dir.to_owned(),
                version: version.to_owned(),
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
    instance_types: Option<Vec<InstanceType>>,
    ready_timeout: Duration,
}

impl std::fmt::Debug for KarpenterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KarpenterBuilder")
            .field("binary", &self.binary)
            .field("kubeconfig", &self.kubeconfig)
            .field("env", &self.env)
            .field(
                "instance_types",
                &self
                    .instance_types
                    .as_ref()
                    .map(|types| types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>()),
            )
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

    /// The instance types the KWOK provider offers instead of its built-in list, e.g. from
    /// [`ksim_nodes::karpenter::instance_types`]: `start` writes them to
    /// `karpenter-instance-types.json` in the control plane's directory and names that file in
    /// `INSTANCE_TYPES_FILE_PATH` (an [`env`](Self::env) of the same name overrides it).
    pub fn instance_types(mut self, types: Vec<InstanceType>) -> Self {
        self.instance_types = Some(types);
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
        if let Some(types) = &self.instance_types {
            let path = write_instance_types(&dir, types)?;
            env.push((INSTANCE_TYPES_ENV.to_owned(), path.display().to_string()));
        }
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

/// Writes `types` to [`INSTANCE_TYPES_FILE`] in `dir`: into a new temporary file first, then
/// renamed over the name, so Karpenter never reads half a file and a link or device already
/// there is replaced, never written through.
fn write_instance_types(dir: &Path, types: &[InstanceType]) -> Result<PathBuf, Error> {
    let json = ksim_nodes::karpenter::to_json(types)
        .map_err(|error| Error::InvalidArgument(error.to_string()))?;
    let path = dir.join(INSTANCE_TYPES_FILE);
    let mut file =
        tempfile::NamedTempFile::new_in(dir).map_err(Error::io("cannot create a file in", dir))?;
    file.write_all(json.as_bytes())
        .map_err(Error::io("cannot write", file.path().to_owned()))?;
    file.persist(&path)
        .map_err(|error| Error::io("cannot write", &path)(error.error))?;
    Ok(path)
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
            instance_types: None,
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
    fn the_pinned_release_is_tested_first_and_every_tested_release_has_its_hash() {
        let tested = tested_karpenter_versions();
        assert_eq!(tested.first().copied(), Some(karpenter_version()));
        assert!(tested.len() >= 2, "{tested:?}");
        for version in tested {
            let key = format!("KARPENTER_{}_SUM", version.to_uppercase().replace('.', "_"));
            let sum = crate::binaries::pinned(VERSIONS_ENV, &key);
            assert!(sum.is_some_and(|sum| sum.starts_with("h1:")), "{key}");
        }
    }

    #[test]
    fn the_pinned_release_is_a_version() {
        assert!(
            karpenter_version().starts_with("v1."),
            "{}",
            karpenter_version()
        );
    }

    #[test]
    fn the_instance_types_are_written_over_whatever_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let skeleton = ksim_nodes::skeleton::NodeSkeleton::from_yaml(
            "metadata: {labels: {node.kubernetes.io/instance-type: m5.large}}\n\
             status: {capacity: {cpu: '2', memory: 8Gi}}",
        )
        .unwrap();
        let pricing = ksim_nodes::pricing::Pricing {
            instance_types: [("m5.large".to_owned(), 0.096)].into(),
            ..Default::default()
        };
        let types = ksim_nodes::karpenter::instance_types(&[skeleton], &pricing).unwrap();
        // A link where the file goes is replaced, not followed.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep").unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(INSTANCE_TYPES_FILE)).unwrap();

        let path = write_instance_types(dir.path(), &types).unwrap();
        assert_eq!(path, dir.path().join(INSTANCE_TYPES_FILE));
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        let written: Vec<InstanceType> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written, types);
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep");
    }

    #[test]
    fn a_directory_without_the_binary_names_the_build_script() {
        let dir = tempfile::tempdir().unwrap();
        let message = KarpenterBinary::in_dir(dir.path()).unwrap_err().to_string();
        assert!(message.contains("deploy/karpenter/build.sh"), "{message}");
        assert!(message.contains(BIN_DIR_ENV), "{message}");
    }
}
