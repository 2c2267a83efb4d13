//! The pool plays the kubelet for the nodes the real Karpenter (its KWOK provider, built by
//! deploy/karpenter/build.sh) creates, against the real control plane and scheduler, running as
//! its ServiceAccount with the shipped RBAC: the node boots by its NodePool's provisioning
//! model, Karpenter takes it as initialized, the real scheduler's pods run on it with IPs from
//! the pool's podCIDR, and when Karpenter consolidates the emptied node the pool forgets it.
//! Orders and states, never timings. Without Karpenter's binary the test fails, naming the
//! build script; it never skips.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use ipnet::Ipv4Net;
use k8s_openapi::api::{apps::v1::Deployment, coordination::v1::Lease, core::v1::Node};
use ksim_localenv::{Karpenter, KarpenterBinary, manifests, wait};
use ksim_nodes::node::{is_booting, is_ready};
use ksim_provisioning::{Delay, GroupProvisioning, NodeDelays};
use ksim_vnode::{config::PoolConfig, index::GroupSource};
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

use crate::common::*;

const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Booting,
    Ready,
}

type Lives = Arc<Mutex<BTreeMap<String, Vec<Seen>>>>;

/// Each of Karpenter's nodes as a watch saw it, each change once, in order.
fn record(client: &Client) -> (Lives, tokio::task::JoinHandle<()>) {
    let lives = Lives::default();
    let events = watcher(
        Api::<Node>::all(client.clone()),
        watcher::Config::default().labels(NODEPOOL_LABEL),
    )
    .default_backoff()
    .applied_objects();
    let seen = lives.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(Ok(node)) = events.next().await {
            let state = if is_booting(&node) {
                Seen::Booting
            } else if is_ready(&node) {
                Seen::Ready
            } else {
                // Karpenter's node before the pool took it: no conditions yet.
                continue;
            };
            let name = node.metadata.name.clone().unwrap_or_default();
            let mut lives = seen.lock().unwrap();
            let life = lives.entry(name).or_default();
            if life.last() != Some(&state) {
                life.push(state);
            }
        }
    });
    (lives, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pool_plays_the_kubelet_for_karpenters_nodes_from_launch_to_consolidation() {
    // On every tested release (docs/compatibility.md), pinned first.
    for version in ksim_localenv::karpenter::tested_karpenter_versions() {
        launch_to_consolidation_on(version).await;
    }
}

async fn launch_to_consolidation_on(version: &str) {
    let env = control_plane().await;
    let client = env.client.clone();
    let binary = KarpenterBinary::locate_release(version).unwrap_or_else(|error| panic!("{error}"));
    let karpenter = Karpenter::builder(&env.control_plane)
        .binary(binary)
        .start()
        .await
        .unwrap_or_else(|error| panic!("Karpenter {version}: {error}"));
    let as_pool = as_pool_service_account(&env).await;
    let (lives, recorder) = record(&client);
    let config = PoolConfig {
        namespace: "ksim-system".to_owned(),
        seat_host: false,
        karpenter: true,
        ..pool_config()
    };
    let pool = start_pool(&as_pool, config).await;

    // Nodes boot 3 s by the NodePool's model; an empty node goes 1 s after it emptied.
    let model = GroupProvisioning {
        model: "it-karpenter".to_owned(),
        seed: 5,
        speed: 1.0,
        nodes: NodeDelays {
            registration: Delay::Fixed(Duration::ZERO),
            ready: Delay::Fixed(Duration::from_secs(3)),
            termination: Delay::Fixed(Duration::ZERO),
        },
    };
    manifests::apply(
        &client,
        &json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
            "metadata": {"name": "default"}, "spec": {}})
        .to_string(),
    )
    .await
    .unwrap();
    manifests::apply(&client, &json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default",
                "annotations": {"ksim.io/provisioning": model.to_json()}},
            "spec": {
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1s",
                    "budgets": [{"nodes": "1"}]},
                "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]}}}}).to_string())
    .await
    .unwrap();

    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web" } },
                  "template": { "metadata": { "labels": { "app": "web" } }, "spec": {
                      "containers": [{ "name": "app", "image": "registry.example/app:1",
                          "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}} }] } } }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods = pods_in_phase(&client, "default", "app=web", "Running", 2).await;

    // Each pod runs on a node of Karpenter's the pool took, with an IP from its podCIDR.
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node_names = std::collections::BTreeSet::new();
    for pod in &pods {
        let node_name = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
        let node = nodes.get(&node_name).await.unwrap();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(NODEPOOL_LABEL).map(String::as_str),
            Some("default")
        );
        assert_eq!(labels.get("ksim.io/pool").map(String::as_str), Some("test"));
        assert_eq!(
            labels.get("ksim.io/group-owner").map(String::as_str),
            Some("karpenter")
        );
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone());
        assert!(
            provider_id
                .as_deref()
                .is_some_and(|id| id.starts_with("kwok://")),
            "Karpenter's node, not one the pool registered: {provider_id:?}"
        );
        let cidr: Ipv4Net = node
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .expect("the pool gave the node a podCIDR")
            .parse()
            .unwrap();
        let ip: Ipv4Addr = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .unwrap()
            .parse()
            .unwrap();
        assert!(cidr.contains(&ip), "{ip} outside {cidr}");
        node_names.insert(node_name);
    }

    // Karpenter took each node as registered and initialized: Ready, its own taint gone.
    for name in &node_names {
        wait::until("Karpenter initialized the node", DEADLINE, || async {
            let node = nodes.get(name).await.map_err(|e| e.to_string())?;
            let labels = node.metadata.labels.unwrap_or_default();
            (labels.get("karpenter.sh/initialized").map(String::as_str) == Some("true"))
                .then_some(())
                .ok_or(format!("labels: {labels:?}"))
        })
        .await
        .unwrap();
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        assert!(
            leases.get_opt(name).await.unwrap().is_some(),
            "{name} has a lease"
        );
        // Booting (the NodePool's 3 s) before Ready, never the other way round.
        let life = lives.lock().unwrap().get(name).cloned().unwrap_or_default();
        assert_eq!(life, vec![Seen::Booting, Seen::Ready], "{name}");
    }
    let group = pool.group("default").unwrap();
    assert_eq!(group.source, GroupSource::Karpenter);
    assert_eq!(group.registered as usize, node_names.len());
    assert_eq!(group.ready as usize, node_names.len());

    // Empty the nodes: Karpenter consolidates them away and the pool forgets each.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    wait::until("Karpenter deleted its empty nodes", DEADLINE, || async {
        let left = nodes
            .list(&ListParams::default().labels(NODEPOOL_LABEL))
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        let registered = pool.group("default").map_or(0, |group| group.registered);
        (left == 0 && registered == 0)
            .then_some(())
            .ok_or(format!("{left} nodes left, {registered} in the pool"))
    })
    .await
    .unwrap();
    recorder.abort();
    let mut karpenter = karpenter;
    karpenter
        .check_running()
        .unwrap_or_else(|error| panic!("{error}"));
}
