//! ksim-localenv's integration tests: one binary, a module per area, so a build links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod autoscaler;
mod control_plane;
mod explain;
mod karpenter;
mod metrics_server;
mod tuning;
