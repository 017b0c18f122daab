#!/usr/bin/env bash
# Two builds of cairn on the data sets of scripts/bench-peers.sh, interleaved, so that a change
# can be held to "within N% of before": create, unchanged re-create, extract, check,
# check --verify-data; wall time medians of N runs.
#   scripts/bench-versions.sh [--runs N] [--only large|small|tree] OLD_BINARY NEW_BINARY
# `tree` (only when asked: it takes minutes) is 200,000 files of 1 KiB in nested directories,
# the largest tree of scripts/bench-scale.sh: the walk's cost, file by file.
# Build the old one from another checkout (git worktree add /tmp/old <commit>; cargo build
# --release there with its own CARGO_TARGET_DIR). BENCH_DIR picks the work directory (default:
# a new one under /var/tmp; kept, and its data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=5
only=""
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) bins+=("$1") ;;
  esac
  shift
done
[ ${#bins[@]} -eq 2 ] || { echo "usage: $0 [--runs N] [--only large|small|tree] OLD NEW" >&2; exit 2; }
. scripts/bench-data.sh
bench_setup versions
bench_data
if [ "$only" = tree ] && [ ! -d "$work/data/tree" ]; then
  "$gen" files "$work/data/tree.tmp" 200000 1K 5 && mv "$work/data/tree.tmp" "$work/data/tree"
fi
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
: > "$work/results"
sets=(large small)
[ -n "$only" ] && sets=("$only")
cd "$work/data"
for r in $(seq 1 "$runs"); do
  # Which build goes first alternates from run to run: the second of two extracts in a row
  # pays for the first one's writeback, and would look slower for it.
  if [ $((r % 2)) -eq 1 ]; then order="0 1"; else order="1 0"; fi
  for set in "${sets[@]}"; do
    for v in $order; do
      bin=${bins[$v]}
      repo="$work/repos/$set-$v-$r-$(date +%s%N)"
      echo "$repo" > "$work/repo.$v"
      "$bin" -r "$repo" init >/dev/null
      warm "$set"
      timed "$set create $v" "$bin" -r "$repo" create --no-progress "$set" "$set"
    done
    for v in $order; do
      warm "$set"
      timed "$set recreate-unchanged $v" "${bins[$v]}" -r "$(cat "$work/repo.$v")" create --no-progress "$set" "$set"
    done
    for op in extract check check-verify-data; do
      for v in $order; do
        repo=$(cat "$work/repo.$v")
        sync
        warm "$repo"
        case $op in
          extract)
            target="$work/restores/$set-$v-$r-$(date +%s%N)"
            timed "$set $op $v" "${bins[$v]}" -r "$repo" extract --no-progress "$set" --target "$target" ;;
          check) timed "$set $op $v" "${bins[$v]}" -r "$repo" check --no-progress ;;
          check-verify-data) timed "$set $op $v" "${bins[$v]}" -r "$repo" check --no-progress --verify-data ;;
        esac
      done
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs; old = ${bins[0]}, new = ${bins[1]}"
echo
echo "| data | operation | old | new | new / old |"
echo "|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { k = $1 " " $2; t[k, $3] = t[k, $3] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END { for (i = 1; i <= m; i++) { k = order[i]; split(k, p, " "); o = median(t[k, 0]); w = median(t[k, 1]);
    printf "| %s | %s | %.2f s | %.2f s | %.3f |\n", p[1], p[2], o / 1000, w / 1000, w / o } }' "$work/results"
