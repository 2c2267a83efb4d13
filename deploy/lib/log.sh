# Shared by the deploy scripts: how they speak. Set log_prefix (the script's component) before
# sourcing it; it defines functions only. Messages go to stderr, so a script's stdout stays its
# answer (a directory to put on PATH, an image tag).

log() { echo "${log_prefix:-ksim}: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}
