//! The configuration under test. The environment runs the real kube-scheduler and
//! cluster-autoscaler; a simulation may ask for them to run differently (a scheduler
//! configuration file, CA flags in recorded time at the replay's speed, kube-controller-manager's
//! HPA and node lifecycle controllers at the replay's speed). This module checks such a
//! configuration with the real binaries, restarts what runs differently, and restores what the
//! environment started with, behind the `ksim.env.v1.Environment` API the driver calls.

use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::OsString,
    path::{Path, PathBuf},
    time::{Duration, Instant, SystemTime},
};

use crate::{
    NAMESPACE,
    backoff::Backoff,
    cluster::{self, Cluster, LeaseHolder, RootState},
    karpenter::KarpenterSlot,
    services::ServiceProcess,
};
use ksim_experiment::{
    AutoscalerFlags, FlagSource,
    autoscaler::{
        FlagError, FlagLayers, SIMULATION_FLAGS,
        recorded::{self, NotApplied},
        run_flags, unremovable,
    },
    scheduler,
};
use ksim_localenv::autoscaler::{
    CloudConfig, ClusterAutoscaler, ClusterAutoscalerBinary, ClusterAutoscalerBuilder,
    cluster_autoscaler_version,
};
use ksim_proto::ksim::env::v1 as pb;
use ksim_provisioning::go_duration;

/// A call that would change what a running simulation runs with, refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "simulation {simulation} is running on this environment ({why}); {call} would change the \
     scheduler or cluster-autoscaler under it, unreported: cancel it or wait for it to end"
)]
pub struct HeldByRun {
    pub simulation: String,
    pub why: &'static str,
    pub call: &'static str,
}

/// Why a configuration was not checked or applied, by what the caller can do about it (the
/// gRPC layer maps each to its status code).
#[derive(Debug, thiserror::Error)]
pub enum ConfigurationError {
    /// The configuration asks for what this environment cannot run: a flag, a file or a speed
    /// the real component refuses.
    #[error("{0}")]
    Refused(String),
    /// Not now: a component it needs is stopped or absent, or a run holds the environment.
    #[error("{0}")]
    NotNow(String),
    /// A component could not be reached to answer.
    #[error("{0}")]
    Unreachable(String),
    /// The environment failed doing it: a restart, a file it writes.
    #[error("{0}")]
    Failed(String),
}

impl From<HeldByRun> for ConfigurationError {
    fn from(held: HeldByRun) -> Self {
        Self::NotNow(held.to_string())
    }
}

/// The calls that change the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Apply,
    Restore,
}

/// Whether `change` may run now. The caller's identity is not verifiable here (any local
/// process reaches this port, and a simulation id is no secret), so the decision rests on what
/// is: the driver's Lease and the simulation's root, read from the apiserver, and which holder
/// this environment already applied a configuration for. A run's own calls fit its timeline:
/// its one ApplyConfiguration comes first, before it creates its root; its RestoreDefaults
/// comes last, after its root is deleted. Between the two, while the root lives, nothing may
/// change, and a second ApplyConfiguration under the same lease is not the run's. (Before the
/// root exists a RestoreDefaults is let through: it is how a run that failed that early cleans
/// up.)
pub(crate) fn may_change(
    change: Change,
    holder: Option<&LeaseHolder>,
    applied_for: Option<&str>,
) -> Result<(), HeldByRun> {
    let Some(holder) = holder else {
        return Ok(());
    };
    let call = match change {
        Change::Apply => "ApplyConfiguration",
        Change::Restore => "RestoreDefaults",
    };
    let refused = |why| {
        Err(HeldByRun {
            simulation: holder.simulation.clone(),
            why,
            call,
        })
    };
    match (change, holder.root) {
        (_, RootState::Live) => refused("it holds the driver's lease and its root exists"),
        (Change::Apply, _) if applied_for == Some(holder.simulation.as_str()) => {
            refused("it holds the driver's lease and its configuration is applied")
        }
        _ => Ok(()),
    }
}

/// What the scheduler runs with besides its defaults.
#[derive(Debug, Clone, PartialEq)]
struct SchedulerRun {
    given: pb::SchedulerConfig,
    /// The file kube-scheduler is started with (the given one, connected to the cluster).
    path: PathBuf,
    /// The complete configuration, as kube-scheduler wrote it when it checked the file.
    as_run_yaml: String,
}

/// How cluster-autoscaler runs: over CA's own defaults, the environment's flags, the recorded
/// cluster's, then the run's, at a speed.
#[derive(Debug, Clone, PartialEq)]
struct AutoscalerRun {
    environment: AutoscalerFlags,
    /// The recorded flags that apply.
    recorded: AutoscalerFlags,
    /// Where the recorded flags came from; empty: none.
    recorded_source: String,
    /// The recorded flags that do not apply, each with why.
    not_applied: Vec<NotApplied>,
    /// The run's flags (the configuration under test).
    flags: AutoscalerFlags,
    speed: f64,
}

impl AutoscalerRun {
    /// The environment's own CA: its flags over CA's defaults, at 1x.
    fn defaults(environment: &AutoscalerFlags) -> Self {
        Self {
            environment: environment.clone(),
            recorded: AutoscalerFlags::default(),
            recorded_source: String::new(),
            not_applied: Vec::new(),
            flags: AutoscalerFlags::default(),
            speed: 1.0,
        }
    }

    fn layers(&self) -> FlagLayers {
        FlagLayers {
            environment: self.environment.clone(),
            recording: self.recorded.clone(),
            run: self.flags.clone(),
        }
    }
}

/// kube-controller-manager's HPA controller flags that measure time in the simulated cluster,
/// each with KCM's default (recorded time) and the shortest it runs with at any speed. The sync
/// period stops at 1 s: shorter, the controller would re-read every HPA's metrics many times
/// between two of the metrics API's samples, for nothing. The others stop at 1 ms so that a
/// wait stays a wait. `--horizontal-pod-autoscaler-tolerance` is a ratio, not divided.
const HPA_DURATIONS: [(&str, Duration, Duration); 4] = [
    (
        "horizontal-pod-autoscaler-sync-period",
        Duration::from_secs(15),
        Duration::from_secs(1),
    ),
    (
        "horizontal-pod-autoscaler-downscale-stabilization",
        Duration::from_secs(5 * 60),
        Duration::from_millis(1),
    ),
    (
        "horizontal-pod-autoscaler-initial-readiness-delay",
        Duration::from_secs(30),
        Duration::from_millis(1),
    ),
    (
        "horizontal-pod-autoscaler-cpu-initialization-period",
        Duration::from_secs(5 * 60),
        Duration::from_millis(1),
    ),
];

/// kube-controller-manager's node lifecycle controller flags that measure time, each with KCM
/// 1.35's default (recorded time) and the shortest it runs with at any speed. The grace period
/// stops at 2 s: the pool renews a node's lease every fifth of it, and shorter would make the
/// healthy nodes' renewals a write storm; the startup grace alike; the monitor period (how often
/// the controller looks) at 200 ms.
const NODE_LIFECYCLE_DURATIONS: [(&str, Duration, Duration); 3] = [
    (
        "node-monitor-grace-period",
        Duration::from_secs(50),
        Duration::from_secs(2),
    ),
    (
        "node-monitor-period",
        Duration::from_secs(5),
        Duration::from_millis(200),
    ),
    (
        "node-startup-grace-period",
        Duration::from_secs(60),
        Duration::from_secs(2),
    ),
];

/// kube-controller-manager's node eviction rates, in nodes per second, with KCM 1.35's defaults
/// (recorded time): multiplied by the speed, not divided. In f64, as decimals: the product of a
/// float32 0.01 and 10 would be 0.099999994, not 0.1.
const NODE_EVICTION_RATES: [(&str, f64); 2] = [
    ("node-eviction-rate", 0.1),
    ("secondary-node-eviction-rate", 0.01),
];

/// A kube-controller-manager flag's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum KcmValue {
    Duration(Duration),
    /// Per second, as KCM holds it: its rate flags are float32, so this is the value it runs.
    Rate(f32),
}

impl std::fmt::Display for KcmValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Duration(duration) => f.write_str(&go_duration::format(*duration)),
            // The shortest decimal that reads back as the same float32, never in exponent
            // form: KCM's ParseFloat takes it (e.g. "0.3", "1", "0.00001").
            Self::Rate(rate) => write!(f, "{rate}"),
        }
    }
}

/// One kube-controller-manager flag at a speed.
#[derive(Debug, Clone, PartialEq)]
struct KcmFlag {
    name: &'static str,
    /// KCM's default, in recorded time.
    given: KcmValue,
    as_run: KcmValue,
}

impl KcmFlag {
    fn arg(&self) -> String {
        format!("--{}={}", self.name, self.as_run)
    }

    fn to_proto(&self) -> pb::ControllerManagerFlag {
        pb::ControllerManagerFlag {
            name: self.name.to_owned(),
            given: self.given.to_string(),
            as_run: self.as_run.to_string(),
        }
    }
}

/// `given` divided by `speed`, to the millisecond (as it is printed), no shorter than `floor`.
fn divided(given: Duration, speed: f64, floor: Duration) -> Duration {
    // Below 1x a duration grows: it stops at Go's longest, which KCM still takes.
    let scaled = Duration::try_from_secs_f64(given.as_secs_f64() / speed)
        .map_or(go_duration::MAX, |scaled| scaled.min(go_duration::MAX));
    let millis = Duration::from_millis(u64::try_from(scaled.as_millis()).unwrap_or(u64::MAX));
    millis.max(floor)
}

/// The HPA controller's duration flags at `speed`: KCM's defaults divided by it, each no
/// shorter than its floor. Durations are formatted as CA's divided flags are, to the
/// millisecond, so the divided value is computed to the millisecond too.
fn hpa_flags(speed: f64) -> Vec<KcmFlag> {
    HPA_DURATIONS
        .iter()
        .map(|&(name, given, floor)| KcmFlag {
            name,
            given: KcmValue::Duration(given),
            as_run: KcmValue::Duration(divided(given, speed, floor)),
        })
        .collect()
}

/// The node lifecycle controller's flags at `speed`: its durations divided by it (to the
/// millisecond, each no shorter than its floor), its eviction rates multiplied by it.
fn node_lifecycle_flags(speed: f64) -> Vec<KcmFlag> {
    let durations = NODE_LIFECYCLE_DURATIONS
        .iter()
        .map(|&(name, given, floor)| KcmFlag {
            name,
            given: KcmValue::Duration(given),
            as_run: KcmValue::Duration(divided(given, speed, floor)),
        });
    let rates = NODE_EVICTION_RATES.iter().map(|&(name, given)| {
        // Within what a float32 holds: a rate of 0 would stop evictions, not slow them.
        let scaled = (given * speed).clamp(f64::from(f32::MIN_POSITIVE), f64::from(f32::MAX));
        // KCM holds a float32: the nearest one is the value it runs.
        KcmFlag {
            name,
            given: KcmValue::Rate(given as f32),
            as_run: KcmValue::Rate(scaled as f32),
        }
    });
    durations.chain(rates).collect()
}

/// How kube-controller-manager runs besides the flags the control plane started it with.
#[derive(Debug, Clone, Default, PartialEq)]
struct ControllerManagerRun {
    /// The HPA controller's duration flags; empty: KCM's own defaults.
    hpa: Vec<KcmFlag>,
    /// The node lifecycle controller's flags; empty: as the control plane started it.
    node_lifecycle: Vec<KcmFlag>,
}

impl ControllerManagerRun {
    /// The flags KCM is started with after its launch flags (the later of a flag given twice
    /// wins). The HPA flags only where they differ from KCM's defaults, which the launch flags
    /// leave be (none at 1x, so workload autoscaling at 1x restarts nothing). The node lifecycle
    /// flags always, even at 1x: the launch flags tune the grace period for runs without node
    /// failures (`node-leases`: 200 s), and a run with them wants production's.
    fn args(&self) -> Vec<String> {
        self.hpa
            .iter()
            .filter(|flag| flag.as_run != flag.given)
            .chain(&self.node_lifecycle)
            .map(KcmFlag::arg)
            .collect()
    }
}

/// A cloud provider configuration file the provider runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderFile {
    /// Where the user's file came from, for messages and the report.
    pub source: String,
    pub yaml: String,
    /// The file the provider reads (absolute: it runs elsewhere than this process).
    pub path: PathBuf,
}

impl ProviderFile {
    /// `ksim up --provider-config FILE`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let canonical = std::fs::canonicalize(path)
            .with_context(|| format!("cannot read the provider config {}", path.display()))?;
        let yaml = ksim_grpc::files::read_text_bounded(
            &canonical,
            ksim_localenv::environment::instance_types::MAX_CONFIG_BYTES,
            "the provider config",
        )?;
        Ok(Self {
            source: path.display().to_string(),
            yaml,
            path: canonical,
        })
    }

    /// Judged by the provider `binary` itself (`--check-config`), as a run's configuration is:
    /// `ksim up` refuses a file it would refuse before anything starts.
    pub async fn check(&self, binary: &Path) -> anyhow::Result<()> {
        use anyhow::Context;
        match provider_refusal(binary, &self.path, &self.source)
            .await
            .with_context(|| format!("running {} --check-config", binary.display()))?
        {
            Some(reason) => anyhow::bail!(
                "--provider-config {}: the cloud provider refuses it: {reason}",
                self.source
            ),
            None => Ok(()),
        }
    }

    fn to_proto(&self) -> pb::ProviderConfig {
        pb::ProviderConfig {
            source: self.source.clone(),
            yaml: self.yaml.clone(),
        }
    }
}

/// Why the provider `binary` refuses the config at `path` (`--check-config`), in the words of
/// `source`, what the user named; `None` when it takes it.
async fn provider_refusal(
    binary: &Path,
    path: &Path,
    source: &str,
) -> std::io::Result<Option<String>> {
    let output = tokio::process::Command::new(binary)
        .arg("--check-config")
        .arg("--provider-config")
        .arg(path)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    if output.status.success() {
        return Ok(None);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let first = stderr
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    // Its words name the file it read; the user's file is what they know.
    let reason = first
        .trim_start_matches("Error: ")
        .replace(
            &format!("provider config {} is invalid: ", path.display()),
            "",
        )
        .replace(&path.display().to_string(), source);
    Ok(Some(reason))
}

/// What runs, or is to run: `None` is the scheduler's defaults, no CA, or no provider config.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Setup {
    scheduler: Option<SchedulerRun>,
    autoscaler: Option<AutoscalerRun>,
    provider: Option<ProviderFile>,
    controller_manager: ControllerManagerRun,
    /// The run's HPAs decide replica counts: only then are KCM's HPA flags listed (a run
    /// without them leaves KCM as it runs, which is nothing to the run). Its node lifecycle
    /// flags are listed whenever set: only a run that fails nodes sets them.
    workload_autoscaling: bool,
    /// Karpenter's release while it runs; `None`: it does not.
    karpenter: Option<String>,
}

impl Setup {
    fn to_proto(&self, binary_defaults: &BTreeMap<String, String>) -> pb::AppliedConfiguration {
        let (autoscaler, speed, autoscaler_flags) = match &self.autoscaler {
            None => (false, 1.0, Vec::new()),
            Some(run) => (true, run.speed, flags_as_run(run, binary_defaults)),
        };
        let recorded = self.autoscaler.as_ref();
        let autoscaler_simulation_flags = if autoscaler {
            SIMULATION_FLAGS
                .iter()
                .map(|flag| pb::AutoscalerSimulationFlag {
                    name: flag.name.to_owned(),
                    value: flag.value.to_owned(),
                    reason: flag.reason.to_owned(),
                })
                .collect()
        } else {
            Vec::new()
        };
        pb::AppliedConfiguration {
            scheduler_given: self.scheduler.as_ref().map(|run| run.given.clone()),
            scheduler_as_run_yaml: self
                .scheduler
                .as_ref()
                .map(|run| run.as_run_yaml.clone())
                .unwrap_or_default(),
            autoscaler,
            speed,
            autoscaler_flags,
            provider: self.provider.as_ref().map(ProviderFile::to_proto),
            autoscaler_recorded_source: recorded
                .map(|run| run.recorded_source.clone())
                .unwrap_or_default(),
            autoscaler_not_applied: recorded
                .map(|run| {
                    run.not_applied
                        .iter()
                        .map(|n| pb::AutoscalerFlagNotApplied {
                            flag: n.flag.clone(),
                            reason: n.reason.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            autoscaler_simulation_flags,
            controller_manager_flags: self
                .controller_manager
                .hpa
                .iter()
                .filter(|_| self.workload_autoscaling)
                .chain(&self.controller_manager.node_lifecycle)
                .map(KcmFlag::to_proto)
                .collect(),
            karpenter: self.karpenter.as_ref().map(|version| pb::KarpenterRun {
                version: version.clone(),
            }),
        }
    }
}

/// Every flag a configuration may set, as given and as run, with where it came from: the
/// layers of `run`, then the binary's own defaults (`binary_defaults`) of the rest.
fn flags_as_run(
    run: &AutoscalerRun,
    binary_defaults: &BTreeMap<String, String>,
) -> Vec<pb::AutoscalerFlag> {
    run_flags(&run.layers(), binary_defaults, run.speed)
        .into_iter()
        .map(|(flag, source)| pb::AutoscalerFlag {
            from_defaults: source != FlagSource::Run,
            source: match source {
                FlagSource::CaDefault => pb::AutoscalerFlagSource::CaDefault,
                FlagSource::Recording => pb::AutoscalerFlagSource::Recording,
                FlagSource::Environment => pb::AutoscalerFlagSource::Environment,
                FlagSource::Run => pb::AutoscalerFlagSource::Run,
            }
            .into(),
            floored: flag.floored,
            name: flag.given.name,
            given: flag.given.value,
            as_run: flag.as_run.value,
        })
        .collect()
}

/// The cluster, the cloud provider and the node autoscaler (cluster-autoscaler or Karpenter)
/// of an environment: what a configuration changes.
#[derive(Debug)]
pub struct Components {
    pub cluster: Option<Cluster>,
    pub autoscaler: Option<ClusterAutoscaler>,
    /// Karpenter, in an environment started with it.
    pub karpenter: Option<KarpenterSlot>,
    /// The cloud provider service; a provider configuration restarts it.
    pub provider: Option<ServiceProcess>,
    /// Its flags besides `--provider-config`.
    provider_args: Vec<OsString>,
    kubeconfig: PathBuf,
    cloud_provider_address: String,
    /// Where the scheduler configurations it runs are written.
    config_dir: PathBuf,
    /// Located when the environment starts with CA, else when a simulation first needs it.
    autoscaler_binary: Option<ClusterAutoscalerBinary>,
    /// The flags the binary lists in its `--help`, and their defaults, read once.
    known_flags: Option<(BTreeSet<String>, BTreeMap<String, String>)>,
    /// The environment's own CA flags (`ksim up --autoscaler-flag`), over CA's defaults.
    autoscaler_flags: AutoscalerFlags,
    pub(crate) running: Setup,
    /// What the environment started with.
    pub(crate) defaults: Setup,
    files_written: u32,
    /// When a CA that died is started again.
    autoscaler_backoff: Backoff,
    /// CA's outages, oldest first.
    pub(crate) outages: Vec<Outage>,
    /// The cloud provider's outages, oldest first (see [`Self::provider_supervised`]).
    pub(crate) provider_outages: Vec<Outage>,
    /// The lease holder the last ApplyConfiguration was made under (see [`may_change`]).
    pub(crate) applied_for: Option<String>,
    /// The directories of CAs that died or failed to start while the environment ran, kept
    /// so the logs its supervision lines and errors name can be read; removed when it stops
    /// ([`Self::remove_dead_autoscaler_dirs`]).
    dead_autoscaler_dirs: Vec<PathBuf>,
}

impl Components {
    pub fn new(cluster: Cluster, cloud_provider_address: String, config_dir: PathBuf) -> Self {
        Self {
            kubeconfig: cluster.kubeconfig_path().to_owned(),
            cluster: Some(cluster),
            autoscaler: None,
            karpenter: None,
            provider: None,
            provider_args: Vec::new(),
            cloud_provider_address,
            config_dir,
            autoscaler_binary: None,
            known_flags: None,
            autoscaler_flags: AutoscalerFlags::default(),
            running: Setup::default(),
            defaults: Setup::default(),
            files_written: 0,
            autoscaler_backoff: Backoff::new(Instant::now()),
            outages: Vec::new(),
            provider_outages: Vec::new(),
            applied_for: None,
            dead_autoscaler_dirs: Vec::new(),
        }
    }

    /// A CA that failed to start keeps its directory, which its error names: removed with the
    /// dead CAs' when the environment stops.
    fn keep_failed_autoscaler_dir(&mut self, error: &anyhow::Error) {
        if let Some(ksim_localenv::Error::AutoscalerStart { dir, .. }) = error.downcast_ref() {
            self.dead_autoscaler_dirs.push(dir.clone());
        }
    }

    /// Removes the directories of the CAs that died (a running CA's goes with it); kept with
    /// `KSIM_KEEP_TESTENV`, as a running CA's is.
    pub fn remove_dead_autoscaler_dirs(&mut self) {
        if std::env::var_os("KSIM_KEEP_TESTENV").is_some() {
            return;
        }
        for dir in self.dead_autoscaler_dirs.drain(..) {
            if let Err(error) = std::fs::remove_dir_all(&dir)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(%error, dir = %dir.display(), "removing a cluster-autoscaler directory");
            }
        }
    }

    /// The simulation holding the driver's Lease, read from the apiserver; `None` without one
    /// (or without a cluster: the change then fails on its own).
    pub(crate) async fn lease_holder(&self) -> Result<Option<LeaseHolder>, ConfigurationError> {
        let Some(cluster) = self.cluster.as_ref() else {
            return Ok(None);
        };
        let unavailable =
            |error: anyhow::Error| ConfigurationError::Unreachable(format!("{error:#}"));
        let client = cluster.client().await.map_err(unavailable)?;
        cluster::lease_holder(&client, NAMESPACE)
            .await
            .map_err(unavailable)
    }

    /// The environment started the cloud provider with `args` (besides `--provider-config`)
    /// and `config`: its defaults, restored after every simulation.
    pub fn started_provider(
        &mut self,
        provider: ServiceProcess,
        args: Vec<OsString>,
        config: Option<ProviderFile>,
    ) {
        self.provider = Some(provider);
        self.provider_args = args;
        self.defaults.provider.clone_from(&config);
        self.running.provider = config;
    }

    /// The environment's own CA flags, over CA's defaults and under every run's: set before
    /// CA first starts.
    pub fn set_autoscaler_flags(&mut self, flags: AutoscalerFlags) {
        self.autoscaler_flags = flags;
    }

    /// The environment started CA (see [`Self::start_default_autoscaler`]): it is part of its
    /// defaults, restored after every simulation.
    pub fn started_with_autoscaler(
        &mut self,
        autoscaler: ClusterAutoscaler,
        binary: ClusterAutoscalerBinary,
    ) {
        self.autoscaler = Some(autoscaler);
        self.autoscaler_binary = Some(binary);
        let defaults = AutoscalerRun::defaults(&self.autoscaler_flags);
        self.defaults.autoscaler = Some(defaults.clone());
        self.running.autoscaler = Some(defaults);
    }

    /// The environment started Karpenter (`slot`, running): it runs between simulations and in
    /// every one but those of cluster-autoscaler.
    pub fn started_with_karpenter(&mut self, slot: KarpenterSlot) {
        let version = Some(slot.version().to_owned());
        self.karpenter = Some(slot);
        self.defaults.karpenter.clone_from(&version);
        self.running.karpenter = version;
    }

    /// Karpenter, if it exited since the last look: it is reported, and started again by the
    /// next simulation that runs it (not during this one, which would not know).
    pub fn supervise_karpenter(&mut self, events: &mut Vec<String>) {
        if let Some(what) = self.karpenter.as_mut().and_then(KarpenterSlot::exited) {
            self.running.karpenter = None;
            events.push(format!(
                "{what}; the next simulation that runs it starts it again"
            ));
        }
    }

    /// CA started with the environment's own flags (`flags`) at 1x.
    pub async fn start_default_autoscaler(
        kubeconfig: &Path,
        cloud_provider_address: &str,
        binary: ClusterAutoscalerBinary,
        flags: &AutoscalerFlags,
    ) -> anyhow::Result<ClusterAutoscaler> {
        start_autoscaler(
            kubeconfig,
            cloud_provider_address,
            binary,
            &AutoscalerRun::defaults(flags),
        )
        .await
    }

    /// How `run` would run; an error if a real binary refuses it or this environment cannot
    /// run it. Nothing is restarted.
    pub(crate) async fn check(&mut self, run: &pb::Run) -> Result<Setup, ConfigurationError> {
        let configuration = run.configuration.clone().unwrap_or_default();
        let scheduler = match configuration.scheduler {
            Some(given) if !given.yaml.trim().is_empty() => {
                Some(self.check_scheduler(given).await?)
            }
            _ => None,
        };
        let karpenter = self.check_karpenter(run)?;
        let autoscaler = if run.autoscaler {
            Some(self.check_autoscaler(
                &configuration.autoscaler_args,
                configuration.recorded_autoscaler.as_ref(),
                run.speed,
            )?)
        } else if !configuration.autoscaler_args.is_empty() {
            return Err(ConfigurationError::Refused(
                "autoscaler_args: the simulation does not run cluster-autoscaler (enable_autoscaler is off)".into(),
            ));
        } else if run.karpenter {
            None
        } else {
            self.defaults.autoscaler.clone()
        };
        let provider = match configuration.provider {
            Some(given) if !given.yaml.trim().is_empty() => Some(self.check_provider(given).await?),
            _ => self.defaults.provider.clone(),
        };
        let controller_manager = self.check_controller_manager(run)?;
        Ok(Setup {
            scheduler,
            autoscaler,
            provider,
            controller_manager,
            workload_autoscaling: run.workload_autoscaling,
            karpenter,
        })
    }

    /// Whether Karpenter runs for `run`: when its nodes come from NodePools, and, in an
    /// environment of Karpenter's, in every run but one of cluster-autoscaler (one node
    /// autoscaler at a time).
    fn check_karpenter(&self, run: &pb::Run) -> Result<Option<String>, ConfigurationError> {
        if !run.karpenter {
            // The environment's own, unless CA runs.
            return Ok(self.defaults.karpenter.clone().filter(|_| !run.autoscaler));
        }
        if run.autoscaler {
            return Err(ConfigurationError::Refused(
                "run.karpenter: a simulation runs one node autoscaler, cluster-autoscaler \
                 (autoscaler) or Karpenter's NodePools (karpenter), not both"
                    .into(),
            ));
        }
        self.defaults.karpenter.clone().map(Some).ok_or_else(|| {
            ConfigurationError::NotNow(
                "the simulation's NodePools need Karpenter, and this environment runs without \
                 it: start it with `ksim up --karpenter`"
                    .into(),
            )
        })
    }

    /// KCM as `run` needs it, on a control plane that is ksim's to restart: with workload
    /// autoscaling, the HPA controller's durations divided by the speed (without it, the HPA
    /// flags as KCM runs them: nothing to the run); with node failures, the node lifecycle
    /// controller's flags at the speed (without them, none: the pool's tuned leases outlive a
    /// run's short grace period, and every node would be found dead).
    fn check_controller_manager(
        &self,
        run: &pb::Run,
    ) -> Result<ControllerManagerRun, ConfigurationError> {
        let wanted = ControllerManagerRun {
            hpa: if run.workload_autoscaling {
                hpa_flags(run.speed)
            } else {
                self.running.controller_manager.hpa.clone()
            },
            node_lifecycle: if run.node_lifecycle {
                node_lifecycle_flags(run.speed)
            } else {
                Vec::new()
            },
        };
        if self
            .cluster
            .as_ref()
            .and_then(Cluster::control_plane)
            .is_some()
        {
            return Ok(wanted);
        }
        // At every speed: the cluster's grace period is whatever it runs, not production's.
        if run.node_lifecycle {
            return Err(ConfigurationError::NotNow(
                "node_lifecycle: the kube-controller-manager of an existing cluster is not \
                 ksim's to restart, and its node lifecycle controller would run that cluster's \
                 grace periods and eviction rates, not production's at the replay's speed; node \
                 failures need the embedded control plane (`ksim up` without --kubeconfig)"
                    .into(),
            ));
        }
        // At 1x an existing cluster's HPA controller already runs in recorded time.
        if run.workload_autoscaling && !wanted.args().is_empty() {
            return Err(ConfigurationError::NotNow(
                "workload_autoscaling: the kube-controller-manager of an existing cluster is not \
                 ksim's to restart, and its HPA controller would run in recorded time; workload \
                 autoscaling at a speed other than 1 needs the embedded control plane (`ksim up` \
                 without --kubeconfig), or `--replicas recorded`"
                    .into(),
            ));
        }
        Ok(wanted)
    }

    /// The provider configuration written where the provider reads it, and judged by the
    /// provider binary itself (`--check-config`).
    async fn check_provider(
        &mut self,
        given: pb::ProviderConfig,
    ) -> Result<ProviderFile, ConfigurationError> {
        let source = if given.source.is_empty() {
            "(unnamed)".to_owned()
        } else {
            given.source.clone()
        };
        let binary = self
            .provider
            .as_ref()
            .map(|provider| provider.binary().to_owned())
            .ok_or_else(|| ConfigurationError::NotNow("the cloud provider is stopped".into()))?;
        let path = self.write_file("provider", &given.yaml)?;
        if let Some(reason) = provider_refusal(&binary, &path, &source)
            .await
            .map_err(|error| {
                ConfigurationError::Failed(format!("running {}: {error}", binary.display()))
            })?
        {
            return Err(ConfigurationError::Refused(format!(
                "provider configuration {source}: the cloud provider refuses it: {reason}"
            )));
        }
        Ok(ProviderFile {
            source,
            yaml: given.yaml,
            path,
        })
    }

    /// Writes `text` as the next `<kind>-<n>.yaml` of the configuration directory.
    fn write_file(&mut self, kind: &str, text: &str) -> Result<PathBuf, ConfigurationError> {
        std::fs::create_dir_all(&self.config_dir).map_err(|error| {
            ConfigurationError::Failed(format!("creating {}: {error}", self.config_dir.display()))
        })?;
        self.files_written += 1;
        let path = self
            .config_dir
            .join(format!("{kind}-{}.yaml", self.files_written));
        std::fs::write(&path, text).map_err(|error| {
            ConfigurationError::Failed(format!("writing {}: {error}", path.display()))
        })?;
        Ok(path)
    }

    async fn check_scheduler(
        &mut self,
        given: pb::SchedulerConfig,
    ) -> Result<SchedulerRun, ConfigurationError> {
        let source = if given.source.is_empty() {
            "(unnamed)".to_owned()
        } else {
            given.source.clone()
        };
        let control_plane = self
            .cluster
            .as_ref()
            .and_then(Cluster::control_plane)
            .ok_or_else(|| {
                ConfigurationError::NotNow(format!(
                    "scheduler configuration {source}: the scheduler of an existing cluster is not \
                     ksim's to restart; a scheduler configuration needs the embedded control plane \
                     (`ksim up` without --kubeconfig)"
                ))
            })?;
        let kubeconfig = control_plane.scheduler_kubeconfig_path().ok_or_else(|| {
            ConfigurationError::NotNow("the local control plane runs no kube-scheduler".into())
        })?;
        let rate = control_plane.tuning().client_rate();
        let text = scheduler::for_environment(&source, &given.yaml, kubeconfig, rate)
            .map_err(|error| ConfigurationError::Refused(error.to_string()))?;
        let binaries = control_plane.binaries().clone();
        let path = self.write_file("scheduler", &text)?;
        let as_run_yaml =
            binaries
                .check_scheduler_config(&path)
                .await
                .map_err(|error| match error {
                    // Named by the user's file, not the environment's copy of it.
                    ksim_localenv::Error::SchedulerConfig { message, .. } => {
                        ConfigurationError::Refused(format!(
                            "scheduler configuration {source}: kube-scheduler refuses it: {message}"
                        ))
                    }
                    other => ConfigurationError::Failed(other.to_string()),
                })?;
        Ok(SchedulerRun {
            given,
            path,
            as_run_yaml,
        })
    }

    /// The run's flags (`args`, each one a run may set and the binary knows, else refused) over
    /// the recorded cluster's (those that apply; the others listed with why) over the
    /// environment's.
    fn check_autoscaler(
        &mut self,
        args: &[String],
        recorded: Option<&pb::RecordedAutoscalerFlags>,
        speed: f64,
    ) -> Result<AutoscalerRun, ConfigurationError> {
        let flags = AutoscalerFlags::parse(args)
            .map_err(|error| ConfigurationError::Refused(error.to_string()))?;
        if self.known_flags.is_none() {
            let binary = self.autoscaler_binary()?;
            let internal =
                |error: ksim_localenv::Error| ConfigurationError::Failed(error.to_string());
            self.known_flags = Some((
                binary.flags().map_err(internal)?,
                binary.defaults().map_err(internal)?,
            ));
        }
        let (mut applied, mut not_applied) = match recorded {
            Some(recorded) => recorded::sort(&recorded.args),
            None => Default::default(),
        };
        if let Some((known, _)) = &self.known_flags {
            flags
                .check_known(known)
                .map_err(|error| ConfigurationError::Refused(error.to_string()))?;
            // The recorded cluster may run another release: a flag this one lacks cannot apply.
            let (kept, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut applied.flags)
                .into_iter()
                .partition(|flag| known.contains(&flag.name));
            applied.flags = kept;
            not_applied.extend(unknown.into_iter().map(|flag| NotApplied {
                reason: FlagError::Unknown(flag.name.clone()).to_string(),
                flag: flag.to_string(),
            }));
        }
        Ok(AutoscalerRun {
            environment: self.autoscaler_flags.clone(),
            recorded: applied,
            recorded_source: recorded
                .map(|recorded| recorded.source.clone())
                .unwrap_or_default(),
            not_applied,
            flags,
            speed,
        })
    }

    fn autoscaler_binary(&mut self) -> Result<ClusterAutoscalerBinary, ConfigurationError> {
        if let Some(binary) = &self.autoscaler_binary {
            return Ok(binary.clone());
        }
        let binary = ClusterAutoscalerBinary::locate().map_err(|error| {
            ConfigurationError::NotNow(format!(
                "the simulation runs cluster-autoscaler, and this environment has no binary of it: {error}"
            ))
        })?;
        self.autoscaler_binary = Some(binary.clone());
        Ok(binary)
    }

    /// Restarts what runs differently from `wanted`. If a restart fails, the environment's
    /// defaults are started again for that component, and the error says what failed.
    /// `setup` as the API says it, with the binary's defaults where they are known.
    pub(crate) fn describe(&self, setup: &Setup) -> pb::AppliedConfiguration {
        let none = BTreeMap::new();
        let defaults = self.known_flags.as_ref().map_or(&none, |(_, d)| d);
        setup.to_proto(defaults)
    }

    pub(crate) async fn converge(&mut self, wanted: Setup) -> Result<(), ConfigurationError> {
        if wanted.scheduler != self.running.scheduler {
            let control_plane = self
                .cluster
                .as_mut()
                .and_then(Cluster::control_plane_mut)
                .ok_or_else(|| ConfigurationError::NotNow("no local control plane".into()))?;
            let config = wanted.scheduler.as_ref().map(|run| run.path.as_path());
            if let Err(error) = control_plane.restart_scheduler(config).await {
                let restored = control_plane.restart_scheduler(None).await;
                self.running.scheduler = None;
                return Err(ConfigurationError::Failed(format!(
                    "restarting kube-scheduler: {error}{}",
                    restored.err().map_or_else(String::new, |again| format!(
                        "; starting it with its defaults failed too: {again}"
                    ))
                )));
            }
            tracing::info!(config = ?config, "kube-scheduler restarted");
            self.running.scheduler = wanted.scheduler;
        }
        if wanted.controller_manager.args() != self.running.controller_manager.args() {
            let control_plane = self
                .cluster
                .as_mut()
                .and_then(Cluster::control_plane_mut)
                .ok_or_else(|| ConfigurationError::NotNow("no local control plane".into()))?;
            let args = wanted.controller_manager.args();
            if let Err(error) = control_plane.restart_controller_manager(&args).await {
                let restored = control_plane.restart_controller_manager(&[]).await;
                self.running.controller_manager = ControllerManagerRun::default();
                self.running.workload_autoscaling = false;
                return Err(ConfigurationError::Failed(format!(
                    "restarting kube-controller-manager: {error}{}",
                    restored.err().map_or_else(String::new, |again| format!(
                        "; starting it with its own flags failed too: {again}"
                    ))
                )));
            }
            tracing::info!(?args, "kube-controller-manager restarted");
        }
        self.running.controller_manager = wanted.controller_manager;
        self.running.workload_autoscaling = wanted.workload_autoscaling;
        if wanted.provider != self.running.provider {
            let mut args = self.provider_args.clone();
            if let Some(file) = &wanted.provider {
                args.extend(["--provider-config".into(), file.path.clone().into()]);
            }
            let provider = self.provider.as_mut().ok_or_else(|| {
                ConfigurationError::NotNow("the cloud provider is stopped".into())
            })?;
            let restarted = provider
                .restart_with(args, Duration::from_secs(15))
                .await
                .map_err(|error| ConfigurationError::Failed(format!("{error:#}")));
            self.running.provider = None;
            restarted?;
            provider
                .wait_healthy(Duration::from_secs(90))
                .await
                .map_err(|error| ConfigurationError::Failed(format!("{error:#}")))?;
            tracing::info!(config = ?wanted.provider.as_ref().map(|f| &f.path), "cloud provider restarted");
            self.running.provider = wanted.provider.clone();
        }
        if wanted.karpenter.is_none()
            && let Some(slot) = self.karpenter.as_mut()
            && slot.running().is_some()
        {
            // Before CA starts: one node autoscaler at a time.
            slot.stop();
            self.running.karpenter = None;
            tracing::info!("karpenter stopped");
        }
        if wanted.autoscaler != self.running.autoscaler {
            // Located before the running CA stops, so a missing binary leaves it running.
            let binary = match wanted.autoscaler {
                Some(_) => Some(self.autoscaler_binary()?),
                None => None,
            };
            // The old CA must be gone first: two would act on the same groups.
            let previous = self.running.autoscaler.take();
            self.autoscaler = None;
            self.autoscaler_backoff = Backoff::new(Instant::now());
            if let (Some(run), Some(binary)) = (&wanted.autoscaler, binary) {
                match start_autoscaler(
                    &self.kubeconfig,
                    &self.cloud_provider_address,
                    binary.clone(),
                    run,
                )
                .await
                {
                    Ok(started) => {
                        tracing::info!(args = ?started.args(), "cluster-autoscaler restarted");
                        self.autoscaler = Some(started);
                        self.running.autoscaler = wanted.autoscaler;
                    }
                    Err(error) => {
                        self.keep_failed_autoscaler_dir(&error);
                        // CA as it ran before (a flag value only CA judges, say): a failed
                        // start leaves CA as it was, or to supervision if that fails too.
                        let restored = match &previous {
                            Some(run) => start_autoscaler(
                                &self.kubeconfig,
                                &self.cloud_provider_address,
                                binary,
                                run,
                            )
                            .await
                            .map(Some),
                            None => Ok(None),
                        };
                        self.running.autoscaler = previous;
                        let again = match restored {
                            Ok(started) => {
                                self.autoscaler = started;
                                String::new()
                            }
                            Err(again) => {
                                self.keep_failed_autoscaler_dir(&again);
                                self.autoscaler_backoff.died(Instant::now());
                                format!("; starting it as it ran before failed too: {again:#}")
                            }
                        };
                        return Err(ConfigurationError::Failed(format!("{error:#}{again}")));
                    }
                }
            }
        }
        if wanted.karpenter.is_some() && self.running.karpenter.is_none() {
            let control_plane = self
                .cluster
                .as_ref()
                .and_then(Cluster::control_plane)
                .ok_or_else(|| ConfigurationError::NotNow("no local control plane".into()))?;
            let slot = self.karpenter.as_mut().ok_or_else(|| {
                ConfigurationError::NotNow("this environment has no Karpenter".into())
            })?;
            slot.start(control_plane)
                .await
                .map_err(|error| ConfigurationError::Failed(format!("{error:#}")))?;
            tracing::info!("karpenter started");
            self.running.karpenter = wanted.karpenter;
        }
        Ok(())
    }

    /// CA, while the configuration asks for one: one that exited is reported (exit status,
    /// log) and started again after its backoff, with the configuration applied now; each
    /// outage is recorded. What happened goes to `events`.
    pub async fn supervise_autoscaler(&mut self, now: Instant, events: &mut Vec<String>) {
        let Some(run) = self.running.autoscaler.clone() else {
            return;
        };
        if !self.autoscaler_backoff.waiting() {
            let exited = match self.autoscaler.as_mut() {
                Some(autoscaler) => match autoscaler.exited() {
                    Some(status) => {
                        // Its log outlives it: the new CA writes another.
                        let log = autoscaler.log_path().to_owned();
                        self.dead_autoscaler_dirs.extend(autoscaler.keep_dir());
                        Some(format!("exited ({status}); log {}", log.display()))
                    }
                    None => None,
                },
                None => Some("is not running".to_owned()),
            };
            let Some(what) = exited else {
                return;
            };
            self.autoscaler = None;
            self.outages.push(Outage {
                down_at: SystemTime::now(),
                up_at: None,
            });
            let delay = self.autoscaler_backoff.died(now);
            events.push(format!(
                "cluster-autoscaler {what}; restarting it{}",
                if delay.is_zero() {
                    String::new()
                } else {
                    format!(" in {}s", delay.as_secs())
                }
            ));
        }
        if !self.autoscaler_backoff.due(now) {
            return;
        }
        let restarted = match self.autoscaler_binary() {
            Ok(binary) => {
                start_autoscaler(&self.kubeconfig, &self.cloud_provider_address, binary, &run).await
            }
            Err(error) => Err(anyhow::anyhow!("{error}")),
        };
        match restarted {
            Ok(autoscaler) => {
                events.push(format!(
                    "cluster-autoscaler restarted (pid {})",
                    autoscaler.pid()
                ));
                self.autoscaler = Some(autoscaler);
                self.autoscaler_backoff.restarted(Instant::now());
                if let Some(outage) = self.outages.last_mut() {
                    outage.up_at.get_or_insert_with(SystemTime::now);
                }
            }
            Err(error) => {
                self.keep_failed_autoscaler_dir(&error);
                self.autoscaler_backoff.died(Instant::now());
                events.push(format!(
                    "cluster-autoscaler could not be restarted: {error:#}"
                ));
            }
        }
    }
}

impl Components {
    /// Records what supervision found of the cloud provider at `at`: an exit begins an
    /// outage, a restart ends the open one, as for CA.
    pub fn provider_supervised(&mut self, exited: bool, restarted: bool, at: SystemTime) {
        record_outage(&mut self.provider_outages, exited, restarted, at);
    }
}

fn record_outage(outages: &mut Vec<Outage>, exited: bool, restarted: bool, at: SystemTime) {
    if exited {
        outages.push(Outage {
            down_at: at,
            up_at: None,
        });
    }
    if restarted && let Some(outage) = outages.last_mut() {
        outage.up_at.get_or_insert(at);
    }
}

/// A time CA was not running although the configuration asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// When supervision found it gone.
    pub down_at: SystemTime,
    /// When it answered its health check again; `None` while it is down.
    pub up_at: Option<SystemTime>,
}

/// The outages that had not ended by `since` (all without it), as the API gives them.
pub(crate) fn outages_since(
    outages: &[Outage],
    since: Option<SystemTime>,
) -> Vec<pb::AutoscalerOutage> {
    outages
        .iter()
        .filter(|outage| match (since, outage.up_at) {
            (Some(since), Some(up_at)) => up_at >= since,
            _ => true,
        })
        .map(|outage| pb::AutoscalerOutage {
            down_time: Some(outage.down_at.into()),
            up_time: outage.up_at.map(Into::into),
        })
        .collect()
}

async fn start_autoscaler(
    kubeconfig: &Path,
    cloud_provider_address: &str,
    binary: ClusterAutoscalerBinary,
    run: &AutoscalerRun,
) -> anyhow::Result<ClusterAutoscaler> {
    use anyhow::Context;
    let cloud_config = CloudConfig::plaintext(cloud_provider_address);
    let mut builder = ClusterAutoscalerBuilder::new(kubeconfig, cloud_config)
        .binary(binary)
        .speed(run.speed);
    let layers = run.layers();
    let merged = layers.run.over(&layers.recording.over(&layers.environment));
    for flag in &merged.flags {
        builder = builder.arg(flag.to_string());
    }
    builder.start().await.context("starting cluster-autoscaler")
}

/// Most of CA's `/metrics` read for its unremovable counts: its text runs to some hundred KB.
pub(crate) const MAX_METRICS_BYTES: usize = 4 << 20;

/// The answer of `GetUnremovableNodes` from CA's metrics `text`.
pub(crate) fn unremovable_nodes(
    text: &str,
) -> Result<pb::GetUnremovableNodesResponse, ConfigurationError> {
    let read =
        unremovable::parse(text).map_err(|error| ConfigurationError::Failed(error.to_string()))?;
    Ok(pb::GetUnremovableNodesResponse {
        counts: read
            .counts
            .into_iter()
            .map(|(reason, nodes)| pb::UnremovableCount { reason, nodes })
            .collect(),
        autoscaler_release: cluster_autoscaler_version().to_owned(),
        autoscaler_start_time: read
            .process_start_seconds
            .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
            .map(|since_epoch| (SystemTime::UNIX_EPOCH + since_epoch).into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_simulation_refuses_configuration_changes_but_its_own() {
        let holder = |root| LeaseHolder {
            simulation: "5f-1".to_owned(),
            root,
        };
        let (absent, live, deleting) = (
            holder(RootState::Absent),
            holder(RootState::Live),
            holder(RootState::Deleting),
        );
        // Nothing runs: anyone may change it.
        assert_eq!(may_change(Change::Apply, None, Some("5f-1")), Ok(()));
        assert_eq!(may_change(Change::Restore, None, None), Ok(()));
        // The run's first step: its ApplyConfiguration, before its root.
        assert_eq!(may_change(Change::Apply, Some(&absent), None), Ok(()));
        assert_eq!(
            may_change(Change::Apply, Some(&absent), Some("an-earlier")),
            Ok(())
        );
        // A second one under the same lease is not the run's.
        let second = may_change(Change::Apply, Some(&absent), Some("5f-1")).unwrap_err();
        assert_eq!(second.simulation, "5f-1");
        // While its root lives, neither call.
        for change in [Change::Apply, Change::Restore] {
            let refused = may_change(change, Some(&live), None).unwrap_err();
            assert!(
                refused
                    .to_string()
                    .starts_with("simulation 5f-1 is running"),
                "{refused}"
            );
        }
        let restore = may_change(Change::Restore, Some(&live), Some("5f-1")).unwrap_err();
        assert!(restore.to_string().contains("RestoreDefaults"), "{restore}");
        assert!(matches!(
            ConfigurationError::from(restore),
            ConfigurationError::NotNow(_)
        ));
        // Its cleanup: the root is going or gone, then the defaults come back.
        assert_eq!(
            may_change(Change::Restore, Some(&deleting), Some("5f-1")),
            Ok(())
        );
        assert_eq!(
            may_change(Change::Restore, Some(&absent), Some("5f-1")),
            Ok(())
        );
        assert!(may_change(Change::Apply, Some(&deleting), Some("5f-1")).is_err());
    }

    #[test]
    fn a_provider_exit_opens_an_outage_its_restart_closes() {
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let mut outages = Vec::new();
        record_outage(&mut outages, false, false, at(5));
        assert!(
            outages.is_empty(),
            "a look that found it running records nothing"
        );
        record_outage(&mut outages, true, false, at(10));
        record_outage(&mut outages, false, true, at(12));
        // Killed and started again in one look: an outage of no length, still listed.
        record_outage(&mut outages, true, true, at(20));
        record_outage(&mut outages, true, false, at(30));
        let listed = outages_since(&outages, Some(at(11)));
        let times: Vec<_> = listed
            .iter()
            .map(|o| (o.down_time.map(|t| t.seconds), o.up_time.map(|t| t.seconds)))
            .collect();
        assert_eq!(
            times,
            [(Some(10), Some(12)), (Some(20), Some(20)), (Some(30), None)]
        );
    }

    #[test]
    fn outages_since_a_time_are_those_not_over_by_then() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let outages = [
            Outage {
                down_at: at(10),
                up_at: Some(at(20)),
            },
            Outage {
                down_at: at(30),
                up_at: Some(at(40)),
            },
            Outage {
                down_at: at(50),
                up_at: None,
            },
        ];
        let downs = |since| -> Vec<i64> {
            outages_since(&outages, since)
                .iter()
                .map(|o| o.down_time.unwrap_or_default().seconds)
                .collect()
        };
        assert_eq!(downs(None), [10, 30, 50]);
        assert_eq!(downs(Some(at(35))), [30, 50]);
        assert_eq!(downs(Some(at(41))), [50]);
        let open = &outages_since(&outages, Some(at(60)))[0];
        assert_eq!(open.up_time, None);
    }

    #[test]
    fn unremovable_nodes_carry_the_gauge_the_release_and_the_start() {
        let answer = unremovable_nodes(
            "# TYPE cluster_autoscaler_unremovable_nodes_count gauge\n\
             cluster_autoscaler_unremovable_nodes_count{reason=\"15\"} 1\n\
             cluster_autoscaler_unremovable_nodes_count{reason=\"4\"} 2\n\
             process_start_time_seconds 1767225600\n",
        )
        .unwrap();
        let counts: Vec<(u32, u64)> = answer.counts.iter().map(|c| (c.reason, c.nodes)).collect();
        assert_eq!(counts, [(4, 2), (15, 1)]);
        assert_eq!(answer.autoscaler_release, cluster_autoscaler_version());
        assert_eq!(
            answer.autoscaler_start_time.map(|t| t.seconds),
            Some(1_767_225_600)
        );
        let error =
            unremovable_nodes("cluster_autoscaler_unremovable_nodes_count{reason=\"x\"} 1\n")
                .unwrap_err();
        assert!(
            matches!(&error, ConfigurationError::Failed(message) if message.contains("line 1")),
            "{error:?}"
        );
    }

    #[test]
    fn the_hpa_controllers_durations_are_its_defaults_divided_by_the_speed() {
        let as_run = |speed| -> Vec<(String, String)> {
            hpa_flags(speed)
                .iter()
                .map(|flag| (flag.name.to_owned(), flag.as_run.to_string()))
                .collect()
        };
        let named = |values: [&str; 4]| -> Vec<(String, String)> {
            HPA_DURATIONS
                .iter()
                .zip(values)
                .map(|((name, _, _), value)| ((*name).to_owned(), value.to_owned()))
                .collect()
        };
        assert_eq!(as_run(10.0), named(["1.5s", "30s", "3s", "30s"]));
        // The sync period stops at its 1 s floor; the others go on down.
        assert_eq!(as_run(1000.0), named(["1s", "300ms", "30ms", "300ms"]));
        assert_eq!(as_run(0.5), named(["30s", "10m", "1m", "10m"]));
        // To the millisecond, as printed: 15 s / 7 is 2.142857 s.
        assert_eq!(as_run(7.0)[0].1, "2.142s");

        // At 1x KCM runs its own defaults: nothing to pass, nothing to restart for.
        let at = |speed| ControllerManagerRun {
            hpa: hpa_flags(speed),
            ..Default::default()
        };
        assert_eq!(at(1.0).args(), Vec::<String>::new());
        assert_eq!(
            at(10.0).args(),
            [
                "--horizontal-pod-autoscaler-sync-period=1.5s",
                "--horizontal-pod-autoscaler-downscale-stabilization=30s",
                "--horizontal-pod-autoscaler-initial-readiness-delay=3s",
                "--horizontal-pod-autoscaler-cpu-initialization-period=30s",
            ]
        );
    }

    #[test]
    fn controller_manager_flags_are_listed_only_when_the_run_asks_for_workload_autoscaling() {
        let mut setup = Setup {
            controller_manager: ControllerManagerRun {
                hpa: hpa_flags(10.0),
                ..Default::default()
            },
            ..Setup::default()
        };
        let none = BTreeMap::new();
        assert!(setup.to_proto(&none).controller_manager_flags.is_empty());
        setup.workload_autoscaling = true;
        let listed = setup.to_proto(&none).controller_manager_flags;
        let rows: Vec<(&str, &str, &str)> = listed
            .iter()
            .map(|flag| {
                (
                    flag.name.as_str(),
                    flag.given.as_str(),
                    flag.as_run.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("horizontal-pod-autoscaler-sync-period", "15s", "1.5s"),
                (
                    "horizontal-pod-autoscaler-downscale-stabilization",
                    "5m",
                    "30s"
                ),
                (
                    "horizontal-pod-autoscaler-initial-readiness-delay",
                    "30s",
                    "3s"
                ),
                (
                    "horizontal-pod-autoscaler-cpu-initialization-period",
                    "5m",
                    "30s"
                ),
            ]
        );
    }

    /// `flags` as (name, given, as_run), as the API lists them.
    fn rows(flags: &[KcmFlag]) -> Vec<(String, String, String)> {
        flags
            .iter()
            .map(|flag| {
                let flag = flag.to_proto();
                (flag.name, flag.given, flag.as_run)
            })
            .collect()
    }

    /// The node lifecycle flags as (name, given, as_run), run with these values.
    fn node_lifecycle_rows(as_run: [&str; 5]) -> Vec<(String, String, String)> {
        let names = [
            ("node-monitor-grace-period", "50s"),
            ("node-monitor-period", "5s"),
            ("node-startup-grace-period", "1m"),
            ("node-eviction-rate", "0.1"),
            ("secondary-node-eviction-rate", "0.01"),
        ];
        names
            .iter()
            .zip(as_run)
            .map(|(&(name, given), as_run)| (name.to_owned(), given.to_owned(), as_run.to_owned()))
            .collect()
    }

    #[test]
    fn the_node_lifecycle_controllers_durations_are_divided_and_its_rates_multiplied() {
        let at = |speed| rows(&node_lifecycle_flags(speed));
        assert_eq!(
            at(10.0),
            node_lifecycle_rows(["5s", "500ms", "6s", "1", "0.1"])
        );
        // Production's at 1x, the tuned 200 s grace period notwithstanding.
        assert_eq!(
            at(1.0),
            node_lifecycle_rows(["50s", "5s", "1m", "0.1", "0.01"])
        );
        assert_eq!(
            at(0.5),
            node_lifecycle_rows(["1m40s", "10s", "2m", "0.05", "0.005"])
        );
        // The durations stop at their floors (0.5 s, 50 ms and 0.6 s divided); rates go on up.
        assert_eq!(
            at(100.0),
            node_lifecycle_rows(["2s", "200ms", "2s", "10", "1"])
        );
        assert_eq!(
            at(1000.0),
            node_lifecycle_rows(["2s", "200ms", "2s", "100", "10"])
        );
        // To the millisecond, and rates as plain decimals (0.1 x 3 is 0.30000000000000004).
        assert_eq!(
            at(3.0),
            node_lifecycle_rows(["16.666s", "1.666s", "20s", "0.3", "0.03"])
        );
        assert_eq!(at(0.001)[4].2, "0.00001");
        // A rate never reaches 0 (no evictions at all) nor a float32's infinity.
        for speed in [1e-60, 1e60] {
            for (_, _, rate) in &at(speed)[3..] {
                let parsed: f32 = rate.parse().unwrap();
                assert!(parsed > 0.0 && parsed.is_finite(), "{speed}: {rate}");
                assert!(!rate.contains(['e', 'E']), "{rate}");
            }
        }
    }

    #[test]
    fn a_node_lifecycle_run_passes_its_flags_at_every_speed_after_the_hpa_controllers() {
        let run = |speed, hpa: bool| ControllerManagerRun {
            hpa: if hpa { hpa_flags(speed) } else { Vec::new() },
            node_lifecycle: node_lifecycle_flags(speed),
        };
        // At 1x too: the environment's launch flags tune the grace period to 200 s.
        let at_one = run(1.0, true).args();
        assert_eq!(
            at_one,
            [
                "--node-monitor-grace-period=50s",
                "--node-monitor-period=5s",
                "--node-startup-grace-period=1m",
                "--node-eviction-rate=0.1",
                "--secondary-node-eviction-rate=0.01",
            ]
        );
        // So a node lifecycle run at 1x restarts KCM from its defaults (RestoreDefaults' args).
        assert_ne!(at_one, ControllerManagerRun::default().args());
        assert_eq!(
            run(10.0, true).args(),
            [
                "--horizontal-pod-autoscaler-sync-period=1.5s",
                "--horizontal-pod-autoscaler-downscale-stabilization=30s",
                "--horizontal-pod-autoscaler-initial-readiness-delay=3s",
                "--horizontal-pod-autoscaler-cpu-initialization-period=30s",
                "--node-monitor-grace-period=5s",
                "--node-monitor-period=500ms",
                "--node-startup-grace-period=6s",
                "--node-eviction-rate=1",
                "--secondary-node-eviction-rate=0.1",
            ]
        );
        assert_eq!(run(10.0, false).args()[0], "--node-monitor-grace-period=5s");
    }

    #[test]
    fn node_lifecycle_flags_are_listed_after_the_hpa_controllers_when_the_run_asks() {
        let setup = |workload_autoscaling, node_lifecycle| Setup {
            controller_manager: ControllerManagerRun {
                hpa: hpa_flags(10.0),
                node_lifecycle: if node_lifecycle {
                    node_lifecycle_flags(10.0)
                } else {
                    Vec::new()
                },
            },
            workload_autoscaling,
            ..Setup::default()
        };
        let none = BTreeMap::new();
        let listed = |workload_autoscaling, node_lifecycle| {
            setup(workload_autoscaling, node_lifecycle)
                .to_proto(&none)
                .controller_manager_flags
                .into_iter()
                .map(|flag| (flag.name, flag.given, flag.as_run))
                .collect::<Vec<_>>()
        };
        let node_lifecycle = node_lifecycle_rows(["5s", "500ms", "6s", "1", "0.1"]);
        assert_eq!(listed(false, true), node_lifecycle);
        // What the driver sizes the pool's leases by.
        assert_eq!(
            listed(false, true)
                .iter()
                .find(|(name, _, _)| name == "node-monitor-grace-period")
                .map(|(_, _, as_run)| as_run.as_str()),
            Some("5s")
        );
        let both = listed(true, true);
        assert_eq!(both.len(), 9);
        assert_eq!(both[..4], rows(&hpa_flags(10.0))[..]);
        assert_eq!(both[4..], node_lifecycle[..]);
        assert!(listed(false, false).is_empty());
    }

    /// The components of an existing cluster whose files go to `dir`, nothing started.
    fn of_an_existing_cluster(dir: &Path) -> Components {
        Components::new(
            Cluster::Existing {
                kubeconfig: dir.join("kubeconfig"),
            },
            "127.0.0.1:1".to_owned(),
            dir.join("config"),
        )
    }

    #[tokio::test]
    async fn workload_autoscaling_needs_the_embedded_plane_and_a_run_without_it_keeps_kcm() {
        let dir = tempfile::tempdir().unwrap();
        let mut components = of_an_existing_cluster(dir.path());
        let run = |workload_autoscaling| pb::Run {
            speed: 10.0,
            workload_autoscaling,
            ..Default::default()
        };
        let error = components.check(&run(true)).await.unwrap_err();
        assert!(
            matches!(&error, ConfigurationError::NotNow(message)
                if message.starts_with("workload_autoscaling: ")
                    && message.contains("existing cluster is not ksim's to restart")),
            "{error:?}"
        );
        // At 1x its HPA controller already runs in recorded time: nothing to restart.
        let at_one = components
            .check(&pb::Run {
                speed: 1.0,
                workload_autoscaling: true,
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(at_one.controller_manager.args().is_empty());
        // Whatever KCM runs, a run without workload autoscaling wants it so, and lists nothing.
        components.running.controller_manager = ControllerManagerRun {
            hpa: hpa_flags(4.0),
            ..Default::default()
        };
        components.running.workload_autoscaling = true;
        let wanted = components.check(&run(false)).await.unwrap();
        assert_eq!(
            wanted.controller_manager,
            components.running.controller_manager
        );
        assert!(!wanted.workload_autoscaling);
        assert!(
            components
                .describe(&wanted)
                .controller_manager_flags
                .is_empty()
        );
    }

    #[tokio::test]
    async fn node_lifecycle_needs_the_embedded_plane_at_every_speed_and_a_run_without_it_drops_it()
    {
        let dir = tempfile::tempdir().unwrap();
        let mut components = of_an_existing_cluster(dir.path());
        let run = |speed, workload_autoscaling, node_lifecycle| pb::Run {
            speed,
            workload_autoscaling,
            node_lifecycle,
            ..Default::default()
        };
        // At 1x too (the cluster's grace period is its own), alone or with workload autoscaling
        // (which alone at 1x it would take).
        for (speed, workload_autoscaling) in [(1.0, false), (1.0, true), (10.0, false), (0.5, true)]
        {
            let error = components
                .check(&run(speed, workload_autoscaling, true))
                .await
                .unwrap_err();
            assert!(
                matches!(&error, ConfigurationError::NotNow(message)
                    if message.starts_with("node_lifecycle: ")
                        && message.contains("existing cluster is not ksim's to restart")
                        && message.contains("grace period")),
                "{speed} {workload_autoscaling}: {error:?}"
            );
        }
        assert!(components.check(&run(1.0, true, false)).await.is_ok());
        // A run without node failures wants none of their flags, whatever KCM runs (the pool's
        // tuned leases would outlive a run's grace period), and keeps the HPA flags as they run.
        components.running.controller_manager = ControllerManagerRun {
            hpa: hpa_flags(4.0),
            node_lifecycle: node_lifecycle_flags(4.0),
        };
        let wanted = components.check(&run(4.0, false, false)).await.unwrap();
        assert_eq!(
            wanted.controller_manager,
            ControllerManagerRun {
                hpa: hpa_flags(4.0),
                node_lifecycle: Vec::new(),
            }
        );
        assert!(
            components
                .describe(&wanted)
                .controller_manager_flags
                .is_empty()
        );
    }

    #[test]
    fn karpenter_runs_in_its_environment_unless_a_run_is_cluster_autoscalers() {
        let dir = tempfile::tempdir().unwrap();
        let mut components = of_an_existing_cluster(dir.path());
        let run = |autoscaler, karpenter| pb::Run {
            autoscaler,
            karpenter,
            ..Default::default()
        };
        let both = components.check_karpenter(&run(true, true)).unwrap_err();
        assert!(
            matches!(&both, ConfigurationError::Refused(message) if message.contains("not both")),
            "{both:?}"
        );
        let without = components.check_karpenter(&run(false, true)).unwrap_err();
        assert!(
            matches!(&without, ConfigurationError::NotNow(message)
                if message.contains("ksim up --karpenter")),
            "{without:?}"
        );
        assert_eq!(
            components.check_karpenter(&run(false, false)).unwrap(),
            None
        );

        // An environment started with Karpenter (a binary never run here).
        let bin = dir.path().join("karpenter-bin");
        std::fs::create_dir_all(bin.join("crds")).unwrap();
        std::fs::write(bin.join("karpenter"), "").unwrap();
        let binary = ksim_localenv::KarpenterBinary::in_dir(&bin).unwrap();
        components.started_with_karpenter(KarpenterSlot::new(
            crate::karpenter::KarpenterSetup::of_binary(binary),
        ));
        let version = Some(ksim_localenv::karpenter::karpenter_version().to_owned());
        assert_eq!(
            components.check_karpenter(&run(false, true)).unwrap(),
            version.clone()
        );
        // Between runs and in runs of fixed groups it runs; a run of CA's stops it.
        assert_eq!(
            components.check_karpenter(&run(false, false)).unwrap(),
            version.clone()
        );
        assert_eq!(components.check_karpenter(&run(true, false)).unwrap(), None);
        assert_eq!(
            components.describe(&components.defaults).karpenter,
            version.map(|version| pb::KarpenterRun { version })
        );
    }

    #[test]
    fn flags_as_run_list_every_layer_and_cas_defaults_divided_by_the_speed() {
        let parse = |texts: &[&str]| AutoscalerFlags::parse(texts).unwrap();
        let (recorded, not_applied) = recorded::sort(&["scan-interval=30s", "cloud-provider=aws"]);
        let run = AutoscalerRun {
            environment: parse(&["scan-interval=1s", "v=4"]),
            recorded,
            recorded_source: "file prod.flags".into(),
            not_applied,
            flags: parse(&["scale-down-unneeded-time=2m", "expander=price"]),
            speed: 20.0,
        };
        let binary = BTreeMap::from([
            ("node-delete-delay-after-taint".to_owned(), "5s".to_owned()),
            ("expander".to_owned(), "random".to_owned()),
            ("skip-nodes-with-system-pods".to_owned(), "true".to_owned()),
        ]);
        let flags = flags_as_run(&run, &binary);
        let find = |name: &str| flags.iter().find(|flag| flag.name == name).unwrap();
        let unneeded = find("scale-down-unneeded-time");
        assert_eq!(
            (unneeded.given.as_str(), unneeded.as_run.as_str()),
            ("2m", "6s")
        );
        assert_eq!(unneeded.source(), pb::AutoscalerFlagSource::Run);
        assert!(!unneeded.from_defaults);
        let expander = find("expander");
        assert_eq!(
            (expander.given.as_str(), expander.as_run.as_str()),
            ("price", "price")
        );
        // The recording's 30s over the environment's 1s, divided by 20.
        let scan = find("scan-interval");
        assert_eq!((scan.given.as_str(), scan.as_run.as_str()), ("30s", "1.5s"));
        assert_eq!(scan.source(), pb::AutoscalerFlagSource::Recording);
        assert_eq!(find("v").source(), pb::AutoscalerFlagSource::Environment);
        assert_eq!(
            flags
                .iter()
                .filter(|flag| flag.name == "scale-down-unneeded-time")
                .count(),
            1
        );
        assert!(flags.iter().all(|flag| flag.name != "cloud-provider"));
        // CA's own defaults: the durations divided, the rest as they are.
        let taint = find("node-delete-delay-after-taint");
        assert_eq!(
            (taint.as_run.as_str(), taint.source()),
            ("250ms", pb::AutoscalerFlagSource::CaDefault)
        );
        let system = find("skip-nodes-with-system-pods");
        assert_eq!(
            (system.as_run.as_str(), system.source()),
            ("true", pb::AutoscalerFlagSource::CaDefault)
        );
        let applied = Setup {
            autoscaler: Some(run),
            ..Setup::default()
        }
        .to_proto(&binary);
        assert_eq!(applied.autoscaler_recorded_source, "file prod.flags");
        assert_eq!(applied.autoscaler_not_applied.len(), 1);
        assert_eq!(
            applied.autoscaler_not_applied[0].flag,
            "--cloud-provider=aws"
        );
        assert!(
            applied
                .autoscaler_simulation_flags
                .iter()
                .any(|flag| flag.name == "leader-elect" && flag.value == "false")
        );
    }
}
