//! Karpenter's instance types made from ksim's node skeletons and prices: the JSON file its KWOK
//! cloud provider reads from `INSTANCE_TYPES_FILE_PATH` in place of its built-in list, so that
//! Karpenter chooses among the same instance types, at the same prices, as cluster-autoscaler
//! is offered through the cloud provider.
//!
//! The file is a JSON array, one object per instance type, in the field names and casing of
//! `sigs.k8s.io/karpenter/kwok/cloudprovider` (v1.14.1, `InstanceTypeOptions` and
//! `KWOKOffering`; the offering's own fields are Go's exported names, capitalised):
//!
//! ```json
//! [{"name": "m5.large",
//!   "offerings": [{"Price": 0.096, "Available": true, "Requirements": [
//!       {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
//!       {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}],
//!   "architecture": "amd64", "operatingSystems": ["linux"],
//!   "resources": {"cpu": "2", "ephemeral-storage": "20959212Ki", "memory": "7910Mi", "pods": "29"}}]
//! ```
//!
//! On loading it Karpenter marks every offering available, gives a type without `pods` 110,
//! and takes 100m of CPU and 10Mi of memory off each type's capacity as overhead; the price of
//! the offering it launches becomes the Node's `eks-node-viewer/instance-price` label.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::labels::{ARCH_LABEL, OS_LABEL};
use crate::skeleton::{DEFAULT_ARCHITECTURE, DEFAULT_OPERATING_SYSTEM, NodeSkeleton};

/// Well-known label of a node's zone; Karpenter offers each instance type per zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Karpenter's label of how an instance is bought (`on-demand`, `spot`, `reserved`).
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// The one capacity type ksim offers: prices are configured per instance type, not per market.
pub const ON_DEMAND: &str = "on-demand";
/// The zone of a skeleton without a [`ZONE_LABEL`]: Karpenter needs a zone in every offering
/// (its NodePools and pods select by zone), and a made-up name shows where it came from.
pub const DEFAULT_ZONE: &str = "ksim-zone";
/// The Node label Karpenter's KWOK provider writes the launched offering's price on, formatted
/// as Go's `%f` (six decimals: 0.096 becomes `0.096000`).
pub const PRICE_LABEL: &str = "eks-node-viewer/instance-price";
/// The resources of a skeleton's capacity an instance type carries; cpu and memory are needed.
const RESOURCES: &[(&str, bool)] = &[
    ("cpu", true),
    ("memory", true),
    ("pods", false),
    ("ephemeral-storage", false),
];

/// One instance type as the KWOK provider reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    pub name: String,
    pub offerings: Vec<Offering>,
    pub architecture: String,
    #[serde(rename = "operatingSystems")]
    pub operating_systems: Vec<String>,
    /// cpu, memory, pods and ephemeral-storage, as Kubernetes quantities.
    pub resources: BTreeMap<String, Quantity>,
}

/// Where and how an instance type can be bought, and at what price per hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Offering {
    pub price: f64,
    pub available: bool,
    pub requirements: Vec<Requirement>,
}

/// A node selector requirement (`corev1.NodeSelectorRequirement`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

impl Requirement {
    fn is(key: &str, value: &str) -> Self {
        Self {
            key: key.to_owned(),
            operator: "In".to_owned(),
            values: vec![value.to_owned()],
        }
    }
}

/// Why skeletons and prices make no instance-type file. Skeletons are counted from 1 in the
/// order given.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum InstanceTypeError {
    #[error(
        "node skeleton {position} of {count} has no node.kubernetes.io/instance-type label: \
         Karpenter knows an instance type by its name"
    )]
    NoInstanceType { position: usize, count: usize },
    #[error(
        "instance type {name:?} is given twice (node skeletons {first} and {second}): \
         Karpenter needs one description of each type"
    )]
    Duplicate {
        name: String,
        first: usize,
        second: usize,
    },
    #[error(
        "instance type {name:?} (node skeleton {position}) has no price: Karpenter launches the \
         cheapest type that fits, so every type needs one (pricing.instanceTypes)"
    )]
    NoPrice { name: String, position: usize },
    #[error(
        "instance type {name:?} (node skeleton {position}) costs {price} per hour: a price must \
         be a finite number, zero or more"
    )]
    BadPrice {
        name: String,
        position: usize,
        price: f64,
    },
    #[error(
        "instance type {name:?} (node skeleton {position}) has no status.capacity[{resource:?}]: \
         Karpenter fits pods by cpu and memory"
    )]
    MissingResource {
        name: String,
        position: usize,
        resource: &'static str,
    },
    #[error("cannot write the instance types as JSON: {0}")]
    Json(String),
}

/// One instance type per skeleton, named by its `node.kubernetes.io/instance-type` label (or
/// the beta spelling) and priced per hour from `prices`, keyed by that name as the cloud
/// provider's `pricing.instanceTypes` is; prices of types no skeleton gives are left out.
///
/// - `architecture` and `operatingSystems` are the skeleton's `kubernetes.io/arch` and
///   `kubernetes.io/os` labels, else its `nodeInfo`, else `amd64` and `linux`: what the pool
///   labels its virtual nodes with, so a Karpenter node and a pool node of one skeleton agree.
/// - `resources` are the skeleton's capacity of cpu and memory (required), pods and
///   ephemeral-storage (when given), as written. Other labels and taints of the skeleton are
///   not part of an instance type: Karpenter takes a node's labels and taints from its NodePool.
/// - `offerings`: one, on-demand at the price, in the skeleton's `topology.kubernetes.io/zone`,
///   or in [`DEFAULT_ZONE`] when it has none.
pub fn instance_types(
    skeletons: &[NodeSkeleton],
    prices: &BTreeMap<String, f64>,
) -> Result<Vec<InstanceType>, InstanceTypeError> {
    let count = skeletons.len();
    let mut positions: BTreeMap<&str, usize> = BTreeMap::new();
    let mut types = Vec::with_capacity(count);
    for (index, skeleton) in skeletons.iter().enumerate() {
        let position = index + 1;
        let name = skeleton
            .instance_type()
            .ok_or(InstanceTypeError::NoInstanceType { position, count })?;
        if let Some(first) = positions.insert(name, position) {
            return Err(InstanceTypeError::Duplicate {
                name: name.to_owned(),
                first,
                second: position,
            });
        }
        let price = *prices.get(name).ok_or_else(|| InstanceTypeError::NoPrice {
            name: name.to_owned(),
            position,
        })?;
        // Karpenter ranks types by price: a negative one would make the dearest look cheapest.
        if !(price.is_finite() && price >= 0.0) {
            return Err(InstanceTypeError::BadPrice {
                name: name.to_owned(),
                position,
                price,
            });
        }
        let mut resources = BTreeMap::new();
        for &(resource, required) in RESOURCES {
            match skeleton.capacity.get(resource) {
                Some(quantity) => {
                    resources.insert(resource.to_owned(), quantity.clone());
                }
                None if required => {
                    return Err(InstanceTypeError::MissingResource {
                        name: name.to_owned(),
                        position,
                        resource,
                    });
                }
                None => {}
            }
        }
        let zone = skeleton
            .labels
            .get(ZONE_LABEL)
            .map_or(DEFAULT_ZONE, String::as_str);
        types.push(InstanceType {
            name: name.to_owned(),
            offerings: vec![Offering {
                price,
                // Karpenter forces it true on load; written so the file reads as it is used.
                available: true,
                requirements: vec![
                    Requirement::is(CAPACITY_TYPE_LABEL, ON_DEMAND),
                    Requirement::is(ZONE_LABEL, zone),
                ],
            }],
            architecture: label_or(
                skeleton,
                ARCH_LABEL,
                &skeleton.node_info.architecture,
                DEFAULT_ARCHITECTURE,
            ),
            operating_systems: vec![label_or(
                skeleton,
                OS_LABEL,
                &skeleton.node_info.operating_system,
                DEFAULT_OPERATING_SYSTEM,
            )],
            resources,
        });
    }
    Ok(types)
}

/// The instance types as the file Karpenter reads (pretty-printed, so a person can read it too).
pub fn to_json(types: &[InstanceType]) -> Result<String, InstanceTypeError> {
    serde_json::to_string_pretty(types).map_err(|error| InstanceTypeError::Json(error.to_string()))
}

/// The label's value, else the kubelet-reported value, else the default.
fn label_or(skeleton: &NodeSkeleton, label: &str, reported: &str, default: &str) -> String {
    match skeleton.labels.get(label) {
        Some(value) => value.clone(),
        None if !reported.is_empty() => reported.to_owned(),
        None => default.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    const M5_LARGE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
    workload: general
status:
  capacity: { cpu: "2", memory: 7910Mi, pods: "29", ephemeral-storage: 20959212Ki, hugepages-2Mi: "0" }
"#;

    /// An arm64 type without zone, os label or pods: defaults and nodeInfo fill them.
    const C7G: &str = r#"
metadata:
  labels:
    beta.kubernetes.io/instance-type: c7g.xlarge
status:
  capacity: { cpu: "4", memory: 8Gi }
  nodeInfo: { architecture: arm64 }
"#;

    fn skeleton(yaml: &str) -> NodeSkeleton {
        NodeSkeleton::from_yaml(yaml).unwrap()
    }

    fn prices(entries: &[(&str, f64)]) -> BTreeMap<String, f64> {
        entries
            .iter()
            .map(|(name, price)| ((*name).to_owned(), *price))
            .collect()
    }

    #[test]
    fn the_file_has_karpenters_field_names_and_the_skeletons_values() {
        let types = instance_types(
            &[skeleton(M5_LARGE), skeleton(C7G)],
            &prices(&[("m5.large", 0.096), ("c7g.xlarge", 0.145), ("unused", 1.0)]),
        )
        .unwrap();
        let written: serde_json::Value = serde_json::from_str(&to_json(&types).unwrap()).unwrap();
        assert_eq!(
            written,
            json!([
                {"name": "m5.large",
                 "offerings": [{"Price": 0.096, "Available": true, "Requirements": [
                     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}],
                 "architecture": "amd64", "operatingSystems": ["linux"],
                 "resources": {"cpu": "2", "memory": "7910Mi", "pods": "29",
                               "ephemeral-storage": "20959212Ki"}},
                {"name": "c7g.xlarge",
                 "offerings": [{"Price": 0.145, "Available": true, "Requirements": [
                     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["ksim-zone"]}]}],
                 "architecture": "arm64", "operatingSystems": ["linux"],
                 // from_yaml gives a skeleton without pods the kubelet's default.
                 "resources": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            ])
        );
    }

    #[test]
    fn the_file_reads_back_as_written() {
        let types = instance_types(&[skeleton(M5_LARGE)], &prices(&[("m5.large", 0.096)])).unwrap();
        let back: Vec<InstanceType> = serde_json::from_str(&to_json(&types).unwrap()).unwrap();
        assert_eq!(back, types);
    }

    #[test]
    fn a_skeleton_built_without_node_info_is_amd64_linux() {
        let mut bare = skeleton(C7G);
        bare.node_info = Default::default();
        let types = instance_types(&[bare], &prices(&[("c7g.xlarge", 0.0)])).unwrap();
        assert_eq!(types[0].architecture, "amd64");
        assert_eq!(types[0].operating_systems, ["linux"]);
        assert_eq!(types[0].offerings[0].price, 0.0, "a free type is a price");
    }

    #[test]
    fn a_skeleton_without_an_instance_type_is_named_by_its_position() {
        let mut unnamed = skeleton(M5_LARGE);
        unnamed.labels.remove("node.kubernetes.io/instance-type");
        let error =
            instance_types(&[skeleton(C7G), unnamed], &prices(&[("c7g.xlarge", 0.1)])).unwrap_err();
        assert_eq!(
            error,
            InstanceTypeError::NoInstanceType {
                position: 2,
                count: 2
            }
        );
        assert!(
            error.to_string().contains("node skeleton 2 of 2"),
            "{error}"
        );
    }

    #[test]
    fn a_type_given_twice_is_refused() {
        let error = instance_types(
            &[skeleton(M5_LARGE), skeleton(C7G), skeleton(M5_LARGE)],
            &prices(&[("m5.large", 0.096), ("c7g.xlarge", 0.1)]),
        )
        .unwrap_err();
        assert_eq!(
            error,
            InstanceTypeError::Duplicate {
                name: "m5.large".into(),
                first: 1,
                second: 3
            }
        );
        assert!(error.to_string().contains("\"m5.large\""), "{error}");
    }

    #[test]
    fn a_type_without_a_price_is_refused() {
        let error = instance_types(
            &[skeleton(M5_LARGE), skeleton(C7G)],
            &prices(&[("m5.large", 0.096)]),
        )
        .unwrap_err();
        assert_eq!(
            error,
            InstanceTypeError::NoPrice {
                name: "c7g.xlarge".into(),
                position: 2
            }
        );
        assert!(
            error.to_string().contains("pricing.instanceTypes"),
            "{error}"
        );
    }

    #[test]
    fn a_price_that_is_no_price_is_refused() {
        for bad in [-0.096, f64::NAN, f64::INFINITY] {
            let error =
                instance_types(&[skeleton(M5_LARGE)], &prices(&[("m5.large", bad)])).unwrap_err();
            let InstanceTypeError::BadPrice {
                name,
                position,
                price,
            } = &error
            else {
                panic!("{bad}: {error:?}")
            };
            assert_eq!((name.as_str(), *position), ("m5.large", 1));
            assert_eq!(price.to_bits(), bad.to_bits());
            assert!(error.to_string().contains("m5.large"), "{error}");
        }
    }

    #[test]
    fn a_skeleton_without_memory_is_refused() {
        let mut no_memory = skeleton(M5_LARGE);
        no_memory.capacity.remove("memory");
        let error = instance_types(&[no_memory], &prices(&[("m5.large", 0.096)])).unwrap_err();
        assert_eq!(
            error,
            InstanceTypeError::MissingResource {
                name: "m5.large".into(),
                position: 1,
                resource: "memory"
            }
        );
    }
}
