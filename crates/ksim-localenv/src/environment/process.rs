//! `ksim-env` as a child process: what `ksim demo` and an experiment's run start and stop
//! around their simulation. `ksim up` runs the same binary in its own place.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use tokio::process::{Child, Command};

use super::{
    EnvironmentError,
    services::{
        DEFAULT_PORT_BASE, ENVIRONMENT, MAX_PORT_BASE, MIN_PORT_BASE, binary_dirs, locate,
        log_tail, terminate,
    },
    state::{self, EnvState},
};

/// How long an environment may take to come up: its own steps have deadlines of their own
/// (the control plane's, each service's health); this one only ends a hang.
const START_DEADLINE: Duration = Duration::from_secs(600);
/// How long it gets to stop after SIGTERM: the driver cleans up for 30 s, the rest after.
const STOP_GRACE: Duration = Duration::from_secs(90);

/// What to start: the flags of `ksim up` and `ksim-env`, defined once here. The default is the
/// embedded control plane without a node autoscaler, on the default ports.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct EnvironmentOptions {
    /// Also start cluster-autoscaler against the cloud provider (needs its binary).
    #[arg(long, conflicts_with = "karpenter")]
    pub autoscaler: bool,
    /// Start the real Karpenter (its KWOK provider) as the node autoscaler instead, with the
    /// KWOKNodeClass `default` for your NodePools; the pool plays its nodes' kubelet. The
    /// embedded control plane only.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context"])]
    pub karpenter: bool,
    /// An instance type Karpenter may launch, as a node skeleton (repeatable), priced by the
    /// provider config's `pricing.instanceTypes`; without any, the KWOK provider's own list.
    #[arg(
        long = "instance-type",
        value_name = "SKELETON",
        requires = "karpenter"
    )]
    pub instance_types: Vec<PathBuf>,
    /// Simulate on the existing cluster of this kubeconfig instead of the embedded control plane.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context of that existing cluster.
    #[arg(long)]
    pub context: Option<String>,
    /// Where `env.json`, the logs and the services' data go (the other commands find the
    /// environment through KSIM_STATE_DIR) [default: $XDG_STATE_HOME/ksim, else
    /// ~/.local/state/ksim]
    #[arg(long, env = "KSIM_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The cloud provider's prices per instance type (for CA's price expander and the
    /// reports' costs) and per-group options, as YAML (`pricing:`, `nodeGroups:`).
    #[arg(long, value_name = "FILE")]
    pub provider_config: Option<PathBuf>,
    /// A cluster-autoscaler flag of the environment as FLAG=VALUE (repeatable), over CA's own
    /// defaults and under a recording's and a run's flags; only flags a run may set.
    #[arg(long = "autoscaler-flag", value_name = "FLAG=VALUE")]
    pub autoscaler_flags: Vec<String>,
    /// The tracer's gRPC port; the pool, cloud provider, driver and environment API take the
    /// next four, and each its metrics port 2100 above. Another environment runs beside this
    /// one with a base of its own and its own KSIM_STATE_DIR.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = DEFAULT_PORT_BASE,
        value_parser = clap::value_parser!(u16).range(i64::from(MIN_PORT_BASE)..=i64::from(MAX_PORT_BASE)),
    )]
    pub port_base: u16,
}

impl Default for EnvironmentOptions {
    fn default() -> Self {
        Self {
            autoscaler: false,
            karpenter: false,
            instance_types: Vec::new(),
            kubeconfig: None,
            context: None,
            state_dir: None,
            provider_config: None,
            autoscaler_flags: Vec::new(),
            port_base: DEFAULT_PORT_BASE,
        }
    }
}

impl EnvironmentOptions {
    /// The `ksim-env` command line that starts this environment, flag by flag.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, value: &dyn AsRef<std::ffi::OsStr>| {
            args.push(name.into());
            args.push(value.as_ref().to_owned());
        };
        for path in &self.instance_types {
            flag("--instance-type", path);
        }
        if let Some(path) = &self.kubeconfig {
            flag("--kubeconfig", path);
        }
        if let Some(context) = &self.context {
            flag("--context", context);
        }
        if let Some(dir) = &self.state_dir {
            flag("--state-dir", dir);
        }
        if let Some(path) = &self.provider_config {
            flag("--provider-config", path);
        }
        for value in &self.autoscaler_flags {
            flag("--autoscaler-flag", value);
        }
        flag("--port-base", &self.port_base.to_string());
        if self.autoscaler {
            args.push("--autoscaler".into());
        }
        if self.karpenter {
            args.push("--karpenter".into());
        }
        args
    }
}

/// The `ksim-env` binary next to the running one.
pub fn binary() -> Result<PathBuf, EnvironmentError> {
    locate(ENVIRONMENT.binary, &binary_dirs()?)
}

/// A running environment started by [`Self::start`]; stopped by [`Self::shutdown`] or, failing
/// that, on drop.
#[derive(Debug)]
pub struct EnvironmentProcess {
    child: Child,
    state: EnvState,
    state_dir: PathBuf,
}

impl EnvironmentProcess {
    /// Starts `ksim-env` with `options` and waits until it is up (its `env.json` names it);
    /// its output goes to `<state dir>/logs/environment.log`. An error names why, with the end
    /// of that log, and leaves nothing running.
    pub async fn start(options: &EnvironmentOptions) -> Result<Self, EnvironmentError> {
        let binary = binary()?;
        let state_dir = match &options.state_dir {
            Some(dir) => dir.clone(),
            None => state::state_dir()?,
        };
        let log_dir = state_dir.join("logs");
        std::fs::create_dir_all(&log_dir).map_err(EnvironmentError::io("creating", &log_dir))?;
        let log = log_dir.join("environment.log");
        let out = std::fs::File::create(&log).map_err(EnvironmentError::io("creating", &log))?;
        let err = out
            .try_clone()
            .map_err(EnvironmentError::io("opening", &log))?;
        let mut options = options.clone();
        options.state_dir = Some(state_dir.clone());
        // A process group of its own: a Ctrl-C in the terminal reaches only its parent, which
        // then stops it in order.
        let child = Command::new(&binary)
            .args(options.args())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(EnvironmentError::io("starting", &binary))?;
        let starting = Starting {
            child: Some(child),
            log,
        };
        let (child, state) = starting.wait_up(&state_dir).await?;
        Ok(Self {
            child,
            state,
            state_dir,
        })
    }

    /// What its `env.json` says: its services' URLs, its kubeconfig.
    pub fn state(&self) -> &EnvState {
        &self.state
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// SIGTERM, then its grace to stop the services and the cluster in order, then SIGKILL.
    pub async fn shutdown(mut self) {
        stop(&mut self.child).await;
    }
}

impl Drop for EnvironmentProcess {
    /// Only reached when [`EnvironmentProcess::shutdown`] was not (an error or panic on the
    /// way): SIGTERM, and the environment stops itself; nothing waits for it here.
    fn drop(&mut self) {
        if let (Ok(None), Some(pid)) = (self.child.try_wait(), self.child.id()) {
            terminate(pid);
        }
    }
}

/// An environment not yet up: terminated on drop (a failed start, an interrupted one).
struct Starting {
    child: Option<Child>,
    log: PathBuf,
}

impl Starting {
    /// The child and its `env.json`, once that names it; the child is stopped (drop) on error.
    async fn wait_up(mut self, state_dir: &Path) -> Result<(Child, EnvState), EnvironmentError> {
        let started = Instant::now();
        while let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(EnvironmentError::ExitedEarly {
                    status,
                    log: self.log.clone(),
                    tail: log_tail(&self.log, 20),
                });
            }
            // A file another environment left names another pid: not this one's yet.
            if let Ok(Some(state)) = EnvState::read(state_dir)
                && Some(state.pid) == child.id()
                && let Some(child) = self.child.take()
            {
                return Ok((child, state));
            }
            if started.elapsed() > START_DEADLINE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(EnvironmentError::NotUp {
            seconds: START_DEADLINE.as_secs(),
            log: self.log.clone(),
            tail: log_tail(&self.log, 20),
        })
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut()
            && let (Ok(None), Some(pid)) = (child.try_wait(), child.id())
        {
            terminate(pid);
        }
    }
}

async fn stop(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    if let Some(pid) = child.id() {
        terminate(pid);
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        tracing::warn!("the environment did not stop on SIGTERM; killing it");
        let _ = child.kill().await;
    }
}
