#!/usr/bin/env bash
# The whole fan-out path on a node that runs real containers: `ksim experiment run --cluster`
# against the cluster join.sh joined this machine to, as the least-privileged experimenter,
# two runs of the demo trace at once, each in its own ksim-run pod on the real node. Prints the
# wall time, how many run pods were Running at once, where each ran and what came back; exits
# non-zero with one line saying what did not happen. Run by hand (as root, with `ksim up`
# running and the node joined, ksim-run loaded: deploy/images/build.sh ksim-run, then join.sh).
#
#   deploy/real-node/experiment.sh [RUNS]      RUNS: how many runs, all at once (default: 2)
#
# Environment:
#   KSIM_REAL_NODE_EXPERIMENT_DIR   where the experiment file and its results go (default: a
#                                   temporary directory, removed afterwards)
#
# It applies deploy/experiment (the namespace, the runs' account, the experimenter's Role and
# its example ServiceAccount) and the namespace's kube-root-ca.crt (`ksim up` turns the root-CA
# publisher off), runs the CLI with a token of ksim-experimenter, and deletes what it applied.
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

runs=${1:-2}
[[ $runs =~ ^[1-9][0-9]?$ ]] || die "RUNS must be a number from 1 to 99, not $runs"
namespace=ksim-experiments
image=docker.io/ksim/ksim-run:dev

fail() { echo "experiment: FAILED: $*" >&2; exit 1; }

use_joined_node
ctr_k8s images ls -q | grep -qx "$image" ||
  fail "$image is not loaded in the node's containerd (deploy/images/build.sh ksim-run, then join.sh)"
ksim=$(command -v ksim) || fail "ksim is not on PATH (the CLI that builds the image: target/debug or target/release)"

work=${KSIM_REAL_NODE_EXPERIMENT_DIR:-}
keep=1
if [[ -z $work ]]; then
  work=$(mktemp -d)
  keep=0
fi
mkdir -p "$work"
sampler=
cleanup() {
  local status=$?
  [[ -z $sampler ]] || kill "$sampler" 2>/dev/null || true
  log "removing what the experiment applied"
  k delete -k "$repo/deploy/experiment" --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 ||
    log "warning: deleting deploy/experiment did not finish"
  [[ $keep == 1 ]] || rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# --- the namespace, its accounts, what the cluster lacks ----------------------------------------
k apply -k "$repo/deploy/experiment" >/dev/null
k get configmap kube-root-ca.crt -n "$namespace" >/dev/null 2>&1 ||
  k create configmap kube-root-ca.crt -n "$namespace" --from-file=ca.crt="$run_dir/pki/ca.crt" >/dev/null
# The experimenter's own kubeconfig: the cluster of the admin's, a token of the example account.
token=$(k create token ksim-experimenter -n "$namespace" --duration=2h)
server=$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
ca=$(k config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
[[ -n $ca ]] || fail "the admin kubeconfig names no certificate-authority file"
cat >"$work/experimenter.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: ksim, cluster: {server: "$server", certificate-authority: "$ca"}}]
users: [{name: ksim-experimenter, user: {token: "$token"}}]
contexts: [{name: ksim-experimenter, context: {cluster: ksim, user: ksim-experimenter, namespace: $namespace}}]
current-context: ksim-experimenter
YAML
chmod 600 "$work/experimenter.kubeconfig"

# --- the experiment: the demo trace, RUNS repeats, all at once ----------------------------------
"$ksim" demo --write-trace "$work/demo.ktrace" >/dev/null
cp "$repo/deploy/vnode/examples/skeleton-m5-large.yaml" "$work/m5.yaml"
cat >"$work/experiment.yaml" <<YAML
trace: demo.ktrace
speed: 4
repeats: $runs
autoscaler: true
autoscalerGroups: ["m5=m5.yaml:1:10:2"]
variants:
- name: demo
YAML

# Which run pods are Running, on which node, and what their cgroups used, once a second: the
# memory high-water mark and CPU time the kernel counted (cgroup v1 here; "-" where the pod's
# cgroup cannot be read, as on a host with cgroup v2 or the systemd driver).
pod_cgroup() { echo "/sys/fs/cgroup/$1/kubepods/burstable/pod$2/$3"; }
(
  while true; do
    t=$(date +%s)
    k get pods -n "$namespace" -l job-name --no-headers \
      -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,NODE:.spec.nodeName,UID:.metadata.uid 2>/dev/null |
      while read -r name phase node uid; do
        [[ $phase == Running ]] || continue
        memory=$(cat "$(pod_cgroup memory "$uid" memory.max_usage_in_bytes)" 2>/dev/null || echo -)
        cpu=$(cat "$(pod_cgroup cpuacct "$uid" cpuacct.usage)" 2>/dev/null || echo -)
        echo "$t $name $node $memory $cpu"
      done
    sleep 1
  done
) >"$work/running.log" &
sampler=$!

started=$(date +%s)
log "running $runs runs of the demo trace at once as ksim-experimenter"
if ! "$ksim" experiment run -f "$work/experiment.yaml" --cluster --parallel "$runs" \
  --kubeconfig "$work/experimenter.kubeconfig" --image "$image" \
  --assert "variants.demo.failed == 0" >"$work/experiment.out" 2>&1; then
  tail -20 "$work/experiment.out" >&2
  fail "ksim experiment run --cluster did not succeed (its output is above)"
fi
took=$(($(date +%s) - started))
kill "$sampler" 2>/dev/null || true
sampler=

# --- what came back -----------------------------------------------------------------------------
results=$work/experiment-results
for ((run = 1; run <= runs; run++)); do
  report=$results/demo/$run/report.json
  [[ -f $report ]] || fail "no report for run $run ($report)"
  echo "run $run: $(jq -r '"\(.costs.node_hours) node-hours, peak \(.peak_nodes) nodes, \(.pod_pending_time.count) pods"' "$report")"
done
[[ -f $results/comparison.json ]] || fail "no comparison in $results"
at_once=$(awk '{ n[$1]++ } END { m = 0; for (t in n) if (n[t] > m) m = n[t]; print m }' "$work/running.log")
nodes=$(awk '{ print $3 }' "$work/running.log" | sort -u | paste -sd, -)
[[ $nodes == "$node_name" ]] || fail "run pods ran on ${nodes:-no node}, not only $node_name"
[[ $at_once == "$runs" ]] || fail "at most $at_once of $runs run pods were Running at once"
leftover=$(k get jobs,configmaps -n "$namespace" -l ksim.dev/experiment --no-headers 2>/dev/null | wc -l)
[[ $leftover == 0 ]] || fail "$leftover Jobs or ConfigMaps of the experiment are left in $namespace"
# Per pod: its memory high-water mark (MiB) and CPU time (s) at its last sample.
awk '$4 != "-" { m[$2] = $4; c[$2] = $5 }
  END { for (p in m) printf "pod %s: peak memory %d MiB, %.0f CPU-seconds\n", p, m[p] / 1048576, c[p] / 1e9 }' \
  "$work/running.log" | sort
grep -E '^ksim experiment: experiment|^  (assert|demo:)' "$work/experiment.out" || true
echo "experiment: ok: $runs runs at once on $node_name in ${took}s; nothing left behind"
