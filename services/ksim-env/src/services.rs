//! The ksim services as child processes of the environment: how they are started, when they
//! count as up (gRPC health SERVING), and how they are stopped.

use std::{
    ffi::OsString,
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use ksim_localenv::environment::services::{ServiceSpec, log_tail, terminate};
use tokio::process::{Child, Command};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::backoff::Backoff;

/// A running service, stopped (SIGTERM, then SIGKILL) by [`Self::stop`] or, failing that, on drop.
#[derive(Debug)]
pub struct ServiceProcess {
    spec: ServiceSpec,
    child: Child,
    log: PathBuf,
    launch: Launch,
    backoff: Backoff,
}

/// How the service was started, to start it again the same way.
#[derive(Debug, Clone)]
struct Launch {
    binary: PathBuf,
    args: Vec<OsString>,
}

impl ServiceProcess {
    /// Starts `binary` with `--grpc-addr`, `--admin-addr` and `args`; stdout and stderr go to
    /// `<log_dir>/<name>.log`. It gets a process group of its own so a Ctrl-C in the terminal
    /// reaches only `ksim-env`, which then stops the services in order.
    pub fn spawn(
        spec: ServiceSpec,
        binary: &Path,
        args: &[OsString],
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        // A port already taken (another environment, say) would let the health check below
        // pass against someone else's service while ours exits.
        for port in [spec.grpc_port, spec.admin_port] {
            std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!(
                    "port {port} of the {} is in use (is another `ksim up` or `ksim demo` running?)",
                    spec.name
                )
            })?;
        }
        let log = log_dir.join(format!("{}.log", spec.name));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let launch = Launch {
            binary: binary.to_owned(),
            args: args.to_vec(),
        };
        let child = start(spec, &launch, out)?;
        Ok(Self {
            spec,
            child,
            log,
            launch,
            backoff: Backoff::new(Instant::now()),
        })
    }

    /// The exit status, once the service has exited (reaped, so no zombie is left).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn backoff(&mut self) -> &mut Backoff {
        &mut self.backoff
    }

    /// Starts the exited service again, its output appended to the same log.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let _ = writeln!(out, "--- ksim-env: restarting {} ---", self.spec.name);
        self.child = start(self.spec, &self.launch, out)?;
        self.backoff.restarted(Instant::now());
        Ok(())
    }

    /// Stops the service and starts it with `args` instead, its output appended to the same
    /// log; the caller waits for its health.
    pub async fn restart_with(
        &mut self,
        args: Vec<OsString>,
        grace: Duration,
    ) -> anyhow::Result<()> {
        self.stop(grace).await;
        self.launch.args = args;
        self.restart()
    }

    /// The binary it runs.
    pub fn binary(&self) -> &Path {
        &self.launch.binary
    }

    pub fn spec(&self) -> ServiceSpec {
        self.spec
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the service reports SERVING on gRPC health; an error with the end of its log
    /// if it exits or `deadline` passes first.
    pub async fn wait_healthy(&mut self, deadline: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before it was healthy; end of {}:\n{}",
                    self.spec.binary,
                    self.log.display(),
                    self.log_tail()
                );
            }
            let last = match health(&self.spec).await {
                Ok(ServingStatus::Serving) => return Ok(()),
                Ok(status) => format!("health says {status:?}"),
                Err(error) => format!("{error:#}"),
            };
            if started.elapsed() > deadline {
                bail!(
                    "{} at {} was not healthy after {}s ({last}); end of {}:\n{}",
                    self.spec.binary,
                    self.spec.url(),
                    deadline.as_secs(),
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, up to `grace` for a clean exit, then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Some(pid) = self.child.id() {
            terminate(pid);
        }
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                service = self.spec.name,
                "did not stop on SIGTERM; killing it"
            );
            let _ = self.child.kill().await;
        }
    }

    /// The last lines of the log, for error messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log, 20)
    }
}

impl Drop for ServiceProcess {
    /// Only reached when [`Self::stop`] was not (an error or panic on the way): a short,
    /// blocking grace, then SIGKILL, so no service outlives `ksim-env`.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Some(pid) = self.child.id() {
            terminate(pid);
        }
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.start_kill();
    }
}

/// Starts the service's process with its output going to `out`; a process group of its own, so
/// a Ctrl-C in the terminal reaches only `ksim-env`, which then stops the services in order.
fn start(spec: ServiceSpec, launch: &Launch, out: File) -> anyhow::Result<Child> {
    let err = out.try_clone()?;
    let child = Command::new(&launch.binary)
        .arg("--grpc-addr")
        .arg(format!("127.0.0.1:{}", spec.grpc_port))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{}", spec.admin_port))
        .args(&launch.args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", launch.binary.display()))?;
    tracing::debug!(service = spec.name, pid = child.id(), "started");
    Ok(child)
}

/// gRPC health of the spec's service, with short timeouts: it is polled.
async fn health(spec: &ServiceSpec) -> anyhow::Result<ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(spec.url())?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2))
        .connect()
        .await?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: spec.health_service.to_owned(),
        })
        .await
        .map_err(|status| anyhow::anyhow!("health check: {}", status.message()))?;
    Ok(response.into_inner().status())
}
