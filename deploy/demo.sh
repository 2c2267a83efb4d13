#!/usr/bin/env bash
# The demo: builds (or reuses) the Go-built control plane and ksim, then runs `ksim demo`
# on the embedded local environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)
export KSIM_CONTROL_PLANE_BIN_DIR
cargo build --quiet --locked -p ksim
exec target/debug/ksim demo "$@"
