//! cluster-autoscaler's `externalgrpc` cloud provider over Deployments of virtual-node seats.
//!
//! - [`domain`]: the rules (limits, instances, resize plans, template node, prices), no I/O.
//! - [`index`]: the in-memory view every answer comes from.
//! - [`watches`] and [`apiserver`]: the Kubernetes adapter (reads and writes).
//! - [`provider`]: the operations, serialised per group.
//! - [`grpc`]: the `CloudProvider` service and its error mapping.
//! - [`runtime`]: the flags and the one way to start the service (`main` is one call).

pub mod apiserver;
pub mod config;
pub mod domain;
pub mod grpc;
pub mod index;
pub mod provider;
pub mod runtime;
pub mod watches;
