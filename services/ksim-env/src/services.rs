//! The ksim services as child processes: where their binaries are, how they are started, when
//! they count as up (gRPC health SERVING), and how they are stopped.

use std::{
    ffi::OsString,
    fs::File,
    io::{Read, Seek, SeekFrom, Write as _},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::backoff::Backoff;
use tokio::process::{Child, Command};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// One ksim service of the local environment, on loopback ports fixed by the environment's
/// port base ([`ServiceSpec::at`]). They lie below the ephemeral port range (Linux:
/// 32768-60999, IANA: 49152-65535): a port in it may be the local end of any outgoing
/// connection, such as a control-plane component's to the API server, and then `ksim up`
/// cannot bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Short name, used for the log file.
    pub name: &'static str,
    /// Executable name, looked up next to the `ksim` binary.
    pub binary: &'static str,
    pub grpc_port: u16,
    pub admin_port: u16,
    /// The gRPC service whose health says the service is up.
    pub health_service: &'static str,
}

/// The tracer's gRPC port in the default environment; the other services follow it.
pub const DEFAULT_PORT_BASE: u16 = 7061;
/// A service's admin (metrics) port lies this far above its gRPC port.
const ADMIN_OFFSET: u16 = 2100;
/// The services of one environment, in [`ServiceSpec::at`]'s order.
const SPECS: [ServiceSpec; 5] = [TRACER, POOL, CLOUDPROV, DRIVER, ENVIRONMENT];
/// The lowest port base: ports below 1024 need privileges.
pub const MIN_PORT_BASE: u16 = 1024;
/// The highest port base whose every port stays below the ephemeral range.
#[allow(clippy::cast_possible_truncation)] // SPECS has five entries.
pub const MAX_PORT_BASE: u16 = 32767 - ADMIN_OFFSET - (SPECS.len() as u16 - 1);

impl ServiceSpec {
    /// This service in the environment whose ports begin at `base` (the default environment's
    /// is [`DEFAULT_PORT_BASE`]): its gRPC port keeps its place after the tracer's, and its
    /// admin port stays [`ADMIN_OFFSET`] above. `base` must be in
    /// [`MIN_PORT_BASE`]..=[`MAX_PORT_BASE`] (`ksim up --port-base` checks it).
    pub fn at(self, base: u16) -> Self {
        let grpc_port = self.grpc_port - DEFAULT_PORT_BASE + base;
        Self {
            grpc_port,
            admin_port: grpc_port + ADMIN_OFFSET,
            ..self
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }
}

pub const TRACER: ServiceSpec = ServiceSpec {
    name: "tracer",
    binary: "ksim-tracer",
    grpc_port: 7061,
    admin_port: 9161,
    health_service: ksim_proto::ksim::trace::v1::trace_store_server::SERVICE_NAME,
};

pub const POOL: ServiceSpec = ServiceSpec {
    name: "pool",
    binary: "ksim-vnode",
    grpc_port: 7062,
    admin_port: 9162,
    health_service: ksim_proto::ksim::vnode::v1::virtual_node_pool_server::SERVICE_NAME,
};

pub const CLOUDPROV: ServiceSpec = ServiceSpec {
    name: "cloudprov",
    binary: "ksim-cloudprov",
    grpc_port: 7063,
    admin_port: 9163,
    health_service:
        ksim_proto::clusterautoscaler::cloudprovider::v1::externalgrpc::cloud_provider_server::SERVICE_NAME,
};

pub const DRIVER: ServiceSpec = ServiceSpec {
    name: "driver",
    binary: "ksim-driver",
    grpc_port: 7064,
    admin_port: 9164,
    health_service: ksim_proto::ksim::driver::v1::driver_server::SERVICE_NAME,
};

/// The environment's own API (the configuration under test), served by the `ksim` process
/// itself rather than a child.
pub const ENVIRONMENT: ServiceSpec = ServiceSpec {
    name: "environment",
    binary: "ksim",
    grpc_port: 7065,
    admin_port: 9165,
    health_service: ksim_proto::ksim::env::v1::environment_server::SERVICE_NAME,
};

/// The directory holding the service binaries: the one `ksim` runs from (target/debug in a
/// checkout). Test executables live one level down, in `deps/`, so that one is tried too.
pub fn binary_dirs() -> anyhow::Result<Vec<PathBuf>> {
    let exe = std::env::current_exe().context("finding the ksim executable")?;
    let mut dirs = Vec::new();
    if let Some(dir) = exe.parent() {
        dirs.push(dir.to_owned());
        if dir.file_name().is_some_and(|name| name == "deps")
            && let Some(parent) = dir.parent()
        {
            dirs.push(parent.to_owned());
        }
    }
    Ok(dirs)
}

/// The path of `binary` in the first of `dirs` that has it.
pub fn locate(binary: &str, dirs: &[PathBuf]) -> anyhow::Result<PathBuf> {
    dirs.iter()
        .map(|dir| dir.join(binary))
        .find(|path| path.is_file())
        .with_context(|| {
            let searched = dirs.first().map_or_else(String::new, |d| d.display().to_string());
            format!("{binary} not found next to ksim (in {searched}); build it with `cargo build --workspace`")
        })
}

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
    /// reaches only `ksim`, which then stops the services in order.
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
        let _ = writeln!(out, "--- ksim up: restarting {} ---", self.spec.name);
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
    /// blocking grace, then SIGKILL, so no service outlives `ksim`.
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
/// a Ctrl-C in the terminal reaches only `ksim`, which then stops the services in order.
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

/// SIGTERM through kill(1): the workspace forbids `unsafe`, so no direct libc call.
pub fn terminate(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Whether a process with this pid exists (`kill -0`) and is not a zombie: an exited `ksim up`
/// whose parent has not reaped it yet has stopped everything it ran.
pub fn is_alive(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesised command name, which may itself contain ") ".
    if stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('Z'))
    {
        return false;
    }
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The last `lines` lines of a file, or a note that it could not be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    const TAIL_BYTES: u64 = 8192;
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|mut file| {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)))?;
        file.read_to_end(&mut bytes)
    });
    if let Err(error) = read {
        return format!("(cannot read {}: {error})", path.display());
    }
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_error_names_it_and_the_build_command() {
        let dir = tempfile::tempdir().unwrap();
        let error = locate("ksim-nothing", &[dir.path().to_owned()]).unwrap_err();
        let message = format!("{error:#}");
        assert!(message.contains("ksim-nothing"), "{message}");
        assert!(message.contains("cargo build --workspace"), "{message}");
        std::fs::write(dir.path().join("ksim-nothing"), "").unwrap();
        assert_eq!(
            locate("ksim-nothing", &[dir.path().to_owned()]).unwrap(),
            dir.path().join("ksim-nothing")
        );
    }

    #[test]
    fn liveness_follows_the_process_and_ignores_zombies() {
        assert!(is_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not reaped: a zombie.
        std::thread::sleep(Duration::from_millis(300));
        assert!(!is_alive(pid));
        child.wait().unwrap();
        assert!(!is_alive(pid));
    }

    fn ports_at_default() -> Vec<u16> {
        SPECS
            .iter()
            .flat_map(|spec| [spec.grpc_port, spec.admin_port])
            .collect()
    }

    #[test]
    fn fixed_ports_are_distinct_and_outside_the_ephemeral_range() {
        let ports_at = |base: u16| -> Vec<u16> {
            SPECS
                .iter()
                .flat_map(|spec| {
                    let spec = spec.at(base);
                    [spec.grpc_port, spec.admin_port]
                })
                .collect()
        };
        // The default environment's ports are the ones the docs name.
        assert_eq!(ports_at(DEFAULT_PORT_BASE), ports_at_default());
        assert_eq!(TRACER.at(8000).url(), "http://127.0.0.1:8000");
        assert_eq!(ENVIRONMENT.at(8000).admin_url(), "http://127.0.0.1:10104");
        let mut ports = ports_at(MIN_PORT_BASE);
        ports.extend(ports_at(DEFAULT_PORT_BASE));
        let highest = ports_at(MAX_PORT_BASE);
        assert!(highest.contains(&32767), "{highest:?}");
        ports.extend(highest);
        for base in [MIN_PORT_BASE, DEFAULT_PORT_BASE, MAX_PORT_BASE] {
            let ports = ports_at(base);
            let distinct: std::collections::HashSet<_> = ports.iter().collect();
            assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        }
        // This machine's range where it can be read, the lower of Linux's and IANA's otherwise.
        let lowest_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| range.split_whitespace().next()?.parse().ok())
            .unwrap_or(32768_u16)
            .min(32768);
        for port in ports {
            assert!(port < lowest_ephemeral, "port {port} is ephemeral");
        }
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        assert_eq!(log_tail(&path, 2), "two\nthree");
        assert!(log_tail(&dir.path().join("none"), 2).contains("cannot read"));
    }
}
