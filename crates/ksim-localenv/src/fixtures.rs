//! The Kubernetes objects the tests and benchmarks build alike (the end-to-end tests, the
//! services' own integration tests): node skeletons, seat Deployments and workload
//! Deployments, one definition each.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use ksim_nodes::{
    labels::{GROUP_LABEL, VIRTUAL_TAINT_KEY},
    seats::{SeatDeployment, SkeletonSource},
};
use serde_json::{Value, json};

/// The extended resource NVIDIA's device plugin advertises whole GPUs as.
const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The example m5.large node skeleton (`deploy/vnode/examples/skeleton-m5-large.yaml`), the
/// one the docs use: the tests' default node.
pub const M5_LARGE_SKELETON: &str =
    include_str!("../../../deploy/vnode/examples/skeleton-m5-large.yaml");

/// An m5.xlarge (3920m CPU, 15Gi memory allocatable, 110 pods) with a fixed name: the pool's
/// own tests' node, whose capacity leaves room for their pods and limits.
pub const M5_XLARGE_SKELETON: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-1-17.ec2.internal
  labels:
    node.kubernetes.io/instance-type: m5.xlarge
    topology.kubernetes.io/zone: us-east-1a
status:
  capacity: { cpu: "4", memory: 16Gi, pods: "110", ephemeral-storage: 100Gi }
  allocatable: { cpu: 3920m, memory: 15Gi, pods: "110", ephemeral-storage: 95Gi }
"#;

/// The example GPU skeleton (`deploy/vnode/examples/skeleton-p3-2xlarge.yaml`): a p3.2xlarge
/// with one `nvidia.com/gpu`, its GPU type under `ksim.io/gpu-type`, tainted
/// `nvidia.com/gpu=present:NoSchedule` ([`Workload::gpus`] tolerates it).
pub const P3_2XLARGE_SKELETON: &str =
    include_str!("../../../deploy/vnode/examples/skeleton-p3-2xlarge.yaml");
/// The same instance type with its GPU allocated by DRA: the Node, then the ResourceSlice of
/// one V100 (driver `gpu.ksim.io`) that claims may share by its memory.
pub const P3_2XLARGE_DRA_SKELETON: &str =
    include_str!("../../../deploy/vnode/examples/skeleton-p3-2xlarge-dra.yaml");

/// The DRA driver of [`P3_2XLARGE_DRA_SKELETON`]'s device.
pub const GPU_DRIVER: &str = "gpu.ksim.io";

/// The DeviceClass of [`GPU_DRIVER`]'s devices (named after it), as JSON.
pub fn gpu_device_class() -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": { "name": GPU_DRIVER },
        "spec": { "selectors": [{ "cel": {
            "expression": format!("device.driver == '{GPU_DRIVER}'")
        } }] }
    })
}

/// A ResourceClaimTemplate `name` for one GPU of [`GPU_DRIVER`]: the whole device, or with
/// `memory`, that much of a shared one's memory (consumable capacity). As JSON.
pub fn gpu_claim_template(name: &str, memory: Option<&str>) -> Value {
    let mut request = json!({ "deviceClassName": GPU_DRIVER });
    if let Some(memory) = memory {
        request["capacity"] = json!({ "requests": { "memory": memory } });
    }
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": { "name": name },
        "spec": { "spec": { "devices": { "requests": [{ "name": "gpu", "exactly": request }] } } }
    })
}

/// An m5.large (1930m CPU, 7Gi memory allocatable, 29 pods) tainted `dedicated=sim:NoSchedule`,
/// as a dedicated group's nodes are: the cloud provider's tests check that CA's node templates
/// carry the taint, and only workloads that tolerate it ([`Workload::on_group`]) land there.
pub const M5_LARGE_TAINTED_SKELETON: &str = r#"apiVersion: v1
kind: Node
metadata:
  labels:
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
spec:
  taints:
  - { key: dedicated, value: sim, effect: NoSchedule }
status:
  capacity: { cpu: "2", memory: 8Gi, pods: "29" }
  allocatable: { cpu: 1930m, memory: 7Gi, pods: "29" }
"#;

/// A second instance type, tainted as [`M5_LARGE_TAINTED_SKELETON`] with twice its CPU: pods
/// asking for 3 CPU fit only here.
pub const C5_XLARGE_TAINTED_SKELETON: &str = r#"apiVersion: v1
kind: Node
metadata:
  labels:
    node.kubernetes.io/instance-type: c5.xlarge
    topology.kubernetes.io/zone: us-east-1a
spec:
  taints:
  - { key: dedicated, value: sim, effect: NoSchedule }
status:
  capacity: { cpu: "4", memory: 8Gi, pods: "58" }
  allocatable: { cpu: 3920m, memory: 7Gi, pods: "58" }
"#;

/// An autoscaling/v2 HorizontalPodAutoscaler named after the Deployment it scales, from 1 to
/// `max_replicas` replicas at `target_utilization` percent of its pods' CPU requests.
pub fn cpu_hpa(
    namespace: &str,
    deployment: &str,
    target_utilization: u32,
    max_replicas: u32,
) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": deployment, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": target_utilization},
            }}],
        },
    })
}

/// Group `group`'s seats in namespace `default`: `replicas` nodes of the inline `skeleton`,
/// which cluster-autoscaler may resize between `min` and `max`. A [`SeatDeployment`], so a
/// caller that needs another namespace, a ConfigMap skeleton or a provisioning model sets it
/// with struct update syntax before `to_deployment`.
pub fn seat_deployment(
    group: &str,
    replicas: i32,
    min: i32,
    max: i32,
    skeleton: &str,
) -> SeatDeployment {
    SeatDeployment {
        group: group.to_owned(),
        namespace: "default".to_owned(),
        replicas,
        skeleton: SkeletonSource::Inline(skeleton.to_owned()),
        min_size: Some(min),
        max_size: Some(max),
        provisioning: None,
    }
}

/// Where a [`Workload`]'s pods may run.
#[derive(Debug, Clone)]
enum Placement {
    /// Wherever the scheduler (or the driver's replay) puts them.
    Anywhere,
    /// On group `0`'s virtual nodes.
    Group(String),
    /// On any group's virtual nodes, not the seat host.
    AnyGroup,
}

/// A Deployment of `replicas` pods labelled `app=<name>`, one container each: the workload
/// a trace replays or cluster-autoscaler scales for. The options are the few the tests and
/// benchmarks vary; one that puts the object itself under test builds its own.
#[derive(Debug, Clone)]
pub struct Workload {
    name: String,
    replicas: i32,
    namespace: Option<String>,
    image: String,
    requests: Option<(String, String)>,
    gpus: u32,
    device_claim: Option<String>,
    placement: Placement,
    pod_labels: BTreeMap<String, String>,
}

impl Workload {
    /// `replicas` pods of `registry.example/app:1`, no namespace (the trace row or the API
    /// call gives it), no requests, no placement.
    pub fn new(name: &str, replicas: i32) -> Self {
        Self {
            name: name.to_owned(),
            replicas,
            namespace: None,
            image: "registry.example/app:1".to_owned(),
            requests: None,
            gpus: 0,
            device_claim: None,
            placement: Placement::Anywhere,
            pod_labels: BTreeMap::new(),
        }
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_owned();
        self
    }

    /// Each pod asks for `cpu` and `memory`.
    pub fn requests(mut self, cpu: &str, memory: &str) -> Self {
        self.requests = Some((cpu.to_owned(), memory.to_owned()));
        self
    }

    /// Each pod asks for `gpus` whole GPUs (`nvidia.com/gpu`, an extended resource: requests
    /// and limits alike) and tolerates GPU nodes' `nvidia.com/gpu` taint.
    pub fn gpus(mut self, gpus: u32) -> Self {
        self.gpus = gpus;
        self
    }

    /// Each pod claims devices by DRA: a ResourceClaim made from template `template` (named
    /// `gpu` in the pod, used by its container), and tolerates GPU nodes' `nvidia.com/gpu`
    /// taint.
    pub fn device_claim(mut self, template: &str) -> Self {
        self.device_claim = Some(template.to_owned());
        self
    }

    /// On group `group`'s virtual nodes, tolerating their taints (ksim's and the tainted
    /// skeletons' `dedicated`).
    pub fn on_group(mut self, group: &str) -> Self {
        self.placement = Placement::Group(group.to_owned());
        self
    }

    /// On any group's virtual nodes (tolerating their taints, as [`Self::on_group`]), never on
    /// the seat host, which has no group label.
    pub fn on_any_group(mut self) -> Self {
        self.placement = Placement::AnyGroup;
        self
    }

    /// One more label on the pods (besides `app=<name>`), as the benchmarks tag a part's pods.
    pub fn pod_label(mut self, key: &str, value: &str) -> Self {
        self.pod_labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The Deployment as JSON, as a trace records it.
    pub fn json(&self) -> Value {
        let mut container = json!({ "name": "main", "image": self.image });
        if let Some((cpu, memory)) = &self.requests {
            container["resources"] = json!({ "requests": { "cpu": cpu, "memory": memory } });
        }
        if self.gpus > 0 {
            let gpus = self.gpus.to_string();
            container["resources"]["requests"][GPU_RESOURCE] = json!(gpus);
            container["resources"]["limits"] = json!({ GPU_RESOURCE: gpus });
        }
        if self.device_claim.is_some() {
            container["resources"]["claims"] = json!([{ "name": "gpu" }]);
        }
        let mut pod_spec = json!({ "containers": [container] });
        if let Some(template) = &self.device_claim {
            pod_spec["resourceClaims"] =
                json!([{ "name": "gpu", "resourceClaimTemplateName": template }]);
        }
        let on_gpus = self.gpus > 0 || self.device_claim.is_some();
        let mut tolerations = json!([
            { "key": "dedicated", "operator": "Exists", "effect": "NoSchedule" },
            { "key": VIRTUAL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule" }
        ]);
        if on_gpus && let Some(list) = tolerations.as_array_mut() {
            list.push(json!({ "key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule" }));
        }
        match &self.placement {
            Placement::Anywhere if on_gpus => pod_spec["tolerations"] = tolerations,
            Placement::Anywhere => {}
            Placement::Group(group) => {
                pod_spec["nodeSelector"] = json!({ GROUP_LABEL: group });
                pod_spec["tolerations"] = tolerations;
            }
            Placement::AnyGroup => {
                pod_spec["affinity"] = json!({ "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [{
                        "matchExpressions": [{ "key": GROUP_LABEL, "operator": "Exists" }]
                    }] }
                } });
                pod_spec["tolerations"] = tolerations;
            }
        }
        let mut labels = self.pod_labels.clone();
        labels.insert("app".to_owned(), self.name.clone());
        let mut metadata = json!({ "name": self.name });
        if let Some(namespace) = &self.namespace {
            metadata["namespace"] = json!(namespace);
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": metadata,
            "spec": {
                "replicas": self.replicas,
                "selector": { "matchLabels": { "app": self.name } },
                "template": { "metadata": { "labels": labels }, "spec": pod_spec }
            }
        })
    }

    /// The Deployment, to create through the API.
    ///
    /// # Panics
    /// Never for the options above: they build a valid Deployment.
    pub fn deployment(&self) -> Deployment {
        serde_json::from_value(self.json())
            .unwrap_or_else(|e| panic!("workload {} is not a valid Deployment: {e}", self.name))
    }
}

/// A KubeSchedulerConfiguration that packs (NodeResourcesFit scoring MostAllocated) where the
/// default spreads: the experiments' change with a real effect.
pub const PACKING_SCHEDULER_CONFIG: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
";

/// Packs pods on the most allocated node, with the scores that would spread them (topology
/// spreading, balanced allocation) off: unlike [`PACKING_SCHEDULER_CONFIG`], pods of one
/// Deployment land together.
pub const PACKING_ONLY_SCHEDULER_CONFIG: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled:
      - name: PodTopologySpread
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
";

/// A KubeSchedulerConfiguration that packs GPUs: `NodeResourcesFit` scores `MostAllocated`, a
/// GPU (`nvidia.com/gpu`) weighing three times CPU or memory, without the balancing score
/// (docs/gpus.md, the same configuration at full size).
pub const GPU_PACKING_SCHEDULER_CONFIG: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: nvidia.com/gpu
          weight: 3
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The DeviceClass and claim templates select the devices the DRA skeleton publishes (and
    /// the Alibaba converter's, which ksim-trace holds to the same skeleton).
    #[test]
    fn the_gpu_driver_is_the_dra_skeletons() {
        let skeleton =
            ksim_nodes::skeleton::NodeSkeleton::from_yaml(P3_2XLARGE_DRA_SKELETON).unwrap();
        assert_eq!(skeleton.devices.unwrap().driver, GPU_DRIVER);
        assert_eq!(gpu_device_class()["metadata"]["name"], GPU_DRIVER);
    }
}
