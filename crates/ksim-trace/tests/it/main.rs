//! ksim-trace's integration tests: one binary, a module per area, so a build links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod errors;
mod fuzz_seeds;
mod round_trip;
mod simkube;
