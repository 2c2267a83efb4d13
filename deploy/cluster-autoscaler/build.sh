#!/usr/bin/env bash
# Builds cluster-autoscaler (CA) with only the externalgrpc cloud provider, and caches it
# outside the repository, one directory per release.
#
#   deploy/cluster-autoscaler/build.sh [VERSION]   build (or reuse) and print the binary's directory
#
# VERSION defaults to the pinned CLUSTER_AUTOSCALER_VERSION; any release with facts in
# versions.env builds the same way. The source, in this order:
#   1. KSIM_CLUSTER_AUTOSCALER_SOURCE: a source archive (cluster-autoscaler-<version>.tar.gz), a
#      directory holding that archive, or an unpacked source directory (CA's own module);
#   2. ../shared/third_party/cluster-autoscaler/cluster-autoscaler-<version>.tar.gz beside the
#      checkout, when it exists;
#   3. the Go module proxy, for proxies that serve k8s.io/autoscaler/cluster-autoscaler.
# Archives and directories are verified against the SHA-256 pinned in versions.env first; a
# mismatch is an error naming both sums. Every other module comes from the Go module proxy.
#
# Environment:
#   KSIM_CLUSTER_AUTOSCALER_BIN_DIR  a directory that already holds `cluster-autoscaler` of the
#                                    pinned release: used as is (other releases ignore it)
#   KSIM_CLUSTER_AUTOSCALER_SOURCE   the source, as above
#   KSIM_CACHE_DIR                   cache root (default: $XDG_CACHE_HOME/ksim or ~/.cache/ksim)
#
# Exit status 3: the Go module proxy refused a module the build needs (403). Any other failure
# exits 1. Only the directory is printed on stdout; progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=${1:-$CLUSTER_AUTOSCALER_VERSION}
module=k8s.io/autoscaler/cluster-autoscaler
binary=cluster-autoscaler
readonly PROXY_REFUSED=3

log_prefix=cluster-autoscaler
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

# pinned FACT: versions.env's CLUSTER_AUTOSCALER_<version>_<FACT> for this release.
pinned() {
  local key="CLUSTER_AUTOSCALER_${version//./_}_$1"
  [[ -n "${!key:-}" ]] || die "no $key in $here/versions.env: release $version is not pinned"
  echo "${!key}"
}
module_version=$(pinned MODULE_VERSION)
archive_sha256=$(pinned ARCHIVE_SHA256)
tree_sha256=$(pinned TREE_SHA256)

if [[ -n "${KSIM_CLUSTER_AUTOSCALER_BIN_DIR:-}" && "$version" == "$CLUSTER_AUTOSCALER_VERSION" ]]; then
  [[ -x "$KSIM_CLUSTER_AUTOSCALER_BIN_DIR/$binary" ]] ||
    die "KSIM_CLUSTER_AUTOSCALER_BIN_DIR=$KSIM_CLUSTER_AUTOSCALER_BIN_DIR has no $binary binary"
  echo "$KSIM_CLUSTER_AUTOSCALER_BIN_DIR"
  exit 0
fi

has_binary() { [[ -x "$1/$binary" ]]; }
version_dir=$(ksim_cache_root)/cluster-autoscaler-$version
bin_dir=$version_dir/bin
reuse_or_lock "$version_dir" "$bin_dir" has_binary

use_shared_go_caches
export GOFLAGS=-mod=mod

# tree_sha256 DIR: one sum for an unpacked source tree, independent of how it was unpacked.
tree_sha256() {
  (cd "$1" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
    sha256sum | cut -d' ' -f1
}

# verify WHAT EXPECTED ACTUAL
verify() {
  [[ "$2" == "$3" ]] ||
    die "$1 has SHA-256 $3, but versions.env pins $2 for cluster-autoscaler $version"
}

# The source to build, or nothing for the Go module proxy route.
archive_name=cluster-autoscaler-$version.tar.gz
source_path=${KSIM_CLUSTER_AUTOSCALER_SOURCE:-}
if [[ -z "$source_path" ]]; then
  shared_archive=$here/../../../shared/third_party/cluster-autoscaler/$archive_name
  [[ -f "$shared_archive" ]] && source_path=$(cd "$(dirname "$shared_archive")" && pwd)/$archive_name
elif [[ -d "$source_path" && -f "$source_path/$archive_name" ]]; then
  source_path=$source_path/$archive_name
elif [[ ! -e "$source_path" ]]; then
  die "KSIM_CLUSTER_AUTOSCALER_SOURCE=$source_path does not exist"
fi

# Build into a scratch directory and move it into place, so an interrupted build never leaves
# a half-written binary where the next run would take it as built.
staging_bin=$version_dir/bin.partial
rm -rf "$staging_bin"
mkdir -p "$staging_bin"

# build_from_source: CA's own module is the main module, so its replaces (./apis included) apply
# as written. It builds in a copy: -mod=mod may rewrite go.mod and go.sum.
build_from_source() {
  local src=$version_dir/src
  rm -rf "$src"
  mkdir -p "$src"
  if [[ -f "$source_path" ]]; then
    verify "$source_path" "$archive_sha256" "$(sha256sum "$source_path" | cut -d' ' -f1)"
    log "building cluster-autoscaler $version from $source_path (SHA-256 verified)"
    tar -xzf "$source_path" -C "$src" --strip-components=1 ||
      die "cannot unpack $source_path"
  else
    verify "$source_path (as a tree)" "$tree_sha256" "$(tree_sha256 "$source_path")"
    log "building cluster-autoscaler $version from $source_path (tree SHA-256 verified)"
    cp -a "$source_path/." "$src/"
  fi
  grep -q "^module $module\$" "$src/go.mod" ||
    die "$source_path is not CA's module (no 'module $module' in go.mod)"
  (cd "$src" && go build -tags externalgrpc -trimpath -ldflags "-s -w" -o "$staging_bin/$binary" .)
  rm -rf "$src"
}

# go_mod_of MODULE@VERSION: downloads MODULE's go.mod and prints its path in the module cache.
# `go mod download -json` reports a failure in its "Error" field, which is what we show.
go_mod_of() {
  local json error go_mod
  json=$(go mod download -json "$1" 2>&1) || true
  error=$(sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  if [[ -n "$error" ]]; then
    log "error: go mod download $1 failed: $(printf '%b' "$error")"
    # A 403 is the proxy's final answer, not a transient failure: say so with its own status.
    [[ "$error" == *"403 Forbidden"* ]] && exit "$PROXY_REFUSED"
    exit 1
  fi
  go_mod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -f "$go_mod" ]] || die "go mod download $1 gave no go.mod: $json"
  echo "$go_mod"
}

# replace_lines GO_MOD: every replace directive of GO_MOD as "old [ver] => new [ver]", whether
# written one per line or in a block, without comments.
replace_lines() {
  awk '
    /^replace[ \t]*\(/ { block = 1; next }
    block && /^\)/     { block = 0; next }
    block              { line = $0 }
    !block && /^replace[ \t]/ { line = $0; sub(/^replace[ \t]+/, "", line) }
    line != "" {
      sub(/[ \t]*\/\/.*$/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
      if (line != "") print line
      line = ""
    }
  ' "$1"
}

# godebug_lines GO_MOD: the godebug directives (single or block), copied as written.
godebug_lines() {
  awk '/^godebug[ \t]*\(/ { block = 1 } block || /^godebug[ \t]/ { print } block && /^\)/ { block = 0 }' "$1"
}

# build_from_proxy: CA cannot be `go install`ed, since its go.mod replaces the Kubernetes staging
# modules and points $module/apis at ./apis. Replaces only count in the main module, so a
# wrapper module copies them, pinning apis to the release commit's pseudo-version.
build_from_proxy() {
  log "building cluster-autoscaler $version ($module@$module_version, externalgrpc provider only)"
  ca_mod=$(go_mod_of "$module@$module_version") || exit $?
  # The apis submodule is fetched up front so that a refusal is reported as clearly as CA's own.
  go_mod_of "$module/apis@$module_version" >/dev/null || exit $?

  kubernetes_version=$(sed -n 's#^\(require\)\{0,1\}[[:space:]]*k8s\.io/kubernetes \(v[^[:space:]]*\).*#\2#p' "$ca_mod" | head -n1)
  [[ -n "$kubernetes_version" ]] || die "$module@$module_version does not require k8s.io/kubernetes"
  staging_version=v0.${kubernetes_version#v1.}
  kubernetes_mod=$(go_mod_of "k8s.io/kubernetes@$kubernetes_version") || exit $?

  declare -A replaced=()
  replaces=()
  while IFS= read -r directive; do
    old=${directive%%=>*}
    new=${directive#*=>}
    read -r old_path _ <<<"$old"
    read -r new_path _ <<<"$new"
    case "$new_path" in
      ./* | ../*)
        # Local paths only exist in CA's own checkout: point them at published modules.
        if [[ "$old_path" == "$module/apis" ]]; then
          replaces+=("$old_path => $old_path $module_version")
        elif [[ "$new_path" == ./staging/* && "$old_path" == k8s.io/* ]]; then
          replaces+=("$old_path => $old_path $staging_version")
        else
          die "cannot map CA's local replace: $directive"
        fi
        ;;
      *) replaces+=("${old% } => ${new# }") ;;
    esac
    replaced[$old_path]=1
  done < <(replace_lines "$ca_mod")

  # k8s.io/kubernetes requires its staging modules at v0.0.0; any CA does not already replace
  # gets the published version of the same release.
  while IFS= read -r staging_module; do
    [[ -n "${replaced[$staging_module]:-}" ]] && continue
    replaces+=("$staging_module => $staging_module $staging_version")
  done < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$kubernetes_mod")

  wrapper=$version_dir/wrapper
  rm -rf "$wrapper"
  mkdir -p "$wrapper"
  {
    echo "module ksim.local/cluster-autoscaler"
    echo
    grep -E '^go ' "$ca_mod"
    godebug_lines "$ca_mod"
    echo
    echo "require ("
    echo "	$module $module_version"
    echo "	$module/apis $module_version"
    echo ")"
    echo
    echo "replace ("
    for directive in "${replaces[@]}"; do echo "	$directive"; done
    echo ")"
  } >"$wrapper/go.mod"
  log "wrapper module: $wrapper/go.mod (k8s.io/kubernetes $kubernetes_version, staging $staging_version)"
  (cd "$wrapper" && go build -tags externalgrpc -trimpath -ldflags "-s -w" -o "$staging_bin/$binary" "$module")
}

started=$SECONDS
if [[ -n "$source_path" ]]; then
  build_from_source
else
  log "no source archive for $version beside the checkout; trying the Go module proxy"
  build_from_proxy
fi
[[ -x "$staging_bin/$binary" ]] || die "go build finished without a $binary binary"
rm -rf "$bin_dir"
mv "$staging_bin" "$bin_dir"
log "built cluster-autoscaler $version into $bin_dir in $((SECONDS - started)) s"
echo "$bin_dir"
