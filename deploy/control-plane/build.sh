#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from Go
# modules at the version pinned in versions.env, and ksim-scheduler: kube-scheduler of the same
# version with ksim's explain layer (ksim-scheduler/, docs/explain.md); caches them outside
# the repository.
#
#   deploy/control-plane/build.sh            build (or reuse) and print the binary directory
#
# Environment:
#   KSIM_CONTROL_PLANE_BIN_DIR  a directory that already holds the six binaries: used as is
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
stock=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
binaries=("${stock[@]}" ksim-scheduler)
# ksim-scheduler is built again when its source changes: the cache remembers the source's hash.
source_hash=$(cd "$here/ksim-scheduler" && cat ./*.go | sha256sum | cut -c1-16)

log_prefix=control-plane
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

has_binaries() {
  local dir=$1 b
  shift
  for b in "$@"; do [[ -x "$dir/$b" ]] || return 1; done
}
has_all_binaries() {
  has_binaries "$1" "${binaries[@]}" && [[ $(cat "$1/ksim-scheduler.source" 2>/dev/null) == "$source_hash" ]]
}

if [[ -n "${KSIM_CONTROL_PLANE_BIN_DIR:-}" ]]; then
  has_binaries "$KSIM_CONTROL_PLANE_BIN_DIR" "${binaries[@]}" ||
    die "KSIM_CONTROL_PLANE_BIN_DIR=$KSIM_CONTROL_PLANE_BIN_DIR lacks one of: ${binaries[*]}"
  echo "$KSIM_CONTROL_PLANE_BIN_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/k8s-$version
bin_dir=$version_dir/bin
reuse_or_lock "$version_dir" "$bin_dir" has_all_binaries

use_shared_go_caches
export GOFLAGS=-mod=mod

wrapper=$version_dir/wrapper
if ! has_binaries "$bin_dir" "${stock[@]}"; then
  log "building Kubernetes $version (a cold build takes 10-20 minutes on 2 cores)"
  kubernetes_wrapper "$wrapper" ksim.local/control-plane "$version" \
    go.etcd.io/etcd/server/v3 \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl ||
    die "could not make the wrapper module for Kubernetes $version"

  staging_bin=$version_dir/bin.partial
  rm -rf "$staging_bin"
  mkdir -p "$staging_bin"
  (
    cd "$wrapper"
    go build -trimpath -ldflags "$(kubernetes_ldflags "$version")" -o "$staging_bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl
    go build -trimpath -ldflags "-s -w" -o "$staging_bin/etcd" go.etcd.io/etcd/server/v3
  )
  has_binaries "$staging_bin" "${stock[@]}" || die "build finished without all of: ${stock[*]}"
  rm -rf "$bin_dir"
  mv "$staging_bin" "$bin_dir"
fi

# ksim-scheduler: its package in a wrapper module of its own (the stock one is tidied for the
# stock commands), next to the stock binaries, replaced whole.
log "building ksim-scheduler for Kubernetes $version"
scheduler_wrapper=$version_dir/ksim-scheduler-wrapper
kubernetes_wrapper "$scheduler_wrapper" ksim.local/ksim-scheduler "$version" \
  k8s.io/kubernetes/cmd/kube-scheduler ||
  die "could not make the wrapper module for ksim-scheduler"
mkdir -p "$scheduler_wrapper/cmd/ksim-scheduler"
cp "$here"/ksim-scheduler/*.go "$scheduler_wrapper/cmd/ksim-scheduler/"
(
  cd "$scheduler_wrapper"
  go mod tidy
  go build -trimpath -ldflags "$(kubernetes_ldflags "$version")" \
    -o "$bin_dir/ksim-scheduler.partial" ./cmd/ksim-scheduler
)
mv "$bin_dir/ksim-scheduler.partial" "$bin_dir/ksim-scheduler"
echo "$source_hash" >"$bin_dir/ksim-scheduler.source"
has_all_binaries "$bin_dir" || die "build finished without all of: ${binaries[*]}"
log "built $version into $bin_dir"
echo "$bin_dir"
