#!/usr/bin/env bash
# The host's classifier at the sizes the sizes issue names, with more trials than the test
# suite runs: a known set of 1000 small files and a known 50 MiB compressible file, each told
# from a decoy by a keyless host comparing object sizes over fresh repositories (fresh keys);
# and the index fragment sizes of an incremental backup of 37 vs 41 changed files.
#   scripts/bench-sizes.sh [--trials N] [--mib M]
# Prints the rows of docs/reliability.md's sizes table (accuracy: 50% is chance).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
trials=100
mib=50
while [ $# -gt 0 ]; do
  case "$1" in
    --trials) trials="$2"; shift ;;
    --mib) mib="$2"; shift ;;
    *) echo "usage: $0 [--trials N] [--mib M]" >&2; exit 2 ;;
  esac
  shift
done
CAIRN_TEST_TRIALS="$trials" CAIRN_TEST_RECOGNISE_MIB="$mib" \
  cargo test --release --locked --test security -- --nocapture --test-threads 1 \
  a_host_cannot_recognise an_incremental_backup_does_not_give 2>&1 |
  grep -E '^\| |^fragment sizes|^test |test result'
