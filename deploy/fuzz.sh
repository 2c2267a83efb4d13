#!/usr/bin/env bash
# Fuzzes the trace file reader and the SimKube converter (crates/ksim-trace/fuzz) with
# cargo-fuzz, each target for KSIM_FUZZ_SECONDS (default 60). Exits non-zero when a target
# crashes, panics, or runs out of time or memory on an input; libFuzzer then prints the input's
# path under crates/ksim-trace/fuzz/artifacts/.
#
# cargo-fuzz needs nightly compiler flags. With a nightly toolchain installed it is used;
# otherwise the default toolchain runs with RUSTC_BOOTSTRAP=1, which unlocks those flags on
# stable, so machines that cannot download a nightly can fuzz too.
# KSIM_FUZZ_TOOLCHAIN=nightly|stable forces one of the two.
#
# `deploy/fuzz.sh seeds` only writes the seed inputs; `deploy/fuzz.sh run` only builds and runs
# the targets (deploy/test.sh writes the seeds first, then runs the targets beside the tests: the
# seeds need the workspace's cargo lock, the targets build in a directory of their own).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

phase=${1:-all}
case $phase in
  all | seeds | run) ;;
  *)
    echo "usage: deploy/fuzz.sh [seeds|run]" >&2
    exit 2
    ;;
esac

seconds=${KSIM_FUZZ_SECONDS:-60}
targets=(trace_reader simkube_convert)
crate_dir=crates/ksim-trace
corpus_dir=$crate_dir/fuzz/corpus
log_prefix=fuzz
# shellcheck source=lib/log.sh
source "deploy/lib/log.sh"

if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  log "KSIM_FUZZ_SECONDS must be a positive whole number of seconds, not '$seconds'"
  exit 2
fi

# Seed each corpus with valid inputs (written by a test that also checks them), so the fuzzer
# starts from real traces rather than having to discover the zstd and MessagePack layouts.
if [[ $phase != run ]]; then
  log "writing seed inputs into $corpus_dir"
  KSIM_FUZZ_SEEDS_DIR=$PWD/$corpus_dir cargo test --quiet -p ksim-trace --test it fuzz_seeds:: >&2
fi
[[ $phase == seeds ]] && exit 0

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked >&2
fi

toolchain=${KSIM_FUZZ_TOOLCHAIN:-}
if [[ -z $toolchain ]]; then
  if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=nightly
  else
    toolchain=stable
  fi
fi
case $toolchain in
  nightly)
    fuzz=(cargo +nightly fuzz)
    rustc_version=$(rustc +nightly --version)
    ;;
  stable)
    fuzz=(cargo fuzz)
    rustc_version=$(rustc --version)
    export RUSTC_BOOTSTRAP=1
    ;;
  *)
    log "KSIM_FUZZ_TOOLCHAIN must be nightly or stable, not '$toolchain'"
    exit 2
    ;;
esac
log "toolchain: $toolchain ($rustc_version)"

cd "$crate_dir"
for target in "${targets[@]}"; do
  log "running $target for $seconds s"
  # -timeout: an input that takes 10 s is a hang worth failing on, not something to wait out.
  "${fuzz[@]}" run "$target" -- -max_total_time="$seconds" -timeout=10 -print_final_stats=1
done
log "no crash in ${#targets[@]} targets, $seconds s each"
