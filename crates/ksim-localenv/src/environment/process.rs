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
    services::{ENVIRONMENT, binary_dirs, locate, log_tail, terminate},
    state::{self, EnvState},
};

/// How long an environment may take to come up: its own steps have deadlines of their own
/// (the control plane's, each service's health); this one only ends a hang.
const START_DEADLINE: Duration = Duration::from_secs(600);
/// How long it gets to stop after SIGTERM: the driver cleans up for 30 s, the rest after.
const STOP_GRACE: Duration = Duration::from_secs(90);

/// What to start; the default is the embedded control plane without cluster-autoscaler. Each
/// field is a flag of `ksim-env` (and of `ksim up`), written by [`Self::args`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvironmentOptions {
    /// Also start cluster-autoscaler against the cloud provider (`--autoscaler`).
    pub autoscaler: bool,
    /// Start Karpenter (its KWOK provider) as the node autoscaler instead, with the pool
    /// playing its nodes' kubelet; the embedded control plane only (`--karpenter`).
    pub karpenter: bool,
    /// Karpenter's instance types, as node skeletons (priced by the provider config); none:
    /// the KWOK provider's built-in list (`--instance-type`).
    pub instance_types: Vec<PathBuf>,
    /// Use the existing cluster of this kubeconfig instead of the embedded control plane.
    pub kubeconfig: Option<PathBuf>,
    /// Use this context of the kubeconfig (implies an existing cluster).
    pub context: Option<String>,
    /// Where `env.json`, the logs and the services' data go; default [`state::state_dir`].
    pub state_dir: Option<PathBuf>,
    /// The cloud provider's pricing and per-group options (its `--provider-config`).
    pub provider_config: Option<PathBuf>,
    /// The environment's own cluster-autoscaler flags (`FLAG=VALUE`, each one a run may
    /// set), over CA's defaults and under every run's: the tests' and the demo's fast flags.
    pub autoscaler_flags: Vec<String>,
    /// The tracer's gRPC port, the other services' following it (`--port-base`); default
    /// [`super::services::DEFAULT_PORT_BASE`]. Environments with different bases and state
    /// directories run side by side.
    pub port_base: Option<u16>,
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
        if let Some(base) = self.port_base {
            flag("--port-base", &base.to_string());
        }
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
    log: PathBuf,
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
        let mut starting = Starting {
            child: Some(child),
            log: log.clone(),
        };
        let state = starting.wait_up(&state_dir).await?;
        let child = starting
            .child
            .take()
            .ok_or_else(|| EnvironmentError::NotUp {
                seconds: 0,
                log: log.clone(),
                tail: String::new(),
            })?;
        Ok(Self {
            child,
            state,
            state_dir,
            log,
        })
    }

    /// What its `env.json` says: its services' URLs, its kubeconfig.
    pub fn state(&self) -> &EnvState {
        &self.state
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// Where its output goes.
    pub fn log_path(&self) -> &Path {
        &self.log
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
    async fn wait_up(&mut self, state_dir: &Path) -> Result<EnvState, EnvironmentError> {
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
            {
                return Ok(state);
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
