//! The real cluster-autoscaler against the provider, the pool and the real control plane.
//!
//! `#[ignore]`d and named `real_ca_*`: they need the binary from
//! deploy/cluster-autoscaler/build.sh, which deploy/test.sh runs them with when it could be
//! built (the Go module proxy currently refuses CA's module, see README.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use ksim_cloudprov::provider::ScaleEvent;
use ksim_grpc::ServeArgs;
use ksim_testenv::{CloudConfig, ClusterAutoscaler, wait};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// The real CA, with the test environment's fast defaults, against the provider at `address`.
async fn autoscaler(env: &Env, address: std::net::SocketAddr) -> ClusterAutoscaler {
    ClusterAutoscaler::builder(
        &env.control_plane,
        CloudConfig::plaintext(address.to_string()),
    )
    .start()
    .await
    .unwrap()
}

/// Pods that fit one m5.large each (1930m allocatable), tolerating the virtual nodes' taints.
fn workload(replicas: i32, node_group: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": format!("work-{node_group}") },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": "work" } },
            "template": {
                "metadata": { "labels": { "app": "work" } },
                "spec": {
                    "nodeSelector": { "ksim.io/node-group": node_group },
                    "tolerations": [{ "operator": "Exists", "effect": "NoSchedule" }],
                    "containers": [{
                        "name": "work", "image": "registry.example/work:1",
                        "resources": { "requests": { "cpu": "1500m", "memory": "1Gi" } }
                    }]
                }
            }
        }
    }))
    .unwrap()
}

async fn running_pods(client: &kube::Client, count: usize) {
    ksim_testenv::pods::in_phase(client, NAMESPACE, "app=work", "Running", count, DEADLINE)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the cluster-autoscaler binary (deploy/cluster-autoscaler/build.sh)"]
async fn real_ca_scales_up_for_pending_pods_and_down_exactly_the_nodes_it_named() {
    let env = start().await;
    let mut events = env.provider.subscribe();
    let address = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    create_deployment(&env.client, &seat_deployment("m5", 1, 1, 5)).await;
    ready_nodes(&env.client, "m5", 1).await;
    let _ca = autoscaler(&env, address).await;

    let workloads: Api<Deployment> = Api::namespaced(env.client.clone(), NAMESPACE);
    workloads
        .create(&PostParams::default(), &workload(3, "m5"))
        .await
        .unwrap();
    running_pods(&env.client, 3).await;
    let before = node_names(&env.client, "m5").await;
    assert_eq!(before.len(), 3, "{before:?}");

    workloads
        .patch(
            "work-m5",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 1 } })),
        )
        .await
        .unwrap();
    // CA removes the two unneeded nodes; min size 1 keeps the last.
    let after = wait::until("scale-down to 1 node", DEADLINE, || async {
        let names = node_names(&env.client, "m5").await;
        (names.len() == 1)
            .then_some(names.clone())
            .ok_or(format!("{names:?}"))
    })
    .await
    .unwrap();
    let mut named = BTreeSet::new();
    while let Ok(event) = events.try_recv() {
        if let ScaleEvent::NodesDeleted { nodes, .. } = event {
            named.extend(nodes);
        }
    }
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(gone, named, "nodes that went vs nodes CA named");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the cluster-autoscaler binary (deploy/cluster-autoscaler/build.sh)"]
async fn real_ca_scales_a_group_up_from_zero_using_its_template() {
    let env = start().await;
    let address = serve(env.provider.clone(), ServeArgs::ephemeral()).await;
    create_deployment(&env.client, &seat_deployment("c5", 0, 0, 3)).await;
    let _ca = autoscaler(&env, address).await;
    Api::<Deployment>::namespaced(env.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &workload(2, "c5"))
        .await
        .unwrap();
    running_pods(&env.client, 2).await;
    assert_eq!(ready_nodes(&env.client, "c5", 2).await.len(), 2);
}
