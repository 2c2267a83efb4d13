# Shared by the scripts that build or install tools into ksim's cache, outside the repository.
# Source it; it defines functions only.

# The cache root: KSIM_CACHE_DIR, else $XDG_CACHE_HOME/ksim, else ~/.cache/ksim.
ksim_cache_root() {
  echo "${KSIM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ksim}"
}

# lock_cache_dir DIR: creates DIR and holds an exclusive lock on it until the script exits, so
# that of several parallel runs one builds and the others wait and reuse the result.
lock_cache_dir() {
  local dir=$1
  command -v go >/dev/null || { echo "go is not on PATH; install Go 1.25 or newer" >&2; return 1; }
  command -v flock >/dev/null || { echo "flock is not on PATH (util-linux)" >&2; return 1; }
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
}

# reuse_or_lock VERSION_DIR BIN_DIR CHECK: when `CHECK BIN_DIR` holds (a complete build is
# there), prints BIN_DIR and exits the script; otherwise takes VERSION_DIR's lock, looks again
# (another run may have built it meanwhile), and returns holding the lock, for the caller to
# build.
reuse_or_lock() {
  local version_dir=$1 bin_dir=$2 check=$3
  if "$check" "$bin_dir"; then
    echo "$bin_dir"
    exit 0
  fi
  lock_cache_dir "$version_dir" || return 1
  if "$check" "$bin_dir"; then
    echo "$bin_dir"
    exit 0
  fi
}

# use_shared_go_caches: Go's module and build caches are content-addressed, so one copy under
# the cache root serves every version of everything built.
use_shared_go_caches() {
  local root
  root=$(ksim_cache_root)
  export GOMODCACHE=$root/go/mod GOCACHE=$root/go/build GOTOOLCHAIN=local CGO_ENABLED=0
}
