#!/usr/bin/env bash
# Installs KWOK (sigs.k8s.io/kwok), the benchmark peer of ksim's virtual node pool, from the
# Go module proxy at the version pinned below, and caches it outside the repository.
#
#   deploy/kwok/install.sh        install (or reuse) and print the directory holding `kwok`
#
# Environment:
#   KSIM_KWOK_BIN_DIR  a directory that already holds a `kwok` binary: used as is
#   KSIM_CACHE_DIR     cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# Only the directory is printed on stdout; progress goes to stderr.
set -euo pipefail
# shellcheck source=../lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cache.sh"

# v0.8.0 is the newest release; its go.mod says `go 1.26.0`, which Go 1.26 accepts with
# GOTOOLCHAIN=local. (v0.7.0 needs only Go 1.24 if an older toolchain must be used.)
KWOK_VERSION=v0.8.0

log_prefix=kwok
# shellcheck source=../lib/log.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/log.sh"

if [[ -n "${KSIM_KWOK_BIN_DIR:-}" ]]; then
  [[ -x "$KSIM_KWOK_BIN_DIR/kwok" ]] || die "KSIM_KWOK_BIN_DIR=$KSIM_KWOK_BIN_DIR has no kwok binary"
  echo "$KSIM_KWOK_BIN_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/kwok-$KWOK_VERSION
bin_dir=$version_dir/bin
if [[ -x "$bin_dir/kwok" ]]; then
  echo "$bin_dir"
  exit 0
fi

lock_cache_dir "$version_dir"
if [[ -x "$bin_dir/kwok" ]]; then
  echo "$bin_dir"
  exit 0
fi

use_shared_go_caches
# `go install pkg@version` runs outside any module; a -mod flag inherited from the caller would break it.
unset GOFLAGS

log "installing sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION (a cold build takes a few minutes)"
# Install into a scratch directory and move it into place, so an interrupted build never
# leaves a half-written binary where the next run would take it as installed.
staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"
GOBIN=$staging_bin go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
[[ -x "$staging_bin/kwok" ]] || die "go install finished without a kwok binary"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "installed KWOK $KWOK_VERSION into $bin_dir"
echo "$bin_dir"
