//! The virtual node pool: registers virtual nodes with the apiserver, heartbeats them, and
//! plays the kubelet for the pods bound to them.
//!
//! - [`domain`]: the rules (skeletons, node objects, CIDRs and IPs, pod status), no I/O.
//! - [`index`]: the in-memory state the controllers and the API share.
//! - [`apiserver`]: the Kubernetes adapter, every API read and write.
//! - [`controllers`]: the control loops (nodes, heartbeats, pods, seats) and the nodes'
//!   kubelet resource endpoints, which metrics-server scrapes.
//! - [`pool`]: startup with adoption, and the operations behind the gRPC API.
//! - [`metrics_api`]: the resource metrics API (`kubectl top`, the HPA), served over HTTPS.
//! - [`grpc`]: `ksim.vnode.v1.VirtualNodePool` and its error mapping.
//! - [`runtime`]: the flags and the one way to start the service (`main` is one call).

pub mod apiserver;
pub mod config;
pub mod controllers;
pub mod domain;
pub mod grpc;
pub mod index;
pub mod metrics;
pub mod metrics_api;
pub mod pool;
pub mod runtime;
pub mod tls;
