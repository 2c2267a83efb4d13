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

# v0.8.0 is the newest release; its go.mod says `go 1.26.0`, which Go 1.26 accepts with
# GOTOOLCHAIN=local. (v0.7.0 needs only Go 1.24 if an older toolchain must be used.)
KWOK_VERSION=v0.8.0

log() { echo "kwok: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -n "${KSIM_KWOK_BIN_DIR:-}" ]]; then
  [[ -x "$KSIM_KWOK_BIN_DIR/kwok" ]] || die "KSIM_KWOK_BIN_DIR=$KSIM_KWOK_BIN_DIR has no kwok binary"
  echo "$KSIM_KWOK_BIN_DIR"
  exit 0
fi

cache_root=${KSIM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ksim}
version_dir=$cache_root/kwok-$KWOK_VERSION
bin_dir=$version_dir/bin
if [[ -x "$bin_dir/kwok" ]]; then
  echo "$bin_dir"
  exit 0
fi

command -v go >/dev/null || die "go is not on PATH; KWOK $KWOK_VERSION needs Go 1.26 or newer"
command -v flock >/dev/null || die "flock is not on PATH (util-linux)"
mkdir -p "$version_dir"
# Parallel runs may all ask for an install: one builds, the others wait and reuse it.
exec 9>"$version_dir/.lock"
flock 9
if [[ -x "$bin_dir/kwok" ]]; then
  echo "$bin_dir"
  exit 0
fi

# Go's caches are content-addressed, so they are shared with deploy/control-plane/build.sh.
export GOMODCACHE=$cache_root/go/mod
export GOCACHE=$cache_root/go/build
export GOTOOLCHAIN=local CGO_ENABLED=0
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
