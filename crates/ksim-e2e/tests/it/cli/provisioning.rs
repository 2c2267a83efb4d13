//! The provisioning model end to end: nodes that take time to boot and to go, pods that take
//! time to start, learned from a recording and used by the what-if question they exist for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Node, Pod},
};
use ksim_localenv::fixtures::seat_deployment;
use ksim_nodes::{
    labels::{GROUP_LABEL, POD_PROVISIONING_ANNOTATION},
    node::is_ready,
    seats::SeatDeployment,
};
use ksim_provisioning::{
    Delay, Draws, GroupProvisioning, Model, NodeDelays, PodDelays, PodProvisioning,
    calibrate::Figures,
};
use ksim_trace::{
    Record, TraceReader,
    time::{now_ms, timestamp},
};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::common::{
    deployment, forget_recording, series,
    up::{Up, fast_autoscaler_args, ksim_in, report_dir},
    web, write_trace,
};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;

/// Nodes take 20 to 30 s to register and 5 s more to be Ready, and linger 40 s when removed,
/// in recorded time (a cloud's figures scaled down so the test replays in a minute and a half).
const BOOTING: &str = "\
name: booting
source: the what-if test
seed: 3
nodes:
  default:
    registration: {p50: 20s, p90: 30s}
    ready: 5s
    termination: 40s
";

/// CA's unready time as in production: a node still booting is not taken for a broken one.
const EXPERIMENT: &str = "\
trace: bursts.ksim
speed: 5
autoscaler: true
autoscalerGroups: [\"m5=m5.yaml:0:4:0\"]
provisioning: booting.yaml
variants:
- name: short
  autoscalerArgs: [scale-down-unneeded-time=20s, scale-down-unready-time=20m]
- name: long
  autoscalerArgs: [scale-down-unneeded-time=5m, scale-down-unready-time=20m]
";

/// The termination delay of [`BOOTING`], in ms.
const TERMINATION_MS: u64 = 40_000;

/// Deployment `burst` in `shop`: `replicas` pods of one CPU, one per m5.large.
fn burst(replicas: i32, revision: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burst", "namespace": "shop", "labels": {"revision": revision}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "burst"}},
            "template": {
                "metadata": {"labels": {"app": "burst"}},
                "spec": {
                    "containers": [{"name": "work", "image": "registry.example/work:1",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
                }
            }
        }
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The what-if the model is for: with nodes that take time to boot, giving them back soon after
/// a burst saves node-hours and costs pending time at the next burst, which waits for nodes to
/// boot again; and a removed node counts until its termination delay has passed.
#[tokio::test(flavor = "multi_thread")]
async fn with_booting_nodes_a_short_unneeded_time_trades_node_hours_for_pending_time() {
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let dir = up.state.path().join("what-if");
    std::fs::create_dir_all(&dir).unwrap();
    // Three bursts of three one-CPU pods, a minute each, two minutes apart.
    let t0 = 1_767_225_600_000;
    let minute = 60_000;
    let mut applies = Vec::new();
    for (n, at) in [0, 3, 6].into_iter().enumerate() {
        applies.push((t0 + at * minute, deployment(&burst(3, &format!("up-{n}")))));
        applies.push((
            t0 + (at + 1) * minute,
            deployment(&burst(0, &format!("down-{n}"))),
        ));
    }
    applies.push((t0 + 7 * minute + 30_000, deployment(&burst(0, "end"))));
    write_trace(&dir.join("bursts.ksim"), applies, &[]);
    std::fs::write(dir.join("m5.yaml"), SKELETON).unwrap();
    std::fs::write(dir.join("booting.yaml"), BOOTING).unwrap();
    let file = dir.join("experiment.yaml");
    std::fs::write(&file, EXPERIMENT).unwrap();

    let assertions = [
        "variants.short.node_hours < variants.long.node_hours",
        "variants.short.pending_pod_seconds > variants.long.pending_pod_seconds",
    ];
    let mut args: Vec<String> = ["experiment", "run", "-f", file.to_str().unwrap()]
        .map(str::to_owned)
        .to_vec();
    for assertion in assertions {
        args.extend(["--assert".to_owned(), assertion.to_owned()]);
    }
    let output = tokio::task::block_in_place(|| up.ksim_any(&args));
    let printed = text(&output.stdout);
    assert!(output.status.success(), "{printed}{}", text(&output.stderr));
    for assertion in assertions {
        assert!(
            printed.contains(&format!("assert ok:     {assertion}")),
            "{printed}"
        );
    }

    let results = dir.join("experiment-results");
    let report = |variant: &str| -> Value {
        let path = results.join(variant).join("1").join("report.json");
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
    };
    let (short, long) = (report("short"), report("long"));
    // Each report says which model ran and how the run got it.
    for report in [&short, &long] {
        let provisioning = &report["provisioning"];
        assert_eq!(provisioning["name"], "booting", "{provisioning}");
        assert_eq!(provisioning["origin"], "given", "{provisioning}");
        assert!(
            provisioning["yaml"]
                .as_str()
                .unwrap()
                .contains("termination: 40s")
        );
    }
    // The short variant's bursts waited for nodes to boot, and the report says so apart.
    let node_boot = short["pending_split"]["node_boot"].as_f64().unwrap();
    assert!(node_boot > 0.0, "{:#}", short["pending_split"]);
    // A node CA removed stayed (and counted) until its termination delay had passed: the
    // first removal comes at least most of that delay after the group first shrank.
    let first_shrink = short["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|bucket| bucket["scale_downs"].as_u64().unwrap_or(0) > 0)
        .map(|bucket| bucket["offset_ms"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("CA never shrank the group: {:#}", short["timeline"]));
    let first_removal = short["node_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|change| change["kind"] == "removed")
        .filter_map(|change| change["offset_ms"].as_u64())
        .min()
        .unwrap_or_else(|| panic!("no node removed: {:#}", short["node_changes"]));
    assert!(
        first_removal >= first_shrink + TERMINATION_MS * 8 / 10,
        "shrank at {first_shrink} ms, first node gone at {first_removal} ms"
    );
}

/// The recorded group, its nodes and the model its pool plays.
const GROUP: &str = "boot";
const NODES: usize = 30;
/// Seed 6 draws its 30 nodes' Ready delays within 5% of the model's p50 and p90 (asserted
/// below), so what calibration learns is held against the model itself.
const SEED: u64 = 6;
/// The pool plays the recorded cluster's node delays at 2x, so the recording takes a minute;
/// calibration learns them as they were recorded (halved).
const RECORDING_SPEED: f64 = 2.0;
const DEADLINE: Duration = Duration::from_secs(300);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Node Ready after p50 40 s / p90 70 s, gone 30 s after its removal; pods start in 10 s
/// (a pod's bind and start are recorded in whole seconds, so a start of a few seconds could
/// not be learned to 15%).
fn known_nodes() -> NodeDelays {
    NodeDelays {
        registration: Delay::default(),
        ready: Delay::Percentiles {
            p50: secs(40),
            p90: Some(secs(70)),
            p99: None,
        },
        termination: Delay::Fixed(secs(30)),
    }
}

fn known_pods() -> PodDelays {
    PodDelays {
        start: Delay::Fixed(secs(10)),
        first_pull: Delay::default(),
    }
}

/// Whether `learned` is within 15% of `configured`.
fn close(learned: Duration, configured: Duration) -> bool {
    (learned.as_secs_f64() / configured.as_secs_f64() - 1.0).abs() <= 0.15
}

/// `replicas` pods of web, one per node of the group, each starting by the model.
fn known_web(replicas: i32) -> Deployment {
    let start = PodProvisioning {
        model: "known".to_owned(),
        seed: SEED,
        speed: 1.0,
        pods: known_pods(),
    };
    web(
        GROUP,
        replicas,
        json!({POD_PROVISIONING_ANNOTATION: start.to_json()}),
    )
}

/// Waits until `done` holds of the group's Ready nodes and web's Running pods.
async fn until(client: &Client, what: &str, done: impl Fn(usize, usize) -> bool) {
    let started = Instant::now();
    loop {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
            .await;
        let pods = Api::<Pod>::namespaced(client.clone(), "shop")
            .list(&ListParams::default())
            .await;
        if let (Ok(nodes), Ok(pods)) = (nodes, pods) {
            let ready = nodes.items.iter().filter(|node| is_ready(node)).count();
            let running = pods
                .items
                .iter()
                .filter(|pod| {
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count();
            if done(ready, running) {
                return;
            }
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scale<K>(api: &Api<K>, name: &str, replicas: usize)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

/// `ksim up --autoscaler` with the tests' fast CA flags but production's unready time: a node
/// still booting (NotReady for up to a minute here) is not a broken one to remove.
fn booting_autoscaler_args() -> Vec<String> {
    fast_autoscaler_args()
        .into_iter()
        .map(|arg| {
            if arg.starts_with("scale-down-unready-time=") {
                "scale-down-unready-time=20m".to_owned()
            } else {
                arg
            }
        })
        .collect()
}

/// The pending time of each recorded pod: from when the test created web (its ReplicaSet makes
/// the pods within about a second of it) to the pod's start in the trace's pod lifecycles.
fn recorded_pending(trace: &Path, created_ms: i64) -> Vec<Duration> {
    let file = std::fs::File::open(trace).expect("the exported trace");
    let mut reader = TraceReader::new(file).expect("a trace");
    let mut pending = Vec::new();
    while let Some(record) = reader.next_record().expect("a record") {
        if let Record::Lifecycle(pod) = record
            && pod.start_ms > 0
        {
            let ms = u64::try_from(pod.start_ms - created_ms).unwrap_or(0);
            pending.push(Duration::from_millis(ms));
        }
    }
    pending
}

/// The first two tests. A recording of a pool that plays a known model, calibrated,
/// gives that model back within 15%; replayed with that learned model it looks like the
/// recording (nodes, pods running, pending p50), replayed with no delays it does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_recording_of_a_known_model_calibrates_back_and_replays_close_only_with_the_model() {
    // The seed's own draws are near the model, so the comparison below is with the model.
    let mut draws = Draws::new(SEED, GROUP);
    let known = known_nodes();
    let ready: Vec<Duration> = (0..NODES)
        .map(|_| {
            draws.next(&known.registration);
            let ready = draws.next(&known.ready);
            draws.next(&known.termination);
            ready
        })
        .collect();
    let drawn = Figures::of(&ready).unwrap();
    assert!(
        (drawn.p50.as_secs_f64() / 40.0 - 1.0).abs() < 0.05
            && (drawn.p90.as_secs_f64() / 70.0 - 1.0).abs() < 0.05,
        "{drawn:?}"
    );

    let up = tokio::task::spawn_blocking(|| {
        let args = booting_autoscaler_args();
        Up::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    let client = up.client().await;
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    // The recorded cluster: a group CA grows from none, whose pool plays the known model.
    let seats = SeatDeployment {
        namespace: "ksim-system".to_owned(),
        provisioning: Some(
            GroupProvisioning {
                model: "known".to_owned(),
                seed: SEED,
                speed: RECORDING_SPEED,
                nodes: known,
            }
            .to_json(),
        ),
        ..seat_deployment(GROUP, 0, 0, NODES as i32, SKELETON)
    }
    .to_deployment();
    let seats_api = Api::<Deployment>::namespaced(client.clone(), "ksim-system");
    seats_api
        .create(&PostParams::default(), &seats)
        .await
        .unwrap();

    // The recording: web wants 30 pods, one per node, CA grows the group to 30 nodes that
    // come Ready by the model, the pods start (CA's nodes, so a replay with CA can play the
    // same); then web and the group go to none at once, before CA's unneeded time, so each
    // node's removal begins with the pool's cordon and lingers by the model (CA's own taint
    // comes seconds before the pool sees its removal, and calibration would count those).
    let start_ms = now_ms();
    let web_api = Api::<Deployment>::namespaced(client.clone(), "shop");
    let created_ms = now_ms();
    web_api
        .create(&PostParams::default(), &known_web(NODES as i32))
        .await
        .unwrap();
    until(&client, "30 pods running on 30 nodes", |nodes, running| {
        nodes == NODES && running == NODES
    })
    .await;
    let scaled_down_ms = now_ms();
    scale(&web_api, "web", 0).await;
    scale(&seats_api, &format!("seats-{GROUP}"), 0).await;
    until(&client, "web gone", |_, running| running == 0).await;
    let nodes_api = Api::<Node>::all(client.clone());
    let started = Instant::now();
    loop {
        let left = nodes_api
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
            .await
            .map_or(usize::MAX, |list| list.items.len());
        if left == 0 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "{left} nodes left");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The tracer samples at most once a second: its last records are in by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end_ms = now_ms();

    let trace = up.state.path().join("recorded.ksim");
    up.ksim(&[
        "trace",
        "export",
        "--server",
        &up.urls.tracer,
        "--start",
        &timestamp(start_ms).to_string(),
        "--end",
        &timestamp(end_ms).to_string(),
        "-n",
        "shop",
        "-o",
        trace.to_str().unwrap(),
    ]);
    let model_file = up.state.path().join("learned.yaml");
    let calibrated = up.ksim(&[
        "trace",
        "calibrate",
        trace.to_str().unwrap(),
        "-o",
        model_file.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&calibrated.stdout).into_owned();
    assert!(table.contains(GROUP), "{table}");
    let learned = Model::parse(
        "learned.yaml",
        &std::fs::read_to_string(&model_file).unwrap(),
    )
    .unwrap();

    // Recorded time at the recording's speed: the model's delays halved.
    let recorded = |d: Duration| d.div_f64(RECORDING_SPEED);
    let nodes = learned.node_delays(GROUP);
    let Delay::Percentiles { p50, p90, .. } = nodes.ready else {
        panic!("30 nodes make percentiles: {:?}\n{table}", nodes.ready);
    };
    assert!(close(p50, recorded(secs(40))), "ready p50 {p50:?}\n{table}");
    let p90 = p90.unwrap();
    assert!(close(p90, recorded(secs(70))), "ready p90 {p90:?}\n{table}");
    let termination = nodes.termination.median();
    assert!(
        close(termination, recorded(secs(30))),
        "termination {termination:?}\n{table}"
    );
    let start = learned.pod_delays("Deployment/shop/web").start.median();
    assert!(close(start, secs(10)), "pod start {start:?}\n{table}");

    // The recording's pending p50, from the trace itself (the report of a replay has only the
    // simulation's): CA's reaction, the node's boot and the pod's start.
    let pending = recorded_pending(&trace, created_ms);
    assert_eq!(pending.len(), NODES, "{pending:?}");
    let recorded_p50 = Figures::of(&pending).unwrap().p50.as_secs_f64();

    forget_recording(&client, GROUP).await;
    let skeleton = up.state.path().join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    // Each replay stops where the recording scaled down (wall clock at 1x is recorded time):
    // the replay's CA removes nodes its own way after its unneeded time, the recording's test
    // did it at once, and that end would weigh on both replays alike.
    let duration = format!("{}ms", scaled_down_ms - start_ms);
    let with_model = replay(
        &up,
        &trace,
        &skeleton,
        model_file.to_str().unwrap(),
        &duration,
    )
    .await;
    // Its cleanup took its nodes away before the next brings a group of the same name.
    until(&client, "the replay's nodes gone", |nodes, _| nodes == 0).await;
    let instant = replay(&up, &trace, &skeleton, "instant", &duration).await;
    let figures = |report: &Value| {
        let fidelity = &report["fidelity"];
        let nodes = series(fidelity, &format!("nodes/{GROUP}"));
        let running = series(fidelity, "pods_running");
        let number = |series: &Value, key: &str| series[key].as_f64().unwrap();
        ReplayFigures {
            nodes_within: number(nodes, "within_tolerance"),
            node_error: number(nodes, "mean_abs_error"),
            running_within: number(running, "within_tolerance"),
            running_error: number(running, "mean_abs_error"),
            pending_p50: report["pod_pending_time"]["p50_ms"].as_f64().unwrap() / 1000.0,
        }
    };
    let model = figures(&with_model);
    let instant_figures = figures(&instant);
    let said = format!(
        "recorded pending p50 {recorded_p50:.1} s; with the model: {model}; instant: {instant_figures}"
    );
    eprintln!("{said}");
    assert_eq!(with_model["provisioning"]["origin"], "given", "{said}");
    assert_eq!(instant["provisioning"]["name"], "instant", "{said}");
    // Passing runs on 2 shared cores: recorded p50 32.7 s, model nodes within ±1 in 0.69 of the
    // buckets (mean error 1.15), pods 0.77, p50 29.5 s; instant nodes 0.23 (10.77), pods 0.23,
    // p50 12.9 s (2026-11-26). Another: recorded 32.2 s, model nodes 0.46 (1.38), pods 0.54,
    // p50 28.5 s; instant 0.23 (9.54), pods 0.15, p50 4.6 s (CI, 2026-11-27). The model's replay
    // draws its own 30 Ready delays, so on the ramp (a node a second) a bucket that misses by 2
    // is luck, and the share within ±1 swings between runs; the mean error is steady. So the
    // claims are on mean errors: about a node with the model, where instant is off by ten
    // (it has all 30 nodes while the recording still boots them), and each share better with
    // the model than instant.
    assert!(model.node_error <= 3.0, "{said}");
    assert!(instant_figures.node_error >= 5.0, "{said}");
    assert!(
        model.node_error * 3.0 <= instant_figures.node_error,
        "{said}"
    );
    assert!(
        model.running_error < instant_figures.running_error,
        "{said}"
    );
    assert!(
        model.nodes_within > instant_figures.nodes_within
            && model.running_within > instant_figures.running_within,
        "{said}"
    );
    // Pending p50 within 30% with the model (it was 10% under); under half of it instant (that
    // run still paid the recording's 10 s pod start, which the driver now drops, 54cfd58).
    assert!(
        (model.pending_p50 / recorded_p50 - 1.0).abs() <= 0.3,
        "model pending p50 not near the recording's: {said}"
    );
    assert!(
        instant_figures.pending_p50 < recorded_p50 * 0.5,
        "instant pending p50 near the recording's: {said}"
    );
}

/// What a replay's report says of its closeness to the recording.
struct ReplayFigures {
    /// The share of buckets whose node count is within ±1 of the recording's.
    nodes_within: f64,
    node_error: f64,
    /// The share of buckets whose running pods are within 5% of the recording's.
    running_within: f64,
    running_error: f64,
    pending_p50: f64,
}

impl std::fmt::Display for ReplayFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nodes within ±1 in {:.2} of the buckets (mean error {:.2}), pods running within 5% \
             in {:.2} (mean error {:.2}), pending p50 {:.1} s",
            self.nodes_within,
            self.node_error,
            self.running_within,
            self.running_error,
            self.pending_p50
        )
    }
}

/// `ksim run` of the recording at 1x with CA resizing a group like the recorded one and the
/// provisioning model `model`, stopped after `duration`; its report.
async fn replay(up: &Up, trace: &Path, skeleton: &Path, model: &str, duration: &str) -> Value {
    let args: Vec<String> = [
        "run",
        trace.to_str().unwrap(),
        "--autoscaler",
        &format!(
            "--autoscaler-group={GROUP}={}:0:{NODES}:0",
            skeleton.display()
        ),
        "--provisioning",
        model,
        "--duration",
        duration,
    ]
    .map(str::to_owned)
    .to_vec();
    let state = up.state.path().to_owned();
    let run = tokio::task::spawn_blocking(move || ksim_in(&state, &args))
        .await
        .unwrap();
    let printed = text(&run.stdout);
    assert!(run.status.success(), "{printed}{}", text(&run.stderr));
    let json = Path::new(report_dir(&printed)).join("report.json");
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

/// CA 1.35+ takes a startup time of 0 for a group that answers GetOptions (docs/compatibility.md):
/// the report warns of it when the run's CA has `--max-node-startup-time`, the provider answers
/// the group's options and the model gives its nodes a ready delay, and not when the nodes are
/// Ready at once or the group has no options. The environment's CA is the pinned 1.35.2.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_with_options_and_booting_nodes_is_warned_of_on_ca_1_35() {
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let dir = up.state.path().join("warning");
    std::fs::create_dir_all(&dir).unwrap();
    let t0 = 1_767_225_600_000;
    let trace = dir.join("one.ksim");
    write_trace(&trace, [(t0, deployment(&burst(1, "one")))], &[]);
    let skeleton = dir.join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let booting = dir.join("booting.yaml");
    std::fs::write(&booting, BOOTING).unwrap();
    let options = dir.join("options.yaml");
    std::fs::write(
        &options,
        "nodeGroups:\n  m5:\n    scaleDownUnneededTime: 2m\n",
    )
    .unwrap();

    let warnings = |model: &Path, options: Option<&Path>| {
        let mut args: Vec<String> = [
            "run",
            trace.to_str().unwrap(),
            "--speed",
            "5",
            "--autoscaler",
            &format!("--autoscaler-group=m5={}:0:2:0", skeleton.display()),
            "--provisioning",
            model.to_str().unwrap(),
            "--duration",
            "30s",
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(options) = options {
            args.extend([
                "--provider-config".to_owned(),
                options.display().to_string(),
            ]);
        }
        let run = ksim_in(up.state.path(), &args);
        let printed = text(&run.stdout);
        assert!(run.status.success(), "{printed}{}", text(&run.stderr));
        let json = Path::new(report_dir(&printed)).join("report.json");
        let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        // None is no field.
        let warnings: Vec<String> = report["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|warning| warning.as_str().unwrap().to_owned())
            .collect();
        (warnings, printed)
    };
    let instant = Path::new("instant");
    let (warned, printed) = tokio::task::block_in_place(|| warnings(&booting, Some(&options)));
    assert_eq!(warned.len(), 1, "{warned:?}\n{printed}");
    for part in [
        "node group m5 (ready p50 5s) answers cluster-autoscaler's GetOptions",
        "has --max-node-startup-time (added in 1.35)",
        "instead of 15m",
    ] {
        assert!(warned[0].contains(part), "{part}: {warned:?}");
    }
    assert!(printed.contains("warning: node group m5"), "{printed}");
    let (unwarned, _) = tokio::task::block_in_place(|| warnings(instant, Some(&options)));
    assert_eq!(unwarned, Vec::<String>::new());
    let (unwarned, _) = tokio::task::block_in_place(|| warnings(&booting, None));
    assert_eq!(unwarned, Vec::<String>::new());
}
