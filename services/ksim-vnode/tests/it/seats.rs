//! Deployment-backed node groups: one virtual node per seat pod of a labelled Deployment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use crate::common::*;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Node};
use ksim_localenv::wait;
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

async fn seat_names(client: &kube::Client) -> BTreeSet<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    pods.list(&ListParams::default().labels("ksim.io/node-group=m5"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_seat_deployment_scaled_0_5_2_leaves_exactly_two_nodes_named_after_its_seats() {
    let env = control_plane().await;
    let _pool = start_pool(&env.client, pool_config()).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    deployments
        .create(&PostParams::default(), &seat_deployment("m5", 0, None))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(env.client.clone());
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(
        nodes
            .list(&ListParams::default().labels("ksim.io/node-group=m5"))
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let scale = |replicas: i32| json!({ "spec": { "replicas": replicas } });
    deployments
        .patch("seats-m5", &PatchParams::default(), &Patch::Merge(scale(5)))
        .await
        .unwrap();
    let five = ready_nodes(&env.client, "m5", 5).await;
    // Seats run on the seat host, like pods on a kubelet.
    pods_in_phase(
        &env.client,
        "default",
        "ksim.io/node-group=m5",
        "Running",
        5,
    )
    .await;
    let node_names: BTreeSet<String> = five
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(node_names, seat_names(&env.client).await);
    for node in &five {
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
    }

    deployments
        .patch("seats-m5", &PatchParams::default(), &Patch::Merge(scale(2)))
        .await
        .unwrap();
    let two = wait::until(
        "exactly the 2 remaining seats as nodes",
        DEADLINE,
        || async {
            let seats = seat_names(&env.client).await;
            let list = nodes
                .list(&ListParams::default().labels("ksim.io/node-group=m5"))
                .await
                .map_err(|e| e.to_string())?;
            let names: BTreeSet<String> = list
                .items
                .iter()
                .map(|n| n.metadata.name.clone().unwrap())
                .collect();
            if seats.len() == 2 && names == seats {
                Ok(names)
            } else {
                Err(format!("nodes {names:?}, seats {seats:?}"))
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(two.len(), 2);
}
