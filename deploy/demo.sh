#!/usr/bin/env bash
# The demo: builds (or reuses) the Go-built control plane and cluster-autoscaler, builds ksim
# and its four services, then runs `ksim demo`: the local environment, a bundled trace replayed
# through the driver, and the report.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KSIM_CONTROL_PLANE_BIN_DIR=$(deploy/control-plane/build.sh)
export KSIM_CONTROL_PLANE_BIN_DIR

# The demo lets cluster-autoscaler resize the node group. If CA cannot be built, `ksim demo`
# still runs, on a fixed-size group, and says why (KSIM_DEMO_NO_AUTOSCALER carries the reason).
ca_out=$(mktemp) ca_log=$(mktemp)
ca_status=0
deploy/cluster-autoscaler/build.sh >"$ca_out" 2>"$ca_log" &
ca_pid=$!
tail -n +1 -f --pid="$ca_pid" "$ca_log" >&2 & # its progress, live
wait "$ca_pid" || ca_status=$?
wait # for tail, which ends with the build
if [[ $ca_status -eq 0 ]]; then
  KSIM_CLUSTER_AUTOSCALER_BIN_DIR=$(cat "$ca_out")
  export KSIM_CLUSTER_AUTOSCALER_BIN_DIR
else
  reason=$(grep -m1 'error:' "$ca_log" || tail -n 1 "$ca_log")
  export KSIM_DEMO_NO_AUTOSCALER="building it failed (deploy/cluster-autoscaler/build.sh exited $ca_status: ${reason:-no output})"
fi
rm -f "$ca_out" "$ca_log"

# The report's web page needs its charting library (npm registry); without it the demo says so
# and writes the rest.
deploy/uplot/fetch.sh >/dev/null || echo "demo: no web page of the report (deploy/uplot/fetch.sh failed)" >&2

cargo build --quiet --locked --workspace --bins
exec target/debug/ksim demo "$@"
