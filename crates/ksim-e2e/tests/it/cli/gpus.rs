//! What a run's report says about GPUs (issue 57), with the real scheduler: a group of two
//! p3.2xlarge (one V100 each, by extended resources), a pod asking one GPU that runs, and one
//! asking two, more than any node has, that waits for good with the scheduler's reason. The
//! idle V100 is fragmented while it waits: the pod that waits cannot use it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ksim_localenv::fixtures::{P3_2XLARGE_SKELETON, Workload};
use serde_json::Value;

use super::common::{
    deployment,
    up::{Up, report_dir},
    write_trace,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_run_reports_gpu_allocation_fragmentation_and_why_the_pod_too_big_waits() {
    let up = tokio::task::spawn_blocking(|| Up::start(&[]))
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
    let output = up.ksim_any(&[
        "run".into(),
        trace.to_str().unwrap().into(),
        "--driver".into(),
        up.urls.driver.clone(),
        format!("--node-group=p3={}:2", skeleton.display()),
        "--speed".into(),
        "20".into(),
    ]);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = Path::new(report_dir(&printed)).join("report.json");
    let report: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let gpus = &report["accelerators"];
    assert_eq!(
        (
            gpus["gpu_pods"].as_u64(),
            gpus["gpu_pods_never_scheduled"].as_u64()
        ),
        (Some(2), Some(1)),
        "{gpus:#}"
    );
    // big for good; train too if a sample caught it before it was bound.
    let peak = gpus["pending_gpu_pods_peak"].as_u64().unwrap();
    assert!((1..=2).contains(&peak), "{gpus:#}");
    let v100 = &gpus["models"][0];
    assert_eq!(v100["model"], "Tesla-V100-SXM2-16GB", "{gpus:#}");
    assert_eq!(v100["allocatable_peak"], 2, "{gpus:#}");
    assert_eq!(v100["fragmented_peak"], 1, "{gpus:#}");
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
}
