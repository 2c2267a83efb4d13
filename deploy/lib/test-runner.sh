#!/usr/bin/env bash
# Cargo's runner for the test binaries deploy/test.sh runs (CARGO_TARGET_<host>_RUNNER): each
# libtest binary prints every test's time (`test x ... ok <12.3s>`), and a last line with the
# binary's own (`test binary ksim-e2e/it: 2570 s`), which the suite's summary sorts.
# libtest keeps --report-time behind -Zunstable-options; setting RUSTC_BOOTSTRAP here, for the
# test process alone, unlocks it without touching the build (set for cargo, it would change
# every crate's fingerprint and rebuild the workspace). A test that runs cargo itself (the
# end-to-end tests build the workspace's binaries) must not pass it on, or that build starts
# over from nothing: KSIM_TEST_RUNNER_BOOTSTRAP says it was set here, not by the user.
set -uo pipefail
binary=$1
shift
# A listing runs as it is.
for arg in "$@"; do
  [[ $arg == --list ]] && exec "$binary" "$@"
done
started=$SECONDS
bootstrap=()
[[ -z ${RUSTC_BOOTSTRAP:-} ]] && bootstrap=(RUSTC_BOOTSTRAP=1 KSIM_TEST_RUNNER_BOOTSTRAP=1)
env "${bootstrap[@]}" "$binary" "$@" -Zunstable-options --report-time
status=$?
name=$(basename "$binary")
echo "test binary ${CARGO_PKG_NAME:-?}/${name%-*}: $((SECONDS - started)) s"
exit "$status"
