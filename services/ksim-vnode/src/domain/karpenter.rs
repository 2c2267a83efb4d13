//! Which of the nodes Karpenter creates the pool takes: those of its KWOK provider (no machine
//! behind them), not yet claimed by another pool.

use k8s_openapi::api::core::v1::Node;

use super::labels::{KARPENTER_NODEPOOL_LABEL, KWOK_FAKE_VALUE, KWOK_NODE_ANNOTATION, POOL_LABEL};

/// The NodePool (the pool's group) of a node this pool plays the kubelet for, or may claim;
/// `None` for any other node: a real one, one of Karpenter's with a real instance behind it,
/// another pool's, or one already being deleted before it was claimed.
pub fn nodepool_of<'a>(node: &'a Node, pool: &str) -> Option<&'a str> {
    let meta = &node.metadata;
    let fake = meta
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(KWOK_NODE_ANNOTATION))
        .is_some_and(|value| value == KWOK_FAKE_VALUE);
    let labels = meta.labels.as_ref()?;
    let nodepool = labels
        .get(KARPENTER_NODEPOOL_LABEL)
        .filter(|name| !name.is_empty())?;
    let claimed_by = labels.get(POOL_LABEL);
    let ours = claimed_by.is_some_and(|owner| owner == pool);
    let free = claimed_by.is_none() && meta.deletion_timestamp.is_none();
    (fake && (ours || free)).then_some(nodepool.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "kwok-default-abc", "labels": labels, "annotations": annotations}
        }))
        .unwrap()
    }

    #[test]
    fn takes_kwok_nodes_of_a_nodepool_that_are_free_or_its_own() {
        let fake = json!({"kwok.x-k8s.io/node": "fake"});
        let free = node(json!({"karpenter.sh/nodepool": "default"}), fake.clone());
        assert_eq!(nodepool_of(&free, "p1"), Some("default"));
        let ours = node(
            json!({"karpenter.sh/nodepool": "spot", "ksim.io/pool": "p1"}),
            fake.clone(),
        );
        assert_eq!(nodepool_of(&ours, "p1"), Some("spot"));
        assert_eq!(nodepool_of(&ours, "p2"), None, "another pool's");
    }

    #[test]
    fn leaves_real_instances_and_nodes_outside_any_nodepool() {
        let real = node(json!({"karpenter.sh/nodepool": "default"}), json!({}));
        assert_eq!(nodepool_of(&real, "p1"), None);
        let not_fake = node(
            json!({"karpenter.sh/nodepool": "default"}),
            json!({"kwok.x-k8s.io/node": "real"}),
        );
        assert_eq!(nodepool_of(&not_fake, "p1"), None);
        let no_pool = node(json!({}), json!({"kwok.x-k8s.io/node": "fake"}));
        assert_eq!(nodepool_of(&no_pool, "p1"), None);
    }

    #[test]
    fn a_node_being_deleted_is_claimed_by_nobody_new() {
        let mut free = node(
            json!({"karpenter.sh/nodepool": "default"}),
            json!({"kwok.x-k8s.io/node": "fake"}),
        );
        free.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(nodepool_of(&free, "p1"), None);
        free.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("ksim.io/pool".into(), "p1".into());
        assert_eq!(
            nodepool_of(&free, "p1"),
            Some("default"),
            "its own to the end"
        );
    }
}
