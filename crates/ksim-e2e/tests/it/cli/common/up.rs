//! `ksim up` as a user runs it, for the tests that need the whole local environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// How long `ksim up` may take on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(240);

/// `ksim up ARGS` in a state directory of its own, on ports of its own (unless ARGS give
/// `--port-base`), stopped with `ksim down` when dropped.
pub struct Up {
    pub state: tempfile::TempDir,
    /// Its services' URLs, as its env.json gives them.
    pub urls: Urls,
    child: Option<Child>,
}

/// The services' URLs of an environment.
#[derive(Debug, Clone, Default)]
pub struct Urls {
    pub tracer: String,
    pub pool: String,
    pub driver: String,
    pub environment: String,
}

/// `--autoscaler` and one `--autoscaler-flag` per fast flag.
pub fn fast_autoscaler_args() -> Vec<String> {
    std::iter::once("--autoscaler".to_owned())
        .chain(
            ksim_localenv::autoscaler::FAST_FLAGS
                .iter()
                .flat_map(|flag| ["--autoscaler-flag".to_owned(), (*flag).to_owned()]),
        )
        .collect()
}

impl Up {
    /// Starts it and waits until its environment file says it is up.
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// As [`Up::start`], with `env` set for `ksim up` and the services it starts (a test's fast
    /// settings, given explicitly).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let state = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(state.path().join("up.out")).unwrap();
        let mut command = Command::new(ksim_e2e::binary("ksim"));
        command.arg("up").args(args);
        if !args.iter().any(|arg| arg.starts_with("--port-base")) {
            command.args(["--port-base", &ksim_e2e::port_base().to_string()]);
        }
        let child = command
            .envs(env.iter().copied())
            .env("KSIM_STATE_DIR", state.path())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut up = Self {
            state,
            urls: Urls::default(),
            child: Some(child),
        };
        let env_file = up.state.path().join("env.json");
        let started = Instant::now();
        while !env_file.exists() {
            if let Some(status) = up.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ksim up exited ({status}): {}", up.said());
            }
            assert!(started.elapsed() < DEADLINE, "ksim up: {}", up.said());
            std::thread::sleep(Duration::from_millis(200));
        }
        let env: Value = serde_json::from_slice(&std::fs::read(&env_file).unwrap()).unwrap();
        let url = |key: &str| env["urls"][key].as_str().unwrap().to_owned();
        up.urls = Urls {
            tracer: url("tracer"),
            pool: url("pool"),
            driver: url("driver"),
            environment: url("environment"),
        };
        up
    }

    /// `ksim up --autoscaler ARGS` with the tests' fast CA flags
    /// (`ksim_localenv::autoscaler::FAST_FLAGS`) as the environment's own, set here explicitly:
    /// without them CA runs with its production defaults (minutes between decisions).
    pub fn with_fast_autoscaler(args: &[&str]) -> Self {
        let fast = fast_autoscaler_args();
        let all: Vec<&str> = fast
            .iter()
            .map(String::as_str)
            .chain(args.iter().copied())
            .collect();
        Self::start(&all)
    }

    /// What it printed.
    pub fn said(&self) -> String {
        std::fs::read_to_string(self.state.path().join("up.out")).unwrap_or_default()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        let env: Value =
            serde_json::from_slice(&std::fs::read(self.state.path().join("env.json")).unwrap())
                .unwrap();
        PathBuf::from(env["kubeconfig"].as_str().unwrap())
    }

    /// An admin client of the environment's cluster.
    pub async fn client(&self) -> kube::Client {
        ksim_kube::KubeArgs::file(self.kubeconfig())
            .connect()
            .await
            .unwrap()
            .client
    }

    /// `ksim ARGS`, which must succeed (a `run` pinned to the instant model, see [`pinned`]).
    pub fn ksim(&self, args: &[&str]) -> Output {
        let output = Command::new(ksim_e2e::binary("ksim"))
            .args(pinned(args))
            .env("KSIM_STATE_DIR", self.state.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "ksim {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// The recording of `namespace` from `start_ms` to `end_ms` (Unix ms), as a user exports
    /// it: without --server, from the tracer of this environment; `recorded.ksim` in its state
    /// directory, then inspected. What `ksim trace inspect` printed.
    pub fn export_recording(
        &self,
        start_ms: i64,
        end_ms: i64,
        namespace: &str,
    ) -> (PathBuf, String) {
        let trace = self.state.path().join("recorded.ksim");
        let stamp = |ms: i64| ksim_trace::time::timestamp(ms).to_string();
        self.ksim(&[
            "trace",
            "export",
            "--start",
            &stamp(start_ms),
            "--end",
            &stamp(end_ms),
            "-n",
            namespace,
            "-o",
            trace.to_str().unwrap(),
        ]);
        let inspected = self.ksim(&["trace", "inspect", trace.to_str().unwrap()]);
        (
            trace,
            String::from_utf8_lossy(&inspected.stdout).into_owned(),
        )
    }

    /// The pid of `ksim up`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// `ksim ARGS` in this environment, whatever its exit.
    pub fn ksim_any(&self, args: &[String]) -> Output {
        ksim_in(self.state.path(), args)
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new(ksim_e2e::binary("ksim"))
            .arg("down")
            .env("KSIM_STATE_DIR", self.state.path())
            .output();
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

/// `args` of a `ksim run` that names no provisioning model, with `--provisioning instant`:
/// the tests that are not about provisioning replay with nodes and pods that come at once,
/// said explicitly (a user's run gets the model learned from the trace, or the published one).
/// The tests of the default run `ksim` themselves.
pub fn pinned<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    let mut args: Vec<String> = args.iter().map(|arg| arg.as_ref().to_owned()).collect();
    let names_one = args
        .iter()
        .any(|arg| arg == "--provisioning" || arg.starts_with("--provisioning="));
    if args.first().is_some_and(|verb| verb == "run") && !names_one {
        args.extend(["--provisioning".to_owned(), "instant".to_owned()]);
    }
    args
}

/// `ksim ARGS` in the environment of `state`, whatever its exit (a `run` pinned to the instant
/// model, see [`pinned`]).
pub fn ksim_in(state: &Path, args: &[String]) -> Output {
    Command::new(ksim_e2e::binary("ksim"))
        .args(pinned(args))
        .env("KSIM_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// SIGTERMs a running `ksim` (as Ctrl-C would end it) and waits for its output.
pub async fn terminate(running: Child) -> Output {
    let signalled = Command::new("kill")
        .args(["-TERM", &running.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    tokio::task::spawn_blocking(move || running.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

/// The simulation id of a `ksim run` that succeeded, from its "simulation <id> succeeded" line.
pub fn run_id(printed: &str) -> &str {
    printed
        .lines()
        .find_map(|line| {
            line.strip_prefix("ksim: simulation ")?
                .strip_suffix(" succeeded")
        })
        .unwrap_or_else(|| panic!("no success line in {printed}"))
}

/// The directory of the report files the summary lists.
pub fn report_dir(printed: &str) -> &str {
    let json = printed
        .lines()
        .find_map(|line| line.trim().strip_prefix("files:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no files line in {printed}"));
    json.strip_suffix("/report.json").unwrap_or(json)
}

/// The pid `ksim up` printed for service `name` (its line `  <name> ... pid <pid> ...`), in
/// what it has printed so far.
pub fn service_pid(said: &str, name: &str) -> Option<u32> {
    said.lines()
        .find(|line| line.trim_start().starts_with(&format!("{name} ")))
        .and_then(|line| {
            line.split("pid ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u32>()
                .ok()
        })
}
