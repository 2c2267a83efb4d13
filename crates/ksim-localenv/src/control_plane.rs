//! A real control plane on loopback: etcd, kube-apiserver, and optionally
//! kube-controller-manager and kube-scheduler, each on free ports with certificates from a
//! throwaway CA. Dropping it kills exactly the processes it started.

use std::{
    future::Future,
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client, Config, config::KubeConfigOptions};
use tempfile::TempDir;

use crate::{
    ControlPlaneBinaries, Error, kubeconfig,
    pki::{CertFiles, CertificateAuthority, ServiceAccountKey},
    ports::free_port,
    process::Process,
    tuning::{Setting, Tuning},
};

const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The feature gates the apiserver, the scheduler and the controller manager run with beyond
/// their release's defaults: consumable capacity (alpha in 1.34 and 1.35), so a device a
/// skeleton shares between claims (`allowMultipleAllocations`) is allocated as shared. It only
/// adds fields; slices and claims that do not use them are allocated as without it
/// (docs/local-environment.md).
pub const FEATURE_GATES: &str = "DRAConsumableCapacity=true";
// The first address of SERVICE_CIDR: in-cluster clients reach the apiserver there.
const KUBERNETES_SERVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Starts tried when a component finds its port taken (see [`ControlPlaneBuilder::start`]).
const START_ATTEMPTS: u32 = 3;
const SCHEDULER: &str = "kube-scheduler";
/// The scheduler binary started by default: kube-scheduler with ksim's explain layer, which
/// schedules a pod without the `ksim.dev/explain` annotation as the stock binary does
/// (deploy/control-plane/ksim-scheduler, docs/explain.md).
pub const SCHEDULER_BINARY: &str = "ksim-scheduler";
/// The stock kube-scheduler binary, of the same version ([`ControlPlaneBuilder::stock_scheduler`]).
pub const STOCK_SCHEDULER_BINARY: &str = "kube-scheduler";
const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// The CN of the client certificate the apiserver proxies to extension apiservers with.
const FRONT_PROXY_CLIENT: &str = "front-proxy-client";
/// Where [`Setting::EtcdInMemory`] keeps etcd's data: tmpfs on every Linux this runs on.
const MEMORY_DIR: &str = "/dev/shm";

/// Options for [`ControlPlane`]; see [`ControlPlane::builder`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    binaries: Option<ControlPlaneBinaries>,
    controller_manager: bool,
    scheduler: bool,
    apiserver_args: Vec<String>,
    controller_manager_args: Vec<String>,
    scheduler_args: Vec<String>,
    scheduler_binary: &'static str,
    tuning: Tuning,
    ready_timeout: Duration,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        Self {
            binaries: None,
            controller_manager: true,
            scheduler: true,
            apiserver_args: Vec::new(),
            controller_manager_args: Vec::new(),
            scheduler_args: Vec::new(),
            scheduler_binary: SCHEDULER_BINARY,
            tuning: Tuning::simulation(),
            // Cold starts on busy CI machines have needed over half a minute.
            ready_timeout: Duration::from_secs(180),
        }
    }
}

impl ControlPlaneBuilder {
    /// Use these binaries instead of [`ControlPlaneBinaries::locate`].
    pub fn binaries(mut self, binaries: ControlPlaneBinaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    pub fn without_controller_manager(mut self) -> Self {
        self.controller_manager = false;
        self
    }

    pub fn without_scheduler(mut self) -> Self {
        self.scheduler = false;
        self
    }

    /// An extra kube-apiserver flag, e.g. `--max-requests-inflight=0` for benchmarks.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// An extra kube-controller-manager flag, e.g. `--kube-api-qps=5000`.
    pub fn controller_manager_arg(mut self, arg: impl Into<String>) -> Self {
        self.controller_manager_args.push(arg.into());
        self
    }

    /// An extra kube-scheduler flag.
    pub fn scheduler_arg(mut self, arg: impl Into<String>) -> Self {
        self.scheduler_args.push(arg.into());
        self
    }

    /// Runs the stock kube-scheduler binary instead of [`SCHEDULER_BINARY`] (no explanations).
    pub fn stock_scheduler(mut self) -> Self {
        self.scheduler_binary = STOCK_SCHEDULER_BINARY;
        self
    }

    /// The settings to run the components with: [`Tuning::simulation`] unless told
    /// otherwise; [`Tuning::stock`] runs the components' own defaults.
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// How long each component may take to become ready.
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Starts the components in order and waits until each is ready. On failure everything
    /// started is killed and the directory with the logs is kept and named in the error.
    ///
    /// A component's port is free when chosen but only bound when the component starts; an
    /// outgoing connection may take it in between (ports come from the ephemeral range). Such
    /// a start is tried again on fresh ports, up to [`START_ATTEMPTS`] times in all.
    pub async fn start(self) -> Result<ControlPlane, Error> {
        let binaries = match self.binaries.clone() {
            Some(binaries) => binaries,
            None => ControlPlaneBinaries::locate()?,
        };
        let mut attempt = 1;
        loop {
            let dir = tempfile::Builder::new()
                .prefix("ksim-control-plane-")
                .tempdir()
                .map_err(Error::io(
                    "cannot create a directory in",
                    std::env::temp_dir(),
                ))?;
            match self.start_in(&binaries, dir).await {
                Ok(control_plane) => return Ok(control_plane),
                Err((source, dir)) if attempt < START_ATTEMPTS && source.is_port_taken() => {
                    tracing::warn!(
                        attempt,
                        %source,
                        "a port was taken before its component bound it; starting again"
                    );
                    drop(dir);
                    attempt += 1;
                }
                Err((source, dir)) => {
                    return Err(Error::Start {
                        dir: dir.keep(),
                        source: Box::new(source),
                    });
                }
            }
        }
    }

    /// One start with `dir` for files and logs; on failure, why, and the directory.
    async fn start_in(
        &self,
        binaries: &ControlPlaneBinaries,
        dir: TempDir,
    ) -> Result<ControlPlane, (Error, TempDir)> {
        let mut starting = Starting {
            builder: self,
            binaries,
            dir: dir.path(),
            etcd_dir: None,
            processes: Vec::new(),
        };
        let started = starting.run().await;
        let processes = std::mem::take(&mut starting.processes);
        let etcd_dir = starting.etcd_dir.take();
        match started {
            Ok(ready) => Ok(ControlPlane {
                dir: Some(dir),
                etcd_dir,
                processes,
                apiserver_url: ready.apiserver_url,
                admin_kubeconfig: ready.admin_kubeconfig,
                ca_cert: ready.ca_cert,
                client: ready.client,
                binaries: binaries.clone(),
                scheduler: ready.scheduler,
                controller_manager_args: ready.controller_manager_args,
                ready_timeout: self.ready_timeout,
                tuning: self.tuning.clone(),
            }),
            Err(source) => {
                drop(processes);
                Err((source, dir))
            }
        }
    }
}

/// A running control plane. See the crate docs for an example.
pub struct ControlPlane {
    dir: Option<TempDir>,
    /// etcd's data when it is kept in memory; else it is under `dir`.
    etcd_dir: Option<TempDir>,
    // Kept in start order and stopped in reverse, so nothing outlives what it depends on.
    processes: Vec<Process>,
    apiserver_url: String,
    admin_kubeconfig: PathBuf,
    ca_cert: PathBuf,
    client: Client,
    binaries: ControlPlaneBinaries,
    scheduler: Option<SchedulerLaunch>,
    /// kube-controller-manager's flags without `--secure-port`, if it runs.
    controller_manager_args: Option<Vec<String>>,
    ready_timeout: Duration,
    tuning: Tuning,
}

/// How kube-scheduler was started, to start it again with another configuration.
#[derive(Debug, Clone)]
struct SchedulerLaunch {
    binary: &'static str,
    kubeconfig: PathBuf,
    /// Its flags without `--secure-port` (a restart takes a free one) and `--config`.
    args: Vec<String>,
}

impl ControlPlane {
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

    /// Starts all four components with default settings.
    pub async fn start() -> Result<Self, Error> {
        Self::builder().start().await
    }

    /// A client with cluster-admin rights (group system:masters).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client acting as `user` in `groups` (impersonated by the admin), e.g. a
    /// ServiceAccount, to test that an RBAC policy is enough.
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<Client, Error> {
        let mut config = config_from_kubeconfig(&self.admin_kubeconfig).await?;
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups =
            Some(groups.iter().map(|g| (*g).to_owned()).collect());
        Ok(Client::try_from(config)?)
    }

    /// The admin kubeconfig, for kubectl or for services under test.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub fn apiserver_url(&self) -> &str {
        &self.apiserver_url
    }

    /// The CA that signed every certificate of this control plane.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert
    }

    /// The directory holding certificates, kubeconfigs, etcd data and component logs.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(TempDir::path)
    }

    /// Log file of a component started by this control plane (`etcd`, `kube-apiserver`, ...).
    pub fn log_path(&self, component: &str) -> Option<&Path> {
        self.processes
            .iter()
            .find(|process| process.name() == component)
            .map(Process::log_path)
    }

    /// The kubeconfig kube-scheduler connects with (its own identity), if it runs: a
    /// scheduler configuration must name it as `clientConnection.kubeconfig`.
    pub fn scheduler_kubeconfig_path(&self) -> Option<&Path> {
        self.scheduler
            .as_ref()
            .map(|launch| launch.kubeconfig.as_path())
    }

    /// The binaries this control plane runs.
    pub fn binaries(&self) -> &ControlPlaneBinaries {
        &self.binaries
    }

    /// The settings the components run with.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// etcd's data directory.
    pub fn etcd_data_dir(&self) -> Option<PathBuf> {
        match &self.etcd_dir {
            Some(dir) => Some(dir.path().to_owned()),
            None => self.dir().map(|dir| dir.join("etcd")),
        }
    }

    /// Stops kube-scheduler and starts it again, with `--config=config` or, for `None`, with
    /// its defaults; waits for its `/healthz`. The previous process's log is kept beside the
    /// new one as `kube-scheduler.previous.log`. The file must be one the scheduler accepts
    /// (see [`ControlPlaneBinaries::check_scheduler_config`]); if the new scheduler does not
    /// come up, the error says why and none runs.
    pub async fn restart_scheduler(&mut self, config: Option<&Path>) -> Result<(), Error> {
        let launch = self.scheduler.clone().ok_or_else(|| {
            Error::InvalidArgument("this control plane was started without kube-scheduler".into())
        })?;
        let mut args = launch.args;
        if let Some(config) = config {
            args.push(flag("--config", config));
        }
        self.restart(SCHEDULER, launch.binary, args).await
    }

    /// Stops kube-controller-manager and starts it again with the flags it was first started
    /// with and then `extra_args` (a flag given twice takes the later value), e.g.
    /// `--horizontal-pod-autoscaler-sync-period=3s`; with none, as it first ran. Waits for its
    /// `/healthz`. The previous process's log is kept as
    /// `kube-controller-manager.previous.log`; if the new one does not come up, the error says
    /// why and none runs.
    pub async fn restart_controller_manager(&mut self, extra_args: &[String]) -> Result<(), Error> {
        let mut args = self.controller_manager_args.clone().ok_or_else(|| {
            Error::InvalidArgument(
                "this control plane was started without kube-controller-manager".into(),
            )
        })?;
        args.extend(extra_args.iter().cloned());
        self.restart(CONTROLLER_MANAGER, CONTROLLER_MANAGER, args)
            .await
    }

    /// Stops `name`, keeps its log as `<name>.previous.log` and starts `binary` as it with
    /// `args` and a free `--secure-port`, waiting for its `/healthz`.
    async fn restart(
        &mut self,
        name: &'static str,
        binary: &'static str,
        args: Vec<String>,
    ) -> Result<(), Error> {
        let dir = self
            .dir()
            .ok_or_else(|| Error::InvalidArgument("the control plane is stopped".into()))?
            .to_owned();
        if let Some(index) = self
            .processes
            .iter()
            .position(|process| process.name() == name)
        {
            drop(self.processes.remove(index));
        }
        let log = dir.join(format!("{name}.log"));
        let previous = dir.join(format!("{name}.previous.log"));
        std::fs::rename(&log, &previous).map_err(Error::io("cannot rename", &log))?;
        let process = start_healthy(
            name,
            &self.binaries.path(binary),
            args,
            &dir,
            &self.ca_cert,
            self.ready_timeout,
        )
        .await?;
        self.processes.push(process);
        Ok(())
    }

    /// A GET of `path` (e.g. `/metrics`, `/healthz?verbose`) from a component's own
    /// endpoint: `etcd`, `kube-apiserver` (as admin), `kube-controller-manager` or
    /// `kube-scheduler`.
    pub async fn get(&self, component: &str, path: &str) -> Result<String, Error> {
        let url = self
            .processes
            .iter()
            .find(|process| process.name() == component)
            .and_then(Process::url)
            .ok_or_else(|| Error::InvalidArgument(format!("no {component} runs here")))?;
        let client = if component == "kube-apiserver" {
            self.client.clone()
        } else {
            component_client(component, url, &self.ca_cert)?
        };
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|error| Error::InvalidArgument(format!("GET {path}: {error}")))?;
        Ok(client.request_text(request).await?)
    }

    /// PIDs of the component processes this control plane started.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.processes
            .iter()
            .map(|process| (process.name(), process.pid()))
            .collect()
    }
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("apiserver_url", &self.apiserver_url)
            .field("dir", &self.dir())
            .field("processes", &self.pids())
            .finish_non_exhaustive()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(process) = self.processes.pop() {
            drop(process);
        }
        let keep = std::thread::panicking() || std::env::var_os("KSIM_KEEP_TESTENV").is_some();
        if let Some(dir) = self.dir.take()
            && keep
        {
            // A failing test's logs are what explains it: keep them and say where.
            eprintln!(
                "ksim-localenv: control-plane files kept in {}",
                dir.keep().display()
            );
        }
    }
}

/// What a successful start hands to [`ControlPlane`] besides the processes.
struct Ready {
    apiserver_url: String,
    admin_kubeconfig: PathBuf,
    ca_cert: PathBuf,
    client: Client,
    scheduler: Option<SchedulerLaunch>,
    controller_manager_args: Option<Vec<String>>,
}

/// State while components come up; owns the processes until the control plane is ready.
struct Starting<'a> {
    builder: &'a ControlPlaneBuilder,
    binaries: &'a ControlPlaneBinaries,
    dir: &'a Path,
    etcd_dir: Option<TempDir>,
    processes: Vec<Process>,
}

impl Starting<'_> {
    async fn run(&mut self) -> Result<Ready, Error> {
        let pki_dir = self.subdir("pki")?;
        let ca = CertificateAuthority::create(&pki_dir, "ksim-local-ca")?;
        let service_account = ServiceAccountKey::create(&pki_dir)?;
        let advertise = ksim_kube::aggregation::advertise_address();
        let mut apiserver_ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST), KUBERNETES_SERVICE_IP];
        apiserver_ips.extend(advertise);
        let apiserver_serving = ca.server_cert(
            "kube-apiserver",
            &[
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "localhost",
            ],
            &apiserver_ips,
        )?;

        // The aggregation layer's own trust: the apiserver proxies to an extension apiserver
        // (metrics-server) with this client certificate, and the extension trusts the user
        // headers of a request only when it presents a certificate of this CA.
        let front_proxy_ca =
            CertificateAuthority::create_as(&pki_dir, "front-proxy-ca", "ksim-front-proxy-ca")?;
        let front_proxy_client =
            front_proxy_ca.client_cert("front-proxy-client", FRONT_PROXY_CLIENT, None)?;

        let etcd_port = free_port()?;
        self.start_etcd(etcd_port)?;
        self.wait(0, "etcd", || tcp_open(etcd_port)).await?;

        let apiserver_port = free_port()?;
        let apiserver_url = format!("https://127.0.0.1:{apiserver_port}");
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            format!("--feature-gates={FEATURE_GATES}"),
            format!("--secure-port={apiserver_port}"),
            "--bind-address=127.0.0.1".to_owned(),
            flag("--tls-cert-file", &apiserver_serving.cert),
            flag("--tls-private-key-file", &apiserver_serving.key),
            flag("--client-ca-file", ca.cert_file()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
            flag("--service-account-key-file", &service_account.public),
            flag(
                "--service-account-signing-key-file",
                &service_account.private,
            ),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC".to_owned(),
            "--allow-privileged=true".to_owned(),
            "--profiling=false".to_owned(),
            flag("--cert-dir", &self.subdir("apiserver-certs")?),
            // The aggregation layer, always on: it costs nothing until an APIService is
            // registered. The apiserver publishes these in kube-system's
            // extension-apiserver-authentication ConfigMap, where extension apiservers read them.
            flag("--requestheader-client-ca-file", front_proxy_ca.cert_file()),
            format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
            "--requestheader-group-headers=X-Remote-Group".to_owned(),
            "--requestheader-username-headers=X-Remote-User".to_owned(),
            flag("--proxy-client-cert-file", &front_proxy_client.cert),
            flag("--proxy-client-key-file", &front_proxy_client.key),
            // No kube-proxy here, so a Service's cluster IP leads nowhere: the apiserver
            // proxies to the Service's endpoints itself.
            "--enable-aggregator-routing=true".to_owned(),
        ];
        args.extend(self.builder.tuning.flags("kube-apiserver"));
        // Loopback is refused as the advertise address, and without a default route the
        // apiserver cannot pick one itself.
        if let Some(ip) = advertise {
            args.push(format!("--advertise-address={ip}"));
        }
        args.extend(self.builder.apiserver_args.iter().cloned());
        self.spawn("kube-apiserver", &args)?;
        self.set_url(apiserver_url.clone());

        let admin = ca.client_cert("admin", "ksim-admin", Some("system:masters"))?;
        let admin_kubeconfig = self.write_kubeconfig("admin", &apiserver_url, &ca, &admin)?;
        let config = config_from_kubeconfig(&admin_kubeconfig).await?;
        let probe = probe_client(&config)?;
        let index = self.processes.len() - 1;
        self.wait(index, "kube-apiserver", || get_ok(&probe, "/readyz"))
            .await?;
        let client = Client::try_from(config)?;

        let mut controller_manager_args = None;
        if self.builder.controller_manager {
            let identity = ca.client_cert(
                "kube-controller-manager-client",
                "system:kube-controller-manager",
                None,
            )?;
            let kubeconfig =
                self.write_kubeconfig(CONTROLLER_MANAGER, &apiserver_url, &ca, &identity)?;
            let mut args = self.component_args(CONTROLLER_MANAGER, &kubeconfig, &ca)?;
            args.extend([
                flag(
                    "--service-account-private-key-file",
                    &service_account.private,
                ),
                flag("--root-ca-file", ca.cert_file()),
                "--use-service-account-credentials=true".to_owned(),
            ]);
            args.extend(self.builder.tuning.flags(CONTROLLER_MANAGER));
            args.extend(self.builder.controller_manager_args.iter().cloned());
            self.start_component(CONTROLLER_MANAGER, CONTROLLER_MANAGER, args.clone(), &ca)
                .await?;
            controller_manager_args = Some(args);
            // Pods are refused until their namespace's default ServiceAccount exists, and the
            // controller manager creates it: wait so tests do not race it.
            let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
            let index = self.processes.len() - 1;
            self.wait(index, CONTROLLER_MANAGER, || async {
                matches!(accounts.get_opt("default").await, Ok(Some(_)))
            })
            .await?;
        }

        let mut scheduler = None;
        if self.builder.scheduler {
            let identity =
                ca.client_cert("kube-scheduler-client", "system:kube-scheduler", None)?;
            let kubeconfig = self.write_kubeconfig(SCHEDULER, &apiserver_url, &ca, &identity)?;
            let mut args = self.component_args(SCHEDULER, &kubeconfig, &ca)?;
            args.extend(self.builder.tuning.flags(SCHEDULER));
            args.extend(self.builder.scheduler_args.iter().cloned());
            let binary = self.builder.scheduler_binary;
            self.start_component(SCHEDULER, binary, args.clone(), &ca)
                .await?;
            scheduler = Some(SchedulerLaunch {
                binary,
                kubeconfig,
                args,
            });
        }

        Ok(Ready {
            apiserver_url,
            admin_kubeconfig,
            ca_cert: ca.cert_file().to_owned(),
            client,
            scheduler,
            controller_manager_args,
        })
    }

    fn start_etcd(&mut self, client_port: u16) -> Result<(), Error> {
        let peer_port = free_port()?;
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data_dir = if self.builder.tuning.contains(Setting::EtcdInMemory) {
            let dir = tempfile::Builder::new()
                .prefix("ksim-etcd-")
                .tempdir_in(MEMORY_DIR)
                .map_err(Error::io("cannot create a directory in", MEMORY_DIR))?;
            let path = dir.path().to_owned();
            self.etcd_dir = Some(dir);
            path
        } else {
            self.subdir("etcd")?
        };
        let mut args = vec![
            "--name=ksim".to_owned(),
            flag("--data-dir", &data_dir),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=ksim={peer_url}"),
            "--log-level=warn".to_owned(),
        ];
        args.extend(self.builder.tuning.flags("etcd"));
        self.spawn("etcd", &args)?;
        self.set_url(client_url);
        Ok(())
    }

    /// Flags kube-controller-manager and kube-scheduler share: their kubeconfig for the API
    /// and for delegated authn/z, a loopback serving port with a certificate from our CA.
    fn component_args(
        &self,
        name: &str,
        kubeconfig: &Path,
        ca: &CertificateAuthority,
    ) -> Result<Vec<String>, Error> {
        let serving = ca.server_cert(name, &["localhost"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
        Ok(vec![
            flag("--kubeconfig", kubeconfig),
            flag("--authentication-kubeconfig", kubeconfig),
            flag("--authorization-kubeconfig", kubeconfig),
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            flag("--tls-cert-file", &serving.cert),
            flag("--tls-private-key-file", &serving.key),
            format!("--feature-gates={FEATURE_GATES}"),
        ])
    }

    /// Starts a component with a free `--secure-port` and waits for its `/healthz`.
    async fn start_component(
        &mut self,
        name: &'static str,
        binary: &'static str,
        args: Vec<String>,
        ca: &CertificateAuthority,
    ) -> Result<(), Error> {
        let process = start_healthy(
            name,
            &self.binaries.path(binary),
            args,
            self.dir,
            ca.cert_file(),
            self.builder.ready_timeout,
        )
        .await?;
        self.processes.push(process);
        Ok(())
    }

    /// The URL of the process started last.
    fn set_url(&mut self, url: String) {
        if let Some(process) = self.processes.pop() {
            self.processes.push(process.with_url(url));
        }
    }

    fn spawn(&mut self, name: &'static str, args: &[String]) -> Result<(), Error> {
        let process = Process::spawn(name, &self.binaries.path(name), args, self.dir)?;
        self.processes.push(process);
        Ok(())
    }

    /// Polls `probe` until it succeeds, failing early if the process exits.
    async fn wait<F, Fut>(
        &mut self,
        index: usize,
        component: &'static str,
        mut probe: F,
    ) -> Result<(), Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let started = Instant::now();
        loop {
            let process = &mut self.processes[index];
            process.check_running()?;
            if probe().await {
                tracing::debug!(component, elapsed = ?started.elapsed(), "ready");
                return Ok(());
            }
            if started.elapsed() > self.builder.ready_timeout {
                return Err(Error::NotReady {
                    component,
                    seconds: self.builder.ready_timeout.as_secs(),
                    log_tail: self.processes[index].log_tail(),
                });
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn write_kubeconfig(
        &self,
        name: &str,
        server: &str,
        ca: &CertificateAuthority,
        identity: &CertFiles,
    ) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        let config = kubeconfig::kubeconfig(server, ca.cert_file(), identity, name);
        kubeconfig::write(&config, &path)?;
        Ok(path)
    }

    fn subdir(&self, name: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(name);
        std::fs::create_dir_all(&path).map_err(Error::io("cannot create", &path))?;
        Ok(path)
    }
}

/// Starts `name` with `args` and a free `--secure-port`, and waits until its `/healthz` (served
/// with a certificate of `ca_cert`) answers; on failure the process is killed.
async fn start_healthy(
    name: &'static str,
    binary: &Path,
    mut args: Vec<String>,
    dir: &Path,
    ca_cert: &Path,
    timeout: Duration,
) -> Result<Process, Error> {
    let port = free_port()?;
    args.push(format!("--secure-port={port}"));
    let url = format!("https://127.0.0.1:{port}");
    let health = component_client(name, &url, ca_cert)?;
    let mut process = Process::spawn(name, binary, &args, dir)?.with_url(url);
    let started = Instant::now();
    loop {
        process.check_running()?;
        if get_ok(&health, "/healthz").await {
            tracing::debug!(component = name, elapsed = ?started.elapsed(), "ready");
            return Ok(process);
        }
        if started.elapsed() > timeout {
            return Err(Error::NotReady {
                component: name,
                seconds: timeout.as_secs(),
                log_tail: process.log_tail(),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A client for a component's own endpoints (health, metrics), trusting the control plane's
/// CA and presenting no identity: they are served to anyone.
fn component_client(name: &str, url: &str, ca_cert: &Path) -> Result<Client, Error> {
    let mut config = Config::new(
        url.parse()
            .map_err(|_| Error::Kubeconfig(format!("invalid URL {url} for {name}")))?,
    );
    config.root_cert_file = Some(ca_cert.to_owned());
    probe_client(&config)
}

async fn config_from_kubeconfig(path: &Path) -> Result<Config, Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    Ok(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)
}

/// A client for readiness probes. Unlike `Client::try_from`, it has no tracing layer: a
/// component that is not up yet is expected, not an error worth logging.
fn probe_client(config: &Config) -> Result<Client, Error> {
    use kube::client::ConfigExt;
    let https = config.rustls_https_connector()?;
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(Box::<dyn std::error::Error + Send + Sync>::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace.clone()))
}

async fn get_ok(client: &Client, path: &str) -> bool {
    match http::Request::get(path).body(Vec::new()) {
        Ok(request) => client.request_text(request).await.is_ok(),
        Err(_) => false,
    }
}

async fn tcp_open(port: u16) -> bool {
    tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .is_ok()
}

fn flag(name: &str, path: &Path) -> String {
    format!("{name}={}", path.display())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Starts only etcd, on `client_port`, and waits for it as a control-plane start does.
    async fn etcd_on(client_port: u16) -> Result<(), Error> {
        let binaries = ControlPlaneBinaries::locate().unwrap();
        let builder = ControlPlaneBuilder::default().ready_timeout(Duration::from_secs(60));
        let dir = tempfile::tempdir().unwrap();
        let mut starting = Starting {
            builder: &builder,
            binaries: &binaries,
            dir: dir.path(),
            etcd_dir: None,
            processes: Vec::new(),
        };
        starting.start_etcd(client_port)?;
        let result = starting.wait(0, "etcd", || tcp_open(client_port)).await;
        drop(std::mem::take(&mut starting.processes));
        result
    }

    #[tokio::test]
    async fn a_component_whose_port_was_taken_is_told_apart() {
        // Held by a connection's local end, as an outgoing connection from the ephemeral
        // range would hold it; a listener would make etcd's port look open.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let taken = client.local_addr().unwrap().port();

        let error = etcd_on(taken).await.unwrap_err();
        assert!(error.is_port_taken(), "{error}");

        let free = free_port().unwrap();
        etcd_on(free).await.unwrap();
    }
}
