//! The provider's rules, free of Kubernetes and gRPC I/O so every edge case is unit-tested.

pub mod group;
pub mod limits;
pub mod options;
pub mod plan;
pub mod template;
