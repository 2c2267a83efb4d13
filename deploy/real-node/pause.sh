#!/usr/bin/env bash
# Builds the pod sandbox ("pause") image the real node's containerd starts for every pod, from
# build/pause/linux/pause.c of the pinned Kubernetes module, and prints the OCI archive's path.
#
#   deploy/real-node/pause.sh        build (or reuse); prints the archive, then the image name
#
# There is no registry to pull registry.k8s.io/pause from here, so the image is made as
# upstream makes it (build/pause/Makefile: gcc -Os -static, FROM scratch, USER 65535, ENTRYPOINT
# /pause) but laid out by hand as an OCI archive: one uncompressed layer, a config, a manifest
# and an index naming it, which `ctr images import` reads. Its name says it is built here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../control-plane/versions.env
source "$here/../control-plane/versions.env"
# shellcheck source=../lib/cache.sh
source "$here/../lib/cache.sh"
version=$KUBERNETES_VERSION

log_prefix=pause
# shellcheck source=../lib/log.sh
source "$here/../lib/log.sh"

command -v gcc >/dev/null || die "gcc is not on PATH (apt-get install gcc libc6-dev)"
version_dir=$(ksim_cache_root)/k8s-node-$version
out=$version_dir/pause
lock_cache_dir "$version_dir"
use_shared_go_caches

source_dir=$(go mod download -json "k8s.io/kubernetes@$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/build/pause
[[ -f $source_dir/linux/pause.c ]] || die "no build/pause/linux/pause.c in k8s.io/kubernetes@$version"
tag=$(sed -n 's/^TAG ?= *//p' "$source_dir/Makefile")
[[ -n $tag ]] || die "no TAG in $source_dir/Makefile"
name=localhost/ksim/pause:$tag
archive=$out/pause-$tag.oci.tar
if [[ -f $archive ]]; then
  printf '%s\n%s\n' "$archive" "$name"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/oci/blobs/sha256"
# The Makefile's flags; VERSION is what `pause -v` prints.
gcc -Os -Wall -Werror -static -DVERSION="v$tag-ksim" -o "$work/rootfs/pause" "$source_dir/linux/pause.c"
strip "$work/rootfs/pause"

# blob FILE MEDIATYPE: moves FILE into the layout, prints its descriptor.
blob() {
  local sum size
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  mv "$1" "$work/oci/blobs/sha256/$sum"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$2" "$sum" "$size"
}

tar --create --file "$work/layer.tar" --directory "$work/rootfs" \
  --owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name pause
diff_id=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
layer=$(blob "$work/layer.tar" application/vnd.oci.image.layer.v1.tar)
printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
  "$diff_id" >"$work/config.json"
config=$(blob "$work/config.json" application/vnd.oci.image.config.v1+json)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
  "$config" "$layer" >"$work/manifest.json"
manifest=$(blob "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)
# containerd names an imported image by io.containerd.image.name.
printf '{"schemaVersion":2,"manifests":[%s]}' \
  "${manifest%\}},\"annotations\":{\"io.containerd.image.name\":\"$name\",\"org.opencontainers.image.ref.name\":\"$tag\"}}" \
  >"$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"

mkdir -p "$out"
tar --create --file "$archive.partial" --directory "$work/oci" --owner=0 --group=0 --numeric-owner \
  oci-layout index.json blobs
mv "$archive.partial" "$archive"
log "built $name into $archive"
printf '%s\n%s\n' "$archive" "$name"
