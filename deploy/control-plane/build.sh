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
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with
# ./staging/src/..., so a wrapper module pins each staging module to its published v0.Y.Z.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=$KUBERNETES_VERSION
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

log() { echo "control-plane: $*" >&2; }
die() { log "error: $*"; exit 1; }

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

log "building Kubernetes $version (a cold build takes 10-20 minutes on 2 cores)"
upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f "$upstream_mod" ]] || die "could not download k8s.io/kubernetes@$version from the Go module proxy"

staging_version=v0.${version#v1.}
staging_modules=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$upstream_mod")
[[ -n "$staging_modules" ]] || die "no staging replaces found in $upstream_mod"
godebug_line=$(grep -E '^godebug ' "$upstream_mod" || true)
go_line=$(grep -E '^go ' "$upstream_mod")
etcd_version=$(sed -n 's#^[[:space:]]*go\.etcd\.io/etcd/server/v3 \(v[^[:space:]]*\).*#\1#p' "$upstream_mod")
[[ -n "$etcd_version" ]] || die "k8s.io/kubernetes@$version does not pin go.etcd.io/etcd/server/v3"

wrapper=$version_dir/wrapper
rm -rf "$wrapper"
mkdir -p "$wrapper"
{
  echo "module ksim.local/control-plane"
  echo
  echo "$go_line"
  [[ -n "$godebug_line" ]] && echo "$godebug_line"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $version"
  echo "	go.etcd.io/etcd/server/v3 $etcd_version"
  echo ")"
  echo
  echo "replace ("
  for module in $staging_modules; do echo "	$module => $module $staging_version"; done
  echo ")"
} >"$wrapper/go.mod"
cat >"$wrapper/tools.go" <<'GO'
//go:build tools

// Package tools only names the commands this module builds, so `go mod tidy` keeps their deps.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO

cd "$wrapper"
go mod tidy
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"

staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"
go build -trimpath -ldflags "$ldflags" -o "$staging_bin/" \
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
