//! `ksim completions`, `run`, `down` and `up` as a user runs them: the real binary, with a
//! temporary state directory. The `up` test starts the real control plane and every service
//! binary of the workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common;

use std::{
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::json;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

fn ksim(state_dir: &Path, args: &[&str]) -> Output {
    Command::new(ksim_e2e::binary("ksim"))
        .args(common::up::pinned(args))
        .env("KSIM_STATE_DIR", state_dir)
        // Nothing may reach a driver a developer left running.
        .env("KSIM_DRIVER_URL", "http://127.0.0.1:1")
        .output()
        .unwrap()
}

/// Fails with exit code != 0 and exactly one line on stderr, which contains `needle`.
fn assert_one_line_error(output: &Output, needle: &str) {
    assert_one_line_error_of("ksim", output, needle);
}

/// [`assert_one_line_error`] of the program `program` (`ksim up` becomes `ksim-env`).
fn assert_one_line_error_of(program: &str, output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "succeeded: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr}"
    );
    assert!(
        stderr.starts_with(&format!("{program}: error: ")),
        "{stderr}"
    );
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

#[test]
fn completions_cover_the_commands() {
    let state = tempfile::tempdir().unwrap();
    let output = ksim(state.path(), &["completions", "bash"]);
    assert!(output.status.success());
    let script = String::from_utf8(output.stdout).unwrap();
    assert!(script.contains("complete"), "{script}");
    for command in ["run", "up", "down", "report"] {
        assert!(script.contains(command), "{command} missing");
    }
    assert!(script.contains("--node-group"));
}

#[test]
fn run_names_the_unreadable_trace_file() {
    let state = tempfile::tempdir().unwrap();
    let missing = state.path().join("missing.ksim");
    let output = ksim(state.path(), &["run", missing.to_str().unwrap()]);
    assert_one_line_error(
        &output,
        &format!("cannot read the trace file {}", missing.display()),
    );
}

#[test]
fn run_names_the_bad_node_group_flag_and_value() {
    let state = tempfile::tempdir().unwrap();
    let output = ksim(
        state.path(),
        &["run", "t.ksim", "--node-group", "m5=x.yaml"],
    );
    assert_one_line_error(&output, "'m5=x.yaml' for '--node-group");
    assert_eq!(output.status.code(), Some(2));
}

/// A CA flag that would make CA, running as the environment's user, write a file is refused
/// on the command line, naming it, before anything is asked of a driver.
#[test]
fn run_refuses_an_autoscaler_flag_that_writes_a_file() {
    let state = tempfile::tempdir().unwrap();
    let written = state.path().join("x");
    let log_file = format!("log-file={}", written.display());
    let output = ksim(
        state.path(),
        &[
            "run",
            "t.ksim",
            "--autoscaler",
            "--autoscaler-arg",
            &log_file,
            "--autoscaler-arg",
            "logtostderr=false",
        ],
    );
    assert_one_line_error(&output, "--log-file is not a flag a run may set (logging)");
    assert_eq!(output.status.code(), Some(2));
    assert!(!written.exists());
}

#[test]
fn run_names_the_unreachable_driver() {
    let state = tempfile::tempdir().unwrap();
    let trace = state.path().join("t.ksim");
    std::fs::write(&trace, b"not checked before the driver").unwrap();
    let output = ksim(state.path(), &["run", trace.to_str().unwrap()]);
    assert_one_line_error(&output, "cannot reach the driver at http://127.0.0.1:1");
}

#[test]
fn kubectl_without_an_environment_says_so() {
    let state = tempfile::tempdir().unwrap();
    let output = ksim(state.path(), &["kubectl", "get", "nodes"]);
    assert_one_line_error(&output, "no environment is up");
}

#[test]
fn down_without_an_environment_says_so() {
    let state = tempfile::tempdir().unwrap();
    let output = ksim(state.path(), &["down"]);
    assert_one_line_error(&output, "no environment is up");
}

/// A trace of one Deployment of two pods, created then scaled to three.
fn write_trace(path: &Path) {
    let web = |replicas: i64| {
        common::deployment(&json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
                }
            }
        }))
    };
    common::write_trace(
        path,
        [(1_767_225_600_000, web(2)), (1_767_225_600_500, web(3))],
        &[],
    );
}

async fn serving(port: u16, service: &str) -> bool {
    let Ok(channel) = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
    else {
        return false;
    };
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .is_ok_and(|response| response.into_inner().status() == ServingStatus::Serving)
}

/// `ksim up` brings up the control plane, the four services and its environment API, each
/// healthy on its fixed port, records itself in env.json, and `ksim down` stops all of it.
#[tokio::test(flavor = "multi_thread")]
async fn up_serves_every_service_until_down() {
    let _ports = ksim_e2e::LOCAL_ENV_PORTS.lock().await;
    let state = tempfile::tempdir().unwrap();
    let mut up = Command::new(ksim_e2e::binary("ksim"))
        .arg("up")
        .env("KSIM_STATE_DIR", state.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its output, line by line as it comes: the supervision lines are read while it runs.
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let stdout = up.stdout.take().unwrap();
        let lines = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout).lines() {
                lines.lock().unwrap().push(line.unwrap());
            }
        })
    };
    let printed_so_far = || lines.lock().unwrap().join("\n");
    let env_file = state.path().join("env.json");
    let started = Instant::now();
    while !env_file.exists() {
        if let Some(status) = up.try_wait().unwrap() {
            let output = up.wait_with_output().unwrap();
            panic!(
                "ksim up exited ({status}): {}{}",
                printed_so_far(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "ksim up took too long"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&env_file).unwrap()).unwrap();
    assert_eq!(recorded["pid"], up.id());
    assert_eq!(recorded["urls"]["driver"], "http://127.0.0.1:7064");
    assert!(Path::new(recorded["kubeconfig"].as_str().unwrap()).is_file());

    for (port, service) in [
        (7061, "ksim.trace.v1.TraceStore"),
        (7062, "ksim.vnode.v1.VirtualNodePool"),
        (
            7063,
            "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider",
        ),
        (7064, "ksim.driver.v1.Driver"),
        // Served by ksim up itself: the configuration under test.
        (7065, "ksim.env.v1.Environment"),
    ] {
        assert!(serving(port, service).await, "{service} not serving");
    }
    for log in ["tracer", "pool", "cloudprov", "driver"] {
        assert!(state.path().join(format!("logs/{log}.log")).is_file());
    }

    // A replay through the driver, and its report again by id.
    let trace = state.path().join("shop.ksim");
    write_trace(&trace);
    let driver = ["--driver", "http://127.0.0.1:7064"];
    let run = ksim(
        state.path(),
        &[
            &["run", trace.to_str().unwrap(), "--speed", "5"][..],
            &driver,
        ]
        .concat(),
    );
    let printed = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(printed.contains("events applied:    2"), "{printed}");
    let id = common::up::run_id(&printed);
    let report = ksim(
        state.path(),
        &[&["report", id, "--json"][..], &driver].concat(),
    );
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["simulation_id"], id);
    assert_eq!(report["complete"], true);

    // One SIGTERM to `ksim run` cancels the simulation and ends the run: it says it is
    // cancelling and that the simulation was cancelled, and exits non-zero.
    let long = state.path().join("long.ksim");
    common::write_trace(
        &long,
        [
            (
                1_767_225_600_000,
                common::deployment(&json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "slow", "namespace": "shop"},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {"app": "slow"}},
                        "template": {"metadata": {"labels": {"app": "slow"}},
                            "spec": {"containers": [{"name": "slow", "image": "nginx"}]}}
                    }
                })),
            ),
            // Ten minutes later: never reached.
            (
                1_767_226_200_000,
                common::deployment(&json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "late", "namespace": "shop"},
                    "spec": {
                        "replicas": 1,
                        "selector": {"matchLabels": {"app": "late"}},
                        "template": {"metadata": {"labels": {"app": "late"}},
                            "spec": {"containers": [{"name": "late", "image": "nginx"}]}}
                    }
                })),
            ),
        ],
        &[],
    );
    let run_log = state.path().join("run.out");
    let running = Command::new(ksim_e2e::binary("ksim"))
        .args([
            "run",
            long.to_str().unwrap(),
            "--driver",
            "http://127.0.0.1:7064",
        ])
        .env("KSIM_STATE_DIR", state.path())
        .stdout(std::fs::File::create(&run_log).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !std::fs::read_to_string(&run_log)
        .unwrap_or_default()
        .contains("started")
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the long run never started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ended = common::up::terminate(running).await;
    let said = std::fs::read_to_string(&run_log).unwrap();
    assert!(!ended.status.success(), "{said}");
    assert!(
        said.contains("cancelling simulation")
            && String::from_utf8_lossy(&ended.stderr).contains("was cancelled"),
        "{said}{}",
        String::from_utf8_lossy(&ended.stderr)
    );

    // A second environment is refused while this one runs, by the environment `ksim up`
    // becomes.
    let second = ksim(state.path(), &["up"]);
    assert_one_line_error_of("ksim-env", &second, "an environment is already up");

    // kill -9 of the pool: `ksim up` says so at once, with the exit status and the log, and
    // starts it again; `ksim down` reports it.
    let pool_pid = common::up::service_pid(&printed_so_far(), "pool")
        .unwrap_or_else(|| panic!("no pool pid in {}", printed_so_far()));
    let killed = Command::new("kill")
        .args(["-9", &pool_pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    loop {
        let printed = printed_so_far();
        if printed.contains("ksim: pool exited (signal: 9")
            && printed.contains("logs/pool.log")
            && printed.contains("ksim: pool restarted (pid")
            && serving(7062, "ksim.vnode.v1.VirtualNodePool").await
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the pool was not reported and restarted: {printed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The restarted pool holds the embedded plane's node leases, not a kubelet's 40 s.
    let kubeconfig = recorded["kubeconfig"].as_str().unwrap();
    assert_eq!(
        node_lease_seconds(kubeconfig).await,
        ksim_localenv::tuning::NODE_LEASE_SECONDS
    );

    // kubectl of the control plane's version, against this environment; its exit status.
    assert!(printed_so_far().contains("(or: ksim kubectl get nodes)"));
    let version = ksim(state.path(), &["kubectl", "version", "-o", "json"]);
    let said = String::from_utf8_lossy(&version.stdout);
    assert!(version.status.success(), "{said}");
    let versions: serde_json::Value = serde_json::from_str(&said).unwrap();
    for side in ["clientVersion", "serverVersion"] {
        assert_eq!(
            versions[side]["gitVersion"],
            ksim_localenv::kubernetes_version(),
            "{said}"
        );
    }
    let nodes = ksim(state.path(), &["kubectl", "get", "nodes", "-o", "name"]);
    assert!(
        String::from_utf8_lossy(&nodes.stdout).contains("node/"),
        "{}",
        String::from_utf8_lossy(&nodes.stderr)
    );
    let missing = ksim(state.path(), &["kubectl", "get", "node", "no-such-node"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("NotFound"));

    let down = ksim(state.path(), &["down"]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    let said = String::from_utf8_lossy(&down.stdout);
    assert!(
        said.contains("while it was up") && said.contains("pool exited (signal: 9"),
        "{said}"
    );
    let output = up.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    reader.join().unwrap();
    let printed = printed_so_far();
    assert!(printed.contains("export KUBECONFIG="), "{printed}");
    assert!(
        printed.contains("grpcurl -plaintext 127.0.0.1:7064"),
        "{printed}"
    );
    assert!(!env_file.exists());
    for port in [7061, 7062, 7063, 7064] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still open"
        );
    }
}

/// The lease duration of a node the pool at 7062 registers for a new one-node group.
async fn node_lease_seconds(kubeconfig: &str) -> u32 {
    use k8s_openapi::api::coordination::v1::Lease;
    use ksim_proto::ksim::vnode::v1::{
        CreateNodeGroupRequest, virtual_node_pool_client::VirtualNodePoolClient,
    };

    let mut pool = VirtualNodePoolClient::connect("http://127.0.0.1:7062")
        .await
        .unwrap();
    pool.create_node_group(CreateNodeGroupRequest {
        name: "leases".to_owned(),
        node_skeleton_yaml: ksim_localenv::fixtures::M5_LARGE_SKELETON.to_owned(),
        count: 1,
        provisioning_json: String::new(),
    })
    .await
    .unwrap();
    let client = ksim_kube::KubeArgs::file(kubeconfig)
        .connect()
        .await
        .unwrap()
        .client;
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let leases: kube::Api<Lease> = kube::Api::namespaced(client, "kube-node-lease");
    let started = Instant::now();
    loop {
        let listed = nodes
            .list(&kube::api::ListParams::default().labels("ksim.io/node-group=leases"))
            .await
            .unwrap();
        if let Some(name) = listed.items.first().and_then(|n| n.metadata.name.clone())
            && let Some(lease) = leases.get_opt(&name).await.unwrap()
        {
            let seconds = lease.spec.and_then(|s| s.lease_duration_seconds).unwrap();
            return u32::try_from(seconds).unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the node of group leases has no Lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
