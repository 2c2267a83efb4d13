//! ksim-vnode's integration tests: one binary, a module per area, so a build links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod devices;
mod failures;
mod grpc;
mod karpenter;
mod kubelet_endpoint;
mod limits;
mod metrics_api;
mod nodes;
mod pod_start;
mod pods;
mod provisioning;
mod rbac;
mod seats;
