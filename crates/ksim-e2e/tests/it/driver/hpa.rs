//! Workload autoscaling under test: the real HPA controller in kube-controller-manager reads
//! the replayed usage from the pool's metrics API and decides the replica counts; or the
//! recording does, and the HPAs are not applied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::{apps::v1::Deployment, autoscaling::v2::HorizontalPodAutoscaler};
use ksim_localenv::fixtures::{Workload, cpu_hpa};
use ksim_localenv::wait;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_trace::pb as trace;
use kube::Api;
use serde_json::json;

use super::common::*;

const INTERVAL_MS: i64 = 2_000;
const END_MS: i64 = 600_000;
/// Recorded pods of web, each using [`RECORDED_MILLICORES`] of its 100m request throughout.
const RECORDED_PODS: u32 = 4;
const RECORDED_MILLICORES: i64 = 50;
/// When the recording applies web again (a label, the same replica count): with the HPAs
/// deciding, that apply leaves spec.replicas out, and the count must stay the HPA's.
const REAPPLY_MS: i64 = 60_000;
/// How far the simulated count may be from the expected one once settled.
const TOLERANCE: i32 = 1;

/// Fast HPA settings for a test at speed 1: explicit here, as the environment would set them
/// from the speed.
const FAST_HPA: &[&str] = &[
    "--horizontal-pod-autoscaler-sync-period=1s",
    "--horizontal-pod-autoscaler-downscale-stabilization=5s",
    "--horizontal-pod-autoscaler-initial-readiness-delay=2s",
    "--horizontal-pod-autoscaler-cpu-initialization-period=5s",
];

/// web: 4 replicas recorded, each using 50m of its 100m (a total of 200m), under an HPA
/// targeting `target_utilization` percent; re-applied at [`REAPPLY_MS`] with a new label.
fn trace_file(target_utilization: u32) -> Vec<u8> {
    let web = Workload::new("web", RECORDED_PODS as i32)
        .requests("100m", "32Mi")
        .json();
    let mut relabelled = web.clone();
    relabelled["metadata"]["labels"]["release"] = json!("2");
    let lifecycles = (0..RECORDED_PODS)
        .map(|index| trace::PodLifecycle {
            owner_gvk: Some(ksim_trace::gvk::parse("apps/v1.Deployment").unwrap()),
            owner_namespace: "shop".to_owned(),
            owner_name: "web".to_owned(),
            pod_spec_hash: 7,
            launch_index: index,
            outcome: trace::PodOutcome::Running as i32,
            pod_name: format!("web-{index}"),
            ..Default::default()
        })
        .collect();
    let usage = (0..RECORDED_PODS)
        .flat_map(|index| {
            (0..END_MS)
                .step_by(INTERVAL_MS as usize)
                .map(move |at| trace::UsageSample {
                    timestamp_ms: at,
                    window_ms: INTERVAL_MS,
                    namespace: "shop".to_owned(),
                    pod: format!("web-{index}"),
                    containers: vec![trace::ContainerUsage {
                        name: "main".to_owned(),
                        cpu_nanocores: RECORDED_MILLICORES * 1_000_000,
                        memory_bytes: 16 << 20,
                    }],
                })
        })
        .collect();
    trace_file_with_usage(
        vec![
            (
                0,
                vec![
                    ("apps/v1.Deployment", "shop", "web", web),
                    (
                        "autoscaling/v2.HorizontalPodAutoscaler",
                        "shop",
                        "web",
                        cpu_hpa("shop", "web", target_utilization, 20),
                    ),
                ],
                Vec::new(),
            ),
            (
                REAPPLY_MS,
                vec![("apps/v1.Deployment", "shop", "web", relabelled)],
                Vec::new(),
            ),
        ],
        lifecycles,
        usage,
        INTERVAL_MS,
        END_MS,
    )
}

fn spec(prefix: &str, file: Vec<u8>, replicas: pb::ReplicaSource) -> pb::SimulationSpec {
    pb::SimulationSpec {
        trace_source: uploaded(file),
        speed: 1.0,
        namespace_prefix: prefix.to_owned(),
        node_groups: vec![pool_group(prefix, 2)],
        provisioning: Some(instant_provisioning()),
        replicas: replicas as i32,
        ..Default::default()
    }
}

async fn replicas_of(mesh: &TestMesh, prefix: &str) -> Option<i32> {
    let deployments: Api<Deployment> =
        Api::namespaced(mesh.client.clone(), &format!("{prefix}-shop"));
    deployments
        .get_opt("web")
        .await
        .unwrap()
        .and_then(|deployment| deployment.spec?.replicas)
}

/// Waits until web runs `expected` replicas (within the tolerance), then returns the count.
async fn until_replicas(mesh: &TestMesh, prefix: &str, expected: i32) -> i32 {
    wait::until(
        &format!("{prefix}'s web to run {expected}±{TOLERANCE} replicas"),
        DEADLINE,
        || async {
            match replicas_of(mesh, prefix).await {
                Some(count) if (count - expected).abs() <= TOLERANCE => Ok(count),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
    .unwrap()
}

/// Lets the simulation run past the recorded re-apply of web plus some HPA syncs.
async fn past_the_reapply(mesh: &mut TestMesh, id: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let simulation = mesh.simulation(id).await;
        let applied = simulation
            .progress
            .as_ref()
            .map_or(0, |progress| progress.events_applied);
        if applied >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replay did not reach the re-apply: {simulation:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_simulated_hpa_decides_replicas_from_the_replayed_usage() {
    let mut mesh = start_with(MeshOptions {
        controller_manager_args: FAST_HPA,
        metrics_api: true,
        ..MeshOptions::default()
    })
    .await;

    // (target utilization, replicas the HPA settles on for 200m over 100m requests).
    let cases = [
        ("hpa-same", 50, 4),
        ("hpa-low", 25, 8),
        ("hpa-high", 100, 2),
    ];
    let mut settled = Vec::new();
    for (prefix, target, expected) in cases {
        let simulation = mesh
            .start_simulation(spec(
                prefix,
                trace_file(target),
                pb::ReplicaSource::Unspecified,
            ))
            .await
            .unwrap();
        until_replicas(&mesh, prefix, expected).await;
        // The recorded re-apply leaves spec.replicas to the HPA: still its count, not the
        // recorded 4 nor the default 1.
        past_the_reapply(&mut mesh, &simulation.id).await;
        let count = until_replicas(&mesh, prefix, expected).await;
        settled.push(count);

        let cancelled = mesh.cancel(&simulation.id).await;
        assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
        let scaling = mesh
            .report(&simulation.id)
            .await
            .workload_scaling
            .expect("the trace holds an HPA");
        assert_eq!(scaling.source(), pb::ReplicaSource::Hpa, "{scaling:?}");
        assert_eq!(scaling.reason, "default: the trace holds usage and HPAs");
        assert_eq!((scaling.hpas, scaling.scaled_workloads), (1, 1));
        assert_eq!(scaling.not_replayed, 0, "the re-apply changed no count");
        // Replicas over time: recorded 4 throughout; simulated, the HPA's count at the end,
        // reached by its own scale events (none where it kept the recorded count).
        let [web] = scaling.workloads.as_slice() else {
            panic!("one scaled workload: {scaling:?}")
        };
        assert_eq!(web.name, "Deployment/shop/web");
        assert!(web.recorded.iter().all(|count| *count == 4), "{web:?}");
        let last = web.simulated.iter().rev().find(|count| **count > 0);
        assert!(
            last.is_some_and(|count| (*count as i32 - expected).abs() <= TOLERANCE),
            "{web:?}"
        );
        if expected == 4 {
            assert!(web.scale_events.is_empty(), "{web:?}");
        } else {
            let final_count = web.scale_events.last().map(|event| event.to as i32);
            assert!(
                final_count.is_some_and(|to| (to - expected).abs() <= TOLERANCE),
                "{web:?}"
            );
        }
        mesh.assert_nothing_left(&simulation.id, &[prefix]).await;
    }
    // The directions: a lower target runs more replicas, a higher one fewer.
    assert!(
        settled[1] > settled[0] && settled[2] < settled[0],
        "{settled:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_recording_deciding_the_hpas_are_not_applied() {
    let mut mesh = start_with(MeshOptions {
        controller_manager_args: FAST_HPA,
        metrics_api: true,
        ..MeshOptions::default()
    })
    .await;
    let prefix = "hpa-recorded";
    // At 25% the HPA would double web; the recording keeps it at 4.
    let simulation = mesh
        .start_simulation(spec(prefix, trace_file(25), pb::ReplicaSource::Recorded))
        .await
        .unwrap();
    past_the_reapply(&mut mesh, &simulation.id).await;
    assert_eq!(replicas_of(&mesh, prefix).await, Some(RECORDED_PODS as i32));
    let hpas: Api<HorizontalPodAutoscaler> =
        Api::namespaced(mesh.client.clone(), &format!("{prefix}-shop"));
    assert!(hpas.get_opt("web").await.unwrap().is_none());

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    let scaling = mesh.report(&simulation.id).await.workload_scaling.unwrap();
    assert_eq!(
        (
            scaling.source(),
            scaling.reason.as_str(),
            scaling.not_replayed
        ),
        (pb::ReplicaSource::Recorded, "given", 1)
    );
    mesh.assert_nothing_left(&simulation.id, &[prefix]).await;
}
