#!/usr/bin/env bash
# Builds the OCI images of the four services and the CLI without a Docker daemon (buildah).
#
#   deploy/images/build.sh [--tag TAG] [--out DIR] [--binaries DIR] [IMAGE...]
#
# Each image is FROM scratch: the release binary (debug info stripped), the shared libraries
# `ldd` lists for it, the CA certificates, and a passwd/group naming the non-root user 65532 it
# runs as. It is committed to the local image store as docker.io/ksim/<image>:<tag> (the name
# Kubernetes gives the manifests' `ksim/<image>:dev`), and written to DIR/<image>.oci.tar as an
# OCI archive (`podman load -i`, `skopeo copy oci-archive:...`, `ctr images import`). A line per
# image gives its size.
#
#   --tag TAG        image tag (default: dev, as deploy/*/deployment.yaml name it)
#   --out DIR        where the OCI archives go (default: target/images)
#   --binaries DIR   take the binaries from DIR instead of `cargo build --release`
#   IMAGE...         some of: ksim-tracer ksim-vnode ksim-cloudprov ksim-driver ksim (default: all)
#
# Needs buildah, skopeo and ca-certificates (Debian packages of those names).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
all_images=(ksim-tracer ksim-vnode ksim-cloudprov ksim-driver ksim)
tag=dev
out=$repo/target/images
binaries=
images=()

log_prefix=images
# shellcheck source=../lib/log.sh
source "$repo/deploy/lib/log.sh"

while [[ $# -gt 0 ]]; do
  case $1 in
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --binaries) binaries=${2:?--binaries needs a value}; shift 2 ;;
    -h | --help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ " ${all_images[*]} " == *" $1 "* ]] || die "unknown image $1; images: ${all_images[*]}"
      images+=("$1"); shift ;;
  esac
done
[[ ${#images[@]} -gt 0 ]] || images=("${all_images[@]}")
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag $tag is not a valid image tag"

for tool in buildah skopeo ldd objcopy; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (apt-get install buildah skopeo binutils)"
done
certs=/etc/ssl/certs/ca-certificates.crt
[[ -f $certs ]] || die "$certs is missing (apt-get install ca-certificates)"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
source_url=${KSIM_SOURCE_URL:-https://github.com/ksim-dev/ksim}

if [[ -z $binaries ]]; then
  packages=()
  for image in "${images[@]}"; do packages+=(-p "$image"); done
  log "building ${images[*]} (release)"
  (cd "$repo" && cargo build --release --locked --bins "${packages[@]}" >&2)
  binaries=$repo/target/release
fi

mkdir -p "$out"
work=$(mktemp -d)
container=
cleanup() {
  [[ -n $container ]] && buildah rm "$container" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# rootfs IMAGE DIR: the image's files, laid out as they will be in the image.
rootfs() {
  local image=$1 dir=$2 binary=$binaries/$1 lib
  [[ -x $binary ]] || die "$binary is missing or not executable"
  mkdir -p "$dir/usr/local/bin" "$dir/etc/ssl/certs" "$dir/tmp"
  chmod 1777 "$dir/tmp"
  objcopy --strip-debug "$binary" "$dir/usr/local/bin/$image"
  # Every library the dynamic loader resolves, and the loader itself, at its own path.
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    [[ -f $lib ]] || die "ldd names $lib for $image, which is not a file"
    mkdir -p "$dir$(dirname "$lib")"
    cp -L "$lib" "$dir$lib"
  done
  cp "$certs" "$dir/etc/ssl/certs/"
  echo "nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin" >"$dir/etc/passwd"
  echo "nonroot:x:65532:" >"$dir/etc/group"
}

for image in "${images[@]}"; do
  name=docker.io/ksim/$image:$tag
  rootfs "$image" "$work/$image"
  container=$(buildah from scratch)
  buildah copy --quiet "$container" "$work/$image" / >/dev/null
  buildah config \
    --user 65532:65532 \
    --workingdir /tmp \
    --entrypoint "[\"/usr/local/bin/$image\"]" \
    --cmd '' \
    --env SSL_CERT_FILE=$certs \
    --label org.opencontainers.image.title="$image" \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.revision="$revision" \
    --label org.opencontainers.image.source="$source_url" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    "$container"
  buildah commit --quiet --format oci --rm "$container" "$name" >/dev/null
  container=
  archive=$out/$image.oci.tar
  rm -f "$archive"
  # containers/storage logs its storage driver at info level on every open.
  skopeo copy --quiet --dest-compress "containers-storage:$name" \
    "oci-archive:$archive:ksim/$image:$tag" 2> >(grep -v 'graphdriver' >&2)
  printf '%-15s %s  %s MiB unpacked, %s MiB compressed\n' "$image" "$name" \
    "$(mib "$(du -sb "$work/$image" | cut -f1)")" "$(mib "$(stat -c %s "$archive")")"
done
