#!/usr/bin/env bash
# The test suite: what the README's test command runs and CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ci-setup.sh
cargo test --locked "$@"
