#!/usr/bin/env bash
# Builds the OCI images of the four services and the CLI without a Docker daemon (buildah),
# and ksim-run: one whole simulation (an experiment's run) in one container.
#
#   deploy/images/build.sh [--tag TAG] [--out DIR] [--binaries DIR] [IMAGE...]
#
# Each image is FROM scratch: the release binary (debug info stripped), the shared libraries
# `ldd` lists for it, the CA certificates, and a passwd/group naming the non-root user 65532 it
# runs as. ksim-run holds the CLI, the environment (ksim-env) and the four services, with the
# control plane, the pinned cluster-autoscaler and Karpenter the project builds (KSIM_CONTROL_PLANE_BIN_DIR,
# KSIM_CLUSTER_AUTOSCALER_BIN_DIR, KSIM_KARPENTER_BIN_DIR, else their build scripts' caches)
# under /opt/ksim, and runs `ksim` (`experiment run-one ...`). It is committed to the local image store as docker.io/ksim/<image>:<tag> (the name
# Kubernetes gives the manifests' `ksim/<image>:dev`), and written to DIR/<image>.oci.tar as an
# OCI archive (`podman load -i`, `skopeo copy oci-archive:...`, `ctr images import`). A line per
# image gives its size.
#
#   --tag TAG        image tag (default: dev, as deploy/*/deployment.yaml name it)
#   --out DIR        where the OCI archives go (default: target/images)
#   --binaries DIR   take the binaries from DIR instead of `cargo build --release`
#   IMAGE...         some of: ksim-tracer ksim-vnode ksim-cloudprov ksim-driver ksim ksim-run
#                    (default: all)
#
# Needs buildah, skopeo and ca-certificates (Debian packages of those names).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
all_images=(ksim-tracer ksim-vnode ksim-cloudprov ksim-driver ksim ksim-run)
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
    -h | --help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# The binaries each image holds: its own, or ksim-run's six.
run_binaries=(ksim ksim-env ksim-tracer ksim-vnode ksim-cloudprov ksim-driver)
if [[ -z $binaries ]]; then
  packages=()
  for image in "${images[@]}"; do
    if [[ $image == ksim-run ]]; then
      for binary in "${run_binaries[@]}"; do packages+=(-p "$binary"); done
    else
      packages+=(-p "$image")
    fi
  done
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

# libraries BINARY DIR: every library the dynamic loader resolves for BINARY, and the loader
# itself, at its own path under DIR (none for a static binary).
libraries() {
  local binary=$1 dir=$2 lib
  ldd "$binary" >/dev/null 2>&1 || return 0
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    [[ -f $lib ]] || die "ldd names $lib for $binary, which is not a file"
    mkdir -p "$dir$(dirname "$lib")"
    cp -L "$lib" "$dir$lib"
  done
}

# rootfs IMAGE DIR: the image's files, laid out as they will be in the image.
rootfs() {
  local image=$1 dir=$2 binary name
  local own=("$image")
  [[ $image == ksim-run ]] && own=("${run_binaries[@]}")
  mkdir -p "$dir/usr/local/bin" "$dir/etc/ssl/certs" "$dir/tmp"
  chmod 1777 "$dir/tmp"
  for name in "${own[@]}"; do
    binary=$binaries/$name
    [[ -x $binary ]] || die "$binary is missing or not executable"
    objcopy --strip-debug "$binary" "$dir/usr/local/bin/$name"
    libraries "$binary" "$dir"
  done
  [[ $image == ksim-run ]] && components "$dir"
  cp "$certs" "$dir/etc/ssl/certs/"
  echo "nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin" >"$dir/etc/passwd"
  echo "nonroot:x:65532:" >"$dir/etc/group"
}

# components DIR: what `ksim up` starts besides ksim's own binaries, under /opt/ksim, from the
# directories the test command exports, else built (or found cached) by their scripts.
components() {
  local dir=$1 from
  from=${KSIM_CONTROL_PLANE_BIN_DIR:-$("$repo/deploy/control-plane/build.sh")}
  mkdir -p "$dir/opt/ksim/control-plane"
  for binary in etcd kube-apiserver kube-controller-manager ksim-scheduler; do
    [[ -x $from/$binary ]] || die "$from/$binary is missing (deploy/control-plane/build.sh)"
    cp "$from/$binary" "$dir/opt/ksim/control-plane/"
    libraries "$from/$binary" "$dir"
  done
  from=${KSIM_CLUSTER_AUTOSCALER_BIN_DIR:-$("$repo/deploy/cluster-autoscaler/build.sh")}
  [[ -x $from/cluster-autoscaler ]] || die "$from/cluster-autoscaler is missing (deploy/cluster-autoscaler/build.sh)"
  mkdir -p "$dir/opt/ksim/cluster-autoscaler"
  cp "$from/cluster-autoscaler" "$dir/opt/ksim/cluster-autoscaler/"
  libraries "$from/cluster-autoscaler" "$dir"
  from=${KSIM_KARPENTER_BIN_DIR:-$("$repo/deploy/karpenter/build.sh")}
  [[ -d $from ]] || die "$from is missing (deploy/karpenter/build.sh)"
  mkdir -p "$dir/opt/ksim/karpenter"
  cp -r "$from/." "$dir/opt/ksim/karpenter/"
}

for image in "${images[@]}"; do
  name=docker.io/ksim/$image:$tag
  rootfs "$image" "$work/$image"
  container=$(buildah from scratch)
  buildah copy --quiet "$container" "$work/$image" / >/dev/null
  entrypoint=$image
  env=(--env SSL_CERT_FILE=$certs)
  if [[ $image == ksim-run ]]; then
    entrypoint=ksim
    env+=(--env KSIM_CONTROL_PLANE_BIN_DIR=/opt/ksim/control-plane
          --env KSIM_CLUSTER_AUTOSCALER_BIN_DIR=/opt/ksim/cluster-autoscaler
          --env KSIM_KARPENTER_BIN_DIR=/opt/ksim/karpenter
          --env KSIM_STATE_DIR=/tmp/ksim)
  fi
  buildah config \
    --user 65532:65532 \
    --workingdir /tmp \
    --entrypoint "[\"/usr/local/bin/$entrypoint\"]" \
    --cmd '' \
    "${env[@]}" \
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
