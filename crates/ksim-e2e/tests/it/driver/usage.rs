//! Usage replay: each replayed pod uses what its recorded pod used, or its share of its owner's
//! recorded total when the replay runs another number of replicas; the pool holds the figures
//! (and serves them as the metrics API).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::common::*;
use k8s_openapi::jiff::Timestamp;
use ksim_e2e::fixtures::Workload;
use ksim_proto::ksim::driver::v1 as pb;
use ksim_testenv::wait;
use ksim_trace::pb as trace;

const INTERVAL_MS: i64 = 2_000;

fn deployment() -> trace::GroupVersionKind {
    ksim_trace::gvk::parse("apps/v1.Deployment").unwrap()
}

/// A recorded pod of a Deployment in `shop`, running from the start to the end of the trace.
fn recorded(owner: &str, pod: &str, launch_index: u32) -> trace::PodLifecycle {
    trace::PodLifecycle {
        owner_gvk: Some(deployment()),
        owner_namespace: "shop".to_owned(),
        owner_name: owner.to_owned(),
        pod_spec_hash: 7,
        launch_index,
        start_ms: 0,
        end_ms: 0,
        outcome: trace::PodOutcome::Running as i32,
        pod_name: pod.to_owned(),
        ..Default::default()
    }
}

/// `pod` used `millicores` of CPU from `from_ms` on, sampled every interval up to `to_ms`.
fn used(pod: &str, from_ms: i64, to_ms: i64, millicores: i64) -> Vec<trace::UsageSample> {
    (from_ms..to_ms)
        .step_by(INTERVAL_MS as usize)
        .map(|at| trace::UsageSample {
            timestamp_ms: at,
            window_ms: INTERVAL_MS,
            namespace: "shop".to_owned(),
            pod: pod.to_owned(),
            containers: vec![trace::ContainerUsage {
                name: "main".to_owned(),
                cpu_nanocores: millicores * 1_000_000,
                memory_bytes: 64 << 20,
            }],
        })
        .collect()
}

/// CPU millicores per replayed pod of `app` the pool holds now, lowest first.
fn cpu_of(mesh: &TestMesh, app: &str) -> Vec<u64> {
    let mut cpu: Vec<u64> = mesh
        .pool
        .pod_readings(Timestamp::now())
        .iter()
        .filter(|pod| pod.namespace == "use-shop" && pod.name.starts_with(&format!("{app}-")))
        .map(|pod| pod.containers.iter().map(|c| c.cpu_nanocores).sum::<u64>() / 1_000_000)
        .collect();
    cpu.sort_unstable();
    cpu
}

async fn until_cpu(mesh: &TestMesh, app: &str, expected: &[u64]) {
    wait::until(
        &format!("{app}'s pods to use {expected:?}"),
        DEADLINE,
        || async {
            let cpu = cpu_of(mesh, app);
            if cpu == expected {
                Ok(())
            } else {
                Err(format!("{cpu:?}"))
            }
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn replayed_pods_use_what_their_recorded_pods_used_and_share_it_when_counts_differ() {
    let mut mesh = start().await;
    let end_ms = 600_000;
    // web: two recorded pods, two replicas replayed: each uses its own pod's figures, which
    // change at 20 s. api: one recorded pod using 900m, three replicas replayed: 300m each.
    let mut usage = used("web-a", 0, 20_000, 200);
    usage.extend(used("web-b", 0, 20_000, 400));
    usage.extend(used("web-a", 20_000, end_ms, 600));
    usage.extend(used("web-b", 20_000, end_ms, 800));
    usage.extend(used("api-a", 0, end_ms, 900));
    let replayable = usage.len() as u64;
    // A pod the trace holds no lifecycle for: ignored.
    usage.extend(used("stranger", 0, 10_000, 50));
    let file = trace_file_with_usage(
        vec![(
            0,
            vec![
                (
                    "apps/v1.Deployment",
                    "shop",
                    "web",
                    Workload::new("web", 2).json(),
                ),
                (
                    "apps/v1.Deployment",
                    "shop",
                    "api",
                    Workload::new("api", 3).requests("100m", "32Mi").json(),
                ),
            ],
            Vec::new(),
        )],
        vec![
            recorded("web", "web-a", 0),
            recorded("web", "web-b", 1),
            recorded("api", "api-a", 0),
        ],
        usage,
        INTERVAL_MS,
        end_ms,
    );
    let simulation = mesh
        .start_simulation(pb::SimulationSpec {
            trace_source: uploaded(file),
            speed: 1.0,
            namespace_prefix: "use".to_owned(),
            node_groups: vec![pool_group("use", 2)],
            ..Default::default()
        })
        .await
        .unwrap();

    until_cpu(&mesh, "api", &[300, 300, 300]).await;
    until_cpu(&mesh, "web", &[200, 400]).await;
    // Recorded time goes on: the later samples take over.
    until_cpu(&mesh, "web", &[600, 800]).await;
    let memory: BTreeMap<String, u64> = mesh
        .pool
        .pod_readings(Timestamp::now())
        .into_iter()
        .filter(|pod| pod.name.starts_with("web-"))
        .map(|pod| (pod.name, pod.containers[0].memory_bytes))
        .collect();
    assert!(
        memory.values().all(|bytes| *bytes == 64 << 20),
        "{memory:?}"
    );

    let cancelled = mesh.cancel(&simulation.id).await;
    assert_eq!(cancelled.state(), pb::SimulationState::Cancelled);
    // The report says how: web's updates matched, api's shared, none defaulted.
    let replayed = mesh.report(&simulation.id).await.usage.unwrap();
    assert_eq!(
        (replayed.samples, replayed.ignored_samples),
        (replayable, 5)
    );
    assert_eq!(replayed.interval.unwrap().seconds, 2);
    assert!(
        replayed.matched >= 2 && replayed.shared >= 3 && replayed.defaulted == 0,
        "{replayed:?}"
    );
    mesh.assert_nothing_left(&simulation.id, &["use"]).await;
}
