#!/usr/bin/env bash
# Joins this machine to the running `ksim up` control plane as a real, untainted node: containerd
# (runc, cgroupfs) with a private config and state, a CNI bridge, kube-proxy in iptables mode and
# a kubelet, all built from or matching the pinned Kubernetes version, so that
# `kubectl apply -k deploy/<service>` runs the ksim services as pods (check.sh does).
#
#   deploy/real-node/join.sh [--images DIR]     start the node; returns once it is Ready
#   deploy/real-node/teardown.sh                stop it and remove everything it made
#
#   --images DIR   OCI archives to load into containerd (default: target/images, what
#                  deploy/images/build.sh writes); the pause image is built by pause.sh
#
# Needs root, `ksim up` running (its env.json names the kubeconfig; the CA key beside it signs
# the node's and kube-proxy's client certificates), and the Debian packages containerd, runc,
# containernetworking-plugins, iptables, socat, openssl, jq and gcc. Everything goes under
# KSIM_REAL_NODE_DIR (default /var/lib/ksim-real-node); see docs/real-node.md.
set -euo pipefail

# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

images_dir=$repo/target/images
while [[ $# -gt 0 ]]; do
  case $1 in
    --images) images_dir=${2:?--images needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

[[ $EUID -eq 0 ]] || die "run as root: the kubelet, containerd and kube-proxy need it"
for tool in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables socat openssl jq gcc; do
  command -v "$tool" >/dev/null ||
    die "$tool is not on PATH (apt-get install containerd runc containernetworking-plugins iptables socat openssl jq gcc)"
done
cni_bin=/usr/lib/cni
[[ -x $cni_bin/bridge && -x $cni_bin/host-local && -x $cni_bin/loopback ]] ||
  die "no CNI plugins in $cni_bin (apt-get install containernetworking-plugins)"
for name in containerd kubelet kube-proxy apiserver-forward; do
  pid=$(running "$name") && die "$name already runs (pid $pid); run deploy/real-node/teardown.sh first"
done

kubeconfig=$(ksim_kubeconfig) || die "no running \`ksim up\` found in $(ksim_state_dir)/env.json; start it first"
pki=$(dirname "$kubeconfig")/pki
[[ -f $pki/ca.key ]] ||
  die "$pki/ca.key is missing: join.sh needs \`ksim up\`'s embedded control plane (its CA signs the node's certificate)"
kubectl=$(kubectl_bin)
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
server=$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')
k get --raw /readyz >/dev/null || die "the apiserver at $server does not answer /readyz"

node_bin=$("$real_node_here/build.sh")
mapfile -t pause < <("$real_node_here/pause.sh")
pause_archive=${pause[0]}
pause_image=${pause[1]}

mkdir -p "$run_dir" "$pid_dir" "$log_dir" "$run_dir/pki"
echo "$node_bin" >"$run_dir/node-bin"
trap '[[ $? -eq 0 ]] || log "the node is partly started: deploy/real-node/teardown.sh removes it"' EXIT
chmod 700 "$run_dir"

# The kernel settings as they were before the node's first start, for teardown.sh.
if [[ ! -f $run_dir/sysctl.saved ]]; then
  for key in "${saved_sysctls[@]}"; do
    echo "$key=$(sysctl -n "$key")"
  done >"$run_dir/sysctl.saved"
fi

# --- identities: client certificates signed by the control plane's CA -----------------------
# The Node authorizer knows a kubelet as the user system:node:<name> in the group system:nodes;
# the bootstrap RBAC binds system:node-proxier to the user system:kube-proxy. (The CSR signing
# controllers a kubelet would bootstrap with are off in `ksim up`, so the CA signs directly.)
cp "$pki/ca.crt" "$run_dir/pki/ca.crt"
client_cert() { # NAME SUBJECT
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" \
    -keyout "$run_dir/pki/$1.key" -out "$run_dir/pki/$1.csr" 2>/dev/null
  openssl x509 -req -in "$run_dir/pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAserial "$run_dir/pki/ca.srl" -CAcreateserial -days 7 -out "$run_dir/pki/$1.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth') 2>/dev/null
  "$kubectl" config set-cluster ksim --server="$server" --certificate-authority="$run_dir/pki/ca.crt" \
    --embed-certs --kubeconfig="$run_dir/$1.kubeconfig" >/dev/null
  "$kubectl" config set-credentials "$1" --client-certificate="$run_dir/pki/$1.crt" \
    --client-key="$run_dir/pki/$1.key" --embed-certs --kubeconfig="$run_dir/$1.kubeconfig" >/dev/null
  "$kubectl" config set-context default --cluster=ksim --user="$1" \
    --kubeconfig="$run_dir/$1.kubeconfig" >/dev/null
  "$kubectl" config use-context default --kubeconfig="$run_dir/$1.kubeconfig" >/dev/null
}
client_cert kubelet "/O=system:nodes/CN=system:node:$node_name"
client_cert kube-proxy "/CN=system:kube-proxy"

# --- the kubernetes Service's endpoint -------------------------------------------------------
# Pods reach the apiserver at the kubernetes Service's ClusterIP, which kube-proxy translates to
# the address the apiserver advertises (this machine's first non-loopback address). `ksim up`'s
# apiserver listens on 127.0.0.1 only, so a forwarder on the advertised address and port passes
# those connections to it: the Service, its EndpointSlice and kube-proxy stay as in any cluster.
endpoint_ip=$(k get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
  -o jsonpath='{.items[0].endpoints[0].addresses[0]}')
endpoint_port=$(k get endpointslices -n default -l kubernetes.io/service-name=kubernetes \
  -o jsonpath='{.items[0].ports[0].port}')
[[ -n $endpoint_ip && -n $endpoint_port ]] || die "the kubernetes Service has no endpoint"
start apiserver-forward socat "TCP-LISTEN:$endpoint_port,bind=$endpoint_ip,fork,reuseaddr" \
  "TCP:127.0.0.1:${server##*:}"
node_ip=$endpoint_ip

# --- containerd -------------------------------------------------------------------------------
mkdir -p "$run_dir/containerd" "$run_dir/cni/net.d" "$run_dir/cni/ipam" "$run_dir/pod-logs"
cat >"$run_dir/containerd/config.toml" <<TOML
# containerd for the ksim real node: its own socket, root and state, nothing of /run/containerd.
version = 2
root = "$run_dir/containerd/root"
state = "$run_dir/containerd/state"
[grpc]
  address = "$containerd_sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$run_dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # Built here by pause.sh: there is no registry to pull registry.k8s.io/pause from.
  sandbox_image = "$pause_image"
  # The pods' network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  # Root here lacks CAP_SYS_RESOURCE (CapEff 000001fffeffffff), so the sandboxes' oom_score_adj
  # of -998 cannot be written and runc fails with "can't get final child's PID from pipe: EOF";
  # this keeps every score at or above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$run_dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # The VM's cgroups are v1 (hybrid) and nothing runs systemd: cgroupfs, as the kubelet.
        SystemdCgroup = false
        Root = "$run_dir/containerd/runc"
TOML
# Host directories the node writes to whatever its configuration: containerd 1.6 puts the shims'
# sockets in /run/containerd/s, CNI caches results in /var/lib/cni, the kubelet links container
# logs in /var/log/containers. teardown.sh removes what the node put there, and each directory
# itself if it was not there before.
for dir in /run/containerd /var/lib/cni /var/log/containers; do
  [[ -e $dir ]] || echo "$dir"
done >>"$run_dir/created-host-dirs"
start containerd containerd --config "$run_dir/containerd/config.toml"
for _ in $(seq 50); do
  ctr --address "$containerd_sock" version >/dev/null 2>&1 && break
  running containerd >/dev/null || die "containerd exited: $(tail -3 "$log_dir/containerd.log")"
  sleep 0.2
done
ctr --address "$containerd_sock" version >/dev/null || die "containerd does not answer on $containerd_sock"

# --- images ------------------------------------------------------------------------------------
# Kubernetes names `ksim/ksim-vnode:dev` docker.io/ksim/ksim-vnode:dev; the archives carry the
# short name, so each image is tagged with the full one as well. Tag `dev` is not `latest`, so
# the pods' pull policy is IfNotPresent and nothing is pulled.
ctr_k8s images import "$pause_archive" >/dev/null
shopt -s nullglob
archives=("$images_dir"/*.oci.tar)
shopt -u nullglob
[[ ${#archives[@]} -gt 0 ]] ||
  log "warning: no OCI archives in $images_dir (run deploy/images/build.sh); only the pause image is loaded"
for archive in "${archives[@]}"; do
  ref=$(tar -xOf "$archive" index.json | jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]')
  ctr_k8s images import "$archive" >/dev/null
  if ! ctr_k8s images ls -q | grep -qx "docker.io/$ref"; then
    imported=$(ctr_k8s images ls -q | grep -E "(^|/)${ref}\$" | head -1)
    [[ -n $imported ]] || die "importing $archive gave no image named $ref"
    ctr_k8s images tag "$imported" "docker.io/$ref" >/dev/null
  fi
  log "loaded docker.io/$ref"
done

# --- CNI: a bridge with host-local addresses ----------------------------------------------------
# hairpinMode lets a pod reach itself through a Service; no masquerade, the pods only need this
# machine (the apiserver, each other).
cat >"$run_dir/cni/net.d/10-ksim.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "ksim-real-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$run_dir/cni/ipam",
        "ranges": [[{ "subnet": "$pod_cidr" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
JSON

# --- kubelet ------------------------------------------------------------------------------------
mkdir -p "$run_dir/kubelet"
cat >"$run_dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$containerd_sock
# The VM has hybrid cgroups (v1 controllers, v2 unused) and no systemd: cgroupfs, and since
# 1.35 the kubelet refuses cgroup v1 unless told not to.
cgroupDriver: cgroupfs
failCgroupV1: false
# No swap here; said anyway so a host with swap still runs the node.
failSwapOn: false
podLogsDir: $run_dir/pod-logs
# Served on the node's address only; requests are authenticated with the control plane's CA
# and authorized by the apiserver (no anonymous access, no read-only port).
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $run_dir/pki/ca.crt }
authorization:
  mode: Webhook
# The disk is shared with builds: evict only when it is really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
  nodefs.inodesFree: 2%
# Images are loaded from archives and cannot be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
start kubelet "$node_bin/kubelet" --config="$run_dir/kubelet/config.yaml" \
  --kubeconfig="$run_dir/kubelet.kubeconfig" --root-dir="$run_dir/kubelet" \
  --hostname-override="$node_name" --node-ip="$node_ip" --v=2

# --- kube-proxy ---------------------------------------------------------------------------------
mkdir -p "$run_dir/kube-proxy"
cat >"$run_dir/kube-proxy/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $run_dir/kube-proxy.kubeconfig
hostnameOverride: $node_name
clusterCIDR: $pod_cidr
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
iptables:
  # Otherwise kube-proxy sets net.ipv4.conf.all.route_localnet=1 for NodePorts on 127.0.0.1.
  localhostNodePorts: false
# 0: leave the host's conntrack table size and timeouts as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
YAML
# After the kubelet has registered the Node: kube-proxy reads the node's addresses from it.
for _ in $(seq 60); do
  k get node "$node_name" >/dev/null 2>&1 && break
  running kubelet >/dev/null || die "kubelet exited: $(tail -5 "$log_dir/kubelet.log")"
  sleep 1
done
k get node "$node_name" >/dev/null 2>&1 || die "the kubelet did not register node $node_name in 60 s (see $log_dir/kubelet.log)"
start kube-proxy "$node_bin/kube-proxy" --config="$run_dir/kube-proxy/config.yaml" --v=2

log "waiting for node $node_name to be Ready"
for _ in $(seq 120); do
  for name in containerd kubelet kube-proxy apiserver-forward; do
    running "$name" >/dev/null || die "$name exited: $(tail -5 "$log_dir/$name.log")"
  done
  ready=$(k get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
  [[ $ready == True ]] && break
  sleep 1
done
[[ $ready == True ]] || die "node $node_name is not Ready after 120 s (see $log_dir/kubelet.log)"
taints=$(k get node "$node_name" -o jsonpath='{.spec.taints}')
[[ -z $taints ]] || die "node $node_name is Ready but tainted: $taints"
log "node $node_name is Ready and untainted"
for name in containerd kube-proxy kubelet apiserver-forward; do
  printf '  %-18s pid %s  log %s\n' "$name" "$(running "$name")" "$log_dir/$name.log"
done
echo "  export KUBECONFIG=$kubeconfig"
echo "  check:    deploy/real-node/check.sh"
echo "  teardown: deploy/real-node/teardown.sh"
