//! The real cluster-autoscaler (CA), built by deploy/cluster-autoscaler/build.sh with only the
//! `externalgrpc` cloud provider, run against a [`ControlPlane`] for tests:
//!
//! ```no_run
//! # async fn example(control_plane: &ksim_localenv::ControlPlane) -> Result<(), ksim_localenv::Error> {
//! use ksim_localenv::autoscaler::{CloudConfig, ClusterAutoscaler};
//! let ca = ClusterAutoscaler::builder(control_plane, CloudConfig::plaintext("127.0.0.1:50051"))
//!     .arg("--scale-down-unneeded-time=10s")
//!     .start()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! Dropping it kills the process. Like the control plane, its directory (cloud-config, log) is
//! kept and printed when the thread is panicking or `KSIM_KEEP_TESTENV` is set.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use ksim_experiment::autoscaler::{
    AutoscalerFlag, AutoscalerFlags, FlagLayers, SIMULATION_FLAGS, defaults_in_help, flags_in_help,
    run_flags,
};
use tempfile::TempDir;

use crate::{
    ControlPlane, Error,
    binaries::{bin_dir, cached_bin_dir},
    ports::free_port,
    process::Process,
};

const VERSIONS_ENV: &str = include_str!("../../../deploy/cluster-autoscaler/versions.env");
const NAME: &str = "cluster-autoscaler";
const BIN_DIR_ENV: &str = "KSIM_CLUSTER_AUTOSCALER_BIN_DIR";
const POLL_INTERVAL: Duration = Duration::from_millis(200);
// Every request goes to loopback; the bound only keeps a wedged CA from hanging a test.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// CA's own default for `grpc_timeout`.
pub const DEFAULT_GRPC_TIMEOUT: Duration = Duration::from_secs(5);

/// The CA release pinned in deploy/cluster-autoscaler/versions.env, e.g. `1.35.2`.
pub fn cluster_autoscaler_version() -> &'static str {
    pinned("CLUSTER_AUTOSCALER_VERSION").unwrap_or("unknown")
}

/// The Go module version of the pinned release (a pseudo-version: CA's tags are not semver).
pub fn cluster_autoscaler_module_version() -> &'static str {
    pinned(&release_key(cluster_autoscaler_version(), "MODULE_VERSION")).unwrap_or("unknown")
}

/// The releases deploy/test.sh builds and the version tests run against, pinned release first.
pub fn tested_cluster_autoscaler_versions() -> Vec<&'static str> {
    pinned("CLUSTER_AUTOSCALER_TESTED_VERSIONS")
        .map(|versions| versions.split_whitespace().collect())
        .unwrap_or_default()
}

/// versions.env's key for a fact of one release: `1.34.5` -> `CLUSTER_AUTOSCALER_1_34_5_<fact>`.
fn release_key(version: &str, fact: &str) -> String {
    format!("CLUSTER_AUTOSCALER_{}_{fact}", version.replace('.', "_"))
}

fn pinned(key: &str) -> Option<&'static str> {
    crate::binaries::pinned(VERSIONS_ENV, key)
}

/// The cluster-autoscaler executable.
#[derive(Debug, Clone)]
pub struct ClusterAutoscalerBinary {
    path: PathBuf,
}

impl ClusterAutoscalerBinary {
    /// The pinned release: `KSIM_CLUSTER_AUTOSCALER_BIN_DIR` if set, otherwise the cache that
    /// build.sh fills.
    pub fn locate() -> Result<Self, Error> {
        Self::locate_release(cluster_autoscaler_version())
    }

    /// Release `version` (e.g. `1.34.5`) as `deploy/cluster-autoscaler/build.sh VERSION` caches
    /// it. `KSIM_CLUSTER_AUTOSCALER_BIN_DIR` stands in for the pinned release only.
    pub fn locate_release(version: &str) -> Result<Self, Error> {
        let cached = format!("cluster-autoscaler-{version}");
        let dir = if version == cluster_autoscaler_version() {
            bin_dir(BIN_DIR_ENV, &cached)?
        } else {
            cached_bin_dir(&cached)?
        };
        Self::in_dir(&dir).map_err(|error| match error {
            Error::MissingClusterAutoscaler { path, .. } => Error::MissingClusterAutoscaler {
                path,
                version: version.to_owned(),
            },
            other => other,
        })
    }

    /// `dir/cluster-autoscaler`, which must exist.
    pub fn in_dir(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(NAME);
        if !path.is_file() {
            return Err(Error::MissingClusterAutoscaler {
                path,
                version: cluster_autoscaler_version().to_owned(),
            });
        }
        Ok(Self { path })
    }

    /// Any executable, unchecked: a stand-in for tests of this crate.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The flag names this binary knows, as its `--help` lists them: the judge of whether a
    /// user's flag exists in this release.
    pub fn flags(&self) -> Result<BTreeSet<String>, Error> {
        let help = self.help()?;
        let flags = flags_in_help(&help);
        if flags.is_empty() {
            return Err(
                Error::io("lists no flags in its --help", self.path.clone())(
                    std::io::Error::other(help.chars().take(200).collect::<String>()),
                ),
            );
        }
        Ok(flags)
    }

    /// The default of each flag that has one, as its `--help` says.
    pub fn defaults(&self) -> Result<BTreeMap<String, String>, Error> {
        Ok(defaults_in_help(&self.help()?))
    }

    fn help(&self) -> Result<String, Error> {
        let output = std::process::Command::new(&self.path)
            .arg("--help")
            .output()
            .map_err(Error::io("cannot run", self.path.clone()))?;
        // Go's flag package prints the help to stderr; either way, both are read.
        Ok(
            (String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr))
                .into_owned(),
        )
    }
}

/// The client certificate CA presents to the provider, and the CA that signed the provider's
/// serving certificate. CA only speaks mutual TLS or plaintext, never server-only TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub cacert: PathBuf,
}

/// CA's `--cloud-config` for the externalgrpc provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudConfig {
    /// `host:port` of the provider. With TLS, CA checks the server certificate against `host`.
    pub address: String,
    pub tls: Option<ClientTls>,
    /// The deadline of every call CA makes to the provider.
    pub grpc_timeout: Duration,
}

impl CloudConfig {
    /// Plaintext (h2c) to `address`, with CA's default timeout.
    pub fn plaintext(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            tls: None,
            grpc_timeout: DEFAULT_GRPC_TIMEOUT,
        }
    }

    /// Mutual TLS to `address`.
    pub fn mutual_tls(address: impl Into<String>, tls: ClientTls) -> Self {
        Self {
            tls: Some(tls),
            ..Self::plaintext(address)
        }
    }

    /// The YAML CA reads. Every value is a double-quoted scalar, so paths with spaces or colons
    /// stay strings.
    pub fn to_yaml(&self) -> String {
        let mut yaml = format!("address: {}\n", yaml_quote(&self.address));
        if let Some(tls) = &self.tls {
            for (key, path) in [
                ("cert", &tls.cert),
                ("key", &tls.key),
                ("cacert", &tls.cacert),
            ] {
                yaml.push_str(&format!(
                    "{key}: {}\n",
                    yaml_quote(&path.display().to_string())
                ));
            }
        }
        yaml.push_str(&format!(
            "grpc_timeout: {}\n",
            yaml_quote(&go_duration(self.grpc_timeout))
        ));
        yaml
    }
}

/// A YAML double-quoted scalar (also a JSON string).
fn yaml_quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A duration in the syntax of Go's `time.ParseDuration`, exact to the nanosecond.
fn go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos.is_multiple_of(1_000_000_000) {
        format!("{}s", nanos / 1_000_000_000)
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", nanos / 1_000_000)
    } else {
        format!("{nanos}ns")
    }
}

/// The flags a fast test or the demo runs CA with (see [`ClusterAutoscalerBuilder::fast`]), each
/// one a run may set, in recorded time. CA's production defaults wait minutes between
/// decisions; a test wants them in seconds. Never what a user's replay runs with unasked.
pub const FAST_FLAGS: &[&str] = &[
    "scan-interval=1s",
    "scale-down-delay-after-add=0s",
    "scale-down-delay-after-delete=0s",
    "scale-down-delay-after-failure=1s",
    "scale-down-unneeded-time=5s",
    "scale-down-unready-time=5s",
    "max-node-provision-time=2m",
    // Virtual nodes run no real pods worth protecting: let every node be a scale-down candidate.
    "skip-nodes-with-local-storage=false",
    "skip-nodes-with-system-pods=false",
    "v=4",
];

/// [`FAST_FLAGS`] as flags.
pub fn fast_flags() -> AutoscalerFlags {
    let flags = FAST_FLAGS
        .iter()
        .filter_map(|arg| arg.parse::<AutoscalerFlag>().ok())
        .collect();
    AutoscalerFlags { flags }
}

/// What every CA started here runs with besides where it connects: the externalgrpc provider,
/// and the flags ksim sets differently from production
/// ([`ksim_experiment::autoscaler::SIMULATION_FLAGS`]).
fn base_flags() -> Vec<String> {
    std::iter::once("--cloud-provider=externalgrpc".to_owned())
        .chain(
            SIMULATION_FLAGS
                .iter()
                .map(|flag| format!("--{}={}", flag.name, flag.value)),
        )
        .collect()
}

/// Options for [`ClusterAutoscaler`]; see [`ClusterAutoscaler::builder`].
#[derive(Debug, Clone)]
pub struct ClusterAutoscalerBuilder {
    binary: Option<ClusterAutoscalerBinary>,
    kubeconfig: PathBuf,
    cloud_config: CloudConfig,
    args: Vec<String>,
    /// [`FAST_FLAGS`] under the args.
    fast: bool,
    ready_timeout: Duration,
    speed: f64,
    /// The binary's own flag defaults, read when it starts at a speed other than 1x.
    binary_defaults: BTreeMap<String, String>,
}

impl ClusterAutoscalerBuilder {
    /// A CA for the cluster `kubeconfig` points at (any cluster, not only a [`ControlPlane`]).
    pub fn new(kubeconfig: impl Into<PathBuf>, cloud_config: CloudConfig) -> Self {
        Self {
            binary: None,
            kubeconfig: kubeconfig.into(),
            cloud_config,
            args: Vec::new(),
            fast: false,
            // CA serves its health endpoint before it talks to anyone; a minute is generous.
            ready_timeout: Duration::from_secs(60),
            speed: 1.0,
            binary_defaults: BTreeMap::new(),
        }
    }

    /// The replay speed CA runs at: every flag that measures time in the simulated cluster,
    /// the defaults' and [`Self::arg`]'s alike, is divided by it (see
    /// [`ksim_experiment::autoscaler`]), so `--scale-down-unneeded-time=2m` at 10x runs as
    /// `12s`; so are the binary's own defaults of those flags, passed explicitly.
    pub fn speed(mut self, speed: f64) -> Self {
        self.speed = speed;
        self
    }

    /// CA with [`FAST_FLAGS`] (under [`Self::arg`]s) rather than its own defaults: decisions
    /// in seconds, every node a scale-down candidate.
    pub fn fast(mut self) -> Self {
        self.fast = true;
        self
    }

    /// Use this binary instead of [`ClusterAutoscalerBinary::locate`].
    pub fn binary(mut self, binary: ClusterAutoscalerBinary) -> Self {
        self.binary = Some(binary);
        self
    }

    /// A CA flag as `--name=value` (or `--name` alone). It replaces the default flag of the same
    /// name, including `--address`, `--kubeconfig` and `--cloud-config`; repeatable flags such
    /// as `--nodes` may be given several times.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// How long CA may take to answer on its health endpoint.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// The command line for a CA that serves diagnostics on `address` and reads its
    /// cloud-config from `cloud_config`: the base flags (and the fast ones if asked), less those
    /// overridden, then [`Self::arg`]s, then the binary's own defaults the speed changes.
    pub fn command_line(&self, address: &str, cloud_config: &Path) -> Vec<String> {
        let mut defaults = base_flags();
        if self.fast {
            defaults.extend(FAST_FLAGS.iter().map(|flag| format!("--{flag}")));
        }
        defaults.push(format!("--cloud-config={}", cloud_config.display()));
        defaults.push(format!("--kubeconfig={}", self.kubeconfig.display()));
        defaults.push(format!("--address={address}"));
        let overridden: Vec<&str> = self.args.iter().map(|arg| flag_name(arg)).collect();
        let mut args: Vec<String> = defaults
            .into_iter()
            .filter(|default| !overridden.contains(&flag_name(default)))
            .chain(self.args.iter().cloned())
            .map(|arg| self.at_speed(arg))
            .collect();
        let binary = run_flags(&FlagLayers::default(), &self.binary_defaults, self.speed);
        for (flag, _) in binary {
            // CA's own value, unless the speed changes it.
            if flag.dilated() && !args.iter().any(|arg| flag_name(arg) == flag.as_run.name) {
                args.push(flag.as_run.to_string());
            }
        }
        args
    }

    /// `arg` as CA runs it at the builder's speed; flags that are not `--name=value` as they
    /// are. The builder's caller is trusted: a run's flags were checked when parsed.
    fn at_speed(&self, arg: String) -> String {
        match AutoscalerFlag::of_environment(&arg).map(|flag| flag.at_speed(self.speed)) {
            Ok(run) if run.dilated() => run.as_run.to_string(),
            _ => arg,
        }
    }

    /// Writes the cloud-config, starts CA and waits until its health endpoint answers. On
    /// failure the process is killed and its directory kept and named in the error.
    pub async fn start(mut self) -> Result<ClusterAutoscaler, Error> {
        let binary = match self.binary.clone() {
            Some(binary) => binary,
            None => ClusterAutoscalerBinary::locate()?,
        };
        if self.speed != 1.0 {
            self.binary_defaults = binary.defaults()?;
        }
        let dir = tempfile::Builder::new()
            .prefix("ksim-cluster-autoscaler-")
            .tempdir()
            .map_err(Error::io(
                "cannot create a directory in",
                std::env::temp_dir(),
            ))?;
        match self.start_in(&binary, dir.path()).await {
            Ok((process, address, cloud_config, args)) => Ok(ClusterAutoscaler {
                dir: Some(dir),
                process,
                address,
                cloud_config,
                args,
            }),
            Err(source) => Err(Error::AutoscalerStart {
                dir: dir.keep(),
                source: Box::new(source),
            }),
        }
    }

    async fn start_in(
        &self,
        binary: &ClusterAutoscalerBinary,
        dir: &Path,
    ) -> Result<(Process, SocketAddr, PathBuf, Vec<String>), Error> {
        let cloud_config = dir.join("cloud-config.yaml");
        std::fs::write(&cloud_config, self.cloud_config.to_yaml())
            .map_err(Error::io("cannot write", &cloud_config))?;
        // A port of its own, so CAs of parallel tests do not fight over CA's default :8085.
        let default_address = format!("{}:{}", Ipv4Addr::LOCALHOST, free_port()?);
        let args = self.command_line(&default_address, &cloud_config);
        let address = diagnostics_address(&args)?;
        let mut process = Process::spawn(NAME, binary.path(), &args, dir)?;
        let started = Instant::now();
        loop {
            process.check_running()?;
            if matches!(
                http_get(address, "/health-check", 1 << 16).await,
                Ok((200, _))
            ) {
                tracing::debug!(elapsed = ?started.elapsed(), pid = process.pid(), "cluster-autoscaler ready");
                return Ok((process, address, cloud_config, args));
            }
            if started.elapsed() > self.ready_timeout {
                return Err(Error::NotReady {
                    component: NAME,
                    seconds: self.ready_timeout.as_secs(),
                    log_tail: process.log_tail(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// The name of a `--name=value` flag; klog's single-dash `-v=4` counts as `v` too.
fn flag_name(arg: &str) -> &str {
    let name = arg.split_once('=').map_or(arg, |(name, _)| name);
    name.trim_start_matches('-')
}

/// Where the effective `--address` makes CA serve `/metrics` and `/health-check`. An empty
/// host (CA's `:8085`) listens everywhere, loopback included.
fn diagnostics_address(args: &[String]) -> Result<SocketAddr, Error> {
    let value = args
        .iter()
        .rev()
        .find_map(|arg| arg.strip_prefix("--address="))
        .ok_or_else(|| Error::InvalidArgument("no --address=host:port".to_owned()))?;
    let invalid = || Error::InvalidArgument(format!("--address={value} is not host:port"));
    let (host, port) = value.rsplit_once(':').ok_or_else(invalid)?;
    let port: u16 = port.parse().map_err(|_| invalid())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host {
        "" | "0.0.0.0" | "localhost" => Ipv4Addr::LOCALHOST.into(),
        host => host.parse().map_err(|_| invalid())?,
    };
    Ok(SocketAddr::new(ip, port))
}

/// A running cluster-autoscaler, killed (by its PID) when dropped.
#[derive(Debug)]
pub struct ClusterAutoscaler {
    // Declared first so it is killed before the directory with its log is removed.
    process: Process,
    dir: Option<TempDir>,
    address: SocketAddr,
    cloud_config: PathBuf,
    args: Vec<String>,
}

impl ClusterAutoscaler {
    /// A CA for `control_plane` (through its admin kubeconfig) and the provider in `cloud_config`.
    pub fn builder(
        control_plane: &ControlPlane,
        cloud_config: CloudConfig,
    ) -> ClusterAutoscalerBuilder {
        ClusterAutoscalerBuilder::new(control_plane.kubeconfig_path(), cloud_config)
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Where CA serves `/metrics` and `/health-check`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn metrics_url(&self) -> String {
        format!("http://{}/metrics", self.address)
    }

    pub fn health_url(&self) -> String {
        format!("http://{}/health-check", self.address)
    }

    /// The command line CA was started with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    pub fn cloud_config_path(&self) -> &Path {
        &self.cloud_config
    }

    /// CA's stdout and stderr (klog).
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The directory holding the cloud-config and the log.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(TempDir::path)
    }

    /// An error, with the end of the log, if CA has exited.
    pub fn check_running(&mut self) -> Result<(), Error> {
        self.process.check_running()
    }

    /// CA's exit status, once it has exited: for a supervisor.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.process.exited()
    }

    /// Keeps CA's directory (its log, its cloud-config) after the drop, and says where: the
    /// post-mortem of a CA that died.
    pub fn keep_dir(&mut self) -> Option<PathBuf> {
        self.dir.take().map(TempDir::keep)
    }

    /// Whether CA has logged `needle` so far, e.g. `"Error on gRPC call Refresh"`.
    pub fn log_contains(&self, needle: &str) -> bool {
        std::fs::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).contains(needle))
            .unwrap_or(false)
    }

    /// The last lines of the log, for assertion messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }

    /// Status and body of `GET path` on CA's diagnostics address.
    pub async fn get(&self, path: &str) -> Result<(u16, String), Error> {
        http_get(self.address, path, usize::MAX).await
    }

    /// CA's Prometheus metrics text, refused when over `max_bytes`: for a reader that must
    /// bound what it holds.
    pub async fn metrics_bounded(&self, max_bytes: usize) -> Result<String, Error> {
        metrics_at(self.address, max_bytes).await
    }

    /// CA's Prometheus metrics text.
    pub async fn metrics(&self) -> Result<String, Error> {
        match self.get("/metrics").await? {
            (200, body) => Ok(body),
            (status, _) => Err(Error::Http {
                url: self.metrics_url(),
                reason: format!("status {status}"),
            }),
        }
    }
}

impl Drop for ClusterAutoscaler {
    fn drop(&mut self) {
        // The fields drop after this: the process is killed, then an unkept directory removed.
        let keep = std::thread::panicking() || std::env::var_os("KSIM_KEEP_TESTENV").is_some();
        if keep && let Some(dir) = self.dir.take() {
            eprintln!(
                "ksim-localenv: cluster-autoscaler files kept in {}",
                dir.keep().display()
            );
        }
    }
}

/// The Prometheus metrics text of the CA serving diagnostics on `address`, refused when over
/// `max_bytes`: for a reader that must not hold a lock on the [`ClusterAutoscaler`] meanwhile.
pub async fn metrics_at(address: SocketAddr, max_bytes: usize) -> Result<String, Error> {
    match http_get(address, "/metrics", max_bytes).await? {
        (200, body) => Ok(body),
        (status, _) => Err(Error::Http {
            url: format!("http://{address}/metrics"),
            reason: format!("status {status}"),
        }),
    }
}

/// Status and body (at most `max_bytes`, else an error) of `GET path` on CA's plain-HTTP
/// diagnostics server (or another component's plain-HTTP endpoint).
pub(crate) async fn http_get(
    address: SocketAddr,
    path: &str,
    max_bytes: usize,
) -> Result<(u16, String), Error> {
    use http_body_util::BodyExt;

    let url = format!("http://{address}{path}");
    let fail = |reason: String| Error::Http {
        url: url.clone(),
        reason,
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<String>();
    let request = http::Request::get(&url)
        .body(String::new())
        .map_err(|e| fail(e.to_string()))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = response.status().as_u16();
        let body = http_body_util::Limited::new(response.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|e| fail(format!("{e} (at most {max_bytes} bytes are read)")))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {} s", HTTP_TIMEOUT.as_secs())))?
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn builder() -> ClusterAutoscalerBuilder {
        ClusterAutoscalerBuilder::new("/k/admin.kubeconfig", CloudConfig::plaintext("p:1"))
    }

    /// A server on a loopback port that answers one request for `path` with `response`.
    async fn answer_once(path: &'static str, response: &'static [u8]) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let n = socket.read(&mut request).await.unwrap();
            let request = String::from_utf8_lossy(&request[..n]).into_owned();
            assert!(request.starts_with(&format!("GET {path} ")), "{request}");
            socket.write_all(response).await.unwrap();
        });
        address
    }

    #[tokio::test]
    async fn http_get_returns_status_and_body_and_names_the_url_on_failure() {
        let address = answer_once(
            "/health-check",
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\n\r\nbusy",
        )
        .await;
        assert_eq!(
            http_get(address, "/health-check", 4).await.unwrap(),
            (503, "busy".to_owned())
        );
        let err = http_get(address, "/metrics", usize::MAX).await.unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("http://{address}/metrics")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_an_error_saying_so() {
        let address = answer_once(
            "/metrics",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n0123456789",
        )
        .await;
        let err = http_get(address, "/metrics", 4).await.unwrap_err();
        assert!(err.to_string().contains("at most 4 bytes"), "{err}");
    }

    #[test]
    fn the_pinned_release_and_module_version_are_read() {
        let version = cluster_autoscaler_version();
        assert_eq!(version.split('.').count(), 3, "{version}");
        assert!(version.split('.').all(|part| part.parse::<u32>().is_ok()));
        assert!(
            cluster_autoscaler_module_version().starts_with("v0.0.0-"),
            "{}",
            cluster_autoscaler_module_version()
        );
    }

    #[test]
    fn every_tested_release_is_pinned_with_its_sums() {
        let tested = tested_cluster_autoscaler_versions();
        assert_eq!(
            tested.first(),
            Some(&cluster_autoscaler_version()),
            "{tested:?}"
        );
        for version in tested {
            for fact in ["MODULE_VERSION", "ARCHIVE_SHA256", "TREE_SHA256"] {
                let key = release_key(version, fact);
                assert!(pinned(&key).is_some_and(|v| !v.is_empty()), "{key} missing");
            }
            let sum = pinned(&release_key(version, "ARCHIVE_SHA256")).unwrap_or_default();
            assert!(
                sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()),
                "{sum}"
            );
        }
    }

    #[test]
    fn ca_and_the_control_plane_share_a_kubernetes_minor() {
        let ca_minor = cluster_autoscaler_version().split('.').nth(1);
        let k8s_minor = crate::kubernetes_version().split('.').nth(1);
        assert_eq!(ca_minor, k8s_minor);
    }

    #[test]
    fn a_missing_binary_names_the_build_script() {
        let dir = tempfile::tempdir().unwrap();
        let err = ClusterAutoscalerBinary::in_dir(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("deploy/cluster-autoscaler/build.sh"),
            "{message}"
        );
        assert!(message.contains(BIN_DIR_ENV), "{message}");
        // Another release names itself, for its own build command.
        let err = ClusterAutoscalerBinary::locate_release("0.0.1").unwrap_err();
        assert!(err.to_string().contains("build.sh 0.0.1"), "{err}");
    }

    #[test]
    fn plaintext_cloud_config_renders_address_and_timeout_only() {
        let config = CloudConfig {
            grpc_timeout: Duration::from_millis(1500),
            ..CloudConfig::plaintext("127.0.0.1:50051")
        };
        assert_eq!(
            config.to_yaml(),
            "address: \"127.0.0.1:50051\"\ngrpc_timeout: \"1500ms\"\n"
        );
    }

    #[test]
    fn tls_cloud_config_parses_back_to_the_keys_ca_reads() {
        let tls = ClientTls {
            cert: PathBuf::from("/pki/ca client.crt"),
            key: PathBuf::from("/pki/client.key"),
            cacert: PathBuf::from("C:\\pki\\\"ca\".crt"),
        };
        let config = CloudConfig::mutual_tls("localhost:8086", tls);
        let parsed: BTreeMap<String, String> = serde_saphyr::from_str(&config.to_yaml()).unwrap();
        let expected: BTreeMap<String, String> = [
            ("address", "localhost:8086"),
            ("cert", "/pki/ca client.crt"),
            ("key", "/pki/client.key"),
            ("cacert", "C:\\pki\\\"ca\".crt"),
            ("grpc_timeout", "5s"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn durations_use_go_syntax() {
        assert_eq!(go_duration(Duration::from_secs(5)), "5s");
        assert_eq!(go_duration(Duration::from_secs(120)), "120s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_nanos(1_500)), "1500ns");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn at_a_speed_the_durations_in_simulated_time_are_divided() {
        let args = builder()
            .fast()
            .arg("--scale-down-unneeded-time=2m")
            .arg("--expander=price")
            .speed(10.0)
            .command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        for expected in [
            "--scale-down-unneeded-time=12s",
            // The fast 1 s scan interval, at its floor.
            "--scan-interval=100ms",
            "--max-node-provision-time=12s",
            "--expander=price",
            "--address=127.0.0.1:9000",
            "--cloud-config=/d/cloud.yaml",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
    }

    #[test]
    fn the_default_command_line_leaves_cas_own_defaults_alone() {
        let args = builder().command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        assert_eq!(
            args,
            [
                "--cloud-provider=externalgrpc",
                "--leader-elect=false",
                "--cloud-config=/d/cloud.yaml",
                "--kubeconfig=/k/admin.kubeconfig",
                "--address=127.0.0.1:9000",
            ]
        );
        let fast = builder()
            .fast()
            .command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        assert!(fast.iter().any(|a| a == "--scan-interval=1s"), "{fast:?}");
        assert_eq!(fast.len(), args.len() + FAST_FLAGS.len());
        assert_eq!(fast_flags().flags.len(), FAST_FLAGS.len());
    }

    #[test]
    fn at_a_speed_cas_own_defaults_run_divided() {
        let mut builder = builder().speed(60.0);
        builder.binary_defaults = BTreeMap::from([
            ("scale-down-unneeded-time".to_owned(), "10m0s".to_owned()),
            ("expander".to_owned(), "random".to_owned()),
        ]);
        let args = builder.command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        assert!(
            args.iter().any(|a| a == "--scale-down-unneeded-time=10s"),
            "{args:?}"
        );
        // Not changed by the speed: left to the binary.
        assert!(
            !args.iter().any(|a| a.starts_with("--expander")),
            "{args:?}"
        );
    }

    #[test]
    fn a_later_flag_replaces_the_default_of_the_same_name() {
        let args = builder()
            .fast()
            .arg("--scan-interval=10s")
            .arg("-v=2")
            .arg("--nodes=0:5:a")
            .arg("--nodes=0:5:b")
            .command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        let named =
            |name: &str| -> Vec<&String> { args.iter().filter(|a| flag_name(a) == name).collect() };
        assert_eq!(named("scan-interval"), ["--scan-interval=10s"]);
        // The fast preset's --v=4 is replaced by klog's single-dash spelling too.
        assert_eq!(named("v"), ["-v=2"]);
        assert_eq!(named("nodes"), ["--nodes=0:5:a", "--nodes=0:5:b"]);
        assert_eq!(named("leader-elect"), ["--leader-elect=false"]);
    }

    #[test]
    fn the_diagnostics_address_follows_an_overridden_address_flag() {
        let args = builder()
            .arg("--address=:8085")
            .command_line("127.0.0.1:9000", Path::new("/d/cloud.yaml"));
        assert_eq!(
            diagnostics_address(&args).unwrap(),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 8085))
        );
        let err = diagnostics_address(&["--address=nowhere".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("not host:port"), "{err}");
    }
}
