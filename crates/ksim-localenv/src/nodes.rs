//! Waiting for nodes, as every test that scales node groups does, and Node objects made ready
//! without a kubelet, for tests of the scheduler alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use ksim_nodes::node::takes_pods;
use kube::{
    Api, Client,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::wait::{self, TimedOut};

/// The nodes matching `label_selector`, once exactly `count` exist and every one is Ready
/// with its not-ready taint lifted, so a test's next pods can land on any of them.
pub async fn ready_nodes(
    client: &Client,
    label_selector: &str,
    count: usize,
    deadline: Duration,
) -> Result<Vec<Node>, TimedOut> {
    let nodes: Api<Node> = Api::all(client.clone());
    let params = ListParams::default().labels(label_selector);
    wait::until(
        &format!("{count} Ready nodes ({label_selector})"),
        deadline,
        || async {
            let list = nodes.list(&params).await.map_err(|e| e.to_string())?;
            let ready = list.items.iter().filter(|n| takes_pods(n)).count();
            if ready == count && list.items.len() == count {
                Ok(list.items)
            } else {
                Err(format!("{ready} Ready of {}", list.items.len()))
            }
        },
    )
    .await
}

/// Creates the Node `name` as a kubelet registers one: `capacity` (also allocatable, e.g.
/// `[("cpu", "8"), ("memory", "32Gi"), ("pods", "110")]`), Ready, its hostname label; no
/// kubelet keeps it so. `taints`, when given, replaces its taints: without
/// kube-controller-manager the apiserver's not-ready taint on a new node is never lifted.
pub async fn create_ready_node(
    client: &Client,
    name: &str,
    capacity: &[(&str, &str)],
    taints: Option<serde_json::Value>,
) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let capacity: serde_json::Map<String, serde_json::Value> = capacity
        .iter()
        .map(|(resource, amount)| ((*resource).to_owned(), json!(amount)))
        .collect();
    // The apiserver keeps the status a node is created with, as a kubelet's registration.
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    nodes.create(&PostParams::default(), &node).await?;
    if let Some(taints) = taints {
        let patch = json!({ "spec": { "taints": taints } });
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}
