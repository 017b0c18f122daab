#!/usr/bin/env bash
# kill -9 torture: create/compact/check/delete in a loop on a changing tree, each killed with
# SIGKILL after a random delay; every committed archive must extract identically to the tree
# it was made from, and check must never find damage.
# --clients: the many-clients torture instead: several creates in separate PID namespaces with
# skewed clocks, while compact, prune, delete and check --repair run in between (needs root).
#   scripts/torture.sh [--clients] [--duration SECONDS] [--seed N]   (default 120 s, random seed)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=120
test_name=torture
prefix="torture:"
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) test_name=torture_clients; prefix="torture-clients:" ;;
    --duration) duration="$2"; shift ;;
    --seed) export CAIRN_TORTURE_SEED="$2"; shift ;;
    *) echo "usage: $0 [--clients] [--duration SECONDS] [--seed N]" >&2; exit 2 ;;
  esac
  shift
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
CAIRN_TORTURE_SECS="$duration" cargo test --locked --test torture -- --ignored --nocapture "$test_name::" >"$log" 2>&1 || status=$?
if [ $status = 0 ]; then
  grep -E "^$prefix" "$log"
else
  cat "$log"
fi
exit $status
