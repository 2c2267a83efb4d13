//! Limits enforced on the usage set on the pool: memory above a container's limit is an OOM
//! kill the apiserver shows as a kubelet would write it, CPU above its limit is capped and
//! counted as throttled, and a node left short of memory evicts as a kubelet would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use ksim_vnode::{
    domain::usage::ContainerUsage,
    pool::{Eviction, OomKill, PodUsageUpdate},
};
use kube::{Api, api::PostParams};
use serde_json::json;

const NAMESPACE: &str = "limits";
const MI: u64 = 1 << 20;

fn pod(name: &str, restart_policy: &str, limits: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "limited" } },
        "spec": {
            "restartPolicy": restart_policy,
            "tolerations": [virtual_toleration()],
            "nodeSelector": { "ksim.io/node-group": "workers" },
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1",
                "resources": { "limits": limits },
            }],
        },
    }))
    .unwrap()
}

fn usage(name: &str, millicores: u64, mebibytes: u64) -> PodUsageUpdate {
    PodUsageUpdate {
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        containers: vec![ContainerUsage {
            name: "app".to_owned(),
            cpu_nanocores: millicores * 1_000_000,
            memory_bytes: mebibytes * MI,
        }],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_above_the_limit_is_an_oom_kill_and_cpu_above_it_is_throttled() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    create_namespace(&env.client, NAMESPACE).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    for pod in [
        pod("hungry", "Always", json!({ "memory": "64Mi" })),
        pod("once", "Never", json!({ "memory": "64Mi" })),
        pod("busy", "Always", json!({ "cpu": "200m" })),
    ] {
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    pods_in_phase(&env.client, NAMESPACE, "app=limited", "Running", 3).await;

    // 128 MiB against a 64 MiB limit: killed; 500m against a 200m limit: capped.
    let applied = pool
        .set_pod_usage(
            vec![
                usage("hungry", 100, 128),
                usage("once", 100, 128),
                usage("busy", 500, 32),
            ],
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(applied.applied, 3);
    let kill = |name: &str, restarted| OomKill {
        namespace: NAMESPACE.to_owned(),
        name: name.to_owned(),
        container: "app".to_owned(),
        restarted,
    };
    let mut kills = applied.oom_kills.clone();
    kills.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(kills, [kill("hungry", true), kill("once", false)]);
    assert!(
        applied.throttled.is_empty(),
        "no time has passed at 500m yet"
    );

    // The kill as a kubelet writes it, through the apiserver.
    let hungry = pods.get("hungry").await.unwrap();
    let status = hungry.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let app = &status.container_statuses.unwrap()[0];
    assert_eq!(app.restart_count, 1);
    let last = app
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.reason.as_deref(), Some("OOMKilled"));
    assert_eq!(last.exit_code, 137);
    assert!(app.state.as_ref().unwrap().running.is_some());
    // Restart policy Never: the container stays terminated and the pod fails.
    let once = pods.get("once").await.unwrap().status.unwrap();
    assert_eq!(once.phase.as_deref(), Some("Failed"));
    let app = &once.container_statuses.unwrap()[0];
    assert_eq!(app.restart_count, 0);
    let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(terminated.reason.as_deref(), Some("OOMKilled"));

    // What the pool serves: CPU capped at the limit, the restarted container starting small.
    let readings = pool.pod_readings(Timestamp::now());
    let reading = |name: &str| {
        let pod = readings.iter().find(|pod| pod.name == name).unwrap();
        (
            pod.containers[0].cpu_nanocores,
            pod.containers[0].memory_bytes,
        )
    };
    assert_eq!(reading("busy"), (200_000_000, 32 * MI));
    assert_eq!(reading("hungry"), (0, 0));
    assert!(readings.iter().all(|pod| pod.name != "once"), "failed");

    // The next set reports the CPU throttled in between: 300m over the interval.
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let applied = pool
        .set_pod_usage(
            vec![usage("busy", 500, 32), usage("once", 100, 32)],
            Timestamp::now(),
        )
        .await
        .unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!((applied.applied, applied.not_running), (1, 1));
    assert!(applied.oom_kills.is_empty());
    assert_eq!(applied.throttled.len(), 1);
    let throttled = &applied.throttled[0];
    assert_eq!(
        (throttled.name.as_str(), throttled.container.as_str()),
        ("busy", "app")
    );
    assert!(
        throttled.cpu_seconds >= 0.3 * 0.5 && throttled.cpu_seconds <= 0.3 * (elapsed + 1.0),
        "{} throttled CPU-seconds over {elapsed} s",
        throttled.cpu_seconds
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_short_of_memory_evicts_the_pod_over_its_request() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    let node = ready_nodes(&env.client, "workers", 1).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    create_namespace(&env.client, NAMESPACE).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    for (name, request) in [("greedy", "1Gi"), ("modest", "8Gi")] {
        let mut pod = pod(name, "Always", json!({}));
        pod.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(json!({ "requests": { "memory": request } })).unwrap());
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    pods_in_phase(&env.client, NAMESPACE, "app=limited", "Running", 2).await;

    // Below the threshold: 15 GiB of the skeleton's 16 GiB capacity leaves 1 GiB available.
    let applied = pool
        .set_pod_usage(
            vec![
                usage("greedy", 100, 9 * 1_024),
                usage("modest", 100, 6 * 1_024),
            ],
            Timestamp::now(),
        )
        .await
        .unwrap();
    // Both were Running for the pool as soon as anyone could see them so.
    assert_eq!((applied.applied, applied.not_running), (2, 0));
    assert!(applied.evicted.is_empty(), "{:?}", applied.evicted);

    // 16 GiB used of 16 GiB: greedy, 9 GiB above its request, goes; modest, within its
    // request, stays.
    let applied = pool
        .set_pod_usage(vec![usage("greedy", 100, 10 * 1_024)], Timestamp::now())
        .await
        .unwrap();
    let message =
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 0Ki.";
    assert_eq!(
        applied.evicted,
        [Eviction {
            namespace: NAMESPACE.to_owned(),
            name: "greedy".to_owned(),
            node: node.clone(),
            message: message.to_owned(),
        }]
    );

    // The eviction as a kubelet writes it, through the apiserver.
    let status = pods.get("greedy").await.unwrap().status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some("Evicted"));
    assert_eq!(status.message.as_deref(), Some(message));
    let disruption = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DisruptionTarget")
        .unwrap();
    assert_eq!(disruption.status, "True");
    assert_eq!(disruption.reason.as_deref(), Some("TerminationByKubelet"));
    let app = &status.container_statuses.unwrap()[0];
    assert!(app.state.as_ref().unwrap().terminated.is_some());
    let modest = pods.get("modest").await.unwrap().status.unwrap();
    assert_eq!(modest.phase.as_deref(), Some("Running"));

    // The pool no longer runs the evicted pod: it takes no usage and is not served.
    assert!(
        pool.pod_readings(Timestamp::now())
            .iter()
            .all(|pod| pod.name != "greedy")
    );
    let applied = pool
        .set_pod_usage(
            vec![usage("greedy", 100, 64), usage("modest", 100, 6 * 1_024)],
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!((applied.applied, applied.not_running), (1, 1));
    assert!(applied.evicted.is_empty());
    assert_eq!(pool.stats().pods.failed, 1);
}
