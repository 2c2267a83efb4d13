//! The pool as the kubelet of its nodes' pods, against the real scheduler and controllers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, net::Ipv4Addr, time::Duration};

use crate::common::*;
use ipnet::Ipv4Net;
use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::Job,
    core::v1::{Node, Pod},
};
use ksim_localenv::wait;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

fn pod_spec() -> serde_json::Value {
    json!({
        "tolerations": [virtual_toleration()],
        "nodeSelector": { "ksim.io/node-group": "workers" },
        "containers": [{ "name": "app", "image": "registry.example/app:1",
                         "resources": { "requests": { "cpu": "100m" } } }]
    })
}

fn bare_pod(name: &str, annotations: serde_json::Value, finalizers: &[&str]) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": name }, "annotations": annotations,
                      "finalizers": finalizers },
        "spec": pod_spec(),
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn deployment_pods_run_with_unique_ips_inside_their_nodes_cidrs() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 2).await.unwrap();
    let nodes = ready_nodes(&env.client, "workers", 2).await;
    let cidr_of: BTreeMap<String, (Ipv4Net, String)> = nodes
        .iter()
        .map(|n: &Node| {
            let ip = n
                .status
                .as_ref()
                .unwrap()
                .addresses
                .as_ref()
                .unwrap()
                .iter()
                .find(|a| a.type_ == "InternalIP")
                .unwrap()
                .address
                .clone();
            (
                n.metadata.name.clone().unwrap(),
                (
                    n.spec
                        .as_ref()
                        .unwrap()
                        .pod_cidr
                        .clone()
                        .unwrap()
                        .parse()
                        .unwrap(),
                    ip,
                ),
            )
        })
        .collect();

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 12, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } }, "spec": pod_spec() } }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods = pods_in_phase(&env.client, "default", "app=web", "Running", 12).await;

    let mut ips = std::collections::BTreeSet::new();
    for pod in &pods {
        let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
        let status = pod.status.as_ref().unwrap();
        let ip: Ipv4Addr = status.pod_ip.as_ref().unwrap().parse().unwrap();
        let (cidr, node_ip) = &cidr_of[&node];
        assert!(cidr.contains(&ip), "{ip} outside {cidr} of {node}");
        assert_ne!(&ip.to_string(), node_ip, "a pod got the node's own IP");
        assert!(ips.insert(ip), "duplicate pod IP {ip}");
        assert_eq!(status.host_ip.as_ref(), Some(node_ip));
        let containers = status.container_statuses.as_ref().unwrap();
        assert!(
            containers
                .iter()
                .all(|c| c.ready && c.state.as_ref().unwrap().running.is_some())
        );
        let conditions = status.conditions.as_ref().unwrap();
        for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            assert!(
                conditions
                    .iter()
                    .any(|c| c.type_ == kind && c.status == "True"),
                "{kind} not True"
            );
        }
    }
    // The Deployment controller sees them available, as with a kubelet.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    wait::until("12 available replicas", DEADLINE, || async {
        let d = deployments.get("web").await.map_err(|e| e.to_string())?;
        let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
        if available == 12 {
            Ok(())
        } else {
            Err(format!("{available} available"))
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn job_pods_and_pods_with_a_lifetime_complete_when_it_ends() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;

    let mut spec = pod_spec();
    spec["restartPolicy"] = json!("Never");
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "batch" },
        "spec": { "completions": 3, "parallelism": 2, "template": { "spec": spec } }
    }))
    .unwrap();
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    jobs.create(&PostParams::default(), &job).await.unwrap();

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &bare_pod("short-lived", json!({ "ksim.io/lifetime-ms": "2000" }), &[]),
    )
    .await
    .unwrap();

    wait::until("the Job to complete", DEADLINE, || async {
        let job = jobs.get("batch").await.map_err(|e| e.to_string())?;
        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        if succeeded == 3 {
            Ok(())
        } else {
            Err(format!("{succeeded} succeeded"))
        }
    })
    .await
    .unwrap();

    let done = pods_in_phase(&env.client, "default", "app=short-lived", "Succeeded", 1).await;
    let state = done[0]
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(state.exit_code, 0);
    let ran_for = state
        .finished_at
        .unwrap()
        .0
        .duration_since(state.started_at.unwrap().0);
    assert!(ran_for.as_millis() >= 2000, "ended early: {ran_for:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finalizer_keeps_a_deleted_pod_until_it_is_removed_and_deletion_completes() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &bare_pod("held", json!({}), &["example.com/hold"]),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &bare_pod("plain", json!({}), &[]))
        .await
        .unwrap();
    pods_in_phase(&env.client, "default", "app=held", "Running", 1).await;
    pods_in_phase(&env.client, "default", "app=plain", "Running", 1).await;

    // Graceful deletion (default grace period): the pool finishes the pod and removes it.
    pods.delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    wait::until("the plain pod to be gone", DEADLINE, || async {
        match pods.get_opt("plain").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        }
    })
    .await
    .unwrap();

    // The held pod outlives the plain one's deletion by a wide margin while its finalizer stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = pods.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert_eq!(
        held.metadata.finalizers.as_deref(),
        Some(&["example.com/hold".to_owned()][..])
    );

    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
    )
    .await
    .unwrap();
    wait::until("the held pod to be gone", DEADLINE, || async {
        match pods.get_opt("held").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_owned()),
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_out_of_pod_ips_leaves_the_extra_pods_pending_with_a_reason() {
    let env = control_plane().await;
    // A /29 per node: 8 addresses, minus network, node and broadcast: 5 pod IPs.
    let config = ksim_vnode::config::PoolConfig {
        node_cidr_prefix: 29,
        ..pool_config()
    };
    let pool = start_pool(&env.client, config).await;
    pool.create_group("workers", SKELETON, 1).await.unwrap();
    ready_nodes(&env.client, "workers", 1).await;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), "default");
    for n in 0..7 {
        let mut pod = bare_pod(&format!("p{n}"), json!({}), &[]);
        pod.metadata.labels = Some(BTreeMap::from([("batch".to_owned(), "ips".to_owned())]));
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    pods_in_phase(&env.client, "default", "batch=ips", "Running", 5).await;
    let pending = wait::until("2 pods marked out of IPs", DEADLINE, || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels("batch=ips"))
            .await
            .map_err(|e| e.to_string())?;
        let stuck: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter().any(|c| {
                            c.reason.as_deref() == Some("FailedCreatePodSandBox")
                                && c.message
                                    .as_deref()
                                    .is_some_and(|m| m.contains("exhausted"))
                        })
                    })
            })
            .collect();
        if stuck.len() == 2 {
            Ok(stuck)
        } else {
            Err(format!("{} marked", stuck.len()))
        }
    })
    .await
    .unwrap();
    for pod in &pending {
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
    }
    assert!(pool.stats().ip_exhaustions >= 2);

    // Freeing an IP lets a waiting pod start.
    pods.delete("p0", &DeleteParams::default()).await.unwrap();
    wait::until("a waiting pod to take the freed IP", DEADLINE, || async {
        let list = pods
            .list(&kube::api::ListParams::default().labels("batch=ips"))
            .await
            .map_err(|e| e.to_string())?;
        let running: Vec<String> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        if running.len() == 5 && !running.contains(&"p0".to_owned()) {
            Ok(())
        } else {
            Err(format!("{running:?}"))
        }
    })
    .await
    .unwrap();
}
