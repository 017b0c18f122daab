#!/usr/bin/env bash
# What the lock and deletion protocol costs, for two builds of cairn (before and after a
# change), on the data sets of scripts/bench-peers.sh:
#  - store operations of each step (a first create, an unchanged re-create, a delete, a
#    compact that frees an archive's data, a compact with nothing to do), counted with
#    CAIRN_STORE_LOG;
#  - compact's wall time when nothing waits (a second archive of the large set with a quarter
#    of its files changed, the first archive deleted, then compact), interleaved, medians of N.
#   scripts/bench-maintenance.sh [--runs N] OLD_BINARY NEW_BINARY
# Build the old one from another checkout with its own CARGO_TARGET_DIR (see bench-versions.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=5
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    *) bins+=("$1") ;;
  esac
  shift
done
[ ${#bins[@]} -eq 2 ] || { echo "usage: $0 [--runs N] OLD NEW" >&2; exit 2; }
. scripts/bench-data.sh
bench_setup maintenance
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
: > "$work/results"
# The changed copy of the large set: two of its eight files replaced.
if [ ! -d "$work/data/changed" ]; then
  mkdir -p "$work/data/changed"
  cp "$work/data/large"/* "$work/data/changed/"
  "$gen" mixed "$work/data/changed/f1" 128M 91
  "$gen" mixed "$work/data/changed/f2" 128M 92
fi
cd "$work/data"

# Store operations per step, from the log (one line per operation).
ops() {
  local log="$work/ops.log"
  : > "$log"
  CAIRN_STORE_LOG="$log" "$@" >/dev/null 2>&1
  wc -l < "$log"
}
echo "| step | old | new |" > "$work/ops.md"
echo "|---|---|---|" >> "$work/ops.md"
# One repository (made by the new build), copied: both builds then cut the same chunks under
# the same keys, and their counts differ only by what they do, not by the data.
declare -A count
first="$work/repos/ops-$(date +%s%N)"
"${bins[1]}" -r "$first" init >/dev/null
for v in 0 1; do
  rm -rf "$first-$v"
  cp -a "$first" "$first-$v"
done
for v in 0 1; do
  bin=${bins[$v]}
  repo="$first-$v"
  count["create (first, 20,000 files),$v"]=$(ops "$bin" -r "$repo" create --no-progress small small)
  count["create (unchanged),$v"]=$(ops "$bin" -r "$repo" create --no-progress small small)
  count["list,$v"]=$(ops "$bin" -r "$repo" list)
  "$bin" -r "$repo" create --no-progress large large >/dev/null
  count["delete (one archive),$v"]=$(ops "$bin" -r "$repo" delete large)
  count["compact (frees 1 GiB),$v"]=$(ops "$bin" -r "$repo" compact --no-progress)
  count["compact (nothing to do),$v"]=$(ops "$bin" -r "$repo" compact --no-progress)
done
# (extract is left out: which pack reads its workers coalesce varies from run to run.)
for step in "create (first, 20,000 files)" "create (unchanged)" "list" "delete (one archive)" \
  "compact (frees 1 GiB)" "compact (nothing to do)"; do
  echo "| $step | ${count["$step,0"]} | ${count["$step,1"]} |" >> "$work/ops.md"
done

for r in $(seq 1 "$runs"); do
  if [ $((r % 2)) -eq 1 ]; then order="0 1"; else order="1 0"; fi
  for v in $order; do
    bin=${bins[$v]}
    repo="$work/repos/compact-$v-$r-$(date +%s%N)"
    "$bin" -r "$repo" init >/dev/null
    "$bin" -r "$repo" create --no-progress large large >/dev/null
    "$bin" -r "$repo" create --no-progress changed changed >/dev/null
    "$bin" -r "$repo" delete large >/dev/null
    sync
    timed "compact $v" "$bin" -r "$repo" compact --no-progress
    rm -rf "$repo"
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d); old = ${bins[0]}, new = ${bins[1]}"
echo
echo "Store operations (CAIRN_STORE_LOG lines):"
echo
cat "$work/ops.md"
echo
echo "compact, 1 GiB archive deleted beside a quarter-changed copy (medians of $runs runs):"
echo
echo "| operation | old | new | new / old |"
echo "|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { t[$2] = t[$2] " " $3 }
  END { o = median(t[0]); w = median(t[1]);
    printf "| compact | %.2f s | %.2f s | %.3f |\n", o / 1000, w / 1000, w / o }' "$work/results"
