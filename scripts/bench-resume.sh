#!/usr/bin/env bash
# An extract over a target that holds most of the archive already, on a bandwidth-limited
# store (CAIRN_STORE_BANDWIDTH, default 400 Mbit/s, and 10 ms a request): 24 files of 8 MiB
# (the mixed data of bench-data.sh). Each round times, one after the other, in one target:
#   - a full extract into an empty directory;
#   - an extract after 3 of the 24 files were overwritten with other bytes;
#   - an extract after 14 of the 24 were deleted (what an extract interrupted past half way
#     leaves).
# Prints each time and the medians of N rounds.
#   scripts/bench-resume.sh [--runs N] [--cairn BINARY]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
cairn_given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --cairn) cairn_given="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
. scripts/bench-data.sh
bench_setup resume
[ -n "$cairn_given" ] && cairn="$cairn_given"
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache" CAIRN_REPO="$work/repo"
if [ ! -d "$work/src" ]; then
  mkdir -p "$work/src"
  for i in $(seq -w 0 23); do "$gen" mixed "$work/src/f$i" 8M "$((10#$i + 100))"; done
fi
if [ ! -d "$CAIRN_REPO" ]; then
  "$cairn" init >/dev/null
  (cd "$work" && "$cairn" create --no-progress a src >/dev/null)
fi
export CAIRN_STORE_BANDWIDTH="${CAIRN_STORE_BANDWIDTH:-400000000}"
export CAIRN_STORE_LATENCY="${CAIRN_STORE_LATENCY:-10000}"
now() { date +%s.%N; }
: >"$work/results"
for r in $(seq 1 "$runs"); do
  t="$work/t-$r"
  rm -rf "$t"
  warm "$CAIRN_REPO"
  s=$(now); "$cairn" extract a --target "$t" --no-progress >/dev/null; e=$(now)
  echo "full $(echo "$e - $s" | bc)" | tee -a "$work/results"
  for f in 03 11 19; do "$gen" mixed "$t/src/f$f" 8M "$((r * 1000 + 10#$f))"; done
  warm "$CAIRN_REPO"
  s=$(now); "$cairn" extract a --target "$t" --no-progress >/dev/null; e=$(now)
  echo "three-differ $(echo "$e - $s" | bc)" | tee -a "$work/results"
  rm -f "$t"/src/f1* "$t"/src/f2*
  warm "$CAIRN_REPO"
  s=$(now); "$cairn" extract a --target "$t" --no-progress >/dev/null; e=$(now)
  echo "half-missing $(echo "$e - $s" | bc)" | tee -a "$work/results"
done
echo
echo "| step | median of $runs |"
echo "|---|---|"
for step in full three-differ half-missing; do
  awk -v s="$step" '$1 == s { print $2 }' "$work/results" | sort -n |
    awk -v s="$step" '{ v[NR] = $1 } END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "| %s | %.2f s |\n", s, m }'
done
# The restored trees are kept until the end (ext4 creates files slowly after mass deletes).
rm -rf "$work"/t-*
