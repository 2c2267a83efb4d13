//! GPUs in runs (issue 57), with the real scheduler, two runs in one environment. What a
//! report says about GPUs: a group of two p3.2xlarge (one V100 each, by extended resources), a
//! pod asking one GPU that runs, and one asking two, more than any node has, that waits for
//! good with the scheduler's reason; the idle V100 is fragmented while it waits. And shares of
//! a GPU replayed exactly: an Alibaba-format recording converted with `--gpu-shares dra`, its
//! pods' claims allocated by the real scheduler on the one device its node group publishes.
//! And the scheduler's packing against its spreading: the same converted recording leaves a
//! four-GPU pod pending only when the one-GPU pods before it were spread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ksim_localenv::fixtures::{GPU_PACKING_SCHEDULER_CONFIG, P3_2XLARGE_SKELETON, Workload};
use serde_json::{Value, json};

use super::common::{
    deployment,
    up::{Up, report_dir},
    write_trace,
};

#[tokio::test(flavor = "multi_thread")]
async fn gpu_pods_are_reported_and_shares_of_a_converted_trace_share_a_device() {
    let up = &tokio::task::spawn_blocking(|| Up::start(&[]))
        .await
        .unwrap();
    let dir = up.state.path();
    let train = Workload::new("train", 1)
        .requests("1", "1Gi")
        .gpus(1)
        .on_any_group()
        .json();
    let big = Workload::new("big", 1)
        .requests("1", "1Gi")
        .gpus(2)
        .on_any_group()
        .json();
    let trace = dir.join("gpus.ksim");
    let start_ms = 1_767_225_600_000;
    write_trace(
        &trace,
        [
            (start_ms, deployment(&train)),
            (start_ms, deployment(&big)),
            // Applied again two minutes in, so the replay lasts that long.
            (start_ms + 120_000, deployment(&train)),
        ],
        &[],
    );
    let skeleton = dir.join("p3.yaml");
    std::fs::write(&skeleton, P3_2XLARGE_SKELETON).unwrap();
    let (printed, report) = run_with(
        up,
        &trace,
        &format!("--node-group=p3={}:2", skeleton.display()),
        "20",
        &["--explain"],
    );
    let gpus = &report["accelerators"];
    assert_eq!(
        (
            gpus["gpu_pods"].as_u64(),
            gpus["gpu_pods_never_scheduled"].as_u64()
        ),
        (Some(2), Some(1)),
        "{gpus:#}"
    );
    // The one never scheduled is big, asking two GPUs.
    assert_eq!(
        gpus["never_scheduled_by_gpus"],
        json!([{"gpus": 2, "pods": 1}]),
        "{gpus:#}"
    );
    // Why: the scheduler's explanation of big's pod names every node's rejection, the two
    // one-GPU nodes by NodeResourcesFit, and it is the pod the report counts never scheduled.
    let explained = report["explanations"].as_array().unwrap();
    let unplaced: Vec<&Value> = explained
        .iter()
        .filter(|pod| pod["attempts"].as_array().unwrap().last().unwrap()["node"] == "")
        .collect();
    assert_eq!(
        unplaced.len() as u64,
        report["costs"]["pods_never_scheduled"].as_u64().unwrap(),
        "{explained:#?}"
    );
    let big_pod = unplaced
        .iter()
        .find(|pod| pod["owner"] == "Deployment/big")
        .unwrap_or_else(|| panic!("big not explained: {explained:#?}"));
    let last = big_pod["attempts"].as_array().unwrap().last().unwrap();
    let rejected = last["rejected"].as_array().unwrap();
    let counted: u64 = rejected.iter().map(|g| g["nodes"].as_u64().unwrap()).sum();
    assert_eq!(counted, last["nodes"].as_u64().unwrap(), "{last:#}");
    assert!(
        rejected.iter().any(|g| g["plugin"] == "NodeResourcesFit"
            && g["reason"]
                .as_str()
                .unwrap()
                .contains("Insufficient nvidia.com/gpu")
            && g["nodes"] == 2),
        "{last:#}"
    );
    // big for good; train too if a sample caught it before it was bound.
    let peak = gpus["pending_gpu_pods_peak"].as_u64().unwrap();
    assert!((1..=2).contains(&peak), "{gpus:#}");
    let v100 = &gpus["models"][0];
    assert_eq!(v100["model"], "Tesla-V100-SXM2-16GB", "{gpus:#}");
    assert_eq!(v100["allocatable_peak"], 2, "{gpus:#}");
    // Both idle V100s are fragmented if a sample caught them before train was bound.
    let fragmented = v100["fragmented_peak"].as_u64().unwrap();
    assert!((1..=2).contains(&fragmented), "{gpus:#}");
    // The big pod's reason, the scheduler's, among the GPU pods' waits.
    let waits = gpus["waits"].as_array().unwrap();
    assert!(
        waits
            .iter()
            .any(|wait| wait["reason"] == "Insufficient nvidia.com/gpu"
                && wait["owner"].as_str().unwrap().ends_with("big")),
        "{gpus:#}"
    );
    // Two GPU nodes for the two recorded minutes at least.
    assert!(
        gpus["gpu_node_hours"].as_f64().unwrap() >= 2.0 * 2.0 / 60.0,
        "{gpus:#}"
    );
    // At the end: one of two allocated, the other fragmented while big waits.
    let last = report["timeline"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let model = &last["gpus"][0];
    assert_eq!(
        (
            model["allocatable"].as_u64(),
            model["allocated"].as_u64(),
            model["fragmented"].as_u64(),
            last["pending_gpu_pods"].as_u64()
        ),
        (Some(2), Some(1), Some(1), Some(1)),
        "{last:#}"
    );
    assert!(
        printed.contains("gpus:              Tesla-V100-SXM2-16GB: 2 allocatable at most"),
        "{printed}"
    );
    assert!(
        printed.contains("gpu pods waited:   Insufficient nvidia.com/gpu"),
        "{printed}"
    );

    shares_of_a_converted_trace_share_a_device(up);
    packing_leaves_room_for_a_pod_spreading_fragments(up);
}

/// One node of one V100 (the recording's `V100M16`), pods asking 460 and 500 thousandths of a
/// GPU that run on it together, one asking 300 more that does not fit, and one asking a whole
/// GPU that does not either: the shares hold the device.
fn shares_of_a_converted_trace_share_a_device(up: &Up) {
    // Created two seconds of wall clock apart (at 30x), so they are scheduled in this order.
    let (trace, groups) = convert(
        up,
        "shares",
        &["n-0,8000,32768,1,V100M16"],
        &[
            "s-460,1000,1024,1,460,V100M16,LS,Running,0,300,0",
            "s-500,1000,1024,1,500,V100M16,LS,Running,60,300,60",
            "s-300,1000,1024,1,300,V100M16,LS,Running,120,300,120",
            "whole,1000,1024,1,1000,V100M16,LS,Running,180,300,180",
        ],
        &["--gpu-shares", "dra"],
    );
    let skeletons: Vec<_> = std::fs::read_dir(&groups)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(skeletons.len(), 1, "{skeletons:?}");
    let group = skeletons[0].file_stem().unwrap().to_str().unwrap();
    let (printed, report) = run(
        up,
        &trace,
        &format!("--node-group={group}={}:1", skeletons[0].display()),
        "30",
    );
    assert!(
        report["object_errors"].as_array().is_none_or(Vec::is_empty),
        "the DeviceClass and templates apply: {:#}",
        report["object_errors"]
    );
    // Two ran on the one device; the third share and the whole GPU never found room, for the
    // scheduler's DRA reason.
    assert_eq!(
        report["costs"]["pods_never_scheduled"], 2,
        "{:#}\n{printed}",
        report["waits"]
    );
    // The device counts as the V100M16 it is, held by the shares from when they ran.
    let gpus = &report["accelerators"];
    let v100 = &gpus["models"][0];
    assert_eq!(
        (
            v100["model"].as_str(),
            v100["allocatable_peak"].as_u64(),
            v100["allocated_peak"].as_f64(),
            gpus["gpu_pods"].as_u64(),
            gpus["gpu_pods_never_scheduled"].as_u64()
        ),
        (Some("V100M16"), Some(1), Some(1.0), Some(4), Some(2)),
        "{gpus:#}"
    );
    // A share and a whole device: one GPU each, by their claims.
    assert_eq!(
        gpus["never_scheduled_by_gpus"],
        json!([{"gpus": 1, "pods": 2}]),
        "{gpus:#}"
    );
    let waits = report["waits"].as_array().unwrap();
    for pod in ["s-300", "whole"] {
        assert!(
            waits
                .iter()
                .any(|wait| wait["owner"].as_str().unwrap().ends_with(pod)
                    && wait["reason"]
                        .as_str()
                        .unwrap()
                        .contains("cannot allocate all claims")),
            "{pod}: {waits:#?}"
        );
    }
}

/// Two nodes of four T4s; four one-GPU pods, then one asking four, each two seconds of wall
/// clock after the one before (at 30x). The default scheduler spreads (least allocated, by CPU
/// and memory): two and two, and no node has four GPUs free for the last pod, whose node's
/// GPUs are all fragmented while it waits. A configuration that packs (most allocated, GPUs
/// weighted) fills one node, and the last pod takes the other.
fn packing_leaves_room_for_a_pod_spreading_fragments(up: &Up) {
    let dir = up.state.path();
    let mut pods: Vec<String> = (0..4)
        .map(|i| format!("one-{i},2000,4096,1,1000,T4,LS,Running,{},360,{0}", i * 60))
        .collect();
    pods.push("four,2000,4096,4,1000,T4,LS,Running,240,360,240".into());
    let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
    let (trace, groups) = convert(
        up,
        "t4",
        &["t-0,32000,131072,4,T4", "t-1,32000,131072,4,T4"],
        &pods,
        &[],
    );
    let group = format!(
        "--node-group=gpu-t4-4x-32c={}:2",
        groups.join("gpu-t4-4x-32c.yaml").display()
    );
    let packing = dir.join("packing.yaml");
    std::fs::write(&packing, GPU_PACKING_SCHEDULER_CONFIG).unwrap();
    let runs = [
        ("spread", run(up, &trace, &group, "30").1),
        (
            "packed",
            run_with(
                up,
                &trace,
                &group,
                "30",
                &["--scheduler-config", packing.to_str().unwrap()],
            )
            .1,
        ),
    ];
    let [(_, spread), (_, packed)] = &runs;
    let figures = |report: &Value| {
        let gpus = &report["accelerators"];
        (
            gpus["gpu_pods"].as_u64(),
            gpus["gpu_pods_never_scheduled"].as_u64(),
            // Allocated over allocatable: four of eight spread, all eight packed.
            gpus["models"][0]["allocated_peak"].as_f64(),
        )
    };
    assert_eq!(
        figures(spread),
        (Some(5), Some(1), Some(0.5)),
        "{:#}",
        spread["accelerators"]
    );
    assert_eq!(
        spread["accelerators"]["never_scheduled_by_gpus"],
        json!([{"gpus": 4, "pods": 1}]),
        "{:#}",
        spread["accelerators"]
    );
    assert_eq!(
        figures(packed),
        (Some(5), Some(0), Some(1.0)),
        "{:#}",
        packed["accelerators"]
    );
    // While the four-GPU pod waited beside the four one-GPU pods running, every idle GPU was
    // fragmented: two on each node. (A sample may catch more while one-GPU pods still wait to
    // be bound: the peak is at least that.)
    let waiting: Vec<&Value> = spread["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|bucket| bucket["pods"]["running"] == 4 && bucket["pending_gpu_pods"] == 1)
        .collect();
    assert!(
        !waiting.is_empty()
            && waiting
                .iter()
                .all(|bucket| bucket["gpus"][0]["fragmented"] == 4),
        "{waiting:#?}"
    );
    let fragmented = spread["accelerators"]["models"][0]["fragmented_peak"].as_u64();
    assert!(fragmented >= Some(4), "{:#}", spread["accelerators"]);
    for (name, report) in &runs {
        assert_eq!(
            report["configuration"]["scheduler_given"].is_object(),
            *name == "packed",
            "{name}: {:#}",
            report["configuration"]
        );
    }
}

/// `name.ktrace` and its node groups' directory, converted from an Alibaba-format recording of
/// these node and pod rows (the CSVs' columns, headers added), with `more` flags.
fn convert(
    up: &Up,
    name: &str,
    nodes: &[&str],
    pods: &[&str],
    more: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = up.state.path();
    let csv = |file: &str, header: &str, rows: &[&str]| {
        let path = dir.join(format!("{name}-{file}.csv"));
        std::fs::write(&path, format!("{header}\n{}\n", rows.join("\n"))).unwrap();
        path
    };
    let nodes = csv("nodes", ksim_trace::alibaba::NODES_HEADER, nodes);
    let pods = csv("pods", ksim_trace::alibaba::PODS_HEADER, pods);
    let trace = dir.join(format!("{name}.ktrace"));
    let groups = dir.join(format!("{name}-groups"));
    let mut args = vec![
        "trace",
        "convert",
        "--from",
        "alibaba-gpu-v2023",
        "--nodes",
        nodes.to_str().unwrap(),
        "--pods",
        pods.to_str().unwrap(),
        trace.to_str().unwrap(),
        "--node-groups",
        groups.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    up.ksim(&args);
    (trace, groups)
}

/// `ksim run TRACE` on the environment's driver with one node group, at `speed`, which must
/// succeed: what it printed and its report.
fn run(up: &Up, trace: &Path, node_group: &str, speed: &str) -> (String, Value) {
    run_with(up, trace, node_group, speed, &[])
}

/// [`run`] with more flags.
fn run_with(
    up: &Up,
    trace: &Path,
    node_group: &str,
    speed: &str,
    more: &[&str],
) -> (String, Value) {
    let mut args = vec![
        "run".into(),
        trace.to_str().unwrap().into(),
        "--driver".into(),
        up.urls.driver.clone(),
        node_group.into(),
        "--speed".into(),
        speed.into(),
    ];
    args.extend(more.iter().map(|arg| (*arg).to_owned()));
    let output = up.ksim_any(&args);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = Path::new(report_dir(&printed)).join("report.json");
    let report = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    (printed, report)
}
