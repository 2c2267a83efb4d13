//! The ksim driver: replays a recorded trace onto a simulated cluster (virtual nodes, the real
//! scheduler, controllers and cluster-autoscaler) and reports how the cluster behaved.
//!
//! - [`domain`]: pure rules: the spec, the replay plan and object rewriting, pod lifetimes,
//!   the report.
//! - [`cluster`]: the Kubernetes side, and the only one: root, lease, namespaces, applier, seat
//!   Deployments, observer.
//! - [`mesh`]: gRPC clients of the pool, tracer store and cloud provider.
//! - [`replay`]: one simulation's run; [`driver`]: the simulations and their operations;
//!   [`grpc`]: the `ksim.driver.v1.Driver` API over them.
//! - [`runtime`]: the flags and the one way to start the service (`main` is one call).

pub mod cluster;
pub mod config;
pub mod domain;
pub mod driver;
pub mod grpc;
pub mod mesh;
pub mod metrics;
pub mod replay;
pub mod runtime;
