# Shared by join.sh, check.sh and teardown.sh: where the real node keeps everything it starts,
# and how to reach `ksim up`'s control plane. Source it; it defines variables and functions only.

real_node_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$real_node_here/../.." && pwd)

# Everything the node writes (configs, certificates, containerd's and the kubelet's roots, logs,
# pid files) lives under one directory, so teardown.sh knows what to remove and nothing of the
# host's own /var/lib/kubelet, /etc/cni or /run/containerd is touched.
run_dir=${KSIM_REAL_NODE_DIR:-/var/lib/ksim-real-node}
node_name=${KSIM_REAL_NODE_NAME:-ksim-real-node}
# The pods' addresses: the CNI bridge's subnet, also kube-proxy's clusterCIDR.
pod_cidr=${KSIM_REAL_NODE_POD_CIDR:-10.244.0.0/24}
bridge=ksim-cni0
containerd_sock=$run_dir/containerd/containerd.sock
pid_dir=$run_dir/pids
log_dir=$run_dir/logs
# The kernel settings the kubelet and kube-proxy may change, saved by join.sh and restored by
# teardown.sh (the kubelet sets kernel.panic_on_oops=1, among others, on every start).
saved_sysctls=(
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
)

log_prefix=real-node
# shellcheck source=../lib/log.sh
source "$real_node_here/../lib/log.sh"

ctr_k8s() { ctr --address "$containerd_sock" --namespace k8s.io "$@"; }

# The state directory `ksim up` writes env.json into (services/ksim/src/env/state.rs).
ksim_state_dir() {
  if [[ -n ${KSIM_STATE_DIR:-} ]]; then echo "$KSIM_STATE_DIR"
  elif [[ -n ${XDG_STATE_HOME:-} ]]; then echo "$XDG_STATE_HOME/ksim"
  else echo "$HOME/.local/state/ksim"; fi
}

# The admin kubeconfig of the running `ksim up` (the one it prints), or nothing.
ksim_kubeconfig() {
  local env_json
  env_json=$(ksim_state_dir)/env.json
  [[ -f $env_json ]] || return 1
  local pid
  pid=$(jq -r .pid "$env_json")
  [[ -d /proc/$pid ]] || return 1
  jq -r .kubeconfig "$env_json"
}

# The kubectl built with the control plane (cached; prints its directory at once when built).
kubectl_bin() {
  echo "$("$repo/deploy/control-plane/build.sh")/kubectl"
}

# For the scripts that use a joined node (check.sh, experiment.sh): sets `kubeconfig` (the
# running `ksim up`'s admin one) and `kubectl`, defines `k` as kubectl on that cluster, and
# checks the node is registered and Ready; the caller's `fail` says what is missing.
use_joined_node() {
  kubeconfig=$(ksim_kubeconfig) || fail "no running \`ksim up\` (start it, then deploy/real-node/join.sh)"
  kubectl=$(kubectl_bin)
  k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
  local ready
  ready=$(k get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) ||
    fail "node $node_name is not registered (run deploy/real-node/join.sh)"
  [[ $ready == True ]] || fail "node $node_name is not Ready"
}

# start NAME COMMAND...: runs COMMAND in the background, its output in logs/NAME.log and its
# pid in pids/NAME.pid. `nohup` and the command exec in place, so $! is the process itself.
start() {
  local name=$1
  shift
  realpath "$(command -v "$1")" >"$pid_dir/$name.exe"
  nohup "$@" >"$log_dir/$name.log" 2>&1 </dev/null &
  echo $! >"$pid_dir/$name.pid"
}

# running NAME: the pid of NAME if pids/NAME.pid names a live process running the same
# executable it was started with (a reused pid is not ours).
running() {
  local file=$pid_dir/$1.pid pid exe
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ -d /proc/$pid ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ -f $pid_dir/$1.exe ]] && [[ $exe != "$(<"$pid_dir/$1.exe")" ]] && return 1
  echo "$pid"
}
