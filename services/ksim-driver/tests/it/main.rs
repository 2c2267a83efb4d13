//! ksim-driver's integration tests: one binary, a module per area, so a build links it once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod control;
mod lifetimes;
mod rbac;
mod replay;
mod restart;
