//! Recorded vs simulated, end to end as a user gets it: `ksim up --autoscaler` (the real control
//! plane, the four services and the real cluster-autoscaler), a workload that grows one node at
//! a time and shrinks again while the tracer records and this test watches, `ksim trace export`
//! of that window, `ksim run` of it with CA, and the report's fidelity held against the curve
//! the test itself saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Node, Pod},
};
use ksim_localenv::fixtures::seat_deployment;
use ksim_nodes::{labels::GROUP_LABEL, node::is_ready, seats::SeatDeployment};
use ksim_trace::time::now_ms;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use super::common::{
    forget_recording, series,
    up::{Up, ksim_in, report_dir, run_id},
    web,
};

const SKELETON: &str = ksim_localenv::fixtures::M5_LARGE_SKELETON;
const GROUP: &str = "m5";
const SEATS_NAMESPACE: &str = "ksim-system";
/// A pending pod, CA's scale-up, the node's registration and the pod's start, on a loaded
/// machine.
const DEADLINE: Duration = Duration::from_secs(240);
/// How long each size is held: longer than a fidelity bucket, so a step that comes a few
/// seconds later in the replay than in the recording is off by one node at most; and longer
/// than the replay's reaction in recorded time (a pending pod gets its node in 2-3 s of wall
/// clock on a loaded machine, 10-15 s recorded at 5x), or a size held briefly is never reached
/// in it and the pod that waited for it is deleted unscheduled.
const HOLD: Duration = Duration::from_secs(25);
/// The tracer samples at most once a second and this test polls every 250 ms: a recorded value
/// is one the test saw within this much of the same moment. A look spans the time its two lists
/// took (seconds on a loaded machine), and it counts as seen anywhere in that span.
const SLACK_MS: i64 = 2_000;
/// The replay's speed. The recorded side of the comparison is the trace's at any speed; a 1x
/// replay as well cost four of this test's eight minutes, and at 10x a loaded machine's 3 s
/// reaction (30 s recorded) outlasted [`HOLD`]: a pod waiting for the fourth node was deleted
/// by the scale-down before it got one. 5x costs 20 s more than 10x.
const SPEED: f64 = 5.0;

/// What the test saw of the recorded cluster at one moment.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When the look began and ended: what it saw was true at some moment between.
    from_ms: i64,
    to_ms: i64,
    nodes: u64,
    running: u64,
    pending: u64,
}

async fn look(client: &Client) -> Result<Seen, kube::Error> {
    let from_ms = now_ms();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
        .await?;
    let pods = Api::<Pod>::namespaced(client.clone(), "shop")
        .list(&ListParams::default())
        .await?;
    let phase = |wanted: &str| {
        pods.items
            .iter()
            .filter(|pod| {
                pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(wanted)
                    && pod.metadata.deletion_timestamp.is_none()
            })
            .count() as u64
    };
    Ok(Seen {
        from_ms,
        to_ms: now_ms(),
        nodes: nodes.items.iter().filter(|node| is_ready(node)).count() as u64,
        running: phase("Running"),
        pending: phase("Pending"),
    })
}

/// Waits until what the test sees satisfies `done`.
async fn until(client: &Client, what: &str, done: impl Fn(&Seen) -> bool) {
    let started = Instant::now();
    loop {
        if let Ok(seen) = look(client).await
            && done(&seen)
        {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn scale(client: &Client, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), "shop")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// The values the test saw within [`SLACK_MS`] of `at_ms`, by `value`.
fn seen_near(curve: &[Seen], at_ms: i64, value: fn(&Seen) -> u64) -> Vec<u64> {
    let mut values: Vec<u64> = curve
        .iter()
        .filter(|seen| seen.from_ms <= at_ms + SLACK_MS && at_ms - SLACK_MS <= seen.to_ms)
        .map(value)
        .collect();
    values.dedup();
    values
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_autoscaling_scenario_replays_within_one_node_of_the_recording() {
    let up = tokio::task::spawn_blocking(|| Up::with_fast_autoscaler(&[]))
        .await
        .unwrap();
    let client = up.client().await;

    // The recorded cluster: a group CA may resize from 1 to 6 nodes, made as ksim makes one.
    let seats = SeatDeployment {
        namespace: SEATS_NAMESPACE.to_owned(),
        ..seat_deployment(GROUP, 1, 1, 6, SKELETON)
    }
    .to_deployment();
    let seats_api = Api::<Deployment>::namespaced(client.clone(), SEATS_NAMESPACE);
    seats_api
        .create(&PostParams::default(), &seats)
        .await
        .unwrap();
    until(&client, "the group's first node", |s| s.nodes == 1).await;

    // Watched from here on, every 250 ms, while the tracer records.
    let curve = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let watching = tokio::spawn({
        let (client, curve) = (client.clone(), curve.clone());
        async move {
            loop {
                if let Ok(seen) = look(&client).await {
                    curve.lock().unwrap().push(seen);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    let start_ms = now_ms();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shop"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "shop")
        .create(&PostParams::default(), &web(GROUP, 1, json!({})))
        .await
        .unwrap();
    until(&client, "web's first pod running", |s| s.running == 1).await;
    tokio::time::sleep(HOLD).await;
    // Up one node at a time, then down one at a time.
    for replicas in [2, 3, 4] {
        scale(&client, replicas).await;
        let want = replicas as u64;
        until(&client, &format!("{replicas} pods running"), |s| {
            s.running == want && s.nodes == want
        })
        .await;
        tokio::time::sleep(HOLD).await;
    }
    for replicas in [3, 2, 1] {
        scale(&client, replicas).await;
        let want = replicas as u64;
        until(&client, &format!("CA down to {replicas} nodes"), |s| {
            s.nodes == want && s.running == want
        })
        .await;
        tokio::time::sleep(HOLD).await;
    }
    let end_ms = now_ms();
    watching.abort();
    let curve = curve.lock().unwrap().clone();
    assert_eq!(curve.iter().map(|s| s.nodes).max(), Some(4));

    // The recording, as a user exports it: without --server, from the tracer of the
    // environment in KSIM_STATE_DIR (this test's own ports, not the default's 7061).
    let (trace, inspected) = up.export_recording(start_ms, end_ms, "shop");
    assert!(inspected.contains("cluster state"), "{inspected}");
    // The local environment serves the metrics API (the pool's), but no pod here was given
    // usage: the tracer read it, and its recording says it reported none.
    assert!(
        inspected.contains(
            "\nusage           none: the metrics API reported no pod while it was read\n"
        ),
        "{inspected}"
    );

    forget_recording(&client, GROUP).await;
    until(&client, "the recorded group gone", |s| s.nodes == 0).await;

    let skeleton = up.state.path().join("m5.yaml");
    std::fs::write(&skeleton, SKELETON).unwrap();
    let report = replay(&up, &trace, &skeleton).await;
    let fidelity = &report["fidelity"];
    let buckets = fidelity["buckets"].as_array().unwrap();
    recorded_is_what_the_test_saw(fidelity, &curve, start_ms, end_ms);
    // The figures are those of the buckets, and the replay stayed within a node of the
    // recording with the same peak.
    for (name, field) in [
        (format!("nodes/{GROUP}"), "nodes"),
        ("pods_running".to_owned(), "pods_running"),
    ] {
        let figures = series(fidelity, &name);
        let errors: Vec<u64> = buckets
            .iter()
            .map(|b| value(b, "recorded", field).abs_diff(value(b, "simulated", field)))
            .collect();
        let mean = errors.iter().sum::<u64>() as f64 / errors.len() as f64;
        assert!(
            (figures["mean_abs_error"].as_f64().unwrap() - mean).abs() < 1e-9,
            "{figures}"
        );
        assert_eq!(
            figures["max_abs_error"],
            errors.iter().max().copied().unwrap()
        );
        assert_eq!(figures["buckets"], buckets.len());
    }
    let nodes = series(fidelity, &format!("nodes/{GROUP}"));
    assert_eq!(nodes["within_tolerance"], 1.0, "at {SPEED}x: {fidelity:#}");
    assert_eq!(nodes["recorded_peak"], 4, "{nodes}");
    assert_eq!(nodes["simulated_peak"], 4, "at {SPEED}x: {nodes}");
    assert_eq!(series(fidelity, "nodes")["recorded_peak"], 4);

    // Pending time: every recorded web pod was created inside the window, and the tracer kept
    // when, so the recording has a pending time per pod (those that waited for CA's node
    // waited); running pod-seconds are the buckets' running pods, 5 s each.
    let pending = &fidelity["pending"];
    let recorded = &pending["recorded"];
    assert!(recorded["count"].as_u64().unwrap() >= 4, "{pending:#}");
    assert!(recorded["max_ms"].as_f64().unwrap() > 0.0, "{pending:#}");
    assert_eq!(
        pending["simulated"], report["pod_pending_time"],
        "{pending:#}"
    );
    for side in ["recorded", "simulated"] {
        let running: u64 = buckets.iter().map(|b| value(b, side, "pods_running")).sum();
        assert_eq!(
            pending[format!("{side}_running_pod_seconds")].as_f64(),
            Some(running as f64 * 5.0),
            "{pending:#}"
        );
    }

    // Every pod ran, and the end looks like the recording's: one node, one pod running.
    let last = buckets.last().unwrap();
    assert_eq!(value(last, "simulated", "pods_running"), 1, "{last}");
    assert_eq!(value(last, "simulated", "pods_pending"), 0, "{last}");
    assert!(
        report["pod_pending_time"]["count"].as_u64().unwrap() >= 4,
        "{report:#}"
    );
    nothing_left(&client, &seats_api).await;
}

/// `ksim run` of the recording at [`SPEED`] with CA resizing a group like the recorded one;
/// its report, after checking that it wrote its files and says how CA ran.
async fn replay(up: &Up, trace: &Path, skeleton: &Path) -> Value {
    let args: Vec<String> = [
        "run",
        trace.to_str().unwrap(),
        "--driver",
        &up.urls.driver,
        "--speed",
        &SPEED.to_string(),
        "--autoscaler",
        &format!("--autoscaler-group={GROUP}={}:1:6:1", skeleton.display()),
    ]
    .map(str::to_owned)
    .to_vec();
    let state = up.state.path().to_owned();
    let run = tokio::task::spawn_blocking(move || ksim_in(&state, &args))
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        printed.contains("fidelity:          nodes within ±1 in"),
        "{printed}"
    );
    // The line holds the recorded pending time beside the simulated, and the pod-seconds.
    let line = printed
        .lines()
        .find(|line| line.contains("fidelity:"))
        .unwrap();
    assert!(line.contains("; pending time p50 "), "{line}");
    assert!(line.contains(" recorded, p90 "), "{line}");
    assert!(line.contains("; running pod-seconds "), "{line}");
    assert!(
        printed.contains(" (complete)\n"),
        "a run that succeeded: {printed}"
    );
    let id = run_id(&printed);
    let report: Value = serde_json::from_slice(
        &up.ksim(&["report", id, "--json", "--driver", &up.urls.driver])
            .stdout,
    )
    .unwrap();
    assert_eq!(report["fidelity"]["bucket_ms"], 5000, "{report:#}");
    // CA ran with the recording's durations divided by the speed.
    let flags = report["configuration"]["autoscaler_flags"]
        .as_array()
        .unwrap();
    let unneeded = flags
        .iter()
        .find(|flag| flag["name"] == "scale-down-unneeded-time")
        .unwrap();
    // The environment's 5 s, divided by the speed.
    assert_eq!(unneeded["as_run"], "1s", "{unneeded}");
    let files = std::fs::read_dir(Path::new(report_dir(&printed)))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect::<Vec<_>>();
    assert!(files.contains(&"fidelity.svg".to_owned()), "{files:?}");
    report
}

/// A bucket's value of `field` on one side (`recorded` or `simulated`).
fn value(bucket: &Value, side: &str, field: &str) -> u64 {
    match field {
        "nodes" => bucket[side]["ready_nodes"][GROUP].as_u64().unwrap_or(0),
        _ => bucket[side][field].as_u64().unwrap(),
    }
}

/// Each bucket's recorded values are what the test saw at the same moment of the recording.
fn recorded_is_what_the_test_saw(fidelity: &Value, curve: &[Seen], start_ms: i64, end_ms: i64) {
    let buckets = fidelity["buckets"].as_array().unwrap();
    let window_ms = end_ms - start_ms;
    assert!(
        buckets.len() as i64 >= window_ms / 5000,
        "{} buckets for {window_ms} ms",
        buckets.len()
    );
    for bucket in buckets {
        let offset = bucket["offset_ms"].as_i64().unwrap();
        let at_ms = (start_ms + offset + 4_999).min(end_ms);
        for (field, seen) in [
            ("nodes", seen_near(curve, at_ms, |s| s.nodes)),
            ("pods_running", seen_near(curve, at_ms, |s| s.running)),
            ("pods_pending", seen_near(curve, at_ms, |s| s.pending)),
        ] {
            assert!(
                seen.contains(&value(bucket, "recorded", field)),
                "bucket at {offset} ms recorded {bucket} but the test saw {field} {seen:?}"
            );
        }
    }
}

/// Nothing of a replay is left: its namespace, group and nodes are gone.
async fn nothing_left(client: &Client, seats_api: &Api<Deployment>) {
    let namespaces = Api::<Namespace>::all(client.clone());
    ksim_localenv::wait::until("the replay's namespace gone", DEADLINE, || async {
        let left: Vec<String> = namespaces
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter_map(|ns| ns.metadata.name)
            .filter(|name| name.ends_with("-shop"))
            .collect();
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    })
    .await
    .unwrap();
    until(client, "the replay's nodes gone", |s| s.nodes == 0).await;
    assert!(
        seats_api
            .get_opt(&format!("seats-{GROUP}"))
            .await
            .unwrap()
            .is_none()
    );
}
