//! ksim-env's integration tests: one binary, a module per area, so a build links it once. They
//! start the embedded control plane:
//! `export KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod node_lifecycle;
