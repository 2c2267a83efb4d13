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
use crate::pricing::Pricing;
use crate::skeleton::{DEFAULT_ARCHITECTURE, DEFAULT_OPERATING_SYSTEM, NodeSkeleton};

/// Well-known label of a node's zone; Karpenter offers each instance type per zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Karpenter's label of how an instance is bought (`on-demand`, `spot`, `reserved`).
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// The capacity type of every instance type's offerings.
pub const ON_DEMAND: &str = "on-demand";
/// The capacity type offered too where `pricing.spotInstanceTypes` prices a type.
pub const SPOT: &str = "spot";
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
        "instance type {name:?} is given twice in one zone, or differently (node skeletons \
         {first} and {second}): Karpenter needs one description of each type (the same type in \
         another zone is an offering there)"
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

/// One instance type per name of the skeletons' `node.kubernetes.io/instance-type` label (or
/// the beta spelling), priced per hour from `pricing.instanceTypes` (and, where it prices the
/// type, `pricing.spotInstanceTypes`), keyed by that name as the cloud provider's pricing is;
/// prices of types no skeleton gives are left out.
///
/// - `architecture` and `operatingSystems` are the skeleton's `kubernetes.io/arch` and
///   `kubernetes.io/os` labels, else its `nodeInfo`, else `amd64` and `linux`: what the pool
///   labels its virtual nodes with, so a Karpenter node and a pool node of one skeleton agree.
/// - `resources` are the skeleton's capacity of cpu and memory (required), pods and
///   ephemeral-storage (when given) and extended resources (`nvidia.com/gpu`), as written. Other labels and taints of the skeleton are
///   not part of an instance type: Karpenter takes a node's labels and taints from its NodePool.
/// - `offerings`: on demand at the price, and spot at the spot price if it has one, in the
///   skeleton's `topology.kubernetes.io/zone`, or in [`DEFAULT_ZONE`] when it has none. A
///   type's skeletons in other zones (the same but for the zone) add its offerings there.
pub fn instance_types(
    skeletons: &[NodeSkeleton],
    pricing: &Pricing,
) -> Result<Vec<InstanceType>, InstanceTypeError> {
    let count = skeletons.len();
    // By name: where in `types`, and the skeleton that first gave it.
    let mut positions: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut types: Vec<InstanceType> = Vec::with_capacity(count);
    for (index, skeleton) in skeletons.iter().enumerate() {
        let position = index + 1;
        let name = skeleton
            .instance_type()
            .ok_or(InstanceTypeError::NoInstanceType { position, count })?;
        let price =
            *pricing
                .instance_types
                .get(name)
                .ok_or_else(|| InstanceTypeError::NoPrice {
                    name: name.to_owned(),
                    position,
                })?;
        let spot = pricing.spot_instance_types.get(name).copied();
        // Karpenter ranks types by price: a negative one would make the dearest look cheapest.
        for price in std::iter::once(price).chain(spot) {
            if !(price.is_finite() && price >= 0.0) {
                return Err(InstanceTypeError::BadPrice {
                    name: name.to_owned(),
                    position,
                    price,
                });
            }
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
        // Extended resources (a device plugin's `nvidia.com/gpu`): Karpenter fits pods that
        // ask for them only to types that have them.
        for (resource, quantity) in &skeleton.capacity {
            if resource.contains('/') {
                resources.insert(resource.clone(), quantity.clone());
            }
        }
        let zone = skeleton
            .labels
            .get(ZONE_LABEL)
            .map_or(DEFAULT_ZONE, String::as_str);
        let offerings: Vec<Offering> = [(ON_DEMAND, Some(price)), (SPOT, spot)]
            .into_iter()
            .filter_map(|(capacity_type, price)| {
                price.map(|price| Offering {
                    price,
                    // Karpenter forces it true on load; written so the file reads as it is used.
                    available: true,
                    requirements: vec![
                        Requirement::is(CAPACITY_TYPE_LABEL, capacity_type),
                        Requirement::is(ZONE_LABEL, zone),
                    ],
                })
            })
            .collect();
        let described = InstanceType {
            name: name.to_owned(),
            offerings,
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
        };
        match positions.get(name) {
            None => {
                positions.insert(name, (types.len(), position));
                types.push(described);
            }
            Some(&(at, first)) => {
                let known = &mut types[at];
                let in_zone = |offering: &Offering| {
                    offering
                        .requirements
                        .contains(&Requirement::is(ZONE_LABEL, zone))
                };
                if known.offerings.iter().any(in_zone)
                    || known.architecture != described.architecture
                    || known.operating_systems != described.operating_systems
                    || known.resources != described.resources
                {
                    return Err(InstanceTypeError::Duplicate {
                        name: name.to_owned(),
                        first,
                        second: position,
                    });
                }
                known.offerings.extend(described.offerings);
            }
        }
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

    fn prices(entries: &[(&str, f64)]) -> Pricing {
        Pricing {
            instance_types: entries
                .iter()
                .map(|(name, price)| ((*name).to_owned(), *price))
                .collect(),
            ..Pricing::default()
        }
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
    fn a_type_in_two_zones_is_offered_in_both_and_as_spot_where_priced() {
        let other_zone = M5_LARGE.replace("us-east-1a", "us-east-1b");
        let mut pricing = prices(&[("m5.large", 0.096), ("c7g.xlarge", 0.145)]);
        pricing.spot_instance_types = [("m5.large".to_owned(), 0.04)].into();
        let types = instance_types(
            &[skeleton(M5_LARGE), skeleton(C7G), skeleton(&other_zone)],
            &pricing,
        )
        .unwrap();
        assert_eq!(types.len(), 2);
        let offered: Vec<(f64, Vec<String>)> = types[0]
            .offerings
            .iter()
            .map(|offering| {
                (
                    offering.price,
                    offering
                        .requirements
                        .iter()
                        .flat_map(|r| r.values.clone())
                        .collect(),
                )
            })
            .collect();
        let offering = |price: f64, capacity: &str, zone: &str| {
            (price, vec![capacity.to_owned(), zone.to_owned()])
        };
        assert_eq!(
            offered,
            [
                offering(0.096, "on-demand", "us-east-1a"),
                offering(0.04, "spot", "us-east-1a"),
                offering(0.096, "on-demand", "us-east-1b"),
                offering(0.04, "spot", "us-east-1b"),
            ]
        );
        assert_eq!(
            types[1].offerings.len(),
            1,
            "no spot price, no spot offering"
        );

        // The same type described differently in another zone is two descriptions.
        let bigger = other_zone.replace("cpu: \"2\"", "cpu: \"4\"");
        let error = instance_types(&[skeleton(M5_LARGE), skeleton(&bigger)], &pricing).unwrap_err();
        assert!(
            matches!(
                error,
                InstanceTypeError::Duplicate {
                    first: 1,
                    second: 2,
                    ..
                }
            ),
            "{error:?}"
        );
        // A spot price that is no price is refused like any.
        pricing.spot_instance_types = [("m5.large".to_owned(), -1.0)].into();
        let error = instance_types(&[skeleton(M5_LARGE)], &pricing).unwrap_err();
        assert!(matches!(error, InstanceTypeError::BadPrice { price, .. } if price == -1.0));
    }

    #[test]
    fn a_gpu_type_carries_its_gpus_and_no_hugepages() {
        let gpu = skeleton(
            "metadata:\n  labels: {node.kubernetes.io/instance-type: p3.8xlarge}\n\
             status:\n  capacity: {cpu: '32', memory: 244Gi, nvidia.com/gpu: '4', \
             hugepages-1Gi: '0'}\n",
        );
        let types = instance_types(&[gpu], &prices(&[("p3.8xlarge", 12.24)])).unwrap();
        let names: Vec<&str> = types[0].resources.keys().map(String::as_str).collect();
        assert_eq!(names, ["cpu", "memory", "nvidia.com/gpu", "pods"]);
        assert_eq!(types[0].resources["nvidia.com/gpu"], Quantity("4".into()));
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
