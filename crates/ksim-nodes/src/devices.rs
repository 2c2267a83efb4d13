//! A skeleton's devices for Dynamic Resource Allocation: the ResourceSlice a node's DRA driver
//! publishes, given after the Node in the skeleton's YAML, and the slice each virtual node
//! publishes from it.
//!
//! What the local control plane cannot express is refused by name rather than dropped: the
//! apiserver silently clears the fields of a feature gate it runs without, and a device shared
//! that way would be allocated whole. Consumable capacity (`allowMultipleAllocations`, a
//! capacity's `requestPolicy`; gate `DRAConsumableCapacity`) is what the environment enables
//! (docs/pool.md, "GPU nodes by DRA"); partitionable devices, device taints and binding conditions are not.

use k8s_openapi::{
    api::resource::v1::{Device, ResourcePool, ResourceSlice, ResourceSliceSpec},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use serde::Deserialize;
use thiserror::Error;

use crate::{
    names::{is_dns_label, is_dns_subdomain, yaml_message},
    quantity::{is_valid_quantity, quantity_value},
};

/// The API version of the ResourceSlices a skeleton gives and the pool publishes (GA in 1.34).
pub const RESOURCE_API_VERSION: &str = "resource.k8s.io/v1";

/// The reason of the Warning event the pool gives a Node whose devices it could not publish
/// as the skeleton says (the apiserver dropped a gated field): the node runs without them, and
/// the driver's report says so.
pub const DEVICES_NOT_PUBLISHED_REASON: &str = "DevicesNotPublished";

/// The most devices one ResourceSlice may hold (the apiserver's limit).
pub const MAX_DEVICES: usize = 128;

/// Longest driver name the apiserver takes.
const MAX_DRIVER_LENGTH: usize = 63;

/// Why a skeleton's ResourceSlice was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DevicesError {
    #[error("node skeleton's second document is not a valid ResourceSlice in YAML: {0}")]
    Yaml(String),
    #[error(
        "node skeleton's second document has kind {0:?}, expected \"ResourceSlice\" (the devices its node's DRA driver publishes)"
    )]
    WrongKind(String),
    #[error(
        "node skeleton's ResourceSlice has apiVersion {0:?}, expected \"{RESOURCE_API_VERSION}\""
    )]
    WrongApiVersion(String),
    #[error("node skeleton has {0} documents; a skeleton is a Node and at most one ResourceSlice")]
    TooManyDocuments(usize),
    #[error(
        "node skeleton's ResourceSlice spec.driver {0:?} is not a DNS subdomain of at most 63 characters"
    )]
    Driver(String),
    #[error("node skeleton's ResourceSlice has no devices")]
    NoDevices,
    #[error(
        "node skeleton's ResourceSlice has {0} devices, more than the {MAX_DEVICES} a slice may hold"
    )]
    TooManyDevices(usize),
    #[error("node skeleton's ResourceSlice device {index} has name {name:?}, which {why}")]
    DeviceName {
        index: usize,
        name: String,
        why: &'static str,
    },
    #[error("node skeleton's ResourceSlice {field} cannot be expressed on a virtual node: {why}")]
    Unsupported { field: String, why: &'static str },
    #[error(
        "node skeleton's ResourceSlice device {device:?} capacity {name:?}{part} = {value:?} is not a non-negative Kubernetes quantity"
    )]
    Capacity {
        device: String,
        name: String,
        part: &'static str,
        value: String,
    },
}

/// The devices every node of a group has, as its DRA driver publishes them.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDevices {
    /// The DRA driver's name (`spec.driver`), which DeviceClasses select.
    pub driver: String,
    pub devices: Vec<Device>,
}

#[derive(Deserialize)]
struct Header {
    kind: Option<String>,
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
}

const PARTITIONABLE: &str = "partitionable devices need the DRAPartitionableDevices feature gate (alpha in 1.35), which the local control plane does not enable: share a device by consumable capacity (allowMultipleAllocations) instead";
const PER_NODE: &str =
    "a skeleton's slice is its node's own, published for each virtual node with its name";

impl NodeDevices {
    /// Reads the ResourceSlice after a skeleton's Node, keeping its driver and devices; its
    /// node and pool are the real node's and are replaced per virtual node.
    pub fn from_yaml(yaml: &str) -> Result<NodeDevices, DevicesError> {
        let yaml_error = |error: serde_saphyr::Error| DevicesError::Yaml(yaml_message(&error));
        let header: Header = serde_saphyr::from_str(yaml).map_err(yaml_error)?;
        if let Some(kind) = header.kind.filter(|kind| kind != "ResourceSlice") {
            return Err(DevicesError::WrongKind(kind));
        }
        if let Some(version) = header
            .api_version
            .filter(|version| version != RESOURCE_API_VERSION)
        {
            return Err(DevicesError::WrongApiVersion(version));
        }
        let slice: ResourceSlice = serde_saphyr::from_str(yaml).map_err(yaml_error)?;
        Self::from_spec(slice.spec)
    }

    fn from_spec(spec: ResourceSliceSpec) -> Result<NodeDevices, DevicesError> {
        let unsupported = |field: &str, why| DevicesError::Unsupported {
            field: field.to_owned(),
            why,
        };
        if !is_dns_subdomain(&spec.driver, MAX_DRIVER_LENGTH) {
            return Err(DevicesError::Driver(spec.driver));
        }
        if spec.all_nodes == Some(true) || spec.node_selector.is_some() {
            return Err(unsupported("spec.allNodes/nodeSelector", PER_NODE));
        }
        if spec.per_device_node_selection == Some(true) {
            return Err(unsupported("spec.perDeviceNodeSelection", PARTITIONABLE));
        }
        if spec.shared_counters.as_ref().is_some_and(|c| !c.is_empty()) {
            return Err(unsupported("spec.sharedCounters", PARTITIONABLE));
        }
        let devices = spec.devices.unwrap_or_default();
        if devices.is_empty() {
            return Err(DevicesError::NoDevices);
        }
        if devices.len() > MAX_DEVICES {
            return Err(DevicesError::TooManyDevices(devices.len()));
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, device) in devices.iter().enumerate() {
            let name_error = |why| DevicesError::DeviceName {
                index,
                name: device.name.clone(),
                why,
            };
            if !is_dns_label(&device.name) {
                return Err(name_error("is not a DNS label"));
            }
            if !names.insert(device.name.as_str()) {
                return Err(name_error("is given twice"));
            }
            check_device(device)?;
        }
        Ok(NodeDevices {
            driver: spec.driver,
            devices,
        })
    }

    /// Whether a device may be shared between claims (consumable capacity).
    pub fn shares_devices(&self) -> bool {
        self.devices
            .iter()
            .any(|device| device.allow_multiple_allocations == Some(true))
    }

    /// The ResourceSlice virtual node `node` (UID `node_uid`) publishes: one pool named after
    /// the node, owned by the Node so it goes with it.
    pub fn slice_for(&self, node: &str, node_uid: &str) -> ResourceSlice {
        ResourceSlice {
            metadata: ObjectMeta {
                name: Some(slice_name(node, &self.driver)),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".to_owned(),
                    kind: "Node".to_owned(),
                    name: node.to_owned(),
                    uid: node_uid.to_owned(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: ResourceSliceSpec {
                driver: self.driver.clone(),
                node_name: Some(node.to_owned()),
                pool: ResourcePool {
                    name: node.to_owned(),
                    generation: 0,
                    resource_slice_count: 1,
                },
                devices: Some(self.devices.clone()),
                ..ResourceSliceSpec::default()
            },
        }
    }
}

/// The name of node `node`'s slice of `driver`: one per node and driver, so publishing again
/// (a restarted pool) writes the same object.
pub fn slice_name(node: &str, driver: &str) -> String {
    let driver = driver.replace('.', "-");
    format!("{node}-{driver}")
}

fn check_device(device: &Device) -> Result<(), DevicesError> {
    let field = |what: &str| format!("device {:?} {what}", device.name);
    let unsupported = |what: &str, why| DevicesError::Unsupported {
        field: field(what),
        why,
    };
    if device
        .consumes_counters
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(unsupported("consumesCounters", PARTITIONABLE));
    }
    if device.node_name.is_some() || device.node_selector.is_some() || device.all_nodes.is_some() {
        return Err(unsupported("nodeName/nodeSelector/allNodes", PARTITIONABLE));
    }
    if device.taints.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(unsupported(
            "taints",
            "device taints need the DRADeviceTaints feature gate (alpha in 1.35), which the local control plane does not enable",
        ));
    }
    if device.binds_to_node.is_some()
        || device
            .binding_conditions
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        || device
            .binding_failure_conditions
            .as_ref()
            .is_some_and(|c| !c.is_empty())
    {
        return Err(unsupported(
            "bindsToNode/bindingConditions",
            "binding conditions need the DRADeviceBindingConditions feature gate (alpha in 1.35), which the local control plane does not enable",
        ));
    }
    for (name, capacity) in device.capacity.iter().flatten() {
        let bad = |part: &'static str, value: &str| DevicesError::Capacity {
            device: device.name.clone(),
            name: name.clone(),
            part,
            value: value.to_owned(),
        };
        let quantity_ok = |value: &str| {
            is_valid_quantity(value) && quantity_value(value).is_some_and(|v| v >= 0.0)
        };
        if !quantity_ok(&capacity.value.0) {
            return Err(bad("", &capacity.value.0));
        }
        let Some(policy) = &capacity.request_policy else {
            continue;
        };
        if let Some(default) = &policy.default
            && !quantity_ok(&default.0)
        {
            return Err(bad(".requestPolicy.default", &default.0));
        }
        for value in policy.valid_values.iter().flatten() {
            if !quantity_ok(&value.0) {
                return Err(bad(".requestPolicy.validValues", &value.0));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLICE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: real-node-gpu.ksim.io-abcde
spec:
  driver: gpu.ksim.io
  nodeName: real-node
  pool: {name: real-node, generation: 3, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    allowMultipleAllocations: true
    attributes:
      model: {string: Tesla-V100-SXM2-16GB}
    capacity:
      memory: {value: 16Gi}
"#;

    #[test]
    fn a_real_slice_keeps_driver_and_devices_and_gets_each_nodes_pool() {
        let devices = NodeDevices::from_yaml(SLICE).unwrap();
        assert_eq!(devices.driver, "gpu.ksim.io");
        assert_eq!(devices.devices.len(), 1);
        assert!(devices.shares_devices());
        let slice = devices.slice_for("gpu-3", "uid-3");
        assert_eq!(slice.metadata.name.as_deref(), Some("gpu-3-gpu-ksim-io"));
        assert_eq!(slice.spec.node_name.as_deref(), Some("gpu-3"));
        assert_eq!(
            (slice.spec.pool.name.as_str(), slice.spec.pool.generation),
            ("gpu-3", 0)
        );
        let owner = &slice.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "gpu-3", "uid-3")
        );
    }

    #[test]
    fn what_the_control_plane_cannot_express_is_refused_by_name() {
        let cases = [
            (
                "  devices:\n",
                "  sharedCounters: [{name: c, counters: {m: {value: 1}}}]\n  devices:\n",
                "spec.sharedCounters",
            ),
            (
                "    allowMultipleAllocations: true\n",
                "    taints: [{key: k, effect: NoSchedule}]\n",
                "taints",
            ),
            (
                "    allowMultipleAllocations: true\n",
                "    bindsToNode: true\n",
                "bindsToNode",
            ),
            (
                "    allowMultipleAllocations: true\n",
                "    consumesCounters: [{counterSet: c, counters: {m: {value: 1}}}]\n",
                "consumesCounters",
            ),
            (
                "  nodeName: real-node\n",
                "  allNodes: true\n",
                "spec.allNodes",
            ),
        ];
        for (from, to, named) in cases {
            let yaml = SLICE.replace(from, to);
            let error = NodeDevices::from_yaml(&yaml).unwrap_err().to_string();
            assert!(error.contains(named), "{named}: {error}");
            assert!(error.contains("cannot be expressed"), "{error}");
        }
    }

    #[test]
    fn bad_slices_are_refused_naming_what_is_wrong() {
        let cases = [
            (SLICE.replace("kind: ResourceSlice", "kind: Pod"), "\"Pod\""),
            (
                SLICE.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1"),
                "v1beta1",
            ),
            (
                SLICE.replace("driver: gpu.ksim.io", "driver: GPU_x"),
                "GPU_x",
            ),
            (SLICE.replace("name: gpu-0", "name: Gpu 0"), "\"Gpu 0\""),
            (SLICE.replace("{value: 16Gi}", "{value: lots}"), "\"lots\""),
            (
                SLICE.replace("  devices:\n", "  devices: []\n  x:\n"),
                "no devices",
            ),
        ];
        for (yaml, named) in cases {
            let error = NodeDevices::from_yaml(&yaml).unwrap_err().to_string();
            assert!(error.contains(named), "{named}: {error}");
        }
        let twice = SLICE.replace("  devices:\n", "  devices:\n  - name: gpu-0\n");
        assert!(
            NodeDevices::from_yaml(&twice)
                .unwrap_err()
                .to_string()
                .contains("given twice")
        );
    }
}
