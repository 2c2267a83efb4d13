//! The state directory and `env.json`, through which `ksim down` finds the environment to
//! stop and every command the services of the environment running there.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{EnvironmentError, services::ServiceSpec};

const STATE_DIR_ENV: &str = "KSIM_STATE_DIR";
const STATE_FILE: &str = "env.json";
/// What the environment saw die and restarted, one line each with its time, for `ksim down`.
pub const SUPERVISION_FILE: &str = "supervision.log";

/// Appends `events` to the supervision file; best effort (it only informs).
pub fn append_supervision(state_dir: &Path, events: &[String]) {
    use std::io::Write as _;
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let written = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(state_dir.join(SUPERVISION_FILE))
        .and_then(|mut file| {
            events
                .iter()
                .try_for_each(|event| writeln!(file, "{now} {event}"))
        });
    if let Err(error) = written {
        tracing::warn!(%error, "writing {SUPERVISION_FILE}");
    }
}

/// The supervision file's lines; none when nothing died.
pub fn supervision(state_dir: &Path) -> Vec<String> {
    std::fs::read_to_string(state_dir.join(SUPERVISION_FILE))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Forgets an earlier environment's supervision lines.
pub fn clear_supervision(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(SUPERVISION_FILE));
}

/// `$KSIM_STATE_DIR`, else `$XDG_STATE_HOME/ksim`, else `~/.local/state/ksim`.
pub fn state_dir() -> Result<PathBuf, EnvironmentError> {
    state_dir_from(|name| std::env::var_os(name).filter(|value| !value.is_empty()))
}

fn state_dir_from(
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<PathBuf, EnvironmentError> {
    if let Some(dir) = var(STATE_DIR_ENV) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_STATE_HOME") {
        return Ok(PathBuf::from(dir).join("ksim"));
    }
    let home = var("HOME").ok_or(EnvironmentError::NoStateDir)?;
    Ok(PathBuf::from(home).join(".local/state/ksim"))
}

/// Where a command reaches a service: `given` (its flag or variable), else the service of the
/// environment running in this state directory ([`state_dir`]; `which` picks it from
/// its URLs), else the default environment's `service`. A state directory that cannot be
/// named (no HOME) is no environment; an `env.json` that cannot be read is an error.
pub fn service_url(
    given: Option<&str>,
    which: fn(Urls) -> String,
    service: ServiceSpec,
) -> Result<String, EnvironmentError> {
    service_url_in(state_dir().ok().as_deref(), given, which, service)
}

/// [`service_url`] with the state directory given (`None`: none can be named).
fn service_url_in(
    dir: Option<&Path>,
    given: Option<&str>,
    which: fn(Urls) -> String,
    service: ServiceSpec,
) -> Result<String, EnvironmentError> {
    if let Some(url) = given {
        return Ok(url.to_owned());
    }
    let running = match dir {
        Some(dir) => EnvState::read(dir)?,
        None => None,
    };
    Ok(running.map_or_else(|| service.url(), |state| which(state.urls)))
}

/// Service URLs of a running environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Urls {
    pub tracer: String,
    pub pool: String,
    pub cloud_provider: String,
    pub driver: String,
    /// The environment API (the configuration under test).
    pub environment: String,
}

/// What `env.json` holds about a running environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvState {
    /// The process that owns the environment; SIGTERM to it stops everything.
    pub pid: u32,
    pub kubeconfig: PathBuf,
    pub urls: Urls,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// The instance types its Karpenter offers (empty: the KWOK provider's built-in list);
    /// absent without Karpenter. An experiment checks its own against them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub karpenter_instance_types: Option<Vec<ksim_nodes::karpenter::InstanceType>>,
    /// Which process `pid` is, so `ksim down` signals that one and no other that later got
    /// its pid; absent from a file an older ksim wrote (or where /proc could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessIdentity>,
}

/// What tells a process from another that has its pid: a pid is reused once its process has
/// exited, a start time and command line make the same process again only by chance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// `starttime` of `/proc/PID/stat` (field 22): clock ticks after boot.
    pub start_time: u64,
    /// `/proc/PID/cmdline`, one string per argument (invalid UTF-8 replaced).
    pub cmdline: Vec<String>,
}

impl ProcessIdentity {
    /// The process `pid` is now, read from `/proc`; an error when it is gone or `/proc` cannot
    /// say (no such file, not Linux).
    pub fn of(pid: u32) -> std::io::Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let start_time = parse_start_time(&stat).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("/proc/{pid}/stat has no start time"),
            )
        })?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
        Ok(Self {
            start_time,
            cmdline: parse_cmdline(&cmdline),
        })
    }
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2) is in parentheses and may
/// itself hold spaces and ")", so the fields are counted after its last ")".
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3, the state.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// The NUL-separated arguments of `/proc/PID/cmdline`.
fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|byte| *byte == 0)
        .map(|argument| String::from_utf8_lossy(argument).into_owned())
        .collect()
}

impl EnvState {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(STATE_FILE)
    }

    /// Writes through a temporary file so a reader never sees half a file.
    pub fn write(&self, state_dir: &Path) -> Result<(), EnvironmentError> {
        let io = EnvironmentError::io;
        std::fs::create_dir_all(state_dir).map_err(io("creating", state_dir))?;
        let path = Self::path(state_dir);
        let partial = state_dir.join(format!("{STATE_FILE}.partial"));
        // Plain data with string keys: it serializes.
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        std::fs::write(&partial, json).map_err(io("writing", &partial))?;
        std::fs::rename(&partial, &path).map_err(io("writing", &path))?;
        Ok(())
    }

    /// `None` when no environment was recorded.
    pub fn read(state_dir: &Path) -> Result<Option<Self>, EnvironmentError> {
        let path = Self::path(state_dir);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(EnvironmentError::io("reading", &path)(error)),
        };
        let state = serde_json::from_slice(&bytes)
            .map_err(|source| EnvironmentError::NotAnEnvironmentFile { path, source })?;
        Ok(Some(state))
    }

    /// Removes `env.json` if it is still this environment's (a later one may own it).
    pub fn remove_if_mine(state_dir: &Path, pid: u32) -> Result<(), EnvironmentError> {
        match Self::read(state_dir) {
            Ok(Some(state)) if state.pid == pid => remove(state_dir),
            _ => Ok(()),
        }
    }
}

pub fn remove(state_dir: &Path) -> Result<(), EnvironmentError> {
    let path = EnvState::path(state_dir);
    match std::fs::remove_file(&path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(EnvironmentError::io("removing", &path)(error))
        }
        _ => Ok(()),
    }
}

/// State files and processes for the tests of the environment's readers.
#[allow(clippy::unwrap_used, clippy::missing_panics_doc)]
pub mod testing {
    use std::path::{Path, PathBuf};

    use super::{EnvState, ProcessIdentity, Urls};

    /// A state file's contents as the environment writes them, for the tests of its readers.
    pub fn state() -> EnvState {
        EnvState {
            pid: 4242,
            kubeconfig: PathBuf::from("/tmp/kubeconfig"),
            urls: Urls {
                tracer: "http://127.0.0.1:7061".into(),
                pool: "http://127.0.0.1:7062".into(),
                cloud_provider: "http://127.0.0.1:7063".into(),
                driver: "http://127.0.0.1:7064".into(),
                environment: "http://127.0.0.1:7065".into(),
            },
            started_at: "2025-01-01T00:00:00Z".into(),
            karpenter_instance_types: None,
            process: Some(ProcessIdentity {
                start_time: 123_456,
                cmdline: vec!["ksim".into(), "up".into()],
            }),
        }
    }

    /// Writes [`state`] naming `pid` and `process` into `dir`.
    pub fn write_state(dir: &Path, pid: u32, process: Option<ProcessIdentity>) {
        EnvState {
            pid,
            process,
            ..state()
        }
        .write(dir)
        .unwrap();
    }

    /// A process that is not the environment (`sleep 30`), killed when the test ends.
    #[derive(Debug)]
    pub struct Unrelated(std::process::Child);

    impl Unrelated {
        /// Returned once exec is done: spawn returns while it is still setting up the
        /// arguments, when /proc shows none.
        pub fn spawn() -> Self {
            let child = Self(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap(),
            );
            for _ in 0..100 {
                if ProcessIdentity::of(child.pid()).unwrap().cmdline == ["sleep", "30"] {
                    return child;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            panic!("sleep 30 did not show its arguments");
        }

        pub fn pid(&self) -> u32 {
            self.0.id()
        }

        pub fn running(&mut self) -> bool {
            self.0.try_wait().unwrap().is_none()
        }
    }

    impl Drop for Unrelated {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{testing::state, *};

    #[test]
    fn a_state_file_without_the_process_identity_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = serde_json::to_value(state()).unwrap();
        old.as_object_mut().unwrap().remove("process");
        std::fs::write(EnvState::path(dir.path()), old.to_string()).unwrap();
        let read = EnvState::read(dir.path()).unwrap().unwrap();
        assert_eq!(read.process, None);
        assert_eq!(read.pid, 4242);
    }

    #[test]
    fn a_negative_or_too_large_pid_is_no_state_file() {
        let dir = tempfile::tempdir().unwrap();
        for pid in ["-1", "4294967296"] {
            let mut text = serde_json::to_value(state()).unwrap();
            text["pid"] = serde_json::from_str(pid).unwrap();
            std::fs::write(EnvState::path(dir.path()), text.to_string()).unwrap();
            let error = EnvState::read(dir.path()).unwrap_err();
            assert!(
                error.to_string().contains("is not a ksim environment file"),
                "{pid}: {error}"
            );
        }
    }

    #[test]
    fn the_start_time_is_field_22_counted_after_the_command_name() {
        let fields_after_name = |name: &str| {
            let mut line = format!("4242 ({name}) S");
            for field in 4..=52 {
                line.push_str(&format!(" {}", field * 1000));
            }
            line
        };
        assert_eq!(parse_start_time(&fields_after_name("ksim")), Some(22_000));
        // A name with spaces and parentheses shifts nothing.
        assert_eq!(
            parse_start_time(&fields_after_name("a) b ) (c")),
            Some(22_000)
        );
        assert_eq!(parse_start_time("4242 (ksim) S 1 2"), None);
        assert_eq!(parse_start_time("no name"), None);
    }

    #[test]
    fn the_command_line_is_its_nul_separated_arguments() {
        assert_eq!(
            parse_cmdline(b"ksim\0up\0--autoscaler\0"),
            ["ksim", "up", "--autoscaler"]
        );
        assert_eq!(parse_cmdline(b"ksim\0\0x\0"), ["ksim", "", "x"]);
        assert!(parse_cmdline(b"").is_empty());
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = ProcessIdentity::of(std::process::id()).unwrap();
        let own_stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(Some(me.start_time), parse_start_time(&own_stat));
        assert!(me.start_time > 0);
        assert_eq!(
            me.cmdline,
            std::env::args().collect::<Vec<_>>(),
            "the test binary's own arguments"
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // spawn returns while exec is still setting up the arguments: read until it is done.
        let mut other = ProcessIdentity::of(child.id()).unwrap();
        for _ in 0..100 {
            if !other.cmdline.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            other = ProcessIdentity::of(child.id()).unwrap();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(other.cmdline, ["sleep", "30"]);
        assert!(other.start_time >= me.start_time);
    }

    #[test]
    fn a_command_reaches_the_service_given_else_the_running_environments_else_the_default() {
        use crate::environment::services::DRIVER;
        let driver = |urls: Urls| urls.driver;
        let dir = tempfile::tempdir().unwrap();
        let url = |dir: Option<&Path>, given| service_url_in(dir, given, driver, DRIVER);
        assert_eq!(url(None, None).unwrap(), "http://127.0.0.1:7064");
        assert_eq!(
            url(Some(dir.path()), None).unwrap(),
            "http://127.0.0.1:7064"
        );
        let mut running = state();
        running.urls.driver = "http://127.0.0.1:20003".into();
        running.write(dir.path()).unwrap();
        assert_eq!(
            url(Some(dir.path()), None).unwrap(),
            "http://127.0.0.1:20003"
        );
        assert_eq!(
            url(Some(dir.path()), Some("http://elsewhere:1")).unwrap(),
            "http://elsewhere:1"
        );
        std::fs::write(EnvState::path(dir.path()), "{").unwrap();
        let error = url(Some(dir.path()), None).unwrap_err();
        assert!(
            error.to_string().contains("is not a ksim environment file"),
            "{error}"
        );
    }

    #[test]
    fn state_file_round_trips_and_is_removed_only_by_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        assert_eq!(EnvState::read(&nested).unwrap(), None);
        state().write(&nested).unwrap();
        assert_eq!(EnvState::read(&nested).unwrap(), Some(state()));
        EnvState::remove_if_mine(&nested, 1).unwrap();
        assert!(EnvState::path(&nested).exists());
        EnvState::remove_if_mine(&nested, 4242).unwrap();
        assert_eq!(EnvState::read(&nested).unwrap(), None);
    }

    #[test]
    fn garbage_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(EnvState::path(dir.path()), "not json").unwrap();
        let error = EnvState::read(dir.path()).unwrap_err();
        assert!(error.to_string().contains("env.json"), "{error}");
    }

    #[test]
    fn state_dir_prefers_ksim_state_dir_then_xdg_then_home() {
        fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<std::ffi::OsString> {
            move |name| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).into())
            }
        }
        let all = [
            ("KSIM_STATE_DIR", "/k"),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(state_dir_from(vars(&all)).unwrap(), PathBuf::from("/k"));
        assert_eq!(
            state_dir_from(vars(&all[1..])).unwrap(),
            PathBuf::from("/x/ksim")
        );
        assert_eq!(
            state_dir_from(vars(&all[2..])).unwrap(),
            PathBuf::from("/h/.local/state/ksim")
        );
        assert!(state_dir_from(vars(&[])).is_err());
    }
}
