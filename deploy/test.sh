#!/usr/bin/env bash
# The project's test command: installs what it needs (Go-built control plane and kubectl, the
# cluster-autoscaler releases under test, metrics-server, Karpenter, buf, mdBook, buildah,
# podman, Chromium and the report page's charting library), then
# runs every check: formatting, the manuals' book, clippy, protobuf lint/format/breaking, unit
# and integration tests against the real control plane, the real cluster-autoscaler, the real
# metrics-server and the real Karpenter, images built and run, and a bounded fuzzing run of the trace decoders.
#
# Both lanes run the architecture invariants first (`crates/ksim-architecture`: it builds no
# service, so a broken rule fails within a minute, before any long build).
#
# `deploy/test.sh --quick` is the lane for a change to pure code: the invariants, fmt, the book,
# buf, clippy, the unit tests and the integration tests that start no control plane; no Go
# builds, images or fuzzing. It says at the end what it left out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=false
case "${1:-}" in
  --quick) quick=true ;;
  "") ;;
  *)
    echo "usage: deploy/test.sh [--quick]" >&2
    exit 2
    ;;
esac

# Each step's time, printed at the end so that a step that grew is seen in the run that grew it,
# with the core-seconds the machine left idle meanwhile (/proc/stat): where a build beside the
# steps could still go.
step_names=()
step_times=()
step_idle=()
step_started=$SECONDS
idle_ticks() { awk '/^cpu / { print $5 + $6 }' /proc/stat; }
ticks_per_s=$(getconf CLK_TCK)
step_started_idle=$(idle_ticks)
step_end() {
  local idle
  idle=$(idle_ticks)
  step_times+=($((SECONDS - step_started)))
  step_idle+=($(((idle - step_started_idle) / ticks_per_s)))
  step_started_idle=$idle
}
step() {
  if [[ ${#step_names[@]} -gt 0 ]]; then
    step_end
  fi
  step_names+=("$*")
  step_started=$SECONDS
  printf '\n==> %s\n' "$*" >&2
}
started=$SECONDS
# The test binaries' output, kept for the summary of the slowest tests (deploy/lib/test-runner.sh).
test_log=target/test-output.log

fuzz_pid=
go_pid=
go_times=
summary() {
  # A report, not a check: `head` closing a pipe early must not end it.
  set +e +o pipefail
  # Fuzzing still running beside tests that failed: stopped with the run.
  if [[ -n $fuzz_pid ]]; then
    kill -- "-$fuzz_pid" 2>/dev/null
  fi
  if [[ -n $go_pid ]]; then
    kill -- "-$go_pid" 2>/dev/null
  fi
  step_end
  printf '\n==> time per step (s; core-seconds idle meanwhile)\n' >&2
  for i in "${!step_names[@]}"; do
    printf '%6s %6s  %s\n' "${step_times[$i]:-?}" "${step_idle[$i]:-?}" "${step_names[$i]}" >&2
  done
  if [[ -s $go_times ]]; then
    printf '\n==> time per Go build, beside the steps above (s; CPU-seconds; ended at s)\n' >&2
    cat "$go_times" >&2
  fi
  if [[ -s $test_log ]]; then
    printf '\n==> time per test binary (s, over 1 s)\n' >&2
    sed -n 's/^test binary \(.*\): \([0-9]*\) s$/\2 \1/p' "$test_log" |
      sort -rn | awk '$1 > 1 { printf "%6d  %s\n", $1, $2 }' >&2
    printf '\n==> the 15 slowest tests (s)\n' >&2
    sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' "$test_log" |
      sort -rn | head -15 | awk '{ printf "%8.1f  %s\n", $1, $2 }' >&2
    # What the browser tests saw (ksim_e2e::render_page).
    if compgen -G "target/test-screenshots/*.png" >/dev/null; then
      printf '\n==> screenshots of the pages the tests rendered\n' >&2
      ls -1 "$PWD"/target/test-screenshots/*.png >&2
    fi
    # The counts of every binary together, as the closing line.
    awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
         END { printf "\ntests: %d passed, %d failed\n", p, f }' "$test_log" >&2
  fi
}
trap summary EXIT

# finish_job PID LOG WHAT: waits for a job started beside the steps (the Go builds, fuzzing),
# prints its output, and fails the run with it.
finish_job() {
  local pid=$1 log=$2 what=$3 status=0
  wait "$pid" || status=$?
  cat "$log" >&2
  if [[ $status -ne 0 ]]; then
    echo "error: $what failed (exit $status; its output is above and in $log)" >&2
    exit 1
  fi
}

# Every test binary runs through the runner, which prints each test's time.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"
export "$runner_var=$PWD/deploy/lib/test-runner.sh"
mkdir -p target
: >"$test_log"
rm -rf target/test-screenshots

step "disk"
# A cold run writes about 8 GiB (cargo's target directory, the Go builds); when the disk fills,
# the linker fails and every end-to-end test fails with it, so say so at the start.
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
echo "$((free_kib / 1024 / 1024)) GiB free here" >&2
if [[ $free_kib -lt $((12 * 1024 * 1024)) ]]; then
  echo "warning: under 12 GiB free; a cold run may fill the disk (df -h .)" >&2
fi

if ! $quick; then
  # The Go components (control plane, the cluster-autoscaler and Karpenter releases under test,
  # metrics-server), in a job of their own from the start, beside the tools, the static checks and
  # the cargo build: from an empty cache they spend minutes on downloads and single-threaded links
  # that leave cores idle. Not in the quick lane, which builds none. Their own session, so an
  # early exit stops them (summary).
  #
  # The control plane builds in a lane of its own beside the pinned cluster-autoscaler, then
  # metrics-server, the pinned Karpenter and the other releases the version tests run against.
  # The tests start once the control plane and the pinned cluster-autoscaler are there ("first
  # Go builds' end"); the rest build beside them at a lower priority, and a test that asks for
  # one before it is there waits for it while the job holds its lock (KSIM_GO_BUILDS_LOCK,
  # ksim_localenv's binaries.rs). The job's end is checked after the tests ("Go builds' end").
  go_components() {
    local version lane lanes
    exec 8>"$go_lock"
    flock 8
    # built WHAT COMMAND...: runs a build script, records its wall and CPU time and when it
    # ended (since the run's start), and marks WHAT built.
    built() {
      local what=$1 t=$SECONDS cpu user sys TIMEFORMAT='%0U %0S'
      shift
      cpu=$({ time "$@" >/dev/null 2>&3; } 3>&2 2>&1) ||
        { echo "error: $what could not be built (see above)" >&2; return 1; }
      read -r user sys <<<"$cpu"
      printf '%6s %6s %6s  %s\n' $((SECONDS - t)) $((user + sys)) $((SECONDS + go_offset)) \
        "$what" >>"$go_times"
      : >"$go_marks/$what"
    }
    # shellcheck source=cluster-autoscaler/versions.env
    source deploy/cluster-autoscaler/versions.env
    # shellcheck source=karpenter/versions.env
    source deploy/karpenter/versions.env

    # Three lanes; a failed one stops the whole job at once, not after the others' builds.
    # First, what nearly every test needs: the control plane, and the pinned cluster-autoscaler
    # then the pinned Karpenter (the Karpenter tests start it through ksim up, whose start is
    # bounded). Beside them from the start, at the lowest priority until the tests start (then
    # 10, with the rest of the job): the other releases the version tests run against
    # (versions.env; one that cannot be built fails the run), in the order the tests ask for
    # them, then metrics-server. Those tests run last: the end-to-end binary's
    # `tested_versions` module, then the ksim-localenv, ksim-tracer and ksim-vnode binaries.
    { built "control plane binaries" deploy/control-plane/build.sh || kill -- -$$; } &
    lanes=("$!")
    {
      built "cluster-autoscaler $CLUSTER_AUTOSCALER_VERSION" \
        deploy/cluster-autoscaler/build.sh "$CLUSTER_AUTOSCALER_VERSION" &&
        built "Karpenter $KARPENTER_VERSION" deploy/karpenter/build.sh "$KARPENTER_VERSION" ||
        kill -- -$$
    } &
    lanes+=("$!")
    renice -n 19 -p $$ >/dev/null
    for version in $CLUSTER_AUTOSCALER_TESTED_VERSIONS; do
      [[ $version == "$CLUSTER_AUTOSCALER_VERSION" ]] ||
        built "cluster-autoscaler $version" deploy/cluster-autoscaler/build.sh "$version"
    done
    for version in $KARPENTER_TESTED_VERSIONS; do
      [[ $version == "$KARPENTER_VERSION" ]] ||
        built "Karpenter $version" deploy/karpenter/build.sh "$version"
    done
    built metrics-server deploy/metrics-server/build.sh
    for lane in "${lanes[@]}"; do
      wait "$lane"
    done
  }
  step "Go builds, started beside the steps that follow"
  go_log=target/go-builds.log
  go_times=target/go-builds.times
  go_lock=$PWD/target/go-builds.lock
  go_marks=target/go-builds.built
  go_ended=target/go-builds.ended
  : >"$go_times"
  rm -rf "$go_marks" "$go_ended"
  mkdir -p "$go_marks"
  export -f go_components
  go_offset=$((SECONDS - started))
  export go_times go_lock go_marks go_ended go_offset
  setsid bash -c 'set -euo pipefail; trap ": >$go_ended" EXIT; go_components' \
    >"$go_log" 2>&1 &
  go_pid=$!
fi

step "tools"
PATH=$(deploy/tools.sh):$PATH

# The third-party data the tests read (the converter's tests read Alibaba's GPU trace from
# ../shared/third_party): checked against its checksums before anything uses it.
(cd ../shared/third_party/alibaba-gpu-v2023 && sha256sum --check --quiet SHA256SUMS) ||
  { echo "../shared/third_party/alibaba-gpu-v2023 does not match its SHA256SUMS" >&2; exit 1; }

step "architecture invariants"
# First: it builds no ksim crate, so a module cycle, an impure domain module or a stale codemap
# fails here in a minute (ARCHITECTURE.md, Invariants).
cargo test --locked -p ksim-architecture 2>&1 | tee -a "$test_log"

# What both lanes check before any test runs.
static_checks() {
  step "cargo fmt, gofmt"
  cargo fmt --all -- --check
  # The project's one Go package (ksim-scheduler; its build checks the rest).
  unformatted=$(gofmt -l deploy/control-plane/ksim-scheduler)
  [[ -z $unformatted ]] || { echo "gofmt would change: $unformatted" >&2; exit 1; }

  step "docs book"
  # The manuals as a book (docs/book.toml); a chapter SUMMARY.md names but docs/ lacks fails it.
  mdbook build docs

  step "buf lint, format, breaking"
  buf lint
  buf format --diff --exit-code
  deploy/buf-breaking.sh

  step "cargo clippy"
  cargo clippy --workspace --all-targets --locked -- -D warnings
}

if $quick; then
  static_checks
  step "unit tests"
  cargo test --workspace --locked --no-fail-fast --lib --bins 2>&1 | tee -a "$test_log"
  step "integration tests that start no control plane"
  cargo test --locked -p ksim-trace -p ksim-grpc --tests 2>&1 | tee -a "$test_log"
  step "quick checks passed in $((SECONDS - started)) s"
  cat >&2 <<'LEFT'
left out (deploy/test.sh runs them): the Go builds; every test that starts a control plane,
cluster-autoscaler, metrics-server or Karpenter (the ksim-vnode, ksim-tracer and ksim-localenv
integration tests, and the end-to-end tests); the images; fuzzing.
LEFT
  exit 0
fi

step "container tools and a browser"
# The image tests build with buildah and run with podman (runc); the report page's test opens it
# in headless Chromium. Debian packages.
missing=()
for tool in buildah skopeo podman runc chromium; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=$([[ $EUID -eq 0 ]] || echo sudo)
  $sudo apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" >&2
fi
# The charting library the report pages put inline (npm registry, integrity-checked); the
# quick lane renders no page.
deploy/uplot/fetch.sh >/dev/null

static_checks

step "cargo build"
# Every test binary and the workspace's binaries, in one build so cargo keeps both cores busy;
# the end-to-end tests then find the binaries they run current (ksim_e2e::binary) instead of
# waiting on a build of their own.
cargo build --workspace --bins --tests --locked

step "first Go builds' end"
# Every end-to-end test needs the control plane and nearly every one the pinned
# cluster-autoscaler; the job marks each build done, or ends (a failed build: reported here).
# shellcheck source=cluster-autoscaler/versions.env
source deploy/cluster-autoscaler/versions.env
until [[ -e "$go_marks/control plane binaries" &&
  -e "$go_marks/cluster-autoscaler $CLUSTER_AUTOSCALER_VERSION" ]]; do
  if [[ -e $go_ended ]]; then
    finish_job "$go_pid" "$go_log" "the Go builds"
    go_pid=
    break
  fi
  sleep 2
done
# The builds left yield to the tests.
[[ -z $go_pid ]] || renice -n 10 -g "$go_pid" >/dev/null 2>&1 || true

step "cargo test, and fuzzing beside it"
# Fuzzing, bounded to a minute per target by default (KSIM_FUZZ_SECONDS; a crash fails the run),
# builds and runs at the lowest priority beside the tests: they leave about a third of the 2
# cores idle while they wait on the control plane, and it takes only that. Its seeds first: they
# need the workspace's cargo lock, which the tests hold while they run. Its own session, so an
# early exit stops all of it (summary).
deploy/fuzz.sh seeds
fuzz_log=target/fuzz.log
setsid nice -n 19 deploy/fuzz.sh run >"$fuzz_log" 2>&1 &
fuzz_pid=$!
# The invariants ran first, above. The tests that start a control plane spend most of their
# time waiting on it (the end-to-end binary used a fifth of 2 cores at 2 threads), so four run
# at once; RUST_TEST_THREADS set by the caller wins.
# The binaries were built above: ksim_e2e::binary uses them as they are. Every test binary
# runs even after one fails, so one run names every failure (a failed end-to-end test once hid
# a unit test's failure until the next run).
KSIM_E2E_BINARIES_BUILT=1 KSIM_GO_BUILDS_LOCK=$go_lock RUST_TEST_THREADS=${RUST_TEST_THREADS:-4} \
  cargo test --workspace --exclude ksim-architecture --locked --no-fail-fast 2>&1 | tee -a "$test_log"

step "Go builds' end"
if [[ -n $go_pid ]]; then
  finish_job "$go_pid" "$go_log" "the Go builds"
  go_pid=
fi

step "fuzzing's end"
finish_job "$fuzz_pid" "$fuzz_log" "fuzzing"
fuzz_pid=

step "all checks passed in $((SECONDS - started)) s"
