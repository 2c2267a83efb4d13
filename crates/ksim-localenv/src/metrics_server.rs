//! The real metrics-server, built by deploy/metrics-server/build.sh, registered with a
//! [`ControlPlane`]'s aggregation layer so that the apiserver serves the metrics API
//! (`metrics.k8s.io/v1beta1`):
//!
//! ```no_run
//! # async fn example(control_plane: &ksim_localenv::ControlPlane) -> Result<(), ksim_localenv::Error> {
//! use ksim_localenv::MetricsServer;
//! let metrics_server = MetricsServer::builder(control_plane).start().await?;
//! # Ok(()) }
//! ```
//!
//! `start` returns once the APIService `v1beta1.metrics.k8s.io` is Available. Dropping the
//! handle kills the process; the APIService stays registered (and turns unavailable), so drop
//! it with the control plane, or call [`MetricsServer::stop`] to unregister it first.

use std::{
    net::{IpAddr, Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use ksim_kube::aggregation::{AggregatedApi, advertise_address, available};
use kube::{Api, Client};

use crate::{ControlPlane, Error, binaries::bin_dir, pki::CertificateAuthority, process::Process};

const VERSIONS_ENV: &str = include_str!("../../../deploy/metrics-server/versions.env");
const NAME: &str = "metrics-server";
const BIN_DIR_ENV: &str = "KSIM_METRICS_SERVER_BIN_DIR";
/// What the release manifest (manifests/base) names: the APIService, and the Service it routes
/// to. The apiserver checks the serving certificate against `<service>.<namespace>.svc`.
pub const API_SERVICE: &str = "v1beta1.metrics.k8s.io";
pub const NAMESPACE: &str = "kube-system";
pub const SERVICE: &str = "metrics-server";
const FIELD_MANAGER: &str = "ksim-localenv";
/// The release manifest's resolution (the binary's own default is 60 s).
pub const DEFAULT_METRIC_RESOLUTION: Duration = Duration::from_secs(15);
/// Starts tried when metrics-server finds its port taken.
const START_ATTEMPTS: u32 = 3;
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// The metrics-server release pinned in deploy/metrics-server/versions.env, e.g. `v0.8.0`.
pub fn metrics_server_version() -> &'static str {
    crate::binaries::pinned(VERSIONS_ENV, "METRICS_SERVER_VERSION").unwrap_or("unknown")
}

/// The metrics-server executable.
#[derive(Debug, Clone)]
pub struct MetricsServerBinary {
    path: PathBuf,
}

impl MetricsServerBinary {
    /// `KSIM_METRICS_SERVER_BIN_DIR` if set, otherwise the cache that build.sh fills for the
    /// pinned release.
    pub fn locate() -> Result<Self, Error> {
        let dir = bin_dir(
            BIN_DIR_ENV,
            &format!("metrics-server-{}", metrics_server_version()),
        )?;
        Self::in_dir(&dir)
    }

    /// `dir/metrics-server`, which must exist.
    pub fn in_dir(dir: &Path) -> Result<Self, Error> {
        let path = dir.join(NAME);
        if !path.is_file() {
            return Err(Error::MissingMetricsServer {
                path,
                version: metrics_server_version().to_owned(),
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
}

/// Options for [`MetricsServer`]; see [`MetricsServer::builder`].
#[derive(Clone)]
pub struct MetricsServerBuilder {
    binary: Option<MetricsServerBinary>,
    client: Client,
    kubeconfig: PathBuf,
    dir: Option<PathBuf>,
    metric_resolution: Duration,
    args: Vec<String>,
    ready_timeout: Duration,
    preferred_address_types: Vec<String>,
    kubelet_client_cert: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for MetricsServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServerBuilder")
            .field("binary", &self.binary)
            .field("kubeconfig", &self.kubeconfig)
            .field("metric_resolution", &self.metric_resolution)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl MetricsServerBuilder {
    /// Use this binary instead of [`MetricsServerBinary::locate`].
    pub fn binary(mut self, binary: MetricsServerBinary) -> Self {
        self.binary = Some(binary);
        self
    }

    /// How often metrics-server scrapes the kubelets (`--metric-resolution`; at least 10 s,
    /// and above `--kubelet-request-timeout`, 10 s unless given with [`Self::arg`]).
    pub fn metric_resolution(mut self, resolution: Duration) -> Self {
        self.metric_resolution = resolution;
        self
    }

    /// An extra metrics-server flag, e.g. `--v=4`, after the defaults.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The node address types metrics-server scrapes kubelets at, first match wins
    /// (`--kubelet-preferred-address-types`; the release manifest's `InternalIP,ExternalIP,
    /// Hostname` by default). A pool serving kubelet endpoints advertises them as ExternalIP.
    pub fn kubelet_preferred_address_types(mut self, types: &[&str]) -> Self {
        self.preferred_address_types = types.iter().map(|t| (*t).to_owned()).collect();
        self
    }

    /// The client certificate and key metrics-server presents to kubelets
    /// (`--kubelet-client-certificate`, `--kubelet-client-key`).
    pub fn kubelet_client_certificate(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.kubelet_client_cert = Some((cert.into(), key.into()));
        self
    }

    /// How long the APIService may take to become Available.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// The command line for a metrics-server serving on `ip:port` with `serving`'s certificate.
    fn command_line(&self, ip: IpAddr, port: u16, cert: &Path, key: &Path) -> Vec<String> {
        let kubeconfig = self.kubeconfig.display();
        let mut args = vec![
            // The admin identity for everything: metrics-server reads nodes and pods, the
            // extension-apiserver-authentication ConfigMap (the front proxy's CA, so no
            // --requestheader-client-ca-file), and delegates authn/z of its callers.
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            format!("--bind-address={ip}"),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-private-key-file={}", key.display()),
            // The release manifest's production flags.
            format!(
                "--kubelet-preferred-address-types={}",
                self.preferred_address_types.join(",")
            ),
            "--kubelet-use-node-status-port".to_owned(),
            format!(
                "--metric-resolution={}",
                go_duration(self.metric_resolution)
            ),
            // The kubelet endpoints of virtual nodes serve no certificate signed by a
            // kubelet CA this control plane knows (none issues kubelet serving certificates).
            "--kubelet-insecure-tls".to_owned(),
        ];
        if let Some((cert, key)) = &self.kubelet_client_cert {
            args.push(format!("--kubelet-client-certificate={}", cert.display()));
            args.push(format!("--kubelet-client-key={}", key.display()));
        }
        args.extend(self.args.iter().cloned());
        args
    }

    /// Starts metrics-server, registers it as the APIService `v1beta1.metrics.k8s.io`, and
    /// waits until the aggregator reports it Available. A port taken between choosing and
    /// binding it is tried again on another; any other failure names the log file.
    pub async fn start(self) -> Result<MetricsServer, Error> {
        let binary = match self.binary.clone() {
            Some(binary) => binary,
            None => MetricsServerBinary::locate()?,
        };
        let dir = self
            .dir
            .clone()
            .ok_or_else(|| Error::InvalidArgument("the control plane is stopped".into()))?;
        let pki_dir = dir.join("metrics-server-pki");
        std::fs::create_dir_all(&pki_dir).map_err(Error::io("cannot create", &pki_dir))?;
        let log = dir.join(format!("{NAME}.log"));
        let mut attempt = 1;
        loop {
            match self.start_once(&binary, &dir, &pki_dir).await {
                Ok(server) => return Ok(server),
                Err(source) if attempt < START_ATTEMPTS && source.is_port_taken() => {
                    tracing::warn!(attempt, %source, "metrics-server's port was taken; starting again");
                    attempt += 1;
                }
                Err(source) => {
                    return Err(Error::MetricsServerStart {
                        log,
                        source: Box::new(source),
                    });
                }
            }
        }
    }

    async fn start_once(
        &self,
        binary: &MetricsServerBinary,
        dir: &Path,
        pki_dir: &Path,
    ) -> Result<MetricsServer, Error> {
        // The apiserver refuses loopback addresses in EndpointSlices, and with aggregator
        // routing it proxies to the endpoint itself (an ExternalName Service is refused:
        // "unsupported service type"), so metrics-server serves on the machine's own address.
        let ip = advertise_address().ok_or_else(|| {
            Error::InvalidArgument(
                "metrics-server needs a non-loopback IPv4 address on an interface that is up: \
                 the apiserver proxies to it through an EndpointSlice, which refuses loopback"
                    .into(),
            )
        })?;
        let port = free_port_on(ip)?;
        let ca = CertificateAuthority::create_as(pki_dir, "ca", "ksim-metrics-server-ca")?;
        let api = aggregated_api();
        let service_dns = api.service_dns();
        let serving = ca.server_cert(
            "serving",
            &[&service_dns, "localhost"],
            &[ip, IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )?;
        let ca_pem =
            std::fs::read(ca.cert_file()).map_err(Error::io("cannot read", ca.cert_file()))?;
        let args = self.command_line(ip, port, &serving.cert, &serving.key);
        let mut process = Process::spawn(NAME, binary.path(), &args, dir)?
            .with_url(format!("https://{ip}:{port}"));
        api.register(&self.client, ip, port, &ca_pem).await?;

        let api_services: Api<APIService> = Api::all(self.client.clone());
        let started = Instant::now();
        loop {
            process.check_running()?;
            let last_seen = match api_services.get_opt(API_SERVICE).await {
                Ok(Some(api_service)) => match available(&api_service) {
                    Ok(()) => {
                        tracing::debug!(elapsed = ?started.elapsed(), pid = process.pid(), "metrics-server available");
                        return Ok(MetricsServer {
                            process,
                            client: self.client.clone(),
                            args,
                            ca_cert: ca.cert_file().to_owned(),
                        });
                    }
                    Err(seen) => seen,
                },
                Ok(None) => format!("APIService {API_SERVICE} not found"),
                Err(error) => format!("GET APIService {API_SERVICE}: {error}"),
            };
            if started.elapsed() > self.ready_timeout {
                return Err(Error::ApiServiceNotAvailable {
                    api_service: API_SERVICE,
                    seconds: self.ready_timeout.as_secs(),
                    last_seen,
                    log_tail: process.log_tail(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// A duration as Go's `time.ParseDuration` reads it: whole seconds, else milliseconds.
fn go_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}

/// A free port on `ip`, where metrics-server binds (not loopback, so `ports::free_port`'s
/// loopback check says nothing about it).
fn free_port_on(ip: IpAddr) -> Result<u16, Error> {
    TcpListener::bind((ip, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(Error::NoFreePort)
}

/// The APIService `v1beta1.metrics.k8s.io` routed to the Service kube-system/metrics-server,
/// as the release manifest names them.
fn aggregated_api() -> AggregatedApi {
    AggregatedApi {
        api_service: API_SERVICE.to_owned(),
        group: "metrics.k8s.io".to_owned(),
        version: "v1beta1".to_owned(),
        namespace: NAMESPACE.to_owned(),
        service: SERVICE.to_owned(),
        field_manager: FIELD_MANAGER.to_owned(),
        labels: Default::default(),
    }
}

/// A running metrics-server, registered as `v1beta1.metrics.k8s.io`; killed (by its PID) when
/// dropped.
pub struct MetricsServer {
    process: Process,
    client: Client,
    args: Vec<String>,
    ca_cert: PathBuf,
}

impl std::fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServer")
            .field("process", &self.process)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl MetricsServer {
    /// A metrics-server for `control_plane`, with its log and certificates in the control
    /// plane's directory and the admin kubeconfig for every connection it makes.
    pub fn builder(control_plane: &ControlPlane) -> MetricsServerBuilder {
        MetricsServerBuilder {
            binary: None,
            client: control_plane.client(),
            kubeconfig: control_plane.kubeconfig_path().to_owned(),
            dir: control_plane.dir().map(Path::to_owned),
            metric_resolution: DEFAULT_METRIC_RESOLUTION,
            args: Vec::new(),
            // It serves within seconds; the aggregator checks an APIService every few.
            ready_timeout: Duration::from_secs(120),
            preferred_address_types: ["InternalIP", "ExternalIP", "Hostname"]
                .map(str::to_owned)
                .to_vec(),
            kubelet_client_cert: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Where metrics-server itself serves (`https://<ip>:<port>`), bypassing the apiserver.
    pub fn url(&self) -> Option<&str> {
        self.process.url()
    }

    /// The command line it was started with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The CA of its serving certificate (the APIService's caBundle).
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert
    }

    /// Its stdout and stderr (klog).
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

    /// Unregisters the APIService, the Service and its EndpointSlice, then kills the process:
    /// a dangling APIService makes discovery incomplete, which stalls namespace deletion and
    /// garbage collection in a control plane that goes on running.
    pub async fn stop(self) -> Result<(), Error> {
        aggregated_api().unregister(&self.client).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_pinned_release_is_a_version() {
        assert!(
            metrics_server_version().starts_with("v0."),
            "{}",
            metrics_server_version()
        );
    }

    #[test]
    fn a_directory_without_the_binary_names_the_build_script() {
        let dir = tempfile::tempdir().unwrap();
        let err = MetricsServerBinary::in_dir(dir.path()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("deploy/metrics-server/build.sh"),
            "{message}"
        );
        assert!(message.contains(BIN_DIR_ENV), "{message}");
    }

    #[test]
    fn the_resolution_is_passed_in_gos_syntax() {
        assert_eq!(go_duration(DEFAULT_METRIC_RESOLUTION), "15s");
        assert_eq!(go_duration(Duration::from_millis(10_500)), "10500ms");
    }
}
