#!/usr/bin/env bash
# The project's test command: installs what it needs (Go-built control plane and kubectl, the
# cluster-autoscaler releases under test, metrics-server, Karpenter, buf, mdBook, buildah and
# podman), then
# runs every check: formatting, the manuals' book, clippy, protobuf lint/format/breaking, unit
# and integration tests against the real control plane, the real cluster-autoscaler, the real
# metrics-server and the real Karpenter, images built and run, and a bounded fuzzing run of the trace decoders.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
started=$SECONDS

step "disk"
# A cold run writes about 8 GiB (cargo's target directory, the Go builds); when the disk fills,
# the linker fails and every end-to-end test fails with it, so say so at the start.
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
echo "$((free_kib / 1024 / 1024)) GiB free here" >&2
if [[ $free_kib -lt $((12 * 1024 * 1024)) ]]; then
  echo "warning: under 12 GiB free; a cold run may fill the disk (df -h .)" >&2
fi

step "tools"
PATH=$(deploy/tools.sh):$PATH

step "control plane binaries"
KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)
export KSIM_CONTROL_PLANE_BIN_DIR

step "cluster-autoscaler binaries"
# Every release the version tests run against (versions.env), from the source archives beside
# the checkout or the Go module proxy. A CA that cannot be built fails the run: the real_ca_*
# tests need it.
# shellcheck source=cluster-autoscaler/versions.env
source deploy/cluster-autoscaler/versions.env
for version in $CLUSTER_AUTOSCALER_TESTED_VERSIONS; do
  ca_dir=$(deploy/cluster-autoscaler/build.sh "$version") ||
    { echo "error: cluster-autoscaler $version could not be built (see above)" >&2; exit 1; }
  if [[ "$version" == "$CLUSTER_AUTOSCALER_VERSION" ]]; then
    export KSIM_CLUSTER_AUTOSCALER_BIN_DIR=$ca_dir
  fi
done

step "metrics-server binary"
# The aggregation-layer tests run the real metrics-server; without it they fail.
KSIM_METRICS_SERVER_BIN_DIR=$(deploy/metrics-server/build.sh)
export KSIM_METRICS_SERVER_BIN_DIR

step "Karpenter binaries"
# The Karpenter tests run the real Karpenter with its KWOK provider, every release the version
# tests run against (versions.env); without one they fail.
# shellcheck source=karpenter/versions.env
source deploy/karpenter/versions.env
for version in $KARPENTER_TESTED_VERSIONS; do
  karpenter_dir=$(deploy/karpenter/build.sh "$version") ||
    { echo "error: Karpenter $version could not be built (see above)" >&2; exit 1; }
  if [[ "$version" == "$KARPENTER_VERSION" ]]; then
    export KSIM_KARPENTER_BIN_DIR=$karpenter_dir
  fi
done

step "container tools"
# The image tests build with buildah and run with podman (runc); Debian packages.
missing=()
for tool in buildah skopeo podman runc; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=$([[ $EUID -eq 0 ]] || echo sudo)
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >&2
fi

step "cargo fmt"
cargo fmt --all -- --check

step "docs book"
# The manuals as a book (docs/book.toml); a chapter SUMMARY.md names but docs/ lacks fails it.
mdbook build docs

step "buf lint, format, breaking"
buf lint
buf format --diff --exit-code
deploy/buf-breaking.sh

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
cargo test --workspace --locked

# Bounded: a minute per target by default (KSIM_FUZZ_SECONDS); a crash fails the run.
step "fuzz the trace decoders"
deploy/fuzz.sh

step "all checks passed in $((SECONDS - started)) s"
