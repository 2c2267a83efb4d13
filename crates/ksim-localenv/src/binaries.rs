//! Finds the Go-built control-plane binaries that deploy/control-plane/build.sh caches.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Error;

const VERSIONS_ENV: &str = include_str!("../../../deploy/control-plane/versions.env");

/// The Kubernetes version pinned in deploy/control-plane/versions.env, e.g. `v1.35.4`.
pub fn kubernetes_version() -> &'static str {
    pinned(VERSIONS_ENV, "KUBERNETES_VERSION").unwrap_or("unknown")
}

/// The value of `key` in a `deploy/*/versions.env` text (`KEY=value`, optionally quoted).
pub(crate) fn pinned(versions_env: &'static str, key: &str) -> Option<&'static str> {
    versions_env
        .lines()
        .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|value| value.trim().trim_matches('"'))
}

/// Directory holding etcd, kube-apiserver, kube-controller-manager and ksim-scheduler
/// (kube-scheduler with ksim's explain layer, which the environment runs); build.sh puts the
/// stock kube-scheduler beside them, for [`crate::ControlPlaneBuilder::stock_scheduler`].
#[derive(Debug, Clone)]
pub struct ControlPlaneBinaries {
    dir: PathBuf,
}

impl ControlPlaneBinaries {
    pub const NAMES: [&'static str; 4] = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        crate::control_plane::SCHEDULER_BINARY,
    ];

    /// `KSIM_CONTROL_PLANE_BIN_DIR` if set (binaries a user already has), otherwise the cache
    /// that build.sh fills for the pinned version.
    pub fn locate() -> Result<Self, Error> {
        Self::in_dir(bin_dir(
            "KSIM_CONTROL_PLANE_BIN_DIR",
            &format!("k8s-{}", kubernetes_version()),
        )?)
    }

    pub fn in_dir(dir: PathBuf) -> Result<Self, Error> {
        for binary in Self::NAMES {
            if !dir.join(binary).is_file() {
                return Err(Error::MissingBinary { binary, dir });
            }
        }
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, binary: &str) -> PathBuf {
        self.dir.join(binary)
    }

    /// kubectl of the same Kubernetes version, which build.sh builds beside the control plane
    /// (a `KSIM_CONTROL_PLANE_BIN_DIR` of a user's own may lack it).
    pub fn kubectl(&self) -> Result<PathBuf, Error> {
        let path = self.path("kubectl");
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::MissingBinary {
                binary: "kubectl",
                dir: self.dir.clone(),
            })
        }
    }

    /// Has the scheduler the environment runs judge the configuration file `config` (decoding, defaulting,
    /// validation and building every profile's plugins, as at its start) without scheduling
    /// anything: `--write-config-to` makes it write the complete configuration and exit. The
    /// file's `clientConnection.kubeconfig` must name a readable kubeconfig; nothing connects.
    /// Returns that complete configuration (YAML), or [`Error::SchedulerConfig`] with the
    /// scheduler's own reason.
    pub async fn check_scheduler_config(&self, config: &Path) -> Result<String, Error> {
        let dir = tempfile::tempdir().map_err(Error::io(
            "cannot create a directory in",
            std::env::temp_dir(),
        ))?;
        let written = dir.path().join("as-run.yaml");
        let binary = self.path(crate::control_plane::SCHEDULER_BINARY);
        let run = tokio::process::Command::new(&binary)
            .arg(format!("--config={}", config.display()))
            .arg(format!("--write-config-to={}", written.display()))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(CHECK_TIMEOUT, run)
            .await
            .map_err(|_| Error::SchedulerConfig {
                file: config.to_owned(),
                message: format!(
                    "kube-scheduler did not finish checking it in {}s",
                    CHECK_TIMEOUT.as_secs()
                ),
            })?
            .map_err(Error::io("cannot start", &binary))?;
        match std::fs::read_to_string(&written) {
            Ok(text) if output.status.success() => Ok(text),
            _ => Err(Error::SchedulerConfig {
                file: config.to_owned(),
                message: failure_reason(&String::from_utf8_lossy(&output.stderr)),
            }),
        }
    }
}

/// How long kube-scheduler may take to check a configuration (it takes well under a second).
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// The reason in a Kubernetes component's last words: the `err="..."` of its `"command failed"`
/// line (unquoted), else its last line.
fn failure_reason(stderr: &str) -> String {
    let last = stderr.lines().rev().find(|line| !line.trim().is_empty());
    let failed = stderr
        .lines()
        .rev()
        .find(|line| line.contains("\"command failed\""));
    let quoted = failed
        .and_then(|line| line.split_once(" err="))
        .map(|(_, err)| err.trim());
    match quoted {
        Some(quoted) => {
            serde_json::from_str::<String>(quoted).unwrap_or_else(|_| quoted.to_owned())
        }
        None => last.map_or_else(
            || "it exited without saying why".to_owned(),
            |line| line.trim().to_owned(),
        ),
    }
}

/// The same cache root build.sh uses.
/// The directory the environment variable `env` names, else `cached_bin_dir(cached)`: a
/// user's own binaries, or the ones the project's build script caches.
pub fn bin_dir(env: &str, cached: &str) -> Result<PathBuf, Error> {
    match std::env::var_os(env) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => cached_bin_dir(cached),
    }
}

/// `<cache root>/<name>/bin`, where `deploy/*/build.sh` put a build (`name` is e.g.
/// `k8s-v1.35.4`, `cluster-autoscaler-1.35.2`). While deploy/test.sh builds beside the tests,
/// waits for a build not there yet (`await_build`).
pub fn cached_bin_dir(name: &str) -> Result<PathBuf, Error> {
    let dir = cache_root()?.join(name).join("bin");
    await_build(&dir)?;
    Ok(dir)
}

/// Set by deploy/test.sh while it builds Go components beside the tests: a file its build job
/// holds an exclusive lock on until its last build ends.
const BUILDS_LOCK_ENV: &str = "KSIM_GO_BUILDS_LOCK";
/// From an empty cache the builds beside the tests take about half an hour; a wedged one fails
/// the tests that wait on it well within CI's limit.
const BUILDS_WAIT: Duration = Duration::from_secs(40 * 60);
const BUILDS_POLL: Duration = Duration::from_secs(1);

/// Returns once `bin_dir` is there, or at once when nothing builds beside the tests
/// (`KSIM_GO_BUILDS_LOCK` unset) or the build job has ended (whatever it left: the caller says
/// what is missing). deploy/test.sh starts the tests once the control plane and the pinned
/// cluster-autoscaler are built and builds the rest meanwhile; each build script moves its
/// finished directory into place whole, so its existence means a complete build.
fn await_build(bin_dir: &Path) -> Result<(), Error> {
    let Some(lock) = std::env::var_os(BUILDS_LOCK_ENV).map(PathBuf::from) else {
        return Ok(());
    };
    await_while_locked(bin_dir, &lock, BUILDS_WAIT)
}

/// Waits up to `wait` for `path` to exist while another process holds `lock` exclusively.
fn await_while_locked(path: &Path, lock: &Path, wait: Duration) -> Result<(), Error> {
    if path.exists() {
        return Ok(());
    }
    let file = std::fs::File::open(lock).map_err(Error::io("cannot open", lock))?;
    let deadline = Instant::now() + wait;
    while !path.exists() {
        match file.try_lock_shared() {
            // The job ended.
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(BUILDS_POLL);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::BuildsUnfinished {
                    lock: lock.to_owned(),
                    minutes: wait.as_secs() / 60,
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(Error::Io {
                    action: "cannot lock",
                    path: lock.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}

pub fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("KSIM_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or(Error::NoCacheDir)?).join(".cache"),
    };
    Ok(base.join("ksim"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory, and in it a lock file held exclusively as deploy/test.sh's build job holds
    /// its own, until the returned file is dropped.
    fn running_build_job() -> (tempfile::TempDir, PathBuf, std::fs::File) {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("go-builds.lock");
        let job = std::fs::File::create(&lock).unwrap();
        job.lock().unwrap();
        (dir, lock, job)
    }

    #[test]
    fn a_build_not_there_yet_is_waited_for_while_the_build_job_runs() {
        let (dir, lock, job) = running_build_job();
        let bin_dir = dir.path().join("bin");
        // The job builds, then goes on to other builds, holding its lock until the test has
        // seen the build (or a minute has passed: a wait for the job's end fails, not hangs).
        let (seen, job_goes_on) = std::sync::mpsc::channel::<()>();
        let builder = {
            let bin_dir = bin_dir.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                std::fs::create_dir(&bin_dir).unwrap();
                let held = job_goes_on.recv_timeout(Duration::from_secs(60)).is_ok();
                drop(job);
                held
            })
        };
        await_while_locked(&bin_dir, &lock, Duration::from_secs(120)).unwrap();
        assert!(bin_dir.exists(), "returned before the build was there");
        let _ = seen.send(());
        assert!(
            builder.join().unwrap(),
            "waited for the job's end, not for the build"
        );
    }

    #[test]
    fn a_build_job_that_ends_without_the_build_ends_the_wait() {
        let (dir, lock, job) = running_build_job();
        let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended = {
            let released = released.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                released.store(true, std::sync::atomic::Ordering::SeqCst);
                drop(job);
            })
        };
        let bin_dir = dir.path().join("bin");
        await_while_locked(&bin_dir, &lock, Duration::from_secs(60)).unwrap();
        assert!(
            released.load(std::sync::atomic::Ordering::SeqCst),
            "returned while the job ran"
        );
        assert!(!bin_dir.exists());
        ended.join().unwrap();
    }

    #[test]
    fn a_build_job_that_does_not_end_in_time_is_an_error_naming_its_lock() {
        let (dir, lock, _job) = running_build_job();
        let error = await_while_locked(&dir.path().join("bin"), &lock, Duration::ZERO).unwrap_err();
        assert!(
            matches!(&error, Error::BuildsUnfinished { lock: named, .. } if *named == lock),
            "{error}"
        );
    }

    #[test]
    fn a_pinned_value_is_its_keys_own_unquoted() {
        const ENV: &str =
            "# A_VERSION=old\nA_VERSIONS=\"1 2\"\n  A_VERSION = x\nA_VERSION=\"v1.2\"\n";
        assert_eq!(pinned(ENV, "A_VERSION"), Some("v1.2"));
        assert_eq!(pinned(ENV, "A_VERSIONS"), Some("1 2"));
        assert_eq!(pinned(ENV, "B"), None);
    }

    #[test]
    fn the_reason_is_the_unquoted_error_of_the_failure_line() {
        let stderr = "I1123 23:54:12.841603   28027 serving.go:386] Generated self-signed cert in-memory\n\
E1123 23:54:13.145128   28048 run.go:72] \"command failed\" err=\"strict decoding error: unknown field \\\"profiles[0].bogusField\\\"\"\n";
        assert_eq!(
            failure_reason(stderr),
            "strict decoding error: unknown field \"profiles[0].bogusField\""
        );
        assert_eq!(failure_reason("panic: boom\n\n"), "panic: boom");
        assert_eq!(failure_reason(""), "it exited without saying why");
    }

    fn minor(version: &str) -> Option<u32> {
        version.strip_prefix("v1.")?.split('.').next()?.parse().ok()
    }

    #[test]
    fn the_pinned_version_is_a_kubernetes_release() {
        assert!(
            minor(kubernetes_version()).is_some(),
            "{}",
            kubernetes_version()
        );
    }

    #[test]
    // Exactly one of the macros expands, which clippy cannot see.
    #[allow(clippy::vec_init_then_push)]
    fn k8s_openapi_feature_matches_the_pinned_minor() {
        let mut enabled = Vec::new();
        k8s_openapi::k8s_if_1_33! { enabled.push(33); }
        k8s_openapi::k8s_if_1_34! { enabled.push(34); }
        k8s_openapi::k8s_if_1_35! { enabled.push(35); }
        k8s_openapi::k8s_if_1_36! { enabled.push(36); }
        k8s_openapi::k8s_if_1_37! { enabled.push(37); }
        assert_eq!(
            enabled,
            minor(kubernetes_version()).into_iter().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_directory_without_binaries_names_the_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let err = ControlPlaneBinaries::in_dir(dir.path().to_owned()).unwrap_err();
        assert!(err.to_string().contains("binary etcd not found"), "{err}");
    }
}
