//! ksim's end-to-end tests: the services together (driver, tracer, pool, cloud provider, the
//! `ksim` CLI and the real cluster-autoscaler) on the real control plane. The only crate that
//! depends on several service crates; the tests are in `tests/it`, the benchmarks that need
//! more than one service in `benches/`.
//!
//! This library holds what the tests and benchmarks share: about processes, where the
//! workspace's binaries are, the lock on the default environment's ports, the other
//! environments' own ports and the log setup. The objects they build (node skeletons, seat and
//! workload Deployments) are `ksim_localenv::fixtures`, shared with the services' own tests.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The path of a workspace binary (`ksim`, `ksim-driver`, ...), built up to date first.
///
/// Cargo gives a test only its own package's binaries; these belong to other packages, so
/// the first call runs `cargo build` for the workspace's binaries (quick when they are current: a test never
/// runs yesterday's binary) and every call finds them in the target directory this test binary
/// was built into. A build that fails fails the test with cargo's output.
///
/// # Panics
/// When the build fails or the binary is still missing: the test cannot run without it.
pub fn binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = match BUILT.get_or_init(build_binaries) {
        Ok(dir) => dir,
        Err(error) => panic!("{error}"),
    };
    let path = dir.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// Set by `deploy/test.sh`, whose step before the tests built the same binaries: a second
/// `cargo build`, even one with nothing to do, kept the first tests waiting minutes beside the
/// fuzzing build.
const BUILT_ENV: &str = "KSIM_E2E_BINARIES_BUILT";

fn build_binaries() -> Result<PathBuf, String> {
    let dir = profile_dir()?;
    if std::env::var_os(BUILT_ENV).is_some_and(|value| value == "1") {
        return Ok(dir);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut command = Command::new(cargo);
    // With the tests (already built, so nothing to do for them): the features are then unified
    // as `cargo test --workspace` unifies them, and the binaries link against the libraries
    // that build compiled instead of a second, differently-featured copy of each.
    command
        .current_dir(&workspace)
        .args(["build", "--workspace", "--bins", "--tests"]);
    // deploy/lib/test-runner.sh sets RUSTC_BOOTSTRAP for libtest's flags alone; passed on to
    // cargo it would change every crate's fingerprint and rebuild the workspace (minutes).
    if std::env::var_os("KSIM_TEST_RUNNER_BOOTSTRAP").is_some() {
        command
            .env_remove("RUSTC_BOOTSTRAP")
            .env_remove("KSIM_TEST_RUNNER_BOOTSTRAP");
    }
    // The same target directory and profile as this test binary.
    if let Some(target) = dir.parent() {
        command.env("CARGO_TARGET_DIR", target);
    }
    if dir.file_name().is_some_and(|profile| profile == "release") {
        command.arg("--release");
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo to build the ksim binaries: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the ksim binaries failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(dir)
}

/// `target/<profile>`: test and bench executables run from its `deps/` directory.
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    exe.parent()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "deps"))
        .and_then(Path::parent)
        .map(Path::to_owned)
        .ok_or_else(|| format!("{} is not in a cargo target directory", exe.display()))
}

/// A page as a real browser renders it: headless Chromium (Debian's `chromium`, which
/// deploy/test.sh installs; `KSIM_CHROMIUM` names another) runs its scripts and gives back the
/// document then, and a screenshot of it goes to `<target>/test-screenshots/<name>.png`, which
/// deploy/test.sh names at the end of its run.
///
/// # Panics
/// When the browser cannot be started or fails: the test cannot judge the page without it.
pub fn render_page(page: &Path, name: &str) -> (String, PathBuf) {
    let browser = std::env::var_os("KSIM_CHROMIUM").unwrap_or_else(|| "chromium".into());
    let url = format!("file://{}", page.display());
    // As root (CI), Chromium's sandbox cannot start; the page is the test's own.
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--virtual-time-budget=10000",
        "--window-size=1280,2400",
    ];
    let run = |extra: &[String]| {
        let output = Command::new(&browser)
            .args(common)
            .args(extra)
            .arg(&url)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} (apt-get install chromium, or set KSIM_CHROMIUM): {e}",
                    browser.to_string_lossy()
                )
            });
        assert!(
            output.status.success(),
            "{} failed on {url}: {}",
            browser.to_string_lossy(),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    };
    let dom = String::from_utf8_lossy(&run(&["--dump-dom".to_owned()]).stdout).into_owned();
    let shots = profile_dir()
        .ok()
        .and_then(|dir| dir.parent().map(|target| target.join("test-screenshots")))
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&shots).unwrap_or_else(|e| panic!("{}: {e}", shots.display()));
    let shot = shots.join(format!("{name}.png"));
    run(&[format!("--screenshot={}", shot.display())]);
    assert!(shot.is_file(), "no screenshot at {}", shot.display());
    (dom, shot)
}

/// Sends the services' logs to the test's captured output (shown when it fails), filtered by
/// `RUST_LOG`; once per process, so every test may call it.
pub fn init_logs() {
    // Err: another test of this process set it up already.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
}

/// `ksim demo` and a `ksim up` without `--port-base` serve on the default environment's ports
/// (7061-7065, 9161-9165): the tests that start one take this lock, so the tests of one run
/// never race for those ports. Every other test's environment has ports of its own
/// ([`port_base`]).
pub static LOCAL_ENV_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `ksim up --port-base` no other environment of this test run has (or a fixed port for a
/// service a test starts alone, as the README walk's tracer): each base takes ten ports' room
/// (an environment uses five from it, and five more 2100 above), counting up from 20000,
/// under `ksim up`'s highest (30663) and the ephemeral range (32768 on). A base whose ports
/// something already listens on (another test run on this machine) is skipped.
///
/// # Panics
/// After a thousand environments in one run.
pub fn port_base() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(20_000);
    loop {
        let base = NEXT.fetch_add(10, std::sync::atomic::Ordering::Relaxed);
        assert!(base < 30_000, "out of port bases");
        if ports_free(base) {
            return base;
        }
    }
}

/// Whether nothing listens on loopback on the ports an environment at `base` takes.
fn ports_free(base: u16) -> bool {
    (base..base + 5)
        .chain(base + 2100..base + 2105)
        .all(|port| std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).is_ok())
}
