#!/usr/bin/env bash
# Stops the real node join.sh started and removes everything it made: its pods and their
# sandboxes, the kubelet, kube-proxy, containerd and its shims, the apiserver forwarder (each by
# its pid file), the mounts under the run directory, the KUBE-* iptables chains, the CNI bridge and
# veths, the kubelet's cgroups, the Node object, and the kernel settings the kubelet changed.
#
#   deploy/real-node/teardown.sh [--keep-logs DIR]
#
#   --keep-logs DIR   copy the node's logs (containerd, kubelet, kube-proxy, pods) to DIR first
#
# Safe to run twice, and without `ksim up` (the API steps are then skipped).
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

keep_logs=
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep-logs) keep_logs=${2:?--keep-logs needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ $EUID -eq 0 ]] || die "run as root"

# stop NAME [SECONDS]: SIGTERM to the pid in pids/NAME.pid, SIGKILL after SECONDS (default 10).
stop() {
  local name=$1 wait=${2:-10} pid
  pid=$(running "$name") || return 0
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((wait * 5))); do
    [[ -d /proc/$pid ]] || return 0
    sleep 0.2
  done
  log "$name (pid $pid) did not stop in ${wait} s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# --- pods, through the API while the kubelet still runs -----------------------------------------
# Deleting them lets the kubelet stop each sandbox the proper way (CNI DEL releases its address
# and veth). Cordoned first, so that their controllers' replacements do not land here again.
api=
if kubeconfig=$(ksim_kubeconfig) && kubectl=$(kubectl_bin) &&
  "$kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
  api=1
fi
k() { "$kubectl" --kubeconfig "$kubeconfig" --request-timeout=10s "$@"; }
if [[ -n $api ]] && k get node "$node_name" >/dev/null 2>&1; then
  k cordon "$node_name" >/dev/null || true
  if running kubelet >/dev/null; then
    log "deleting the pods on $node_name"
    k delete pods -A --field-selector "spec.nodeName=$node_name" --grace-period=5 --wait=false \
      >/dev/null 2>&1 || true
    for _ in $(seq 60); do
      [[ -z $(k get pods -A --field-selector "spec.nodeName=$node_name" -o name 2>/dev/null) ]] && break
      sleep 1
    done
  fi
fi

stop kubelet 20

# --- whatever the kubelet left to containerd ----------------------------------------------------
if running containerd >/dev/null; then
  for task in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks kill --signal SIGKILL "$task" >/dev/null 2>&1 || true
  done
  sleep 1
  for task in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks delete --force "$task" >/dev/null 2>&1 || true
  done
  for container in $(ctr_k8s containers ls -q 2>/dev/null); do
    ctr_k8s containers delete "$container" >/dev/null 2>&1 || true
  done
fi
stop containerd 20
# Shims outlive containerd by design; these are ours because they name our socket.
for pid in $(pgrep -f -- "-address $containerd_sock" || true); do
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */containerd-shim-runc-v2 ]] || continue
  log "stopping containerd-shim-runc-v2 (pid $pid)"
  kill -KILL "$pid" 2>/dev/null || true
done
# A container process left without its shim is still in the kubelet's cgroups: end those too.
for procs in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods; do
  [[ -d $procs ]] || continue
  for pid in $(find "$procs" -name cgroup.procs -exec cat {} + 2>/dev/null); do
    log "killing pod process $pid ($(cat "/proc/$pid/comm" 2>/dev/null))"
    kill -KILL "$pid" 2>/dev/null || true
  done
done

stop kube-proxy
stop apiserver-forward

# --- iptables: every KUBE-* chain, in every table, v4 and v6 ------------------------------------
# kube-proxy's own cleanup first (iptables, and nftables where `nft` exists), then the rest.
node_bin=$(cat "$run_dir/node-bin" 2>/dev/null || true)
if [[ -n $node_bin && -x $node_bin/kube-proxy ]]; then
  "$node_bin/kube-proxy" --cleanup >"$log_dir/kube-proxy-cleanup.log" 2>&1 || true
fi
for cmd in iptables ip6tables; do
  command -v "$cmd" >/dev/null || continue
  for table in filter nat mangle raw; do
    rules=$("$cmd" -t "$table" -S 2>/dev/null) || continue
    # The jumps into KUBE-* chains from the built-in ones, then the chains themselves.
    while read -r rule; do
      [[ -n $rule ]] || continue
      eval "\"\$cmd\" -t \"\$table\" ${rule/#-A/-D}" 2>/dev/null || true
    done < <(grep -E '^-A ' <<<"$rules" | grep -vE '^-A KUBE-' | grep -E -- '-j KUBE-' || true)
    chains=$(sed -n 's/^-N \(KUBE-[^ ]*\)$/\1/p' <<<"$rules")
    for chain in $chains; do "$cmd" -t "$table" -F "$chain" 2>/dev/null || true; done
    for chain in $chains; do "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; done
  done
done

# --- mounts, network, cgroups -------------------------------------------------------------------
if [[ -d $run_dir ]]; then
  # Deepest first: pod volumes, the sandboxes' netns bind mounts, overlay rootfs, shm.
  while read -r mount; do
    umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || log "could not unmount $mount"
  done < <(awk -v dir="$run_dir" '$5 == dir || index($5, dir "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
fi
for veth in $(ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
  ip link delete "$veth" 2>/dev/null || true
done
ip link delete "$bridge" 2>/dev/null || true
# The node's entries in the host directories it cannot be kept out of (see join.sh).
find /var/log/containers -maxdepth 1 -type l -lname "$run_dir/*" -delete 2>/dev/null || true
rm -f /var/lib/cni/results/ksim-real-node-* 2>/dev/null || true
if [[ -f $run_dir/created-host-dirs ]]; then
  while read -r dir; do
    [[ -d $dir ]] || continue
    find "$dir" -depth -type d -empty -delete
    [[ -d $dir ]] && log "$dir is not empty; left in place"
  done < <(sort -u "$run_dir/created-host-dirs")
fi
for hierarchy in /sys/fs/cgroup/*/; do
  [[ -d ${hierarchy}kubepods ]] || continue
  find "${hierarchy}kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  [[ -d ${hierarchy}kubepods ]] && log "could not remove ${hierarchy}kubepods"
done

if [[ -f $run_dir/sysctl.saved ]]; then
  while IFS= read -r setting; do
    sysctl -q -w "$setting" >/dev/null 2>&1 || log "could not restore $setting"
  done <"$run_dir/sysctl.saved"
fi

if [[ -n $api ]]; then
  k delete node "$node_name" --ignore-not-found >/dev/null 2>&1 || true
fi

if [[ -n $keep_logs && -d $log_dir ]]; then
  mkdir -p "$keep_logs"
  cp -r "$log_dir/." "$keep_logs/"
  [[ -d $run_dir/pod-logs ]] && cp -r "$run_dir/pod-logs" "$keep_logs/"
  log "logs kept in $keep_logs"
fi
if [[ -d $run_dir ]]; then
  if awk -v dir="$run_dir" 'index($5, dir "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    die "mounts remain under $run_dir; not removing it"
  fi
  rm -rf "$run_dir"
fi
log "the real node is gone"
