#!/usr/bin/env bash
# The demo: builds (or reuses) the Go-built control plane, tries cluster-autoscaler, builds ksim
# and its four services, then runs `ksim demo`: the local environment, a bundled trace replayed
# through the driver, and the report.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)
export KSIM_CONTROL_PLANE_BIN_DIR

# cluster-autoscaler is optional: without it `ksim demo` says so and uses a fixed-size node
# group. Today the Go module proxy refuses its module (build.sh exits 3 in under a second), so
# that expected refusal stays quiet; any other failure is shown.
ca_log=$(mktemp)
ca_status=0
ca_dir=$(deploy/cluster-autoscaler/build.sh 2>"$ca_log") || ca_status=$?
if [[ $ca_status -eq 0 ]]; then
  export KSIM_CLUSTER_AUTOSCALER_BIN_DIR=$ca_dir
elif [[ $ca_status -ne 3 ]]; then
  echo "demo: building cluster-autoscaler failed (status $ca_status); the end of its output:" >&2
  tail -n 5 "$ca_log" >&2
fi
rm -f "$ca_log"

cargo build --quiet --locked --workspace --bins
exec target/debug/ksim demo "$@"
