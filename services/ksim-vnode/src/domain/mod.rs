//! The pool's rules, free of Kubernetes I/O so they are unit-tested directly. The node rules the
//! cloud provider shares live in `ksim-nodes` and are re-exported here.

pub mod cidr;
pub mod claims;
pub mod groups;
pub mod heartbeat;
pub mod karpenter;
pub mod kubelet_endpoint;
pub mod limits;
pub mod metrics_api;
pub mod pod;
pub mod pod_start;
pub mod provisioning;
pub mod resource_metrics;
pub mod usage;

pub use ksim_nodes::{devices, labels, node, seats, skeleton};
