//! Drains a node as a spot termination handler does: cordons it, then evicts its pods through
//! the eviction API, so the cluster's PodDisruptionBudgets decide which may go. DaemonSet
//! pods, mirror pods and finished pods stay, as `kubectl drain` leaves them; then the
//! instance goes: the node's seat is deleted and its group replaces it (a Karpenter node is
//! deleted, and Karpenter launches for the pods left pending).

use k8s_openapi::api::core::v1::{Node, Pod};
use ksim_nodes::labels::KARPENTER_NODEPOOL_LABEL;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, EvictParams, ListParams, Patch, Preconditions},
};
use serde_json::json;

use super::{ClusterError, observer::owner_of};

/// A pod on a node being drained.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DrainedPod {
    pub namespace: String,
    pub name: String,
    /// Its owner as the observer names it (`Kind/name`).
    pub owner: String,
}

/// What one pass over a node's pods did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Pods still to go: their eviction was refused, or they are terminating (those evicted in
    /// this pass too).
    pub left: Vec<DrainedPod>,
    /// Those whose eviction a PodDisruptionBudget refused (429).
    pub blocked: Vec<DrainedPod>,
}

/// Marks `node` unschedulable.
pub async fn cordon(client: &Client, node: &str) -> Result<(), ClusterError> {
    let patch = json!({ "spec": { "unschedulable": true } });
    Api::<Node>::all(client.clone())
        .patch(node, &super::merge_params(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| ClusterError::new("cordoning", format!("node {node}"), e))
}

/// Whether draining waits for `pod`: not a DaemonSet's or a mirror pod, and not finished.
fn drains(pod: &Pod) -> bool {
    let daemon = pod
        .owner_references()
        .iter()
        .any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !daemon && !mirror && !finished
}

/// The pods on `node` a drain waits for.
pub async fn pods_on(client: &Client, node: &str) -> Result<Vec<Pod>, ClusterError> {
    let listed = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| ClusterError::new("listing", format!("the pods on node {node}"), e))?;
    Ok(listed.items.into_iter().filter(drains).collect())
}

/// `pod` as a drain names it.
pub fn drained(pod: &Pod) -> DrainedPod {
    DrainedPod {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        owner: owner_of(pod),
    }
}

/// Asks the eviction API once for each pod on `node` that is not already going, through
/// `evictions`, a client that does not retry a 429 (kube's default retries would hold a
/// PodDisruptionBudget's refusal back for minutes).
pub async fn evict_pods(
    client: &Client,
    evictions: &Client,
    node: &str,
) -> Result<Pass, ClusterError> {
    let mut pass = Pass::default();
    for pod in pods_on(client, node).await? {
        let found = drained(&pod);
        if pod.metadata.deletion_timestamp.is_some() {
            pass.left.push(found);
            continue;
        }
        let api = Api::<Pod>::namespaced(evictions.clone(), &found.namespace);
        match api.evict(&found.name, &EvictParams::default()).await {
            // Terminating now, still to go until its kubelet has it gone.
            Ok(_) => pass.left.push(found),
            Err(error) if ksim_kube::is_not_found(&error) => continue,
            Err(error) if ksim_kube::status_code(&error) == Some(429) => {
                pass.blocked.push(found.clone());
                pass.left.push(found);
            }
            Err(error) => {
                return Err(ClusterError::new(
                    "evicting",
                    format!("pod {}/{}", found.namespace, found.name),
                    error,
                ));
            }
        }
    }
    Ok(pass)
}

/// Deletes `pods` at once, as pods whose node vanished; those already gone are skipped.
pub async fn delete_at_once(client: &Client, pods: &[DrainedPod]) -> Result<(), ClusterError> {
    for pod in pods {
        match Api::<Pod>::namespaced(client.clone(), &pod.namespace)
            .delete(&pod.name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => {}
            Err(error) if ksim_kube::is_not_found(&error) => {}
            Err(error) => {
                return Err(ClusterError::new(
                    "deleting",
                    format!("pod {}/{}", pod.namespace, pod.name),
                    error,
                ));
            }
        }
    }
    Ok(())
}

/// Ends the instance of `node`, a seat of `group` in `namespace`: deletes the seat (named as
/// its node), which its Deployment replaces. The pods still on the node are the pool's and the
/// control plane's to clear, as when a cloud instance vanishes.
pub async fn end_instance(
    client: &Client,
    namespace: &str,
    group: &str,
    node: &str,
) -> Result<(), ClusterError> {
    let seats = Api::<Pod>::namespaced(client.clone(), namespace);
    delete_labelled(
        &seats,
        node,
        ksim_nodes::labels::GROUP_LABEL,
        group,
        &format!("the seat of node {node}"),
    )
    .await
}

/// Ends the instance of `node`, a node Karpenter launched for NodePool `node_pool`: deletes
/// the Node, which Karpenter terminates (its finalizer: the NodeClaim goes too) and launches
/// for the pods left pending, as after its own interruption handling.
pub async fn end_karpenter_instance(
    client: &Client,
    node_pool: &str,
    node: &str,
) -> Result<(), ClusterError> {
    let nodes = Api::<Node>::all(client.clone());
    delete_labelled(
        &nodes,
        node,
        KARPENTER_NODEPOOL_LABEL,
        node_pool,
        &format!("Karpenter's node {node}"),
    )
    .await
}

/// Deletes the object `name` when it carries `label`=`value` (the name alone is not trusted),
/// that very object (its uid a precondition); gone already, or another's, is nothing to do.
async fn delete_labelled<K>(
    api: &Api<K>,
    name: &str,
    label: &str,
    value: &str,
    what: &str,
) -> Result<(), ClusterError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let found = api
        .get_opt(name)
        .await
        .map_err(|e| ClusterError::new("reading", what, e))?;
    let Some(found) =
        found.filter(|found| found.labels().get(label).map(String::as_str) == Some(value))
    else {
        return Ok(());
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: found.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(error) if ksim_kube::is_not_found(&error) => Ok(()),
        Err(error) => Err(ClusterError::new("deleting", what, error)),
    }
}

/// The names of NodePool `node_pool`'s nodes that carry `label`=`value`.
pub async fn karpenter_nodes_labelled(
    client: &Client,
    node_pool: &str,
    label: &str,
    value: &str,
) -> Result<Vec<String>, ClusterError> {
    let selector = format!("{KARPENTER_NODEPOOL_LABEL}={node_pool},{label}={value}");
    Ok(Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| ClusterError::new("listing", format!("the nodes of NodePool {node_pool}"), e))?
        .items
        .into_iter()
        .filter_map(|node| node.metadata.name)
        .collect())
}
