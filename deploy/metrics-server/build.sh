#!/usr/bin/env bash
# Builds metrics-server (sigs.k8s.io/metrics-server) from its Go module at the version pinned in
# versions.env, and caches it outside the repository.
#
#   deploy/metrics-server/build.sh            build (or reuse) and print the binary directory
#
# Environment:
#   KSIM_METRICS_SERVER_BIN_DIR  a directory that already holds `metrics-server`: used as is
#   KSIM_CACHE_DIR               cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# metrics-server's go.mod has no local replaces, so a wrapper module that requires it as a tool
# (`go get -tool`) builds it with exactly the dependency versions its release pins.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=$METRICS_SERVER_VERSION
package=sigs.k8s.io/metrics-server/cmd/metrics-server
binary=metrics-server

log_prefix=metrics-server
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

if [[ -n "${KSIM_METRICS_SERVER_BIN_DIR:-}" ]]; then
  [[ -x "$KSIM_METRICS_SERVER_BIN_DIR/$binary" ]] ||
    die "KSIM_METRICS_SERVER_BIN_DIR=$KSIM_METRICS_SERVER_BIN_DIR has no $binary binary"
  echo "$KSIM_METRICS_SERVER_BIN_DIR"
  exit 0
fi

has_binary() { [[ -x "$1/$binary" ]]; }
version_dir=$(ksim_cache_root)/metrics-server-$version
bin_dir=$version_dir/bin
reuse_or_lock "$version_dir" "$bin_dir" has_binary

use_shared_go_caches
export GOFLAGS=-mod=mod

started=$SECONDS
log "building metrics-server $version (a cold build takes a few minutes on 2 cores)"
wrapper=$version_dir/wrapper
rm -rf "$wrapper"
mkdir -p "$wrapper"
(cd "$wrapper" && go mod init ksim.local/metrics-server >&2 && go get -tool "$package@$version" >&2) ||
  die "could not make the wrapper module for metrics-server $version"

# Build into a scratch directory and move it into place, so an interrupted build never leaves
# a half-written binary where the next run would take it as built.
staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"
# The version stamp its Makefile sets, so `metrics-server --version` and its /version report
# the release rather than client-go's placeholder.
(cd "$wrapper" && go build -trimpath \
  -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$version" \
  -o "$staging_bin/$binary" "$package")
[[ -x "$staging_bin/$binary" ]] || die "go build finished without a $binary binary"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built metrics-server $version into $bin_dir in $((SECONDS - started)) s"
echo "$bin_dir"
