//! What the virtual node pool and the cloud provider must agree on about virtual nodes, so the
//! node the pool registers is the node the autoscaler was promised:
//!
//! - [`labels`]: label, annotation and taint keys.
//! - [`names`]: the RFC 1123 name rules groups, nodes and devices follow.
//! - [`limits`]: the sizes the pool holds a node group to.
//! - [`skeleton`]: node skeletons, the instance-type part of a Node read from YAML.
//! - [`devices`]: a skeleton's DRA devices (its ResourceSlice) and the slice each node
//!   publishes.
//! - [`node`]: the Node object a virtual node registers, and `ksim://` provider IDs.
//! - [`seats`]: how a seat Deployment names its group and carries its skeleton.
//! - [`karpenter`]: Karpenter's instance-type file, made from skeletons and their prices.
//! - [`quantity`]: Kubernetes quantities, checked and valued.
//! - [`pricing`]: the prices of instance types and of pods' requests, as the provider config
//!   gives them.
//!
//! Pure: no Kubernetes I/O, so every rule is unit-tested directly.

pub mod devices;
pub mod karpenter;
pub mod labels;
pub mod limits;
pub mod names;
pub mod node;
pub mod pricing;
pub mod quantity;
pub mod seats;
pub mod skeleton;
