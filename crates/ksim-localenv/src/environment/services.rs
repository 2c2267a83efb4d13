//! The ksim services of a local environment: their places on its ports, where their binaries
//! are, and the process helpers `ksim-env` and `ksim down` share.

use std::{
    fs::File,
    io::{Read, Seek, SeekFrom},
    path::{Path, PathBuf},
    process::Stdio,
};

use super::EnvironmentError;

/// One ksim service of the local environment, on loopback ports fixed by the environment's
/// port base ([`ServiceSpec::at`]). They lie below the ephemeral port range (Linux:
/// 32768-60999, IANA: 49152-65535): a port in it may be the local end of any outgoing
/// connection, such as a control-plane component's to the API server, and then the
/// environment cannot bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Short name, used for the log file.
    pub name: &'static str,
    /// Executable name, looked up next to the running one ([`locate`]).
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

/// The environment's own API (the configuration under test), served by `ksim-env`, the
/// process that starts and supervises the others.
pub const ENVIRONMENT: ServiceSpec = ServiceSpec {
    name: "environment",
    binary: "ksim-env",
    grpc_port: 7065,
    admin_port: 9165,
    health_service: ksim_proto::ksim::env::v1::environment_server::SERVICE_NAME,
};

/// The directories the ksim binaries are looked up in: the running executable's (target/debug
/// in a checkout). Test executables live one level down, in `deps/`, so that one is tried too.
pub fn binary_dirs() -> Result<Vec<PathBuf>, EnvironmentError> {
    let exe = std::env::current_exe().map_err(EnvironmentError::CurrentExe)?;
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
pub fn locate(binary: &str, dirs: &[PathBuf]) -> Result<PathBuf, EnvironmentError> {
    dirs.iter()
        .map(|dir| dir.join(binary))
        .find(|path| path.is_file())
        .ok_or_else(|| EnvironmentError::MissingBinary {
            binary: binary.to_owned(),
            searched: dirs
                .first()
                .map_or_else(String::new, |d| d.display().to_string()),
        })
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
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn missing_binary_error_names_it_and_the_build_command() {
        let dir = tempfile::tempdir().unwrap();
        let error = locate("ksim-nothing", &[dir.path().to_owned()]).unwrap_err();
        let message = error.to_string();
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
