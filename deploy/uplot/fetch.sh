#!/usr/bin/env bash
# Fetches uPlot, the charting library `ksim report --html` puts inline in its pages, at the
# version pinned in versions.env, checks its package against the pinned integrity hash, and
# caches the script, the stylesheet and the licence outside the repository.
#
#   deploy/uplot/fetch.sh            fetch (or reuse) and print the directory holding them
#
# Environment:
#   KSIM_UPLOT_DIR   a directory that already holds uPlot.iife.min.js and uPlot.min.css: used as is
#   KSIM_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# Needs npm (the npm registry) and flock.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
files=(uPlot.iife.min.js uPlot.min.css LICENSE)

log_prefix=uplot
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

has_files() {
  local f
  for f in "${files[@]}"; do [[ -f "$1/$f" ]] || return 1; done
}

if [[ -n "${KSIM_UPLOT_DIR:-}" ]]; then
  has_files "$KSIM_UPLOT_DIR" || die "KSIM_UPLOT_DIR=$KSIM_UPLOT_DIR lacks one of: ${files[*]}"
  echo "$KSIM_UPLOT_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/uplot-$UPLOT_VERSION
dir=$version_dir/dist
if has_files "$dir"; then
  echo "$dir"
  exit 0
fi
command -v npm >/dev/null || die "npm is not on PATH (apt-get install npm, or Node's installer)"
mkdir -p "$version_dir"
exec 9>"$version_dir/.lock"
flock 9
if has_files "$dir"; then
  echo "$dir"
  exit 0
fi

log "fetching uPlot $UPLOT_VERSION from the npm registry"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$(cd "$work" && npm pack --silent "uplot@$UPLOT_VERSION" 2>/dev/null | tail -1)
[[ -f $work/$tarball ]] || die "npm pack uplot@$UPLOT_VERSION wrote no package"
integrity="sha512-$(openssl dgst -sha512 -binary "$work/$tarball" | base64 -w0)"
[[ $integrity == "$UPLOT_INTEGRITY" ]] ||
  die "uplot@$UPLOT_VERSION's package does not match versions.env's integrity ($integrity)"
tar -xzf "$work/$tarball" -C "$work"
staging=$version_dir/dist.partial
rm -rf "$staging"
mkdir -p "$staging"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" \
  "$work/package/LICENSE" "$staging/"
has_files "$staging" || die "uplot@$UPLOT_VERSION's package lacks one of: ${files[*]}"
rm -rf "$dir"
mv "$staging" "$dir"
log "cached uPlot $UPLOT_VERSION in $dir"
echo "$dir"
