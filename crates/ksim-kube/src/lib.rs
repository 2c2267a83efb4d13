//! The Kubernetes adapter every ksim service shares: connecting like kubectl (the same
//! `--kubeconfig`/`--context` flags everywhere), classifying API errors, and resolving node
//! skeletons that seat Deployments carry or name, registering extension apiservers with
//! the aggregation layer, what a running simulation shows on the cluster, and following a
//! watch through its errors.

pub mod aggregation;
mod args;
mod connect;
mod errors;
pub mod karpenter;
pub mod simulation;
pub mod skeletons;
pub mod watch;

pub use args::KubeArgs;
pub use connect::{ConnectError, Connected, connect};
pub use errors::{is_conflict, is_not_found, status_code};
