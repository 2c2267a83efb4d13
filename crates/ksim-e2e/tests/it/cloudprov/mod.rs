//! The cloud provider with the pool, and with the real cluster-autoscaler.

mod autoscaler;
mod common;
mod provisioning;
mod rbac;
mod scaling;
mod startup;
mod transport;
