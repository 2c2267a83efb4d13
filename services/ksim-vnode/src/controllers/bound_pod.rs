//! What the pods controller keeps of each pod bound to the pool's nodes.
//!
//! Most pods, once Running, need no further write until their deletion is requested, and that
//! request arrives as a new watch event carrying the whole pod. For those only the identity,
//! node, phase and IP are kept. A pod the pool still has to write (to start, complete or
//! delete it) keeps a slimmed copy of itself to build that write from. A k8s-openapi `Pod` is
//! about 2.4 kB before any data, so at 10,000 pods this decides most of the pool's memory.

use std::{borrow::Cow, net::Ipv4Addr};

use k8s_openapi::{
    NamespaceResourceScope,
    api::core::v1::{Container, Pod, PodSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::Resource;
use serde::Deserialize;

use crate::domain::{
    limits::PodLimits,
    pod::{PodPhase, awaits_only_deletion, phase, pod_ip},
};

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "Pod")]
pub struct BoundPod {
    /// Name, namespace and UID only.
    metadata: ObjectMeta,
    pub node: Option<String>,
    pub kept: Kept,
    /// What enforcing the pod's limits needs, read before the pod is slimmed.
    pub limits: Option<Box<PodLimits>>,
}

#[derive(Debug, Clone)]
pub enum Kept {
    /// Finished, or Running until deleted: nothing to write before a new event.
    Settled {
        phase: PodPhase,
        ip: Option<Ipv4Addr>,
    },
    /// Still to be started, completed or deleted: the pod, without what no write reads.
    Unsettled(Box<Pod>),
}

impl BoundPod {
    pub fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `namespace/name`, the index's key.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

impl From<Pod> for BoundPod {
    fn from(mut pod: Pod) -> Self {
        let metadata = ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectMeta::default()
        };
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        let limits = PodLimits::of(&pod);
        let kept = if awaits_only_deletion(&pod) {
            Kept::Settled {
                phase: phase(&pod),
                ip: pod_ip(&pod),
            }
        } else {
            slim(&mut pod);
            Kept::Unsettled(Box::new(pod))
        };
        BoundPod {
            metadata,
            node,
            kept,
            limits,
        }
    }
}

/// The store and the controller see a `BoundPod` as the Pod it stands for.
impl Resource for BoundPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Pod as Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Keeps only what a status write or a deletion reads: identity, owners, annotations,
/// finalizers, deletion, node, host networking, readiness gates, resource claims, container
/// names and images, and the status. Volumes, env, probes, tolerations and managedFields make up most of a pod.
fn slim(pod: &mut Pod) {
    let metadata = &mut pod.metadata;
    metadata.managed_fields = None;
    metadata.labels = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            containers: spec.containers.iter().map(slim_container).collect(),
            init_containers: spec
                .init_containers
                .as_ref()
                .map(|containers| containers.iter().map(slim_container).collect()),
            node_name: spec.node_name.take(),
            host_network: spec.host_network,
            readiness_gates: spec.readiness_gates.take(),
            // Its ResourceClaims, which must be ready before it starts.
            resource_claims: spec.resource_claims.take(),
            restart_policy: spec.restart_policy.take(),
            ..PodSpec::default()
        };
    }
}

fn slim_container(container: &Container) -> Container {
    Container {
        name: container.name.clone(),
        image: container.image.clone(),
        restart_policy: container.restart_policy.clone(),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(phase: &str, annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u-1",
                "labels": {"app": "web"}, "annotations": annotations,
                "managedFields": [{"manager": "kube-controller-manager"}],
            },
            "spec": {
                "nodeName": "g-0",
                "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
            "status": {"phase": phase, "podIP": "10.0.0.7"},
        }))
        .unwrap()
    }

    #[test]
    fn a_running_pod_without_an_end_keeps_identity_node_phase_and_ip_only() {
        let bound = BoundPod::from(pod("Running", json!({})));
        assert_eq!(bound.key(), "shop/web-1");
        assert_eq!(bound.uid(), "u-1");
        assert_eq!(bound.node.as_deref(), Some("g-0"));
        assert!(matches!(
            bound.kept,
            Kept::Settled { phase: PodPhase::Running, ip: Some(ip) } if ip == Ipv4Addr::new(10, 0, 0, 7)
        ));
        assert_eq!(bound.metadata.labels, None);
        assert_eq!(
            bound.limits, None,
            "no limits, requests or priority: nothing kept"
        );
    }

    #[test]
    fn a_pods_limits_are_kept_whether_or_not_the_pod_is() {
        let mut limited = pod("Running", json!({}));
        let spec = limited.spec.as_mut().unwrap();
        spec.restart_policy = Some("OnFailure".to_owned());
        spec.containers[0].resources = serde_json::from_value(
            json!({"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}),
        )
        .unwrap();
        let bound = BoundPod::from(limited);
        assert!(matches!(bound.kept, Kept::Settled { .. }));
        let limits = bound.limits.expect("the limits are kept");
        assert_eq!(limits.containers[0].memory_bytes, Some(64 << 20));
        assert_eq!(limits.memory_requested, 64 << 20);
        assert_eq!(
            limits.restart_policy,
            crate::domain::limits::RestartPolicy::OnFailure
        );
    }

    #[test]
    fn a_pod_still_to_be_written_keeps_what_the_write_reads() {
        let bound = BoundPod::from(pod("Running", json!({"ksim.io/lifetime-ms": "500"})));
        let Kept::Unsettled(kept) = bound.kept else {
            panic!("a pod due to complete must keep its containers");
        };
        let spec = kept.spec.as_ref().unwrap();
        assert_eq!(spec.containers[0].name, "app");
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
        assert_eq!(spec.containers[0].env, None, "env is never written back");
        assert_eq!(spec.volumes, None);
        assert_eq!(spec.node_name.as_deref(), Some("g-0"));
        assert_eq!(kept.metadata.managed_fields, None);
        assert_eq!(
            kept.metadata.annotations.unwrap()["ksim.io/lifetime-ms"],
            "500"
        );

        let pending = BoundPod::from(pod("Pending", json!({})));
        assert!(matches!(pending.kept, Kept::Unsettled(_)));
    }

    #[test]
    fn it_deserializes_from_a_pod() {
        let bound: BoundPod =
            serde_json::from_value(serde_json::to_value(pod("Succeeded", json!({}))).unwrap())
                .unwrap();
        assert!(matches!(
            bound.kept,
            Kept::Settled {
                phase: PodPhase::Succeeded,
                ..
            }
        ));
    }
}
