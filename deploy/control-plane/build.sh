#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from Go
# modules at the version pinned in versions.env, and caches them outside the repository.
#
#   deploy/control-plane/build.sh            build (or reuse) and print the binary directory
#
# Environment:
#   KSIM_CONTROL_PLANE_BIN_DIR  a directory that already holds the five binaries: used as is
#   KSIM_CACHE_DIR              cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# k8s.io/kubernetes cannot be `go install`ed, so they come from a wrapper module
# (deploy/lib/kubernetes.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
# shellcheck source=../lib/kubernetes.sh
source "$here/../lib/kubernetes.sh"
version=$KUBERNETES_VERSION
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

log_prefix=control-plane
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

has_all_binaries() {
  local dir=$1 b
  for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

if [[ -n "${KSIM_CONTROL_PLANE_BIN_DIR:-}" ]]; then
  has_all_binaries "$KSIM_CONTROL_PLANE_BIN_DIR" ||
    die "KSIM_CONTROL_PLANE_BIN_DIR=$KSIM_CONTROL_PLANE_BIN_DIR lacks one of: ${binaries[*]}"
  echo "$KSIM_CONTROL_PLANE_BIN_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/k8s-$version
bin_dir=$version_dir/bin
reuse_or_lock "$version_dir" "$bin_dir" has_all_binaries

use_shared_go_caches
export GOFLAGS=-mod=mod

log "building Kubernetes $version (a cold build takes 10-20 minutes on 2 cores)"
wrapper=$version_dir/wrapper
kubernetes_wrapper "$wrapper" ksim.local/control-plane "$version" \
  go.etcd.io/etcd/server/v3 \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl ||
  die "could not make the wrapper module for Kubernetes $version"
cd "$wrapper"

staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"
go build -trimpath -ldflags "$(kubernetes_ldflags "$version")" -o "$staging_bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o "$staging_bin/etcd" go.etcd.io/etcd/server/v3
has_all_binaries "$staging_bin" || die "build finished without all of: ${binaries[*]}"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built $version into $bin_dir"
echo "$bin_dir"
