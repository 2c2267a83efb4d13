#!/usr/bin/env bash
# Builds Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter/kwok) from its Go module at
# the version pinned in versions.env, and caches it outside the repository with the CRDs it
# needs installed (NodePool, NodeClaim, NodeOverlay, CapacityBuffer, KWOKNodeClass). The
# binary is ksim's own main (provider/): the release's operator and KWOK provider, with
# offerings a simulation can withdraw (docs/disruptions.md); the cache is rebuilt when its
# source changes.
#
#   deploy/karpenter/build.sh            build (or reuse) the pinned release, print its directory
#   deploy/karpenter/build.sh v1.13.0    the same for another release of KARPENTER_TESTED_VERSIONS
#
# Environment:
#   KSIM_KARPENTER_BIN_DIR  a directory that already holds `karpenter` and `crds/`: used as is
#                           for the pinned release
#   KSIM_CACHE_DIR          cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# Karpenter's go.mod has no local replaces, so a wrapper module that requires it and holds
# provider/ builds it with exactly the dependency versions its release pins. The module's
# hash is checked against versions.env before anything is built (the Go checksum database checks
# it too, on the first download).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=${1:-$KARPENTER_VERSION}
case " $KARPENTER_TESTED_VERSIONS " in
  *" $version "*) ;;
  *) echo "karpenter: $version is not one of the tested releases ($KARPENTER_TESTED_VERSIONS)" >&2; exit 1 ;;
esac
sum_var=KARPENTER_$(echo "$version" | tr 'a-z.' 'A-Z_')_SUM
expected_sum=${!sum_var:-}
module=sigs.k8s.io/karpenter
package=$module/kwok
binary=karpenter

log_prefix=karpenter
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

# What the cached build was made from: provider/'s source.
provider_sum=$(cat "$here"/provider/*.go | sha256sum | cut -c1-16)
has_binary() {
  [[ -x "$1/$binary" && -d "$1/crds" && "$(cat "$1/provider.sum" 2>/dev/null)" == "$provider_sum" ]]
}

if [[ -n "${KSIM_KARPENTER_BIN_DIR:-}" && "$version" == "$KARPENTER_VERSION" ]]; then
  has_binary "$KSIM_KARPENTER_BIN_DIR" ||
    die "KSIM_KARPENTER_BIN_DIR=$KSIM_KARPENTER_BIN_DIR has no $binary binary and crds/ directory of this provider/ source"
  echo "$KSIM_KARPENTER_BIN_DIR"
  exit 0
fi

version_dir=$(ksim_cache_root)/karpenter-$version
bin_dir=$version_dir/bin
reuse_or_lock "$version_dir" "$bin_dir" has_binary

use_shared_go_caches
export GOFLAGS=-mod=mod

started=$SECONDS
log "building Karpenter $version with its KWOK provider (a cold build, modules included, took 2 minutes on 2 cores)"
wrapper=$version_dir/wrapper
rm -rf "$wrapper"
mkdir -p "$wrapper"
sum=$(cd "$wrapper" && go mod download -json "$module@$version" | sed -n 's/^\t"Sum": "\(.*\)",$/\1/p')
[[ -n "$expected_sum" && "$sum" == "$expected_sum" ]] ||
  die "$module@$version has hash ${sum:-<none>}, versions.env pins ${expected_sum:-none} ($sum_var)"
cp "$here"/provider/*.go "$wrapper/"
(cd "$wrapper" && go mod init ksim.local/karpenter >&2 && go get "$package@$version" >&2) ||
  die "could not make the wrapper module for Karpenter $version"
source_dir=$(cd "$wrapper" && go list -m -f '{{.Dir}}' "$module")

# Build into a scratch directory and move it into place, so an interrupted build never leaves
# a half-written binary where the next run would take it as built.
staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin/crds"
(cd "$wrapper" && go build -trimpath -ldflags "-s -w" -o "$staging_bin/$binary" .)
[[ -x "$staging_bin/$binary" ]] || die "go build finished without a $binary binary"
# The CRDs of this release: Karpenter's own and the KWOK provider's node class.
cp "$source_dir"/pkg/apis/crds/*.yaml "$source_dir"/kwok/apis/crds/*.yaml "$staging_bin/crds/"
chmod -R u+w "$staging_bin/crds"
echo "$provider_sum" > "$staging_bin/provider.sum"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built Karpenter $version into $bin_dir in $((SECONDS - started)) s"
echo "$bin_dir"
