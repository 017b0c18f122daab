#!/usr/bin/env bash
# Makes tests/golden/repo and tests/golden/repo-chacha20poly1305-blake3, the golden
# repositories (one per cipher suite) that tests/engine/golden.rs lists, checks and restores:
# run it when the on-disk format changes on purpose (and say so in the commit), never to make a
# failing golden test pass.
#   scripts/make-golden.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf tests/golden/repo tests/golden/repo-chacha20poly1305-blake3
cargo test --locked --test engine -- --ignored --exact golden::make_golden_repository --nocapture
du -sh tests/golden/repo*
