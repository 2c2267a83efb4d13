//! The ksim driver: replays a recorded trace onto a simulated cluster (virtual nodes, the real
//! scheduler, controllers and cluster-autoscaler) and reports how the cluster behaved.
//!
//! - `domain`: pure rules: the replay plan and object rewriting, pod lifetimes, the report.

pub mod domain;
