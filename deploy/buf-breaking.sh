#!/usr/bin/env bash
# Checks the protos against every committed state of proto/: once an API has landed on
# main it stays wire- and source-compatible, whichever commit it landed in.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "buf breaking: not a git checkout, skipped" >&2
  exit 0
fi
revisions=$(git log -n 20 --format=%H -- proto buf.yaml)
checked=0
for rev in $revisions; do
  buf breaking --against ".git#ref=$rev,subdir=."
  checked=$((checked + 1))
done
echo "buf breaking: compatible with $checked earlier revision(s) of proto/" >&2
