#!/usr/bin/env bash
# The real node's check: applies the ksim services' kustomizations (deploy/<service>) to the
# cluster join.sh joined this machine to, waits until each service's pod is Running and Ready on
# the real node, prints how long each took, and removes everything it applied. Run by hand (as
# root, with `ksim up` running and the node joined); exits non-zero with one line saying what
# did not happen.
#
#   deploy/real-node/check.sh [SERVICE...]     SERVICE: vnode tracer cloudprov driver (default: all)
#
# Environment:
#   KSIM_REAL_NODE_CHECK_NAMESPACE   where the services go (default: ksim-check)
#   KSIM_REAL_NODE_CHECK_TIMEOUT     seconds to wait for all pods to be Ready (default: 300)
#
# Each kustomization is applied unchanged through an overlay that only sets the namespace: `ksim
# up` runs its own pool, provider and driver in ksim-system (the driver's Lease, the seat
# Deployments), and removing what the check applied must not delete that namespace under them.
# The check also provides what this cluster lacks and a real one would have: the namespace's
# kube-root-ca.crt ConfigMap (`ksim up` turns the root-CA publisher off), a PersistentVolume
# for the tracer's claim (there is no provisioner) and the provider's TLS Secret
# (deploy/cloudprov/README.md's recipe).
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

all_services=(vnode tracer cloudprov driver)
services=("$@")
[[ ${#services[@]} -gt 0 ]] || services=("${all_services[@]}")
for service in "${services[@]}"; do
  [[ " ${all_services[*]} " == *" $service "* ]] ||
    die "unknown service $service; services: ${all_services[*]}"
done
namespace=${KSIM_REAL_NODE_CHECK_NAMESPACE:-ksim-check}
timeout=${KSIM_REAL_NODE_CHECK_TIMEOUT:-300}
[[ $namespace != ksim-system ]] || die "ksim-system belongs to \`ksim up\`; choose another namespace"

fail() { echo "check: FAILED: $*" >&2; exit 1; }

use_joined_node
[[ -z $(k get node "$node_name" -o jsonpath='{.spec.taints}') ]] || fail "node $node_name is tainted"
for service in "${services[@]}"; do
  image=docker.io/ksim/ksim-$service:dev
  ctr_k8s images ls -q | grep -qx "$image" ||
    fail "$image is not loaded in the node's containerd (deploy/images/build.sh, then join.sh)"
done

work=$(mktemp -d)
volume=$run_dir/volumes/ksim-tracer-data
applied=()
cleanup() {
  local status=$? i
  log "removing what the check applied"
  for ((i = ${#applied[@]} - 1; i >= 0; i--)); do
    k delete -k "$work/${applied[i]}" --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 ||
      log "warning: deleting ${applied[i]} did not finish"
  done
  k delete namespace "$namespace" --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
  k delete persistentvolume "$namespace-ksim-tracer-data" --ignore-not-found >/dev/null 2>&1 || true
  rm -rf "$work" "$volume"
  exit "$status"
}
trap cleanup EXIT

# --- what the cluster lacks -------------------------------------------------------------------
k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: { name: $namespace }
YAML
if ! k get configmap kube-root-ca.crt -n "$namespace" >/dev/null 2>&1; then
  # The control plane's CA, as join.sh copied it (`ksim up`'s kubeconfig names a file).
  k create configmap kube-root-ca.crt -n "$namespace" --from-file=ca.crt="$run_dir/pki/ca.crt" >/dev/null
fi
if [[ " ${services[*]} " == *" tracer "* ]]; then
  # hostPath volumes get no fsGroup: the directory is made the tracer's (user 65532) instead.
  mkdir -p "$volume"
  chown 65532:65532 "$volume"
  k apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: { name: $namespace-ksim-tracer-data }
spec:
  capacity: { storage: 12Gi }
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: { namespace: $namespace, name: ksim-tracer-data }
  hostPath: { path: $volume, type: Directory }
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - { key: kubernetes.io/hostname, operator: In, values: [$node_name] }
YAML
fi
if [[ " ${services[*]} " == *" cloudprov "* ]]; then
  (
    cd "$work"
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ksim-ca -keyout ca.key -out tls-ca.crt
    openssl req -newkey rsa:2048 -nodes -subj /CN=ksim-cloudprov -keyout server.key -out server.csr
    openssl x509 -req -in server.csr -CA tls-ca.crt -CAkey ca.key -days 1 -out server.crt \
      -extfile <(printf 'subjectAltName=DNS:ksim-cloudprov.%s.svc\nextendedKeyUsage=serverAuth' "$namespace")
  ) >/dev/null 2>&1
  k create secret generic ksim-cloudprov-tls -n "$namespace" --from-file=tls.crt="$work/server.crt" \
    --from-file=tls.key="$work/server.key" --from-file=ca.crt="$work/tls-ca.crt" >/dev/null
fi

# --- apply ------------------------------------------------------------------------------------
started=$(date +%s)
for service in "${services[@]}"; do
  mkdir -p "$work/$service"
  cat >"$work/$service/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $namespace
resources:
  - $(realpath --relative-to="$work/$service" "$repo/deploy/$service")
YAML
  log "kubectl apply -k deploy/$service (namespace $namespace)"
  k apply -k "$work/$service" >/dev/null
  applied+=("$service")
done

# --- wait -------------------------------------------------------------------------------------
# pod_state SERVICE: "ok NAME" once its pod is Running and Ready on the real node, else a line
# saying where it is.
pod_state() {
  local json
  json=$(k get pods -n "$namespace" -l "app.kubernetes.io/name=ksim-$1" -o json)
  jq -r --arg node "$node_name" '
    if (.items | length) == 0 then "no pod yet"
    else .items[0] as $p
      | ($p.status.conditions // [] | map(select(.type == "Ready"))[0].status) as $ready
      | if $p.status.phase == "Running" and $ready == "True" and $p.spec.nodeName == $node
        then "ok \($p.metadata.name)"
        else "pod \($p.metadata.name) on node \($p.spec.nodeName // "none") is \($p.status.phase)"
          + ([$p.status.containerStatuses[]?.state.waiting | select(.) | ": \(.reason) \(.message // "")"] | join(""))
          + ([$p.status.containerStatuses[]? | select(.ready == false and .state.running) | ": running, not ready (restarts \(.restartCount))"] | join(""))
          + ([$p.status.conditions[]? | select(.type == "PodScheduled" and .status == "False") | ": \(.message)"] | join(""))
        end
    end' <<<"$json"
}
deadline=$((started + timeout))
pending=("${services[@]}")
while [[ ${#pending[@]} -gt 0 ]]; do
  still=()
  for service in "${pending[@]}"; do
    state=$(pod_state "$service")
    if [[ $state == ok* ]]; then
      log "ksim-$service: ${state#ok } Running and Ready on $node_name after $(($(date +%s) - started)) s"
    else
      still+=("$service")
    fi
  done
  pending=("${still[@]+"${still[@]}"}")
  [[ ${#pending[@]} -gt 0 ]] || break
  if (($(date +%s) >= deadline)); then
    service=${pending[0]}
    # The last lines the failing pod's containers wrote (the kubelet's own files: `kubectl logs`
    # would need the apiserver to hold a kubelet client certificate, which `ksim up`'s does not).
    for file in $(ls -t "$run_dir/pod-logs/${namespace}_ksim-${service}-"*/*/*.log 2>/dev/null | head -2); do
      echo "--- $file" >&2
      tail -5 "$file" >&2
    done
    fail "ksim-$service not Running and Ready on $node_name after $timeout s: $(pod_state "$service" | tr '\n' ' ')(pod logs: $run_dir/pod-logs/${namespace}_*)"
  fi
  sleep 2
done

echo "check: ok: ${services[*]} Running and Ready on $node_name in $(($(date +%s) - started)) s"
# From the API: each pod's node, address, and its creation to Ready.
k get pods -n "$namespace" -o json | jq -r '
  .items[] | [.metadata.name, .spec.nodeName, .status.podIP,
    "ready \((.status.conditions[] | select(.type == "Ready") | .lastTransitionTime | fromdate)
            - (.metadata.creationTimestamp | fromdate)) s after creation",
    "restarts \([.status.containerStatuses[].restartCount] | add)"] | join("  ")'
