//! ksim's end-to-end tests: one binary, a module per area, so a build links it once.
//! - `driver`: replays through the driver with the pool and the tracer (kill -9 and soak too).
//! - `cloudprov`: the cloud provider with the pool, and the real cluster-autoscaler.
//! - `cli`: the `ksim` binary as a user runs it: `up`/`down`/`run`/`demo`, trace tools.
//! - `deploy`: the kustomizations and images `deploy/` ships.
//! - `tested_versions`: what differs between the cluster-autoscaler releases under test, against
//!   each; last in name order, so the releases built beside the tests are there by then.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod cloudprov;
mod deploy;
mod driver;
mod tested_versions;
