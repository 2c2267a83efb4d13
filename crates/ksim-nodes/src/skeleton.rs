//! Node skeletons: the instance-type part of a Node object, read from YAML the way
//! `kubectl get node -o yaml` prints a real node, so users can paste one; after it, for nodes
//! whose devices are allocated by DRA, the ResourceSlice its driver publishes (`devices`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSystemInfo, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use thiserror::Error;

pub use crate::quantity::{is_valid_quantity, quantity_value};
use crate::{
    devices::{DevicesError, NodeDevices},
    labels::{BETA_INSTANCE_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL},
};

/// Kubelet version reported by virtual nodes whose skeleton names none; the control plane's minor.
pub const DEFAULT_KUBELET_VERSION: &str = "v1.35.4";
/// Pod capacity a kubelet reports when `--max-pods` is not set.
pub const DEFAULT_MAX_PODS: &str = "110";
pub const DEFAULT_OPERATING_SYSTEM: &str = "linux";
pub const DEFAULT_ARCHITECTURE: &str = "amd64";
pub const DEFAULT_CONTAINER_RUNTIME_VERSION: &str = "ksim://1.0";
pub const DEFAULT_OS_IMAGE: &str = "ksim virtual node";
pub const DEFAULT_KERNEL_VERSION: &str = "ksim";

/// Annotation prefixes written per node by the kubelet, kubeadm, CSI and CNI plugins; copying them
/// would make every virtual node claim one real node's volumes, sockets or addresses.
const PER_NODE_ANNOTATION_PREFIXES: &[&str] = &[
    "node.alpha.kubernetes.io/",
    "kubeadm.alpha.kubernetes.io/",
    "csi.volume.kubernetes.io/",
    "volumes.kubernetes.io/",
    "alpha.kubernetes.io/provided-node-ip",
    "projectcalico.org/",
    "flannel.alpha.coreos.com/",
];

/// Annotations that describe how the source object was written, not the instance type.
const DROPPED_ANNOTATION_KEYS: &[&str] = &["kubectl.kubernetes.io/last-applied-configuration"];

/// Taint key prefixes the node lifecycle controller and cloud providers set for transient
/// states (not-ready, unreachable, uninitialized, ...) of the real node.
const TRANSIENT_TAINT_PREFIXES: &[&str] =
    &["node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"];

/// Taint keys cluster-autoscaler sets while removing the real node.
const TRANSIENT_TAINT_KEYS: &[&str] = &[
    crate::labels::TO_BE_DELETED_TAINT,
    "DeletionCandidateOfClusterAutoscaler",
];

/// Resources a skeleton must give so the scheduler has something to fit pods into.
const REQUIRED_CAPACITY: &[&str] = &["cpu", "memory"];

/// Why a node skeleton was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SkeletonError {
    #[error(
        "node skeleton is empty: expected a Node object in YAML (`kubectl get node <name> -o yaml`)"
    )]
    Empty,
    #[error("node skeleton is not a valid Node in YAML: {0}")]
    Yaml(String),
    #[error(
        "node skeleton has kind {0:?}, expected \"Node\" (for a list, take one item: `kubectl get node <name> -o yaml`)"
    )]
    WrongKind(String),
    #[error("node skeleton has apiVersion {0:?}, expected \"v1\"")]
    WrongApiVersion(String),
    #[error("node skeleton is {0} bytes, more than the {MAX_SKELETON_BYTES} a skeleton may have")]
    TooLarge(usize),
    #[error("node skeleton has no status.capacity: the scheduler needs at least cpu and memory")]
    MissingCapacity,
    #[error(
        "node skeleton status.capacity lacks {0:?}: the scheduler needs at least cpu and memory"
    )]
    MissingCapacityResource(&'static str),
    #[error("node skeleton {field}[{resource:?}] = {value:?} is not a Kubernetes quantity")]
    InvalidQuantity {
        field: &'static str,
        resource: String,
        value: String,
    },
    #[error("node skeleton {field}[{resource:?}] = {value:?} {why}")]
    QuantityOutOfRange {
        field: &'static str,
        resource: String,
        value: String,
        why: &'static str,
    },
    #[error(transparent)]
    Devices(#[from] DevicesError),
}

/// What every node of a group shares: labels, annotations, taints, resources, system info and
/// the devices its DRA driver publishes.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSkeleton {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub capacity: BTreeMap<String, Quantity>,
    pub allocatable: BTreeMap<String, Quantity>,
    pub node_info: NodeSystemInfo,
    /// The ResourceSlice given after the Node: `None` for a node without DRA devices.
    pub devices: Option<NodeDevices>,
}

/// The few top-level fields read before the full parse: the typed Node parser rejects a wrong
/// kind with a generic message, and cannot tell an empty document from an empty object.
#[derive(Deserialize)]
struct DocumentHeader {
    kind: Option<String>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
}

impl NodeSkeleton {
    /// Reads a skeleton from a Node in YAML, keeping what describes the instance type and
    /// dropping what belongs to one real node or to its transient state.
    pub fn from_yaml(yaml: &str) -> Result<NodeSkeleton, SkeletonError> {
        if yaml.len() > MAX_SKELETON_BYTES {
            return Err(SkeletonError::TooLarge(yaml.len()));
        }
        let documents = documents(yaml);
        match documents.as_slice() {
            [] => Err(SkeletonError::Empty),
            [node] => Self::from_node_yaml(node),
            [node, slice] => Ok(NodeSkeleton {
                devices: Some(NodeDevices::from_yaml(slice)?),
                ..Self::from_node_yaml(node)?
            }),
            more => Err(DevicesError::TooManyDocuments(more.len()).into()),
        }
    }

    fn from_node_yaml(yaml: &str) -> Result<NodeSkeleton, SkeletonError> {
        let header: Option<DocumentHeader> = serde_saphyr::from_str(yaml).map_err(yaml_error)?;
        let Some(header) = header else {
            return Err(SkeletonError::Empty);
        };
        if let Some(kind) = header.kind.filter(|kind| kind != "Node") {
            return Err(SkeletonError::WrongKind(kind));
        }
        if let Some(api_version) = header.api_version.filter(|version| version != "v1") {
            return Err(SkeletonError::WrongApiVersion(api_version));
        }
        let node: Node = serde_saphyr::from_str(yaml).map_err(yaml_error)?;
        Self::from_node(node)
    }

    /// Same as [`NodeSkeleton::from_yaml`] for a Node already parsed (e.g. a live node).
    pub fn from_node(node: Node) -> Result<NodeSkeleton, SkeletonError> {
        let status = node.status.unwrap_or_default();
        let mut capacity = status.capacity.ok_or(SkeletonError::MissingCapacity)?;
        validate_quantities("status.capacity", &capacity)?;
        for resource in REQUIRED_CAPACITY {
            if !capacity.contains_key(*resource) {
                return Err(SkeletonError::MissingCapacityResource(resource));
            }
        }
        let mut allocatable = status.allocatable.unwrap_or_default();
        validate_quantities("status.allocatable", &allocatable)?;

        capacity
            .entry("pods".to_owned())
            .or_insert_with(|| Quantity(DEFAULT_MAX_PODS.to_owned()));
        // A kubelet reports allocatable for every resource it has capacity for; a skeleton that
        // omits some (or all) means "nothing reserved" for them.
        for (resource, quantity) in &capacity {
            allocatable
                .entry(resource.clone())
                .or_insert_with(|| quantity.clone());
        }

        let mut labels = node.metadata.labels.unwrap_or_default();
        labels.remove(HOSTNAME_LABEL);

        let mut annotations = node.metadata.annotations.unwrap_or_default();
        annotations.retain(|key, _| !is_per_node_annotation(key));

        let taints = node
            .spec
            .and_then(|spec| spec.taints)
            .unwrap_or_default()
            .into_iter()
            .filter(|taint| !is_transient_taint(&taint.key))
            .map(|taint| Taint {
                // When the real node was tainted says nothing about the instance type.
                time_added: None,
                ..taint
            })
            .collect();

        Ok(NodeSkeleton {
            labels,
            annotations,
            taints,
            capacity,
            allocatable,
            node_info: with_node_info_defaults(status.node_info.unwrap_or_default()),
            devices: None,
        })
    }

    /// The instance type named by the well-known label (or its deprecated beta spelling).
    pub fn instance_type(&self) -> Option<&str> {
        self.labels
            .get(INSTANCE_TYPE_LABEL)
            .or_else(|| self.labels.get(BETA_INSTANCE_TYPE_LABEL))
            .map(String::as_str)
    }
}

/// The documents of a YAML stream, split at its `---` lines, without those that hold nothing
/// but blanks and comments. (A `---` line cannot occur inside a document's content: block
/// scalars are indented.)
fn documents(yaml: &str) -> Vec<String> {
    let mut documents = vec![String::new()];
    for line in yaml.lines() {
        let trimmed = line.trim_end();
        if let Some(rest) = trimmed.strip_prefix("---")
            && (rest.is_empty() || rest.starts_with([' ', '\t']))
        {
            documents.push(format!("{rest}\n"));
        } else if let Some(current) = documents.last_mut() {
            current.push_str(line);
            current.push('\n');
        }
    }
    documents
        .into_iter()
        .filter(|document| {
            document.lines().any(|line| {
                let line = line.trim();
                !line.is_empty() && !line.starts_with('#')
            })
        })
        .collect()
}

/// Fills the system info fields a virtual node must report, and clears those that identify one
/// machine (set per node from its name instead).
pub fn with_node_info_defaults(info: NodeSystemInfo) -> NodeSystemInfo {
    fn or_default(value: String, default: &str) -> String {
        if value.is_empty() {
            default.to_owned()
        } else {
            value
        }
    }
    NodeSystemInfo {
        operating_system: or_default(info.operating_system, DEFAULT_OPERATING_SYSTEM),
        architecture: or_default(info.architecture, DEFAULT_ARCHITECTURE),
        kubelet_version: or_default(info.kubelet_version, DEFAULT_KUBELET_VERSION),
        container_runtime_version: or_default(
            info.container_runtime_version,
            DEFAULT_CONTAINER_RUNTIME_VERSION,
        ),
        os_image: or_default(info.os_image, DEFAULT_OS_IMAGE),
        kernel_version: or_default(info.kernel_version, DEFAULT_KERNEL_VERSION),
        machine_id: String::new(),
        system_uuid: String::new(),
        boot_id: String::new(),
        // Deprecated and no longer set by kubelets, but kept if the source node had it.
        kube_proxy_version: info.kube_proxy_version,
        swap: info.swap,
    }
}

fn yaml_error(error: serde_saphyr::Error) -> SkeletonError {
    SkeletonError::Yaml(crate::names::yaml_message(&error))
}

fn is_per_node_annotation(key: &str) -> bool {
    DROPPED_ANNOTATION_KEYS.contains(&key)
        || PER_NODE_ANNOTATION_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix))
}

fn is_transient_taint(key: &str) -> bool {
    TRANSIENT_TAINT_KEYS.contains(&key)
        || TRANSIENT_TAINT_PREFIXES
            .iter()
            .any(|prefix| key.starts_with(prefix))
}

/// Longest skeleton YAML accepted: a real node's `kubectl get node -o yaml` is a few KiB, and
/// the pool stores each group's skeleton in a ConfigMap (at most 1 MiB in all).
pub const MAX_SKELETON_BYTES: usize = 256 * 1024;

/// Largest amount a node may report of a resource, in its base unit (millicores for cpu): what
/// the scheduler's 64-bit counters hold. The apiserver takes larger quantities and the scheduler
/// silently clamps them.
const MAX_QUANTITY: f64 = 9.2e18;

/// Every quantity parses, none is negative, none overflows the scheduler's counters, and a node
/// has some cpu and memory (a node with none refuses every pod).
fn validate_quantities(
    field: &'static str,
    quantities: &BTreeMap<String, Quantity>,
) -> Result<(), SkeletonError> {
    for (resource, quantity) in quantities {
        let out_of_range = |why| SkeletonError::QuantityOutOfRange {
            field,
            resource: resource.clone(),
            value: quantity.0.clone(),
            why,
        };
        let Some(value) = quantity_value(&quantity.0) else {
            return Err(SkeletonError::InvalidQuantity {
                field,
                resource: resource.clone(),
                value: quantity.0.clone(),
            });
        };
        let base_units = if resource == "cpu" {
            value * 1000.0
        } else {
            value
        };
        if value < 0.0 {
            return Err(out_of_range("is negative"));
        }
        if base_units > MAX_QUANTITY {
            return Err(out_of_range(
                "is more than the scheduler can count (9.2e18 bytes, millicores or units)",
            ));
        }
        if value == 0.0 && (resource == "cpu" || resource == "memory") {
            return Err(out_of_range("is zero: the node could run no pod"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeadm worker as `kubectl get node -o yaml` prints it, caught while not yet ready.
    const REAL_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  annotations:
    cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"
    csi.volume.kubernetes.io/nodeid: '{"ebs.csi.aws.com":"i-0a1b2c3d4e5f60718"}'
    kubeadm.alpha.kubernetes.io/cri-socket: unix:///run/containerd/containerd.sock
    node.alpha.kubernetes.io/ttl: "0"
    projectcalico.org/IPv4Address: 10.20.3.17/24
    team.example.com/owner: platform
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
  creationTimestamp: "2025-11-02T09:14:27Z"
  labels:
    beta.kubernetes.io/arch: amd64
    beta.kubernetes.io/instance-type: m5.large
    beta.kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: ip-10-20-3-17
    kubernetes.io/os: linux
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/region: eu-west-1
    topology.kubernetes.io/zone: eu-west-1a
    workload: general
  name: ip-10-20-3-17.eu-west-1.compute.internal
  resourceVersion: "4821377"
  uid: 6f0c1f4e-9a57-4d8a-b1c3-2f3e4d5a6b7c
spec:
  podCIDR: 10.244.7.0/24
  podCIDRs:
  - 10.244.7.0/24
  providerID: aws:///eu-west-1a/i-0a1b2c3d4e5f60718
  taints:
  - effect: NoSchedule
    key: node.kubernetes.io/not-ready
  - effect: NoExecute
    key: node.kubernetes.io/unreachable
    timeAdded: "2025-11-02T09:15:01Z"
  - effect: NoSchedule
    key: ToBeDeletedByClusterAutoscaler
    value: "1762074901"
  - effect: NoSchedule
    key: dedicated
    value: batch
  unschedulable: true
status:
  addresses:
  - address: 10.20.3.17
    type: InternalIP
  - address: ip-10-20-3-17.eu-west-1.compute.internal
    type: Hostname
  allocatable:
    cpu: 1930m
    ephemeral-storage: "76224326324"
    hugepages-2Mi: "0"
    memory: 7220184Ki
    pods: "29"
  capacity:
    cpu: "2"
    ephemeral-storage: 83873772Ki
    hugepages-2Mi: "0"
    memory: 7910360Ki
    pods: "29"
  conditions:
  - lastHeartbeatTime: "2025-11-02T09:20:12Z"
    lastTransitionTime: "2025-11-02T09:15:01Z"
    message: kubelet has sufficient memory available
    reason: KubeletHasSufficientMemory
    status: "False"
    type: MemoryPressure
  - lastHeartbeatTime: "2025-11-02T09:20:12Z"
    lastTransitionTime: "2025-11-02T09:15:01Z"
    message: container runtime network not ready
    reason: KubeletNotReady
    status: "False"
    type: Ready
  daemonEndpoints:
    kubeletEndpoint:
      Port: 10250
  images:
  - names:
    - registry.k8s.io/pause@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097
    - registry.k8s.io/pause:3.10
    sizeBytes: 320368
  nodeInfo:
    architecture: amd64
    bootID: 3c1f5d0e-8b2a-4c7d-9e6f-1a2b3c4d5e6f
    containerRuntimeVersion: containerd://1.7.27
    kernelVersion: 6.1.141-155.222.amzn2023.x86_64
    kubeProxyVersion: ""
    kubeletVersion: v1.33.4-eks-1234567
    machineID: ec2a1b2c3d4e5f60718293a4b5c6d7e8
    operatingSystem: linux
    osImage: Amazon Linux 2023.8.20250818
    systemUUID: ec2a1b2c-3d4e-5f60-7182-93a4b5c6d7e8
  phase: Running
"#;

    fn quantity(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    fn minimal(capacity: &str) -> String {
        format!("kind: Node\napiVersion: v1\nstatus:\n  capacity:\n{capacity}")
    }

    #[test]
    fn real_node_keeps_instance_type_labels_and_drops_hostname() {
        let skeleton = NodeSkeleton::from_yaml(REAL_NODE).unwrap();
        let keys: Vec<&str> = skeleton.labels.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "beta.kubernetes.io/arch",
                "beta.kubernetes.io/instance-type",
                "beta.kubernetes.io/os",
                "kubernetes.io/arch",
                "kubernetes.io/os",
                "node.kubernetes.io/instance-type",
                "topology.kubernetes.io/region",
                "topology.kubernetes.io/zone",
                "workload",
            ]
        );
        assert_eq!(skeleton.labels["topology.kubernetes.io/zone"], "eu-west-1a");
        assert_eq!(skeleton.instance_type(), Some("m5.large"));
    }

    #[test]
    fn real_node_keeps_only_user_annotations() {
        let skeleton = NodeSkeleton::from_yaml(REAL_NODE).unwrap();
        let expected: BTreeMap<String, String> = [
            (
                "cluster-autoscaler.kubernetes.io/scale-down-disabled",
                "true",
            ),
            ("team.example.com/owner", "platform"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(skeleton.annotations, expected);
    }

    #[test]
    fn real_node_drops_transient_taints_and_their_timestamps() {
        let skeleton = NodeSkeleton::from_yaml(REAL_NODE).unwrap();
        assert_eq!(
            skeleton.taints,
            vec![Taint {
                key: "dedicated".to_owned(),
                value: Some("batch".to_owned()),
                effect: "NoSchedule".to_owned(),
                time_added: None,
            }]
        );
    }

    #[test]
    fn real_node_keeps_resources_verbatim() {
        let skeleton = NodeSkeleton::from_yaml(REAL_NODE).unwrap();
        assert_eq!(skeleton.capacity.len(), 5);
        assert_eq!(skeleton.capacity["cpu"], quantity("2"));
        assert_eq!(skeleton.capacity["memory"], quantity("7910360Ki"));
        assert_eq!(skeleton.capacity["pods"], quantity("29"));
        assert_eq!(skeleton.allocatable["cpu"], quantity("1930m"));
        assert_eq!(
            skeleton.allocatable["ephemeral-storage"],
            quantity("76224326324")
        );
        assert_eq!(skeleton.allocatable["pods"], quantity("29"));
    }

    #[test]
    fn real_node_info_keeps_versions_and_clears_machine_identity() {
        let info = NodeSkeleton::from_yaml(REAL_NODE).unwrap().node_info;
        assert_eq!(info.kubelet_version, "v1.33.4-eks-1234567");
        assert_eq!(info.container_runtime_version, "containerd://1.7.27");
        assert_eq!(info.os_image, "Amazon Linux 2023.8.20250818");
        assert_eq!(info.kernel_version, "6.1.141-155.222.amzn2023.x86_64");
        assert_eq!(info.architecture, "amd64");
        assert_eq!(info.operating_system, "linux");
        assert_eq!(info.machine_id, "");
        assert_eq!(info.system_uuid, "");
        assert_eq!(info.boot_id, "");
    }

    #[test]
    fn minimal_skeleton_gets_kubelet_defaults() {
        let skeleton =
            NodeSkeleton::from_yaml(&minimal("    cpu: \"4\"\n    memory: 16Gi\n")).unwrap();
        assert_eq!(skeleton.capacity["pods"], quantity(DEFAULT_MAX_PODS));
        assert_eq!(skeleton.allocatable, skeleton.capacity);
        assert!(skeleton.labels.is_empty());
        assert!(skeleton.taints.is_empty());
        assert_eq!(skeleton.instance_type(), None);
        let info = &skeleton.node_info;
        assert_eq!(info.operating_system, "linux");
        assert_eq!(info.architecture, "amd64");
        assert_eq!(info.kubelet_version, DEFAULT_KUBELET_VERSION);
        assert_eq!(info.container_runtime_version, "ksim://1.0");
        assert_eq!(info.os_image, "ksim virtual node");
        assert_eq!(info.kernel_version, "ksim");
        assert_eq!(info.kube_proxy_version, "");
    }

    #[test]
    fn unquoted_numbers_are_read_as_quantities() {
        // Hand-written skeletons often leave numbers unquoted, unlike kubectl's output.
        let skeleton =
            NodeSkeleton::from_yaml(&minimal("    cpu: 8\n    memory: 32Gi\n    pods: 58\n"))
                .unwrap();
        assert_eq!(skeleton.capacity["cpu"], quantity("8"));
        assert_eq!(skeleton.capacity["pods"], quantity("58"));
    }

    #[test]
    fn partial_allocatable_is_completed_from_capacity() {
        let yaml = "kind: Node\nstatus:\n  capacity:\n    cpu: \"4\"\n    memory: 16Gi\n    pods: \"58\"\n  allocatable:\n    cpu: 3920m\n";
        let skeleton = NodeSkeleton::from_yaml(yaml).unwrap();
        assert_eq!(skeleton.allocatable["cpu"], quantity("3920m"));
        assert_eq!(skeleton.allocatable["memory"], quantity("16Gi"));
        assert_eq!(skeleton.allocatable["pods"], quantity("58"));
    }

    #[test]
    fn beta_instance_type_label_is_a_fallback() {
        let yaml = "metadata:\n  labels:\n    beta.kubernetes.io/instance-type: c5.xlarge\nstatus:\n  capacity:\n    cpu: \"4\"\n    memory: 8Gi\n";
        let skeleton = NodeSkeleton::from_yaml(yaml).unwrap();
        assert_eq!(skeleton.instance_type(), Some("c5.xlarge"));
    }

    #[test]
    fn broken_yaml_reports_the_parser_location() {
        let error =
            NodeSkeleton::from_yaml("kind: Node\nstatus:\n  capacity: [cpu: 1\n").unwrap_err();
        let SkeletonError::Yaml(message) = &error else {
            panic!("expected a YAML error, got {error:?}");
        };
        assert_eq!(message, "line 3 column 13: unclosed bracket '['");
        assert!(
            error
                .to_string()
                .starts_with("node skeleton is not a valid Node in YAML")
        );
    }

    #[test]
    fn wrongly_typed_field_is_a_yaml_error() {
        let error = NodeSkeleton::from_yaml(
            "kind: Node\nmetadata:\n  labels: [a, b]\nstatus:\n  capacity:\n    cpu: \"1\"\n    memory: 1Gi\n",
        )
        .unwrap_err();
        assert!(matches!(error, SkeletonError::Yaml(_)), "{error:?}");
    }

    #[test]
    fn other_kinds_and_versions_are_rejected_by_name() {
        let error = NodeSkeleton::from_yaml("apiVersion: v1\nkind: Pod\n").unwrap_err();
        assert_eq!(error, SkeletonError::WrongKind("Pod".to_owned()));
        assert!(error.to_string().contains("\"Pod\""));

        let error = NodeSkeleton::from_yaml("apiVersion: v1\nkind: List\nitems: []\n").unwrap_err();
        assert_eq!(error, SkeletonError::WrongKind("List".to_owned()));

        let error = NodeSkeleton::from_yaml("apiVersion: v2\nkind: Node\n").unwrap_err();
        assert_eq!(error, SkeletonError::WrongApiVersion("v2".to_owned()));
    }

    #[test]
    fn empty_documents_are_rejected() {
        for yaml in ["", "   \n", "# just a comment\n", "---\n", "~\n"] {
            assert_eq!(
                NodeSkeleton::from_yaml(yaml),
                Err(SkeletonError::Empty),
                "{yaml:?}"
            );
        }
    }

    #[test]
    fn a_resource_slice_after_the_node_gives_its_devices() {
        let node = minimal("    cpu: \"8\"\n    memory: 32Gi\n");
        let slice = "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nspec:\n  driver: gpu.ksim.io\n  pool: {name: n, resourceSliceCount: 1}\n  devices: [{name: gpu-0}, {name: gpu-1}]\n";
        let skeleton =
            NodeSkeleton::from_yaml(&format!("---\n{node}---\n# the devices\n{slice}")).unwrap();
        let devices = skeleton.devices.expect("the slice's devices");
        assert_eq!(
            (devices.driver.as_str(), devices.devices.len()),
            ("gpu.ksim.io", 2)
        );
        assert_eq!(skeleton.capacity["cpu"], quantity("8"));
        assert_eq!(NodeSkeleton::from_yaml(&node).unwrap().devices, None);

        let three = NodeSkeleton::from_yaml(&format!("{node}---\n{slice}---\n{slice}"));
        assert_eq!(three, Err(DevicesError::TooManyDocuments(3).into()));
        let error = NodeSkeleton::from_yaml(&format!("{node}---\n{node}")).unwrap_err();
        assert_eq!(error, DevicesError::WrongKind("Node".to_owned()).into());
    }

    #[test]
    fn missing_capacity_is_rejected() {
        assert_eq!(
            NodeSkeleton::from_yaml("kind: Node\nmetadata:\n  name: x\n"),
            Err(SkeletonError::MissingCapacity)
        );
        assert_eq!(
            NodeSkeleton::from_yaml("kind: Node\nstatus:\n  allocatable:\n    cpu: \"1\"\n"),
            Err(SkeletonError::MissingCapacity)
        );
    }

    #[test]
    fn capacity_without_cpu_or_memory_is_rejected() {
        assert_eq!(
            NodeSkeleton::from_yaml(&minimal("    memory: 1Gi\n")),
            Err(SkeletonError::MissingCapacityResource("cpu"))
        );
        let error = NodeSkeleton::from_yaml(&minimal("    cpu: \"1\"\n")).unwrap_err();
        assert_eq!(error, SkeletonError::MissingCapacityResource("memory"));
        assert!(error.to_string().contains("\"memory\""));
    }

    #[test]
    fn invalid_quantities_name_field_resource_and_value() {
        let error =
            NodeSkeleton::from_yaml(&minimal("    cpu: \"1\"\n    memory: 10Mb\n")).unwrap_err();
        assert_eq!(
            error,
            SkeletonError::InvalidQuantity {
                field: "status.capacity",
                resource: "memory".to_owned(),
                value: "10Mb".to_owned(),
            }
        );
        let message = error.to_string();
        assert!(
            message.contains("status.capacity")
                && message.contains("memory")
                && message.contains("10Mb"),
            "{message}"
        );

        let yaml =
            "status:\n  capacity:\n    cpu: \"1\"\n    memory: 1Gi\n  allocatable:\n    cpu: one\n";
        assert_eq!(
            NodeSkeleton::from_yaml(yaml),
            Err(SkeletonError::InvalidQuantity {
                field: "status.allocatable",
                resource: "cpu".to_owned(),
                value: "one".to_owned(),
            })
        );
    }

    #[test]
    fn quantities_a_node_cannot_have_are_refused_by_name() {
        for (capacity, resource, why) in [
            ("    cpu: \"-4\"\n    memory: 1Gi\n", "cpu", "negative"),
            ("    cpu: \"4\"\n    memory: 1e30\n", "memory", "more than"),
            ("    cpu: 10000P\n    memory: 1Gi\n", "cpu", "more than"),
            ("    cpu: \"0\"\n    memory: 1Gi\n", "cpu", "zero"),
            (
                "    cpu: \"1\"\n    memory: 1Gi\n    example.com/gpu: \"-1\"\n",
                "example.com/gpu",
                "negative",
            ),
        ] {
            let error = NodeSkeleton::from_yaml(&minimal(capacity)).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(&error, SkeletonError::QuantityOutOfRange { resource: r, .. } if r == resource)
                    && message.contains(why)
                    && message.contains("status.capacity"),
                "{capacity}: {message}"
            );
        }
        // Zero of an extended resource is a node without it; large real nodes are fine.
        NodeSkeleton::from_yaml(&minimal(
            "    cpu: \"448\"\n    memory: 24Ti\n    example.com/gpu: \"0\"\n",
        ))
        .unwrap();
    }

    #[test]
    fn an_oversized_skeleton_is_refused_before_it_is_parsed() {
        let padding = format!("# {}\n", "x".repeat(MAX_SKELETON_BYTES));
        let yaml = minimal("    cpu: \"1\"\n    memory: 1Gi\n") + &padding;
        let error = NodeSkeleton::from_yaml(&yaml).unwrap_err();
        assert_eq!(error, SkeletonError::TooLarge(yaml.len()));
        assert!(error.to_string().contains("262144"), "{error}");
    }
}
