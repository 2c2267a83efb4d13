//! The local environment: a cluster (embedded control plane or an existing one), the namespace
//! `ksim-system`, the four ksim services as child processes on fixed loopback ports, and
//! optionally cluster-autoscaler or Karpenter. It serves the `ksim.env.v1.Environment` API
//! itself, through which the driver runs the scheduler and CA with a simulation's
//! configuration (see [`crate::configuration`]).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use anyhow::Context;
use ksim_experiment::AutoscalerFlags;
use ksim_grpc::{GrpcServer, ServeArgs};
use ksim_localenv::autoscaler::ClusterAutoscalerBinary;
use tokio::sync::Mutex;

use ksim_localenv::environment::{
    EnvironmentOptions,
    services::{self, CLOUDPROV, DRIVER, ENVIRONMENT, POOL, ServiceSpec, TRACER},
    state::{self, EnvState, ProcessIdentity, Urls},
};

use crate::{
    NAMESPACE, args,
    cluster::Cluster,
    configuration::{Components, ProviderFile},
    grpc::EnvironmentService,
    karpenter::{KarpenterSetup, KarpenterSlot},
    services::ServiceProcess,
};

/// How long a service may take to report SERVING. The driver waits for the others and the
/// API server, so it gets the whole budget too.
const HEALTH_DEADLINE: Duration = Duration::from_secs(90);

/// A running local environment, stopped by [`LocalEnv::shutdown`] or, failing that, on drop.
#[derive(Debug)]
pub struct LocalEnv {
    // Services in start order (the cloud provider, which a configuration restarts, is in
    // `components`); they are stopped in reverse, before the cluster goes.
    services: Vec<ServiceProcess>,
    /// The cluster, the cloud provider and CA, shared with the environment API, which
    /// restarts them.
    components: Arc<Mutex<Components>>,
    /// The environment API's server; stopped before anything it could restart.
    server: Option<ksim_grpc::Running>,
    /// The API server of the embedded control plane; `None` for an existing cluster.
    apiserver_url: Option<String>,
    state_dir: PathBuf,
    kubeconfig: PathBuf,
    urls: Urls,
    /// The environment API's own place, on this environment's ports.
    environment: ServiceSpec,
    state_written: bool,
    /// What its Karpenter offers, for `env.json`; `None` without Karpenter.
    karpenter_instance_types: Option<Vec<ksim_nodes::karpenter::InstanceType>>,
}

/// The four services' binaries, each with its place on the environment's ports.
#[derive(Debug)]
struct ServiceBinaries {
    tracer: (ServiceSpec, PathBuf),
    pool: (ServiceSpec, PathBuf),
    cloudprov: (ServiceSpec, PathBuf),
    driver: (ServiceSpec, PathBuf),
}

impl ServiceBinaries {
    fn each<T>(&self, f: impl Fn(&(ServiceSpec, PathBuf)) -> T) -> [T; 4] {
        [&self.tracer, &self.pool, &self.cloudprov, &self.driver].map(f)
    }
}

/// Every binary the environment will run, found (and CA's flags checked against its own
/// release) before anything starts: a missing binary should cost no control plane start.
#[derive(Debug)]
struct Binaries {
    services: ServiceBinaries,
    autoscaler: Option<ClusterAutoscalerBinary>,
    autoscaler_flags: AutoscalerFlags,
}

impl Binaries {
    fn locate(base: u16, options: &EnvironmentOptions) -> anyhow::Result<Self> {
        let dirs = services::binary_dirs()?;
        let [tracer, pool, cloudprov, driver] = [TRACER, POOL, CLOUDPROV, DRIVER]
            .map(|spec| services::locate(spec.binary, &dirs).map(|path| (spec.at(base), path)));
        let services = ServiceBinaries {
            tracer: tracer?,
            pool: pool?,
            cloudprov: cloudprov?,
            driver: driver?,
        };
        let autoscaler_flags = AutoscalerFlags::parse(&options.autoscaler_flags)
            .map_err(|error| anyhow::anyhow!("--autoscaler-flag: {error}"))?;
        let autoscaler = if options.autoscaler {
            let binary = ClusterAutoscalerBinary::locate().context(
                "--autoscaler needs the cluster-autoscaler binary (deploy/cluster-autoscaler/build.sh)",
            )?;
            // The binary judges whether its release has the flag.
            if !autoscaler_flags.flags.is_empty() {
                autoscaler_flags
                    .check_known(&binary.flags()?)
                    .map_err(|error| anyhow::anyhow!("--autoscaler-flag: {error}"))?;
            }
            Some(binary)
        } else {
            None
        };
        Ok(Self {
            services,
            autoscaler,
            autoscaler_flags,
        })
    }

    /// Where cluster-autoscaler reaches the cloud provider.
    fn cloudprov_address(&self) -> String {
        format!("127.0.0.1:{}", self.services.cloudprov.0.grpc_port)
    }
}

impl LocalEnv {
    /// Starts everything and waits until each service answers gRPC health. On error, what was
    /// started is stopped again.
    pub async fn start(options: EnvironmentOptions) -> anyhow::Result<Self> {
        let state_dir = match options.state_dir.clone() {
            Some(dir) => dir,
            None => state::state_dir()?,
        };
        refuse_if_running(&state_dir)?;
        let log_dir = state_dir.join("logs");
        std::fs::create_dir_all(&log_dir)
            .with_context(|| format!("creating {}", log_dir.display()))?;
        let base = options.port_base;
        let binaries = Binaries::locate(base, &options)?;
        // Judged by the provider binary before anything starts: a file it refuses would
        // otherwise surface only as its exit, after the control plane had started.
        let provider_config = match &options.provider_config {
            Some(path) => {
                let file = ProviderFile::read(path)?;
                file.check(&binaries.services.cloudprov.1).await?;
                Some(file)
            }
            None => None,
        };
        let karpenter = if options.karpenter {
            if options.kubeconfig.is_some() || options.context.is_some() {
                anyhow::bail!(
                    "--karpenter runs on the embedded control plane only (it installs Karpenter's CRDs)"
                );
            }
            Some(KarpenterSetup::prepare(
                &options.instance_types,
                provider_config
                    .as_ref()
                    .map(|file| (file.source.as_str(), file.yaml.as_str())),
            )?)
        } else if !options.instance_types.is_empty() {
            anyhow::bail!("--instance-type is Karpenter's: give --karpenter too");
        } else {
            None
        };

        let cluster = Cluster::start(
            options.kubeconfig.as_deref(),
            options.context.as_deref(),
            &state_dir,
        )
        .await?;
        let mut env = Self::around(cluster, state_dir, &binaries, base);
        let provider_address = binaries.cloudprov_address();
        env.components
            .lock()
            .await
            .cluster
            .as_ref()
            .context("the environment is stopped")?
            .ensure_namespace(NAMESPACE)
            .await?;
        // Before the driver, which calls it when a simulation has a configuration.
        env.serve_api().await?;
        env.start_services(
            binaries.services,
            provider_config,
            karpenter.is_some(),
            &log_dir,
        )
        .await?;
        env.karpenter_instance_types = karpenter
            .as_ref()
            .map(|setup| setup.instance_types().to_vec());
        if let Some(setup) = karpenter {
            let mut components = env.components.lock().await;
            let control_plane = components
                .cluster
                .as_ref()
                .and_then(|cluster| cluster.control_plane())
                .context("--karpenter runs on the embedded control plane only")?;
            let mut slot = KarpenterSlot::new(setup);
            slot.start(control_plane).await?;
            components.started_with_karpenter(slot);
        }
        env.start_autoscaler(
            binaries.autoscaler,
            binaries.autoscaler_flags,
            &provider_address,
        )
        .await?;
        env.write_state()?;
        Ok(env)
    }

    /// The environment of `cluster`, before any service runs.
    fn around(cluster: Cluster, state_dir: PathBuf, binaries: &Binaries, base: u16) -> Self {
        let [tracer, pool, cloudprov, driver] = binaries.services.each(|(spec, _)| spec.url());
        let kubeconfig = cluster.kubeconfig_path().to_owned();
        let apiserver_url = cluster
            .control_plane()
            .map(|control_plane| control_plane.apiserver_url().to_owned());
        let config_dir = state_dir.join("configuration");
        Self {
            services: Vec::new(),
            components: Arc::new(Mutex::new(Components::new(
                cluster,
                binaries.cloudprov_address(),
                config_dir,
            ))),
            server: None,
            apiserver_url,
            state_dir,
            kubeconfig,
            urls: Urls {
                tracer,
                pool,
                cloud_provider: cloudprov,
                driver,
                environment: ENVIRONMENT.at(base).url(),
            },
            environment: ENVIRONMENT.at(base),
            state_written: false,
            karpenter_instance_types: None,
        }
    }

    /// Starts the tracer, the pool and the cloud provider, then (once they answer) the driver
    /// that calls them.
    async fn start_services(
        &mut self,
        ServiceBinaries {
            tracer,
            pool,
            cloudprov,
            driver,
        }: ServiceBinaries,
        provider_config: Option<ProviderFile>,
        karpenter: bool,
        log_dir: &Path,
    ) -> anyhow::Result<()> {
        let tracer_data = self.tracer_data_dir()?;
        self.spawn(tracer, &args::tracer(&tracer_data), log_dir)?;
        let node_lease_seconds = self
            .components
            .lock()
            .await
            .cluster
            .as_ref()
            .and_then(|cluster| cluster.control_plane())
            .and_then(|control_plane| control_plane.tuning().node_lease_seconds());
        // The embedded plane gets the pool's metrics API, which the apiserver reaches on this
        // machine's own address (it refuses loopback); without one, the environment runs
        // without it rather than not at all, and says so.
        let metrics_api = node_lease_seconds.is_some()
            && match ksim_kube::aggregation::advertise_address() {
                Some(_) => true,
                None => {
                    eprintln!(
                        "ksim: no metrics API (kubectl top, the HPA, recorded usage): this \
                         machine has no non-loopback IPv4 address for the apiserver to reach"
                    );
                    false
                }
            };
        self.spawn(
            pool,
            &args::pool(node_lease_seconds, metrics_api, karpenter),
            log_dir,
        )?;
        // The provider lives in `components`: the environment API restarts it with a run's
        // configuration.
        let provider_args = args::cloudprov(provider_config.as_ref().map(|file| &*file.path));
        let (spec, binary) = cloudprov;
        let provider = ServiceProcess::spawn(
            spec,
            &binary,
            &self.with_kubeconfig(&provider_args),
            log_dir,
        )?;
        self.components.lock().await.started_provider(
            provider,
            self.with_kubeconfig(&[]),
            provider_config,
        );
        for service in &mut self.services {
            service.wait_healthy(HEALTH_DEADLINE).await?;
        }
        if let Some(provider) = self.components.lock().await.provider.as_mut() {
            provider.wait_healthy(HEALTH_DEADLINE).await?;
        }

        let report_dir = self.state_dir.join("reports");
        self.spawn(driver, &args::driver(&self.urls, &report_dir), log_dir)?;
        if let Some(driver) = self.services.last_mut() {
            driver.wait_healthy(HEALTH_DEADLINE).await?;
        }
        Ok(())
    }

    /// Keeps the environment's own CA flags (a run's go over them) and, with `--autoscaler`,
    /// starts cluster-autoscaler against the cloud provider.
    async fn start_autoscaler(
        &mut self,
        binary: Option<ClusterAutoscalerBinary>,
        flags: AutoscalerFlags,
        provider_address: &str,
    ) -> anyhow::Result<()> {
        self.components
            .lock()
            .await
            .set_autoscaler_flags(flags.clone());
        let Some(binary) = binary else {
            return Ok(());
        };
        let autoscaler = Components::start_default_autoscaler(
            &self.kubeconfig,
            provider_address,
            binary.clone(),
            &flags,
        )
        .await?;
        self.components
            .lock()
            .await
            .started_with_autoscaler(autoscaler, binary);
        Ok(())
    }

    pub fn urls(&self) -> &Urls {
        &self.urls
    }

    /// The environment API's metrics.
    pub fn environment_admin_url(&self) -> String {
        self.environment.admin_url()
    }

    /// The kubeconfig of the simulated cluster, for kubectl and for clients.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The embedded control plane's API server, unless an existing cluster is used.
    pub fn apiserver_url(&self) -> Option<&str> {
        self.apiserver_url.as_deref()
    }

    /// Each service: its spec (name, URL, ports), pid and log file.
    pub async fn services(&self) -> Vec<(ServiceSpec, Option<u32>, PathBuf)> {
        let describe = |service: &ServiceProcess| {
            (service.spec(), service.pid(), service.log_path().to_owned())
        };
        let mut services: Vec<_> = self.services.iter().map(describe).collect();
        if let Some(provider) = self.components.lock().await.provider.as_ref() {
            // In start order: before the driver.
            services.insert(services.len().saturating_sub(1), describe(provider));
        }
        services
    }

    /// The running cluster-autoscaler, if any: its pid, metrics URL and log.
    pub async fn autoscaler(&self) -> Option<(u32, String, PathBuf)> {
        let components = self.components.lock().await;
        let autoscaler = components.autoscaler.as_ref()?;
        Some((
            autoscaler.pid(),
            autoscaler.metrics_url(),
            autoscaler.log_path().to_owned(),
        ))
    }

    /// The running Karpenter, if any: its pid, metrics URL and log.
    pub async fn karpenter(&self) -> Option<(u32, String, PathBuf)> {
        let components = self.components.lock().await;
        let karpenter = components.karpenter.as_ref()?.running()?;
        Some((
            karpenter.pid(),
            karpenter.metrics_url().unwrap_or_default().to_owned(),
            karpenter.log_path().to_owned(),
        ))
    }

    /// Stops cluster-autoscaler, then the services in reverse start order (the driver first,
    /// so it can clean up while the rest still runs), then the cluster; removes `env.json`.
    /// Checks every service and cluster-autoscaler: one that exited is reported (name, exit
    /// status, log) and started again after its backoff, CA with the configuration applied now.
    /// Returns what happened, one line each, also appended to [`state::SUPERVISION_FILE`] so
    /// `ksim down` can say what had died.
    pub async fn supervise(&mut self) -> Vec<String> {
        let now = std::time::Instant::now();
        let mut events = Vec::new();
        for service in &mut self.services {
            let _ = supervise(service, now, &mut events);
        }
        // Busy only while a configuration restarts them: then they are looked at next time.
        if let Ok(mut components) = self.components.try_lock() {
            if let Some(provider) = components.provider.as_mut() {
                let (exited, restarted) = supervise(provider, now, &mut events);
                // Recorded like CA's, so a run's report says when it was down.
                components.provider_supervised(exited, restarted, SystemTime::now());
            }
            components.supervise_autoscaler(now, &mut events).await;
            components.supervise_karpenter(&mut events);
        }
        if !events.is_empty() {
            state::append_supervision(&self.state_dir, &events);
        }
        events
    }

    pub async fn shutdown(mut self) {
        {
            let mut components = self.components.lock().await;
            components.karpenter = None;
            components.autoscaler = None;
        }
        while let Some(mut service) = self.services.pop() {
            // The driver deletes what a cancelled simulation created (and restores the
            // configuration through the API below): give it time.
            let driver = service.spec().name == DRIVER.name;
            let grace = if driver { 30 } else { 15 };
            service.stop(Duration::from_secs(grace)).await;
            // The provider was started between the pool and the driver.
            if driver && let Some(mut provider) = self.components.lock().await.provider.take() {
                provider.stop(Duration::from_secs(15)).await;
            }
        }
        if let Some(server) = self.server.take()
            && let Err(error) = server.shutdown().await
        {
            tracing::warn!(%error, "stopping the environment API");
        }
        let mut components = self.components.lock().await;
        components.autoscaler = None;
        components.remove_dead_autoscaler_dirs();
        components.cluster = None;
        drop(components);
        self.remove_state();
    }

    /// Serves the environment API on its fixed ports.
    async fn serve_api(&mut self) -> anyhow::Result<()> {
        let serve = ServeArgs {
            grpc_addr: ([127, 0, 0, 1], self.environment.grpc_port).into(),
            admin_addr: ([127, 0, 0, 1], self.environment.admin_port).into(),
            ..ServeArgs::ephemeral()
        };
        let service = EnvironmentService::new(self.components.clone());
        let server = GrpcServer::new(serve)
            .add_service(service.into_server())
            .spawn()
            .await
            .with_context(|| {
                format!(
                    "serving the environment API on port {} (is another environment running on these ports?)",
                    self.environment.grpc_port
                )
            })?;
        self.server = Some(server);
        Ok(())
    }

    fn spawn(
        &mut self,
        (spec, binary): (ServiceSpec, PathBuf),
        args: &[OsString],
        log_dir: &Path,
    ) -> anyhow::Result<()> {
        let service = ServiceProcess::spawn(spec, &binary, &self.with_kubeconfig(args), log_dir)?;
        self.services.push(service);
        Ok(())
    }

    /// `args` and the connection flags every service takes (ksim_kube::KubeArgs).
    fn with_kubeconfig(&self, args: &[OsString]) -> Vec<OsString> {
        let mut args = args.to_vec();
        args.extend(["--kubeconfig".into(), OsString::from(&self.kubeconfig)]);
        args
    }

    /// The tracer's data directory. An embedded cluster is new every time, so a log recorded
    /// from an earlier one is removed; an existing cluster's recording is kept.
    fn tracer_data_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.state_dir.join("tracer");
        if self.apiserver_url.is_some() && dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(dir)
    }

    fn write_state(&mut self) -> anyhow::Result<()> {
        state::clear_supervision(&self.state_dir);
        let pid = std::process::id();
        // Without it `ksim down` refuses to signal the pid: say why here, where it happened.
        let process = ProcessIdentity::of(pid)
            .inspect_err(|error| {
                tracing::warn!(%error, "reading this process's start time and command line");
            })
            .ok();
        EnvState {
            pid,
            kubeconfig: self.kubeconfig.clone(),
            urls: self.urls.clone(),
            started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            karpenter_instance_types: self.karpenter_instance_types.clone(),
            process,
        }
        .write(&self.state_dir)?;
        self.state_written = true;
        Ok(())
    }

    fn remove_state(&mut self) {
        if std::mem::take(&mut self.state_written)
            && let Err(error) = EnvState::remove_if_mine(&self.state_dir, std::process::id())
        {
            tracing::warn!(
                error = format!("{error:#}"),
                "removing the environment file"
            );
        }
    }
}

impl Drop for LocalEnv {
    fn drop(&mut self) {
        // Held only by a call of the environment API, which the server's end ends; what it
        // holds then goes with the last reference.
        let mut components = self.components.try_lock().ok();
        if let Some(components) = components.as_mut() {
            components.karpenter = None;
            components.autoscaler = None;
            components.remove_dead_autoscaler_dirs();
        }
        self.server = None;
        // Each service's own drop stops it; popping keeps the reverse order.
        if let Some(driver) = self.services.pop() {
            drop(driver);
            if let Some(components) = components.as_mut() {
                components.provider = None;
            }
        }
        while self.services.pop().is_some() {}
        if let Some(components) = components.as_mut() {
            components.cluster = None;
        }
        drop(components);
        self.remove_state();
    }
}

/// Checks `service`: one that exited is reported (name, exit status, log) and started again
/// after its backoff; what happened goes to `events`. Returns whether it was found exited and
/// whether it was started again.
fn supervise(
    service: &mut ServiceProcess,
    now: std::time::Instant,
    events: &mut Vec<String>,
) -> (bool, bool) {
    let name = service.spec().name;
    let mut exited = false;
    let mut restarted = false;
    if !service.backoff().waiting()
        && let Some(status) = service.exited()
    {
        exited = true;
        let delay = service.backoff().died(now);
        events.push(format!(
            "{name} exited ({status}); log {}; restarting it{}",
            service.log_path().display(),
            if delay.is_zero() {
                String::new()
            } else {
                format!(" in {}s", delay.as_secs())
            }
        ));
    }
    if service.backoff().due(now) {
        match service.restart() {
            Ok(()) => {
                restarted = true;
                events.push(format!(
                    "{name} restarted (pid {})",
                    service.pid().unwrap_or_default()
                ));
            }
            Err(error) => {
                service.backoff().died(now);
                events.push(format!("{name} could not be restarted: {error:#}"));
            }
        }
    }
    (exited, restarted)
}

/// An error if `env.json` names an environment that still runs. A stale file is ignored: its
/// pid runs nothing, or runs a process other than the one recorded (the pid was reused), the
/// same identity `ksim down` checks before it signals. A file without the identity (an older
/// ksim wrote it), or a process `/proc` cannot describe, still refuses: nothing proves it stale.
fn refuse_if_running(state_dir: &Path) -> anyhow::Result<()> {
    let Some(state) = EnvState::read(state_dir)? else {
        return Ok(());
    };
    if state.pid == std::process::id() || !services::is_alive(state.pid) {
        return Ok(());
    }
    if let (Some(recorded), Ok(now)) = (&state.process, ProcessIdentity::of(state.pid))
        && *recorded != now
    {
        tracing::info!(
            pid = state.pid,
            "env.json is stale: its pid is another process now"
        );
        return Ok(());
    }
    anyhow::bail!(
        "an environment is already up (pid {}, started {}, state in {}); stop it with `ksim down`",
        state.pid,
        state.started_at,
        state_dir.display()
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ksim_localenv::environment::state::testing::{Unrelated, write_state};

    #[test]
    fn only_the_recorded_process_alive_refuses_a_second_environment() {
        let sleep = Unrelated::spawn();
        let pid = sleep.pid();
        let real = ProcessIdentity::of(pid).unwrap();
        let dir = tempfile::tempdir().unwrap();
        // The pid now runs another process than the `ksim up` recorded: stale, not refused.
        for other in [
            ProcessIdentity {
                cmdline: vec!["ksim".to_owned(), "up".to_owned()],
                ..real.clone()
            },
            ProcessIdentity {
                start_time: real.start_time.saturating_sub(1),
                ..real.clone()
            },
        ] {
            write_state(dir.path(), pid, Some(other));
            refuse_if_running(dir.path()).unwrap();
        }
        // The recorded process itself, or one nothing proves stale: refused.
        for process in [Some(real), None] {
            write_state(dir.path(), pid, process);
            let error = refuse_if_running(dir.path()).unwrap_err().to_string();
            assert!(
                error.contains(&format!("an environment is already up (pid {pid}")),
                "{error}"
            );
        }
        // No file; a pid that runs nothing.
        let empty = tempfile::tempdir().unwrap();
        refuse_if_running(empty.path()).unwrap();
        drop(sleep);
        write_state(dir.path(), pid, None);
        refuse_if_running(dir.path()).unwrap();
    }
}
