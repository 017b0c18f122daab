#!/usr/bin/env bash
# Installs what a fresh machine lacks for the test suite. Idempotent.
set -euo pipefail
if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
need=()
command -v setpriv >/dev/null || need+=(util-linux)
command -v diff >/dev/null || need+=(diffutils)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq "${need[@]}"
  else
    echo "missing: ${need[*]} (install them and re-run)" >&2
    exit 1
  fi
fi
