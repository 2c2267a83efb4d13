//! ksim-tracer's integration tests: one binary, a module per area, so a build links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod cluster_state;
mod common;
mod export;
mod rbac;
mod recording;
mod restart;
mod usage;
