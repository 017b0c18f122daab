#!/usr/bin/env bash
# kill -9 torture: create/compact/check/delete in a loop on a changing tree, each killed with
# SIGKILL after a random delay; every committed archive must extract identically to the tree
# it was made from, and check must never find damage.
#   scripts/torture.sh [--duration SECONDS] [--seed N]     (default 120 s, a random seed)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=120
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration="$2"; shift ;;
    --seed) export CAIRN_TORTURE_SEED="$2"; shift ;;
    *) echo "usage: $0 [--duration SECONDS] [--seed N]" >&2; exit 2 ;;
  esac
  shift
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
CAIRN_TORTURE_SECS="$duration" cargo test --locked --test torture -- --ignored --nocapture >"$log" 2>&1 || status=$?
if [ $status = 0 ]; then
  grep -E "^torture:" "$log"
else
  cat "$log"
fi
exit $status
