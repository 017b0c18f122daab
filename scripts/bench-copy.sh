#!/usr/bin/env bash
# Copying archives between repositories, cairn copy against restic copy, on the data sets of
# scripts/bench-peers.sh: the large set (1 GiB, 8 files) and the small set (20,000 files of
# 4 KiB), each backed up once into a source repository of each tool, then copied into an
# empty destination (made with the source's chunker parameters, as a user preparing a copy
# would: `init --copy-chunker-params-from`, restic `init --copy-chunker-params`). Wall-time
# medians of N runs, the tools interleaved; the source is read into the page cache right
# before each timing.
#   scripts/bench-copy.sh [--runs N]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
# Installs restic from the distribution when missing (as root with apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
[ "${1:-}" = "--runs" ] && runs="$2"
if ! command -v restic >/dev/null; then
  apt-get install -y -qq restic >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq restic >/dev/null; }
fi
. scripts/bench-data.sh
bench_setup copy
bench_data
export CAIRN_PASSPHRASE=bench CAIRN_FROM_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
export RESTIC_PASSWORD=bench RESTIC_FROM_PASSWORD=bench RESTIC_CACHE_DIR="$work/cache/restic"
src="$work/copy-src"
mkdir -p "$src" "$work/copy-dst"
for set in large small; do
  if [ ! -d "$src/cairn-$set" ]; then
    "$cairn" -r "$src/cairn-$set" init >/dev/null
    (cd "$work/data" && "$cairn" -r "$src/cairn-$set" create --no-progress "$set" "$set" >/dev/null)
  fi
  if [ ! -d "$src/restic-$set" ]; then
    restic -r "$src/restic-$set" init >/dev/null
    (cd "$work/data" && restic -r "$src/restic-$set" backup -q "$set" >/dev/null)
  fi
done
: > "$work/results"
one() { # TOOL SET RUN
  local from="$src/$1-$2" to="$work/copy-dst/$1-$2-$3"
  case $1 in
    cairn)
      "$cairn" -r "$to" init --copy-chunker-params-from "$from" >/dev/null
      warm "$from"
      timed "$1-$2" "$cairn" -r "$to" copy --no-progress --from-repo "$from" ;;
    restic)
      restic -r "$to" init --from-repo "$from" --copy-chunker-params >/dev/null
      warm "$from"
      timed "$1-$2" restic -r "$to" copy -q --from-repo "$from" ;;
  esac
}
for r in $(seq 1 "$runs"); do
  for set in large small; do
    if [ $((r % 2)) -eq 1 ]; then one cairn $set $r; one restic $set $r; else one restic $set $r; one cairn $set $r; fi
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs; cairn $("$cairn" --version | cut -d' ' -f2), $(restic version | cut -d' ' -f1-2)"
echo
echo "| copy of | cairn | restic |"
echo "|---|---|---|"
awk "$MEDIAN_AWK"'
  { t[$1] = t[$1] " " $2 }
  END { for (s = 1; s <= 2; s++) { set = s == 1 ? "large" : "small";
          printf "| %s | %.2f s | %.2f s |\n", set == "large" ? "1 GiB, 8 files" : "20,000 files", median(t["cairn-" set]) / 1000, median(t["restic-" set]) / 1000 } }' "$work/results"
rm -rf "$work/copy-dst"
