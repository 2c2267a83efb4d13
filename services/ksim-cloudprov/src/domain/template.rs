//! The template node cluster-autoscaler simulates a group's next node with, in the Kubernetes
//! protobuf encoding it decodes (`k8s-pb` types; plain, without the apiserver's `k8s\0` envelope).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::{api::resource as pb_resource, apis::meta::v1 as pb_meta};
use ksim_nodes::{node::template_node, skeleton::NodeSkeleton};
use prost::Message;

/// The encoded template node of `group`, as the pool would register it.
pub fn template_node_bytes(skeleton: &NodeSkeleton, group: &str, pool: &str) -> Vec<u8> {
    to_pb(&template_node(skeleton, group, pool, Timestamp::now())).encode_to_vec()
}

/// The fields of a Node that cluster-autoscaler reads from a template.
pub fn to_pb(node: &api::Node) -> pb::Node {
    let spec = node.spec.clone().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    pb::Node {
        metadata: Some(pb_meta::ObjectMeta {
            name: node.metadata.name.clone(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            annotations: node.metadata.annotations.clone().unwrap_or_default(),
            ..Default::default()
        }),
        spec: Some(pb::NodeSpec {
            provider_id: spec.provider_id,
            taints: spec
                .taints
                .unwrap_or_default()
                .into_iter()
                .map(taint)
                .collect(),
            ..Default::default()
        }),
        status: Some(pb::NodeStatus {
            capacity: quantities(status.capacity),
            allocatable: quantities(status.allocatable),
            phase: status.phase,
            conditions: status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .map(condition)
                .collect(),
            node_info: status.node_info.map(node_info),
            ..Default::default()
        }),
    }
}

fn quantities(map: Option<BTreeMap<String, Quantity>>) -> BTreeMap<String, pb_resource::Quantity> {
    map.unwrap_or_default()
        .into_iter()
        .map(|(name, Quantity(value))| {
            (
                name,
                pb_resource::Quantity {
                    string: Some(value),
                },
            )
        })
        .collect()
}

fn taint(taint: api::Taint) -> pb::Taint {
    pb::Taint {
        key: Some(taint.key),
        value: taint.value,
        effect: Some(taint.effect),
        time_added: taint.time_added.map(time),
    }
}

fn condition(condition: api::NodeCondition) -> pb::NodeCondition {
    pb::NodeCondition {
        r#type: Some(condition.type_),
        status: Some(condition.status),
        last_heartbeat_time: condition.last_heartbeat_time.map(time),
        last_transition_time: condition.last_transition_time.map(time),
        reason: condition.reason,
        message: condition.message,
    }
}

fn node_info(info: api::NodeSystemInfo) -> pb::NodeSystemInfo {
    pb::NodeSystemInfo {
        machine_id: Some(info.machine_id),
        system_uuid: Some(info.system_uuid),
        boot_id: Some(info.boot_id),
        kernel_version: Some(info.kernel_version),
        os_image: Some(info.os_image),
        container_runtime_version: Some(info.container_runtime_version),
        kubelet_version: Some(info.kubelet_version),
        kube_proxy_version: Some(info.kube_proxy_version),
        operating_system: Some(info.operating_system),
        architecture: Some(info.architecture),
        ..Default::default()
    }
}

fn time(Time(at): Time) -> pb_meta::Time {
    pb_meta::Time {
        seconds: Some(at.as_second()),
        nanos: Some(at.subsec_nanosecond()),
    }
}

#[cfg(test)]
mod tests {
    use ksim_nodes::labels::{GROUP_LABEL, VIRTUAL_TAINT_KEY};

    use super::*;

    const SKELETON: &str = r#"
apiVersion: v1
kind: Node
metadata:
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
spec:
  taints:
  - key: dedicated
    value: batch
    effect: NoSchedule
status:
  capacity: {cpu: "2", memory: 8Gi, pods: "29"}
  allocatable: {cpu: 1930m, memory: 7Gi, pods: "29"}
"#;

    fn decoded() -> pb::Node {
        let skeleton = NodeSkeleton::from_yaml(SKELETON).unwrap();
        pb::Node::decode(template_node_bytes(&skeleton, "m5", "ksim").as_slice()).unwrap()
    }

    #[test]
    fn the_template_decodes_with_the_group_labels_and_taints() {
        let node = decoded();
        let labels = node.metadata.unwrap().labels;
        assert_eq!(labels.get(GROUP_LABEL).map(String::as_str), Some("m5"));
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("us-east-1a")
        );
        let taints: Vec<_> = node
            .spec
            .unwrap()
            .taints
            .into_iter()
            .map(|t| (t.key.unwrap(), t.effect.unwrap()))
            .collect();
        assert_eq!(
            taints,
            vec![
                ("dedicated".to_owned(), "NoSchedule".to_owned()),
                (VIRTUAL_TAINT_KEY.to_owned(), "NoSchedule".to_owned())
            ]
        );
    }

    #[test]
    fn capacity_and_allocatable_carry_valid_quantities_including_pods() {
        let status = decoded().status.unwrap();
        let text = |map: &BTreeMap<String, pb_resource::Quantity>, key: &str| {
            map.get(key).and_then(|q| q.string.clone())
        };
        assert_eq!(text(&status.capacity, "pods").as_deref(), Some("29"));
        assert_eq!(text(&status.allocatable, "cpu").as_deref(), Some("1930m"));
        assert_eq!(text(&status.allocatable, "memory").as_deref(), Some("7Gi"));
        let ready = status
            .conditions
            .iter()
            .find(|c| c.r#type.as_deref() == Some("Ready"))
            .unwrap();
        assert_eq!(ready.status.as_deref(), Some("True"));
        assert!(ready.last_heartbeat_time.unwrap().seconds.unwrap() > 0);
    }

    #[test]
    fn a_skeleton_without_pods_gets_the_kubelet_default() {
        let skeleton = NodeSkeleton::from_yaml(
            "apiVersion: v1\nkind: Node\nstatus:\n  capacity: {cpu: '4', memory: 16Gi}\n",
        )
        .unwrap();
        let node =
            pb::Node::decode(template_node_bytes(&skeleton, "c5", "ksim").as_slice()).unwrap();
        let status = node.status.unwrap();
        assert_eq!(
            status
                .allocatable
                .get("pods")
                .and_then(|q| q.string.clone())
                .as_deref(),
            Some("110")
        );
        assert!(
            status
                .node_info
                .unwrap()
                .kubelet_version
                .unwrap()
                .starts_with("v1.")
        );
    }
}
