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

# use_shared_go_caches: Go's module and build caches are content-addressed, so one copy under
# the cache root serves every version of everything built.
use_shared_go_caches() {
  local root
  root=$(ksim_cache_root)
  export GOMODCACHE=$root/go/mod GOCACHE=$root/go/build GOTOOLCHAIN=local CGO_ENABLED=0
}
