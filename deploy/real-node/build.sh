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
# cached bin directory: a control-plane rebuild replaces that directory whole. The wrapper module
# is made exactly as deploy/control-plane/build.sh makes its own (k8s.io/kubernetes replaces its
# staging modules with ./staging/src/..., so each is pinned to its published v0.Y.Z), and the
# shared Go module and build caches mean a second build downloads and compiles only what the
# node binaries add.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../control-plane/versions.env
source "$here/../control-plane/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=$KUBERNETES_VERSION
binaries=(kubelet kube-proxy)

log() { echo "real-node: $*" >&2; }
die() { log "error: $*"; exit 1; }

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
upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[[ -f "$upstream_mod" ]] || die "could not download k8s.io/kubernetes@$version from the Go module proxy"

staging_version=v0.${version#v1.}
staging_modules=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$upstream_mod")
[[ -n "$staging_modules" ]] || die "no staging replaces found in $upstream_mod"
godebug_line=$(grep -E '^godebug ' "$upstream_mod" || true)
go_line=$(grep -E '^go ' "$upstream_mod")

wrapper=$version_dir/wrapper
rm -rf "$wrapper"
mkdir -p "$wrapper"
{
  echo "module ksim.local/real-node"
  echo
  echo "$go_line"
  [[ -n "$godebug_line" ]] && echo "$godebug_line"
  echo
  echo "require k8s.io/kubernetes $version"
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
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
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
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy
has_all_binaries "$staging_bin" || die "build finished without all of: ${binaries[*]}"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built $version into $bin_dir"
echo "$bin_dir"
