#!/usr/bin/env bash
# Builds kubelet and kube-proxy from the Kubernetes Go module, at the version the control plane
# is pinned to (deploy/control-plane/versions.env), and caches them outside the repository.
#
#   deploy/real-node/build.sh            build (or reuse) and print the binary directory
#
# Environment:
#   KSIM_NODE_BIN_DIR   a directory that already holds kubelet and kube-proxy: used as is
#   KSIM_CACHE_DIR      cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# Only the real node (join.sh) needs these, so they live beside, not in, the control plane's
# cached bin directory: a control-plane rebuild replaces that directory whole. Both build
# through the same wrapper module recipe (deploy/lib/kubernetes.sh), and the shared Go module
# and build caches mean a second build downloads and compiles only what the node binaries add.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../control-plane/versions.env
source "$here/../control-plane/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
# shellcheck source=../lib/kubernetes.sh
source "$here/../lib/kubernetes.sh"
version=$KUBERNETES_VERSION
binaries=(kubelet kube-proxy)

log_prefix=real-node
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

has_all_binaries() {
  local dir=$1 b
  for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${KSIM_NODE_BIN_DIR:-}" ]]; then
  has_all_binaries "$KSIM_NODE_BIN_DIR" ||
    die "KSIM_NODE_BIN_DIR=$KSIM_NODE_BIN_DIR lacks one of: ${binaries[*]}"
  echo "$KSIM_NODE_BIN_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/k8s-node-$version
bin_dir=$version_dir/bin
if has_all_binaries "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

lock_cache_dir "$version_dir"
if has_all_binaries "$bin_dir"; then
  echo "$bin_dir"
  exit 0
fi

use_shared_go_caches
export GOFLAGS=-mod=mod

log "building kubelet and kube-proxy $version (minutes on 2 cores; mostly cached after the control plane)"
wrapper=$version_dir/wrapper
kubernetes_wrapper "$wrapper" ksim.local/real-node "$version" \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy ||
  die "could not make the wrapper module for Kubernetes $version"
cd "$wrapper"

staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"
go build -trimpath -ldflags "$(kubernetes_ldflags "$version")" -o "$staging_bin/" \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy
has_all_binaries "$staging_bin" || die "build finished without all of: ${binaries[*]}"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built $version into $bin_dir"
echo "$bin_dir"
