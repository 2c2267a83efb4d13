//! The configuration under test, end to end as a user gets it: `ksim run --scheduler-config`
//! and `--autoscaler-arg` on `ksim up`'s environment, which restarts the real kube-scheduler and
//! cluster-autoscaler with them (CA's durations divided by the speed) and its own afterwards.
//! A configuration the real binaries refuse is one line and creates nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeSet, path::Path, time::Duration};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use ksim_proto::ksim::env::v1::{self as env, environment_client::EnvironmentClient};
use kube::{Api, Client, api::ListParams};
use serde_json::{Value, json};

use super::common::{
    deployment, shop_deployment,
    up::{Up, report_dir},
    write_trace,
};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;
const PACKED: &str = ksim_localenv::fixtures::PACKING_ONLY_SCHEDULER_CONFIG;
const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

/// `web` in namespace `shop`: `replicas` pods of `cpu` each.
fn web(replicas: i32, cpu: &str, revision: &str) -> Value {
    app("web", replicas, cpu, revision)
}

/// Deployment `name` in namespace `shop`: `replicas` pods of `cpu` each.
fn app(name: &str, replicas: i32, cpu: &str, revision: &str) -> Value {
    shop_deployment(name, replicas, cpu, "256Mi", revision)
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|arg| (*arg).to_owned()).collect()
}

/// `ksim ARGS`, which must succeed; what it printed.
fn run_ok(up: &Up, args: &[String]) -> String {
    let output = up.ksim_any(args);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    printed
}

/// The report.json of the run whose summary is `printed`.
fn report_of(printed: &str) -> Value {
    let path = Path::new(report_dir(printed)).join("report.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The nodes the pods of the replayed `shop` are bound to, once `count` are bound.
async fn placements(client: &Client, count: usize) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "virtual-shop");
    ksim_localenv::wait::until(
        &format!("{count} replayed pods bound"),
        Duration::from_secs(120),
        || async {
            let nodes: Vec<String> = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|pod| pod.spec?.node_name)
                .collect();
            if nodes.len() >= count {
                Ok(nodes.into_iter().collect())
            } else {
                Err(format!("{} bound", nodes.len()))
            }
        },
    )
    .await
    .unwrap()
}

/// Runs `ksim ARGS` to its end while `watch` looks at the cluster; both results.
async fn run_while<T: Send + 'static>(
    up: &Up,
    args: Vec<String>,
    watch: impl Future<Output = T> + Send + 'static,
) -> (std::process::Output, T) {
    let state = up.state.path().to_owned();
    let run = tokio::task::spawn_blocking(move || super::common::up::ksim_in(&state, &args));
    let seen = tokio::spawn(watch);
    let output = run.await.unwrap();
    (output, seen.await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_runs_the_configuration_under_test_and_a_refused_one_creates_nothing() {
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    let client = up.client().await;
    let dir = up.state.path();
    let trace = dir.join("two.ksim");
    // One pod no node fits, then two small pods, and the trace goes on long enough to look at
    // where they ran. The small ones come 10 s in: a scheduler under load may not have seen
    // both new nodes at once, and would then put both pods on the one it knows.
    write_trace(
        &trace,
        [
            (1_767_225_600_000, deployment(&app("huge", 1, "3", "a"))),
            (1_767_225_610_000, deployment(&web(2, "500m", "a"))),
            (1_767_225_625_000, deployment(&web(2, "500m", "b"))),
        ],
        &[],
    );
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let group = format!("--node-group=small={}:2", skeleton.display());
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let trace = trace.to_str().unwrap().to_owned();

    // Refused, one line each, before anything is created.
    let unknown_field = write(
        "typo.yaml",
        &format!("{HEADER}profiles:\n- schedulerNme: x\n"),
    );
    let bad_weight = write(
        "weight.yaml",
        &format!(
            "{HEADER}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: -3\n"
        ),
    );
    let skeleton_group = format!("--autoscaler-group=m5={}:1:3:1", skeleton.display());
    let bad_prices = write(
        "prices.yaml",
        "pricing:\n  instanceTypes:\n    m5.large: cheap\n",
    );
    let refused: [(Vec<String>, &str); 6] = [
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                &group,
                "--provider-config",
                &bad_prices,
            ]),
            "prices.yaml: the cloud provider refuses it",
        ),
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                &group,
                "--scheduler-config",
                &unknown_field,
            ]),
            "typo.yaml: kube-scheduler refuses it: strict decoding error: unknown field \"profiles[0].schedulerNme\"",
        ),
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                &group,
                "--scheduler-config",
                &bad_weight,
            ]),
            "weight.yaml: kube-scheduler refuses it",
        ),
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                "--autoscaler",
                &skeleton_group,
                "--autoscaler-arg",
                "scale-down-unneded-time=2m",
            ]),
            "--scale-down-unneded-time is not a flag a run may set: only the cluster-autoscaler \
             flags that change its decisions are (did you mean --scale-down-unneeded-time?)",
        ),
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                "--autoscaler",
                &skeleton_group,
                "--autoscaler-arg",
                "scale-down-unneeded-time=soon",
            ]),
            "--scale-down-unneeded-time",
        ),
        (
            args(&[
                "run",
                &trace,
                "--driver",
                &up.urls.driver,
                &group,
                "--autoscaler-arg",
                "expander=price",
            ]),
            "add --autoscaler",
        ),
    ];
    for (args, reason) in refused {
        let output = up.ksim_any(&args);
        let said = stderr(&output);
        assert!(!output.status.success(), "{args:?}: {said}");
        assert!(said.contains(reason), "{args:?}: {said}");
        assert_eq!(said.trim_end().lines().count(), 1, "{args:?}: {said}");
    }
    let reports = dir.join("reports");
    let created = std::fs::read_dir(&reports).map_or(0, |entries| entries.count());
    assert_eq!(created, 0, "a refused configuration made a simulation");
    let namespaces: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .filter(|name| name.starts_with("virtual-"))
        .collect();
    assert!(namespaces.is_empty(), "{namespaces:?}");

    // Packed by the configuration under test, spread by the scheduler's defaults after it.
    let packed = write("packed.yaml", PACKED);
    let (output, nodes) = run_while(
        &up,
        args(&[
            "run",
            &trace,
            "--driver",
            &up.urls.driver,
            &group,
            "--scheduler-config",
            &packed,
        ]),
        {
            let client = client.clone();
            async move { placements(&client, 2).await }
        },
    )
    .await;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    assert_eq!(nodes.len(), 1, "MostAllocated spread the pods: {nodes:?}");
    assert!(
        printed.contains(&format!("scheduler:         {packed}")),
        "{printed}"
    );
    let report = report_of(&printed);
    let configuration = &report["configuration"];
    let scheduler = &configuration["scheduler_given"];
    assert_eq!(scheduler["source"], packed.as_str(), "{report:#}");
    assert!(
        scheduler["yaml"]
            .as_str()
            .unwrap()
            .contains("MostAllocated")
    );
    // As run: complete, with kube-scheduler's own defaults filled in.
    let as_run = configuration["scheduler_as_run_yaml"].as_str().unwrap();
    assert!(as_run.contains("type: MostAllocated"), "{as_run}");
    assert!(as_run.contains("podMaxBackoffSeconds"), "{as_run}");
    // The pod no node fits waited the whole replay, and the report says why.
    let costs = &report["costs"];
    assert_eq!(costs["pods_never_scheduled"], 1, "{costs:#}");
    assert!(
        costs["pending_pod_seconds"].as_f64().unwrap() >= 10.0,
        "{costs:#}"
    );
    let waits = report["waits"].as_array().unwrap();
    assert!(
        waits.iter().any(|wait| wait["source"] == "scheduler"
            && wait["reason"] == "Insufficient cpu"
            && wait["owner"] == "Deployment/huge"
            && wait["count"].as_u64().unwrap() >= 1),
        "{waits:#?}"
    );
    assert!(
        printed.contains("why pods waited:") && printed.contains("Insufficient cpu x"),
        "{printed}"
    );
    // Nothing is priced in this environment: no cost is made up.
    assert_eq!(costs["cost"], Value::Null, "{costs:#}");
    assert!(printed.contains("no price"), "{printed}");

    let (output, nodes) = run_while(
        &up,
        args(&["run", &trace, "--driver", &up.urls.driver, &group]),
        {
            let client = client.clone();
            async move { placements(&client, 2).await }
        },
    )
    .await;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    assert_eq!(
        nodes.len(),
        2,
        "the default scheduler packed the pods: {nodes:?}"
    );
    assert!(
        printed.contains("scheduler:         its defaults"),
        "{printed}"
    );
}

/// The command line of the cluster-autoscaler `ksim up` (pid `parent`) runs now, if one runs.
fn autoscaler_command_line(parent: u32) -> Option<String> {
    autoscaler_process(parent).map(|(_, args)| args.join(" "))
}

/// The pid and arguments of the cluster-autoscaler `ksim up` (pid `parent`) runs now, if one
/// runs (a dead one, a zombie until reaped, has no command line).
fn autoscaler_process(parent: u32) -> Option<(u32, Vec<String>)> {
    child_process(parent, "cluster-autoscaler")
}

/// The pid and arguments of the child of `parent` that runs `binary`, if one runs.
fn child_process(parent: u32, binary: &str) -> Option<(u32, Vec<String>)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces, so read after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        if args.first().is_some_and(|path| path.ends_with(binary)) {
            return Some((pid, args));
        }
    }
    None
}

/// Whether the CA with these arguments answers 200 on `/health-check` at its `--address`.
async fn autoscaler_healthy(args: &[String]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let Some(address) = args.iter().rev().find_map(|a| a.strip_prefix("--address=")) else {
        return false;
    };
    let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
        return false;
    };
    let request = "GET /health-check HTTP/1.0\r\nHost: ca\r\n\r\n";
    let mut response = Vec::new();
    if stream.write_all(request.as_bytes()).await.is_err()
        || stream.read_to_end(&mut response).await.is_err()
    {
        return false;
    }
    let text = String::from_utf8_lossy(&response);
    text.lines()
        .next()
        .is_some_and(|status| status.contains(" 200"))
}

fn env_run(speed: f64, autoscaler_args: &[&str]) -> Option<env::Run> {
    Some(env::Run {
        configuration: Some(env::Configuration {
            autoscaler_args: autoscaler_args.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        }),
        speed,
        autoscaler: true,
        ..Default::default()
    })
}

/// With workload autoscaling at 10x the environment restarts kube-controller-manager with the HPA
/// controller's durations divided and lists them; a run without it leaves KCM be, and
/// RestoreDefaults starts it with none.
#[tokio::test(flavor = "multi_thread")]
async fn workload_autoscaling_runs_the_hpa_controller_at_the_replays_speed() {
    const KCM: &str = "kube-controller-manager";
    const SYNC: &str = "--horizontal-pod-autoscaler-sync-period=";
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    let (first, args) = child_process(up.pid(), KCM).unwrap();
    assert!(args.iter().all(|arg| !arg.starts_with(SYNC)), "{args:?}");
    let mut environment = EnvironmentClient::connect(up.urls.environment.clone())
        .await
        .unwrap();
    let run = |workload_autoscaling| {
        Some(env::Run {
            speed: 10.0,
            workload_autoscaling,
            ..Default::default()
        })
    };

    let applied = environment
        .apply_configuration(env::ApplyConfigurationRequest { run: run(true) })
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    let sync = applied
        .controller_manager_flags
        .iter()
        .find(|flag| flag.name == "horizontal-pod-autoscaler-sync-period")
        .unwrap();
    assert_eq!((sync.given.as_str(), sync.as_run.as_str()), ("15s", "1.5s"));
    assert_eq!(applied.controller_manager_flags.len(), 4);
    let (divided, args) = child_process(up.pid(), KCM).unwrap();
    assert_ne!(divided, first);
    assert!(
        args.iter().any(|arg| *arg == format!("{SYNC}1.5s")),
        "{args:?}"
    );
    assert!(
        args.iter()
            .any(|arg| arg == "--horizontal-pod-autoscaler-downscale-stabilization=30s"),
        "{args:?}"
    );

    // A run without it: KCM runs on as it is, and nothing is listed.
    let applied = environment
        .apply_configuration(env::ApplyConfigurationRequest { run: run(false) })
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    assert!(applied.controller_manager_flags.is_empty());
    assert_eq!(child_process(up.pid(), KCM).unwrap().0, divided);

    let restored = environment
        .restore_defaults(env::RestoreDefaultsRequest {})
        .await
        .unwrap()
        .into_inner()
        .configuration
        .unwrap();
    assert!(restored.controller_manager_flags.is_empty());
    let (last, args) = child_process(up.pid(), KCM).unwrap();
    assert_ne!(last, divided);
    assert!(
        args.iter()
            .all(|arg| !arg.starts_with("--horizontal-pod-autoscaler-")),
        "{args:?}"
    );
}

/// The environment API refuses an absurd speed and a flag that would make CA write a file, in
/// Check and Apply alike, with INVALID_ARGUMENT naming the field or flag; a refused Apply
/// leaves the running CA as it was, and the file is never written.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_configuration_leaves_the_running_autoscaler_alone() {
    let up = tokio::task::spawn_blocking(|| Up::start(&["--autoscaler"]))
        .await
        .unwrap();
    let (pid, args) = autoscaler_process(up.pid()).unwrap();
    let mut environment = EnvironmentClient::connect(up.urls.environment.clone())
        .await
        .unwrap();
    let written = up.state.path().join("ca-wrote-this.log");
    let log_file = format!("log-file={}", written.display());
    let refused = [
        (env_run(1e-300, &[]), "run.speed"),
        (env_run(f64::INFINITY, &[]), "run.speed"),
        (env_run(-1.0, &[]), "run.speed"),
        (
            env_run(1.0, &[&log_file, "logtostderr=false"]),
            "--log-file is not a flag a run may set (logging)",
        ),
        (
            env_run(1.0, &["kubernetes=https://10.0.0.1:6443"]),
            "--kubernetes is not a flag a run may set (connection)",
        ),
        (
            env_run(1.0, &["grpc-expander-url=10.0.0.1:443"]),
            "--grpc-expander-url is not a flag a run may set (connection)",
        ),
    ];
    for (run, needle) in refused {
        let check = environment
            .check_configuration(env::CheckConfigurationRequest { run: run.clone() })
            .await
            .unwrap_err();
        let apply = environment
            .apply_configuration(env::ApplyConfigurationRequest { run: run.clone() })
            .await
            .unwrap_err();
        for status in [check, apply] {
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{run:?}: {status:?}"
            );
            assert!(status.message().contains(needle), "{needle}: {status:?}");
        }
    }
    // The CA that ran before runs still, unrestarted, and serves.
    let (after, after_args) = autoscaler_process(up.pid()).unwrap();
    assert_eq!(after, pid, "a refused Apply restarted CA");
    assert_eq!(after_args, args);
    assert!(autoscaler_healthy(&after_args).await);
    assert!(!written.exists(), "CA wrote {}", written.display());
}

/// A cluster-autoscaler that dies under `ksim up` is reported on its output, started again (a
/// new process that serves its health check), and listed by `ksim down`, which leaves no CA
/// directory behind, the dead one's included.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_autoscaler_is_reported_restarted_and_listed_by_down() {
    // CA's directories go to this TMPDIR, so what is left of them can be seen.
    let tmp = tempfile::tempdir().unwrap();
    let tmp_dir = tmp.path().to_str().unwrap().to_owned();
    let up = tokio::task::spawn_blocking(move || {
        let fast = super::common::up::fast_autoscaler_args();
        let args: Vec<&str> = fast.iter().map(String::as_str).collect();
        Up::start_with_env(&args, &[("TMPDIR", &tmp_dir)])
    })
    .await
    .unwrap();
    let autoscaler_dirs = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("ksim-cluster-autoscaler-"))
            .collect::<Vec<_>>()
    };
    assert_eq!(autoscaler_dirs().len(), 1, "{:?}", autoscaler_dirs());
    let (pid, args) = autoscaler_process(up.pid()).unwrap();
    assert!(autoscaler_healthy(&args).await);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let parent = up.pid();
    let (new_pid, new_args) = ksim_localenv::wait::until(
        "a new cluster-autoscaler serving",
        Duration::from_secs(120),
        || async move {
            match autoscaler_process(parent) {
                Some((new, args)) if new != pid && autoscaler_healthy(&args).await => {
                    Ok((new, args))
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
    .unwrap();
    assert_ne!(new_pid, pid);
    // The environment's own flags, as before.
    assert!(
        new_args
            .iter()
            .any(|a| a == "--scale-down-unneeded-time=5s"),
        "{new_args:?}"
    );
    let said = ksim_localenv::wait::until(
        "ksim up reporting the restart",
        Duration::from_secs(60),
        || {
            let said = up.said();
            async move {
                if said.contains(&format!("cluster-autoscaler restarted (pid {new_pid})")) {
                    Ok(said)
                } else {
                    Err(said)
                }
            }
        },
    )
    .await
    .unwrap();
    assert!(
        said.contains("ksim: cluster-autoscaler exited (signal: 9"),
        "{said}"
    );
    // The environment API hands the outage to a driver: down, then up again.
    let mut environment = EnvironmentClient::connect(up.urls.environment.clone())
        .await
        .unwrap();
    let outages = environment
        .list_autoscaler_outages(env::ListAutoscalerOutagesRequest { since: None })
        .await
        .unwrap()
        .into_inner()
        .outages;
    assert_eq!(outages.len(), 1, "{outages:?}");
    let (down, up_again) = (outages[0].down_time.unwrap(), outages[0].up_time.unwrap());
    assert!(
        (down.seconds, down.nanos) <= (up_again.seconds, up_again.nanos),
        "{outages:?}"
    );
    // One that ended before `since` is not listed.
    let later = prost_types::Timestamp {
        seconds: up_again.seconds + 1,
        nanos: 0,
    };
    let after = environment
        .list_autoscaler_outages(env::ListAutoscalerOutagesRequest { since: Some(later) })
        .await
        .unwrap()
        .into_inner()
        .outages;
    assert!(after.is_empty(), "{after:?}");

    let down = up.ksim(&["down"]);
    let listed = String::from_utf8_lossy(&down.stdout);
    assert!(
        listed.contains("cluster-autoscaler exited (signal: 9"),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("cluster-autoscaler restarted (pid {new_pid})")),
        "{listed}"
    );
    // `ksim down` returns once `ksim up` has exited.
    assert_eq!(autoscaler_dirs(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn at_10x_autoscaler_durations_run_divided_and_a_late_scale_down_happens_in_the_replay() {
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let dir = up.state.path();
    let trace = dir.join("drop.ksim");
    // Three pods of a node each; the load drops 3 recorded minutes before the trace ends.
    let t0 = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (t0, deployment(&web(3, "1200m", "a"))),
            (t0 + 60_000, deployment(&web(0, "1200m", "b"))),
            (t0 + 240_000, deployment(&web(0, "1200m", "c"))),
        ],
        &[],
    );
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let ca_before = autoscaler_command_line(up.pid()).unwrap();
    assert!(
        ca_before.contains("--scale-down-unneeded-time=5s"),
        "{ca_before}"
    );

    let parent = up.pid();
    let (output, seen) = run_while(
        &up,
        args(&[
            "run",
            trace.to_str().unwrap(),
            "--driver",
            &up.urls.driver,
            "--speed",
            "10",
            "--autoscaler",
            &format!("--autoscaler-group=m5={}:1:4:1", skeleton.display()),
            "--autoscaler-arg",
            "scale-down-unneeded-time=2m",
        ]),
        async move {
            // The CA that runs the simulation: its command line once it is the restarted one.
            ksim_localenv::wait::until(
                "CA restarted at 10x",
                Duration::from_secs(120),
                || async move {
                    autoscaler_command_line(parent)
                        .filter(|line| line.contains("--scale-down-unneeded-time=12s"))
                        .ok_or_else(|| "not yet".to_owned())
                },
            )
            .await
        },
    )
    .await;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    let during = seen.unwrap();
    // Every duration divided by 10, the scan interval at CA's floor.
    assert!(during.contains("--scan-interval=100ms"), "{during}");
    assert!(during.contains("--max-node-provision-time=12s"), "{during}");
    assert!(
        printed.contains("scale-down-unneeded-time=2m (runs 12s)"),
        "{printed}"
    );

    let report = report_of(&printed);
    let configuration = &report["configuration"];
    assert_eq!(configuration["speed"], 10.0, "{configuration:#}");
    let flag = configuration["autoscaler_flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|flag| flag["name"] == "scale-down-unneeded-time")
        .unwrap();
    assert_eq!(
        (&flag["given"], &flag["as_run"], &flag["from_defaults"]),
        (&json!("2m"), &json!("12s"), &json!(false))
    );
    // CA added nodes for the pods and removed them after the drop, inside the replay: with
    // 2m undivided, 3 recorded minutes (18 s at 10x) would have been too short.
    let timeline = report["timeline"].as_array().unwrap();
    let total = |field: &str| -> u64 { timeline.iter().map(|b| b[field].as_u64().unwrap()).sum() };
    assert!(total("scale_ups") >= 2, "{report:#}");
    assert!(total("scale_downs") >= 1, "{report:#}");
    let removed: Vec<u64> = report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "removed")
        .map(|change| change["offset_ms"].as_u64().unwrap())
        .collect();
    assert!(!removed.is_empty(), "{report:#}");
    // After the drop plus the 2m, in recorded time, and before the trace's end.
    assert!(
        removed.iter().all(|&ms| (180_000..240_000).contains(&ms)),
        "{removed:?}"
    );

    // Restored: CA runs with the environment's own flags again.
    let after = autoscaler_command_line(up.pid()).unwrap();
    assert!(after.contains("--scale-down-unneeded-time=5s"), "{after}");
    assert!(after.contains("--scan-interval=1s"), "{after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_price_expander_grows_the_cheaper_group_and_least_waste_the_better_fitting_one() {
    let files = tempfile::tempdir().unwrap();
    let pricing = files.path().join("provider.yaml");
    // Memory-heavy pods: an m5.large fits one with little left over, a c5.2xlarge two with
    // much CPU idle, so least-waste takes m5 nodes; priced low per node, c5 is what price takes.
    // (The pods tolerate the c5 skeleton's workload-class taint.)
    std::fs::write(
        &pricing,
        "pricing:\n  instanceTypes:\n    m5.large: 0.096\n    c5.2xlarge: 0.01\n  pod:\n    \
         cpuPerHour: 0.02\n    memoryGiBPerHour: 0.002\n",
    )
    .unwrap();
    // The prices come with each run, not with the environment.
    let provider_config = pricing.to_str().unwrap().to_owned();
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let dir = up.state.path();
    let trace = dir.join("four.ksim");
    let t0 = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (
                t0,
                deployment(&shop_deployment("web", 4, "500m", "6Gi", "a")),
            ),
            (
                t0 + 120_000,
                deployment(&shop_deployment("web", 4, "500m", "6Gi", "b")),
            ),
        ],
        &[],
    );
    let m5 = dir.join("m5.yaml");
    std::fs::write(&m5, SKELETON).unwrap();
    let c5 = dir.join("c5.yaml");
    std::fs::write(
        &c5,
        include_str!("../../../../../deploy/vnode/examples/skeleton-c5-2xlarge.yaml"),
    )
    .unwrap();
    let trace = trace.to_str().unwrap().to_owned();
    let groups = [
        format!("--autoscaler-group=m5={}:0:6:0", m5.display()),
        format!("--autoscaler-group=c5={}:0:2:0", c5.display()),
    ];
    let run_with = |expander: &str, more: &[&str]| {
        let flag = format!("expander={expander}");
        let mut given = vec![
            "run",
            &trace,
            "--driver",
            &up.urls.driver,
            "--speed",
            "10",
            "--autoscaler",
            &groups[0],
            &groups[1],
            "--autoscaler-arg",
            &flag,
            "--provider-config",
            &provider_config,
        ];
        given.extend(more);
        let printed = run_ok(&up, &args(&given));
        report_of(&printed)
    };
    let run = |expander: &str| run_with(expander, &[]);
    let scale_ups = |report: &Value, group: &str| {
        report["costs"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["group"] == group)
            .map_or(0, |g| g["scale_ups"].as_u64().unwrap())
    };
    let price = tokio::task::block_in_place(|| run("price"));
    let waste = tokio::task::block_in_place(|| run("least-waste"));
    assert!(
        scale_ups(&price, "c5") >= 1 && scale_ups(&price, "m5") == 0,
        "price: {:#}",
        price["costs"]
    );
    assert!(
        scale_ups(&waste, "m5") >= 1 && scale_ups(&waste, "c5") == 0,
        "least-waste: {:#}",
        waste["costs"]
    );
    assert_eq!(
        price["configuration"]["provider"]["source"],
        provider_config.as_str()
    );
    let cost = |report: &Value| report["costs"]["cost"].as_f64().unwrap();
    assert!(
        cost(&price) < cost(&waste),
        "price {:#} least-waste {:#}",
        price["costs"],
        waste["costs"]
    );

    // The cheaper group out of stock (issue 56): the cloud provider refuses CA's scale-up of
    // c5, CA backs it off and the price expander falls back to m5, which costs more. (Not
    // "the pods wait longer": the refusal costs at most one CA loop, below the spread of
    // pending pod-seconds from run to run: 78 to 96 with the stockout, 73 to 98 without.)
    let stocked_out = tokio::task::block_in_place(|| {
        run_with("price", &["--stockout", "group=c5,at=0s,for=10m"])
    });
    assert_eq!(
        stocked_out["disruptions"]["outcomes"][0]["kind"], "stockout",
        "{:#}",
        stocked_out["disruptions"]
    );
    assert!(
        scale_ups(&stocked_out, "m5") >= 1 && scale_ups(&stocked_out, "c5") == 0,
        "stockout: {:#}",
        stocked_out["costs"]
    );
    assert!(
        cost(&stocked_out) > cost(&price),
        "stockout {:#} price {:#}",
        stocked_out["costs"],
        price["costs"]
    );
}

/// A cluster-autoscaler killed with -9 while a run replays is in that run's report: one
/// outage with a length, on the summary's own line; a run in which CA stays up has none.
/// While the run goes, a second caller may not change what it runs with (issue 53):
/// ApplyConfiguration, RestoreDefaults and the pool's DeleteNodeGroup of the run's group are
/// FAILED_PRECONDITION naming the run, and the run's own calls (its configuration, its
/// cleanup) still succeed; `--autoscaler-group` without `--autoscaler` is refused here, where
/// the environment's CA would resize the group anyway.
#[tokio::test(flavor = "multi_thread")]
async fn an_autoscaler_killed_mid_run_is_an_outage_in_the_runs_report() {
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let dir = up.state.path();
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let t0 = 1_767_225_600_000;
    let trace = |name: &str, recorded_ms: i64| {
        let path = dir.join(name);
        write_trace(
            &path,
            [
                (t0, deployment(&web(1, "100m", "a"))),
                (t0 + recorded_ms, deployment(&web(1, "100m", "b"))),
            ],
            &[],
        );
        path.to_str().unwrap().to_owned()
    };
    let group = format!("--autoscaler-group=m5={}:1:4:1", skeleton.display());
    // A pool group of the run's own, which no one else may delete while it runs.
    let fixed = format!("--node-group=fixed={}:1", skeleton.display());
    let run_args = |trace: &str| {
        args(&[
            "run",
            trace,
            "--driver",
            &up.urls.driver,
            "--speed",
            "2",
            "--autoscaler",
            &group,
            &fixed,
        ])
    };

    // The environment's CA would resize a group of a run that did not ask for it: refused.
    let unscaled = tokio::task::block_in_place(|| {
        up.ksim_any(&args(&[
            "run",
            &trace("unscaled.ksim", 20_000),
            "--driver",
            &up.urls.driver,
            &group,
        ]))
    });
    assert!(!unscaled.status.success());
    assert!(
        stderr(&unscaled)
            .contains("--autoscaler-group m5: this environment runs cluster-autoscaler")
            && stderr(&unscaled).contains("add --autoscaler"),
        "{}",
        stderr(&unscaled)
    );

    let parent = up.pid();
    let client = up.client().await;
    let (environment_url, pool_url) = (up.urls.environment.clone(), up.urls.pool.clone());
    let (output, killed) = run_while(&up, run_args(&trace("kill.ksim", 80_000)), async move {
        // A replayed pod exists once the replay has begun: the CA running now is the run's.
        let pods: Api<Pod> = Api::namespaced(client.clone(), "virtual-shop");
        ksim_localenv::wait::until(
            "the replay's first pod",
            Duration::from_secs(120),
            || async {
                let listed = pods
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                if listed.items.is_empty() {
                    Err("no pod yet".to_owned())
                } else {
                    Ok(())
                }
            },
        )
        .await
        .unwrap();
        refused_while_running(&client, &environment_url, &pool_url).await;
        let (pid, _) = autoscaler_process(parent).unwrap();
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        pid
    })
    .await;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    assert!(
        printed.contains("cluster-autoscaler: down 1 time, ")
            && printed.contains("(recorded time); its decisions in those spans are missing"),
        "killed pid {killed}: {printed}"
    );
    let report = report_of(&printed);
    let outages = report["autoscaler_outages"].as_array().unwrap();
    assert_eq!(outages.len(), 1, "{report:#}");
    assert!(
        outages[0]["duration_ms"].as_u64().unwrap() > 0,
        "{outages:?}"
    );

    // Once CA serves again and the outage is over, a run it stays up for has none.
    let environment_url = up.urls.environment.clone();
    ksim_localenv::wait::until(
        "cluster-autoscaler serving again",
        Duration::from_secs(120),
        || {
            let environment_url = environment_url.clone();
            async move {
                let mut environment = EnvironmentClient::connect(environment_url)
                    .await
                    .map_err(|e| e.to_string())?;
                let outages = environment
                    .list_autoscaler_outages(env::ListAutoscalerOutagesRequest { since: None })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner()
                    .outages;
                match autoscaler_process(parent) {
                    Some((_, args))
                        if outages.iter().all(|o| o.up_time.is_some())
                            && autoscaler_healthy(&args).await =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?} {outages:?}")),
                }
            }
        },
    )
    .await
    .unwrap();
    let quiet_trace = trace("quiet.ksim", 20_000);
    let printed = tokio::task::block_in_place(|| run_ok(&up, &run_args(&quiet_trace)));
    assert!(!printed.contains("cluster-autoscaler: down"), "{printed}");
    assert_eq!(report_of(&printed)["autoscaler_outages"], json!([]));
}

/// A second caller's ApplyConfiguration (speed 1000, scale-down-unneeded-time=1s),
/// RestoreDefaults and DeleteNodeGroup of the run's pool group `fixed`, while the run that
/// holds the driver's lease replays: each FAILED_PRECONDITION naming that run.
async fn refused_while_running(client: &Client, environment_url: &str, pool_url: &str) {
    use k8s_openapi::api::coordination::v1::Lease;
    use ksim_proto::ksim::vnode::v1::{
        DeleteNodeGroupRequest, virtual_node_pool_client::VirtualNodePoolClient,
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), "ksim-system");
    let running = leases
        .get("ksim-driver")
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.holder_identity)
        .unwrap();
    let named = |what: &str, status: tonic::Status| {
        assert_eq!(
            status.code(),
            tonic::Code::FailedPrecondition,
            "{what}: {status:?}"
        );
        assert!(
            status.message().contains(&format!("simulation {running}")),
            "{what}: {status:?}"
        );
    };
    let mut environment = EnvironmentClient::connect(environment_url.to_owned())
        .await
        .unwrap();
    let run = env_run(1000.0, &["scale-down-unneeded-time=1s"]);
    let applied = environment
        .apply_configuration(env::ApplyConfigurationRequest { run })
        .await;
    named("ApplyConfiguration", applied.unwrap_err());
    let restored = environment
        .restore_defaults(env::RestoreDefaultsRequest {})
        .await;
    named("RestoreDefaults", restored.unwrap_err());
    let mut pool = VirtualNodePoolClient::connect(pool_url.to_owned())
        .await
        .unwrap();
    let deleted = pool
        .delete_node_group(DeleteNodeGroupRequest {
            name: "fixed".to_owned(),
        })
        .await;
    named("DeleteNodeGroup", deleted.unwrap_err());
}

/// The flag `name` of a report's configuration: (given, as run, source).
fn flag_of(report: &Value, name: &str) -> (String, String, String) {
    let flag = report["configuration"]["autoscaler_flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|flag| flag["name"] == name)
        .unwrap_or_else(|| panic!("no flag {name}: {:#}", report["configuration"]));
    let text = |key: &str| flag[key].as_str().unwrap_or_default().to_owned();
    (text("given"), text("as_run"), text("source"))
}

/// A small movable pod in `namespace` (a one-replica Deployment, no PodDisruptionBudget) on
/// group `m5`, placed off node `avoid` where it can be (a preference, which CA's scale-down
/// simulation does not hold it to).
fn keeper(namespace: &str, avoid: &str) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "keeper", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "keeper"}},
            "template": {
                "metadata": {"labels": {"app": "keeper"}},
                "spec": {
                    "nodeSelector": {"ksim.io/node-group": "m5"},
                    "affinity": {"nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "preference": {"matchExpressions": [{
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": [avoid]
                            }]}
                        }]
                    }},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "keeper",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                    }]
                }
            }
        }
    }))
    .unwrap()
}

/// Creates [`keeper`] in `namespace` and waits until its pod runs: the node it runs on.
async fn place_keeper(client: &Client, namespace: &str, avoid: &str) -> String {
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &keeper(namespace, avoid))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    ksim_localenv::wait::until("the keeper pod running", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let listed = pods
                .list(&ListParams::default().labels("app=keeper"))
                .await
                .map_err(|e| e.to_string())?;
            listed
                .items
                .iter()
                .find(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .and_then(|pod| pod.spec.as_ref()?.node_name.clone())
                .ok_or_else(|| format!("{} pods", listed.items.len()))
        }
    })
    .await
    .unwrap()
}

/// `ksim up --autoscaler` with no autoscaler arguments runs CA as production does: its own
/// defaults, durations divided by the speed. Of three nodes, one empty, one holding a small
/// movable pod in `default` and one holding the same pod in kube-system, only the last is kept
/// (`skip-nodes-with-system-pods` defaults to true): the other two are removed after CA's 10
/// minutes (10 s at 60x), the `default` pod moving to the kept node. The two pods differ only
/// in their namespace. The report says why from CA's own gauge: the kept node was
/// BlockedByPod (CA's drain rule for kube-system pods). A trace holding the recorded cluster's CA
/// Deployment runs with its flags: its `--scale-down-unneeded-time=3m` as given, its cloud
/// provider's flags not applied and named.
#[tokio::test(flavor = "multi_thread")]
async fn without_autoscaler_arguments_ca_runs_its_own_defaults_and_a_recorded_deployments_flags() {
    let up = tokio::task::spawn_blocking(|| Up::start(&["--autoscaler"]))
        .await
        .unwrap();
    let client = up.client().await;
    let dir = up.state.path();
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let group = format!("--autoscaler-group=m5={}:0:4:3", skeleton.display());
    let environment_ca = autoscaler_command_line(up.pid()).unwrap();
    for production in [
        "--scale-down-unneeded-time",
        "--skip-nodes-with",
        "--scan-interval",
    ] {
        assert!(!environment_ca.contains(production), "{environment_ca}");
    }
    assert!(
        environment_ca.contains("--leader-elect=false"),
        "{environment_ca}"
    );

    // Nothing replayed: 30 recorded minutes of three nodes, 30 s at 60x.
    let t0 = 1_767_225_600_000;
    let quiet = dir.join("quiet.ksim");
    write_trace(
        &quiet,
        [
            (t0, deployment(&web(0, "100m", "a"))),
            (t0 + 30 * 60_000, deployment(&web(0, "100m", "b"))),
        ],
        &[],
    );
    let parent = up.pid();
    let (output, (kept, moved, during)) = run_while(
        &up,
        args(&[
            "run",
            quiet.to_str().unwrap(),
            "--driver",
            &up.urls.driver,
            "--speed",
            "60",
            "--autoscaler",
            &group,
        ]),
        {
            let client = client.clone();
            async move {
                let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
                ksim_localenv::wait::until("three m5 nodes", Duration::from_secs(120), || {
                    let nodes = nodes.clone();
                    async move {
                        let listed = nodes
                            .list(&ListParams::default().labels("ksim.io/node-group=m5"))
                            .await
                            .map_err(|e| e.to_string())?;
                        (listed.items.len() >= 3)
                            .then_some(())
                            .ok_or_else(|| format!("{} nodes", listed.items.len()))
                    }
                })
                .await
                .unwrap();
                let during = autoscaler_command_line(parent).unwrap_or_default();
                let kept = place_keeper(&client, "kube-system", "none").await;
                let moved = place_keeper(&client, "default", &kept).await;
                (kept, moved, during)
            }
        },
    )
    .await;
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{printed}{}", stderr(&output));
    // CA's own defaults, divided by 60; the skip-nodes flags left to CA.
    assert!(
        during.contains("--scale-down-unneeded-time=10s"),
        "{during}"
    );
    assert!(
        during.contains("--blocking-system-pod-distruption-timeout=1m"),
        "{during}"
    );
    assert!(!during.contains("--skip-nodes-with"), "{during}");
    let report = report_of(&printed);
    assert_eq!(
        flag_of(&report, "scale-down-unneeded-time"),
        ("10m0s".into(), "10s".into(), "ca-default".into())
    );
    assert_eq!(
        flag_of(&report, "skip-nodes-with-system-pods"),
        ("true".into(), "true".into(), "ca-default".into())
    );
    let simulation_flags = &report["configuration"]["autoscaler_simulation_flags"];
    assert_eq!(
        simulation_flags[0]["name"], "leader-elect",
        "{simulation_flags:#}"
    );
    assert!(
        printed.contains("ksim sets:         leader-elect=false (production differs)"),
        "{printed}"
    );
    let removed: Vec<String> = report["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "removed")
        .map(|change| change["node"].as_str().unwrap().to_owned())
        .collect();
    assert_ne!(moved, kept, "the two pods share a node");
    assert_eq!(removed.len(), 2, "{removed:?} {report:#}");
    assert!(
        !removed.contains(&kept),
        "the node with a kube-system pod was removed"
    );
    assert!(removed.contains(&moved), "{removed:?}");
    // Why the kept node stayed, as CA's unremovable_nodes_count{reason} said: 15, BlockedByPod.
    let nodes_kept = &report["nodes_kept"];
    assert!(
        nodes_kept["source"]
            .as_str()
            .is_some_and(|source| source.contains("cluster_autoscaler_unremovable_nodes_count")),
        "{nodes_kept:#}"
    );
    let blocked = nodes_kept["reasons"]
        .as_array()
        .and_then(|reasons| reasons.iter().find(|reason| reason["code"] == 15))
        .unwrap_or_else(|| panic!("no BlockedByPod in {nodes_kept:#}"));
    assert_eq!(blocked["name"], "BlockedByPod", "{nodes_kept:#}");
    assert!(
        blocked["peak_nodes"].as_u64().is_some_and(|peak| peak >= 1),
        "{nodes_kept:#}"
    );
    assert!(
        printed.contains("why nodes stayed:  ") && printed.contains("BlockedByPod "),
        "{printed}"
    );

    // The recorded cluster's CA, as a Deployment in the trace.
    let recorded = dir.join("recorded.ksim");
    let mut ca = deployment(&json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
            "template": {
                "metadata": {"labels": {"app": "cluster-autoscaler"}},
                "spec": {"containers": [{
                    "name": "cluster-autoscaler",
                    "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
                    "command": ["./cluster-autoscaler", "--cloud-provider=aws",
                                "--nodes=1:10:prod-asg", "--scale-down-unneeded-time=3m",
                                "--expander=least-waste"]
                }]}
            }
        }
    }));
    ca.namespace = "kube-system".into();
    write_trace(
        &recorded,
        [(t0, ca), (t0 + 60_000, deployment(&web(0, "100m", "a")))],
        &[],
    );
    let printed = run_ok(
        &up,
        &args(&[
            "run",
            recorded.to_str().unwrap(),
            "--driver",
            &up.urls.driver,
            "--speed",
            "60",
            "--autoscaler",
            &group,
        ]),
    );
    let report = report_of(&printed);
    assert_eq!(
        flag_of(&report, "scale-down-unneeded-time"),
        ("3m".into(), "3s".into(), "recording".into())
    );
    assert_eq!(
        flag_of(&report, "expander"),
        (
            "least-waste".into(),
            "least-waste".into(),
            "recording".into()
        )
    );
    let configuration = &report["configuration"];
    assert_eq!(
        configuration["autoscaler_recorded_source"],
        "Deployment kube-system/cluster-autoscaler in the trace"
    );
    let not_applied: Vec<&str> = configuration["autoscaler_not_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["flag"].as_str().unwrap())
        .collect();
    assert_eq!(
        not_applied,
        ["--cloud-provider=aws", "--nodes=1:10:prod-asg"],
        "{configuration:#}"
    );
    assert!(
        printed.contains("recording: scale-down-unneeded-time=3m (runs 3s)"),
        "{printed}"
    );
}
