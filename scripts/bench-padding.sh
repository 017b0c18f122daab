#!/usr/bin/env bash
# What `init --padding padme` costs: repository size and create time with and without it, on
# the data sets of scripts/bench-peers.sh (1 GiB of 2:1-compressible data in 8 files; 20,000
# files of 4 KiB), interleaved, medians of N runs.
#   scripts/bench-padding.sh [--runs N]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept, and the
# data in it is reused by later runs, as bench-peers.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    *) echo "usage: $0 [--runs N]" >&2; exit 2 ;;
  esac
  shift
done
. scripts/bench-data.sh
bench_setup padding
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
unset CAIRN_PACK_SIZE CAIRN_THREADS CAIRN_PACK_ASYNC
: > "$work/results"
cd "$work/data"
for r in $(seq 1 "$runs"); do
  for set in large small; do
    for padding in none padme; do
      repo="$work/repos/$set-$padding-$r-$(date +%s%N)"
      "$cairn" -r "$repo" init --padding "$padding" >/dev/null
      find "$set" -type f -exec cat {} + >/dev/null
      start=$(date +%s%N)
      "$cairn" -r "$repo" create --no-progress "$set" "$set" >/dev/null
      end=$(date +%s%N)
      size=$(du -sb "$repo/packs" "$repo/index" "$repo/archives" | awk '{ s += $1 } END { print s }')
      echo "$set $padding $(( (end - start) / 1000000 )) $size" >> "$work/results"
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs"
echo
echo "| data | padding | create | stored (packs, index, archives) | overhead |"
echo "|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { k = $1 " " $2; t[k] = t[k] " " $3; s[k] = $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END { for (i = 1; i <= m; i++) { split(order[i], p, " "); base = s[p[1] " none"];
    printf "| %s | %s | %.2f s | %.1f MiB | %+.2f%% |\n", p[1], p[2], median(t[order[i]]) / 1000, s[order[i]] / 1048576, 100 * (s[order[i]] - base) / base } }' "$work/results"
