#!/usr/bin/env bash
# The project's test command: installs what it needs (Go-built control plane, buf), then
# runs every check: formatting, clippy, protobuf lint/format/breaking, unit and
# integration tests against the real control plane.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
started=$SECONDS

step "tools"
PATH=$(deploy/tools.sh):$PATH

step "control plane binaries"
KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)
export KSIM_CONTROL_PLANE_BIN_DIR

step "cargo fmt"
cargo fmt --all -- --check

step "buf lint, format, breaking"
buf lint
buf format --diff --exit-code
deploy/buf-breaking.sh

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

step "all checks passed in $((SECONDS - started)) s"
