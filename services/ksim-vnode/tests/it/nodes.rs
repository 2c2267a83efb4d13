//! Virtual nodes against the real control plane: registration, readiness past the node
//! lifecycle controller's grace period, scaling, and restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, time::Duration};

use crate::common::*;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Node};
use ksim_localenv::wait;
use ksim_nodes::node::is_ready;
use kube::{Api, api::ListParams};

#[tokio::test(flavor = "multi_thread")]
async fn nodes_register_with_the_skeleton_and_stay_ready_past_the_grace_period() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("m5", SKELETON, 3).await.unwrap();
    let nodes = ready_nodes(&env.client, "m5", 3).await;

    let mut cidrs = std::collections::BTreeSet::new();
    for node in &nodes {
        let name = node.metadata.name.clone().unwrap();
        let labels = node.metadata.labels.clone().unwrap();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
        assert_eq!(labels["kubernetes.io/hostname"], name);
        assert_eq!(labels["ksim.io/virtual-node"], "true");
        let spec = node.spec.clone().unwrap();
        assert_eq!(spec.provider_id.unwrap(), format!("ksim://m5/{name}"));
        assert!(
            spec.taints
                .unwrap()
                .iter()
                .any(|t| t.key == "ksim.io/virtual-node" && t.effect == "NoSchedule")
        );
        assert!(
            cidrs.insert(spec.pod_cidr.unwrap()),
            "podCIDRs must be distinct"
        );
        let status = node.status.clone().unwrap();
        assert_eq!(status.allocatable.unwrap()["cpu"].0, "3920m");
        assert!(
            status
                .addresses
                .unwrap()
                .iter()
                .any(|a| a.type_ == "InternalIP")
        );
    }
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-node-lease");
    // The heartbeat writes the first lease after registration, so a Ready node may not have one yet.
    let lease = wait::until("the lease of m5-0", DEADLINE, || async {
        leases.get("m5-0").await.map_err(|e| e.to_string())
    })
    .await
    .unwrap();
    assert_eq!(lease.metadata.owner_references.unwrap()[0].kind, "Node");

    // Three grace periods: a pool that stopped renewing would be marked NotReady and tainted.
    let nodes_api: Api<Node> = Api::all(env.client.clone());
    let until = tokio::time::Instant::now() + Duration::from_secs(3 * GRACE_SECONDS);
    while tokio::time::Instant::now() < until {
        for node in nodes_api
            .list(&ListParams::default().labels("ksim.io/node-group=m5"))
            .await
            .unwrap()
        {
            assert!(is_ready(&node), "{:?} lost Ready", node.metadata.name);
            let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
            assert!(
                !taints
                    .iter()
                    .any(|t| t.key.starts_with("node.kubernetes.io/unreachable")),
                "{taints:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(pool.stats().nodes_ready, 3);
    assert!(pool.stats().renewals_per_second > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn scaling_a_group_adds_and_removes_nodes() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("g", SKELETON, 2).await.unwrap();
    ready_nodes(&env.client, "g", 2).await;
    pool.scale_group("g", 4).await.unwrap();
    ready_nodes(&env.client, "g", 4).await;
    pool.scale_group("g", 1).await.unwrap();
    let nodes = ready_nodes(&env.client, "g", 1).await;
    assert_eq!(nodes[0].metadata.name.as_deref(), Some("g-0"));
    pool.delete_group("g").await.unwrap();
    ready_nodes(&env.client, "g", 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_pool_adopts_its_nodes_without_duplicates_or_not_ready() {
    let env = control_plane().await;
    let pool = start_pool(&env.client, pool_config()).await;
    pool.create_group("r", SKELETON, 3).await.unwrap();
    let before: BTreeMap<String, String> = ready_nodes(&env.client, "r", 3)
        .await
        .into_iter()
        .map(|n| (n.metadata.name.unwrap(), n.metadata.uid.unwrap()))
        .collect();

    // Stop the pool, and come back within the lease duration.
    drop(pool);
    tokio::time::sleep(Duration::from_secs(u64::from(LEASE_SECONDS) / 2)).await;
    let pool = start_pool(&env.client, pool_config()).await;
    assert_eq!(
        pool.group("r").unwrap().desired,
        3,
        "the group definition survived"
    );

    let nodes_api: Api<Node> = Api::all(env.client.clone());
    let until = tokio::time::Instant::now() + Duration::from_secs(3 * GRACE_SECONDS);
    while tokio::time::Instant::now() < until {
        let nodes = nodes_api
            .list(&ListParams::default().labels("ksim.io/pool=test"))
            .await
            .unwrap();
        let after: BTreeMap<String, String> = nodes
            .items
            .iter()
            .filter(|n| n.metadata.labels.as_ref().unwrap()["ksim.io/node-group"] == "r")
            .map(|n| {
                (
                    n.metadata.name.clone().unwrap(),
                    n.metadata.uid.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(after, before, "same nodes, same objects");
        assert!(
            nodes.items.iter().all(is_ready),
            "a node went NotReady across the restart"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
