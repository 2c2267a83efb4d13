//! The cloud provider with the pool, and with the real cluster-autoscaler.

pub(crate) mod autoscaler;
mod common;
mod provisioning;
mod rbac;
mod scaling;
pub(crate) mod startup;
mod transport;
