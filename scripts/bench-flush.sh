#!/usr/bin/env bash
# What two packs in flight buy on a disk whose flush is slow (issue 45): `create` of 512 MiB of
# mixed data (4 × 128 MiB, half 4 KiB random blocks, half zeros) into a local repository whose
# every write takes CAIRN_STORE_FLUSH_MS longer after it has given its bytes back (an fsync
# that waits for a slow device), with
#
#   default  one pack in flight, two buffers (the seed's contract)
#   2        two packs in flight, three buffers (CAIRN_PACK_INFLIGHT=2)
#   2:2      two packs in flight within two buffers (CAIRN_PACK_INFLIGHT=2:2): a pack is
#            filled in the buffer the older store gave back before its flush
#
# at flush delays of 0, 20 and 50 ms. Runs interleave the three settings; each repository is
# new; the data is read into the page cache right before each run. Prints the medians (s).
#
# Usage: scripts/bench-flush.sh [--runs N] [--delays "0 20 50"]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env

runs=3
delays="0 20 50"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --delays) delays="$2"; shift ;;
    *) echo "usage: $0 [--runs N] [--delays \"0 20 50\"]" >&2; exit 2 ;;
  esac
  shift
done

cairn_build --example gendata
gen="$bin/examples/gendata"
cairn_workdir bench-flush
echo "work directory: $work" >&2
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
data="$work/data"
if [ ! -d "$data" ]; then
  mkdir -p "$data"
  for i in 1 2 3 4; do "$gen" mixed "$data/f$i" 128M "$((i + 20))"; done
fi
: > "$work/results"

settings=(default 2 2:2)
for r in $(seq 1 "$runs"); do
  for d in $delays; do
    for s in "${settings[@]}"; do
      repo="$work/repo-$s-$d"
      rm -rf "$repo"
      "$cairn" -r "$repo" init >/dev/null 2>&1
      find "$data" -type f -exec cat {} + >/dev/null
      env=()
      [ "$d" != 0 ] && env+=("CAIRN_STORE_FLUSH_MS=$d")
      [ "$s" != default ] && env+=("CAIRN_PACK_INFLIGHT=$s")
      start=$(date +%s%N)
      env "${env[@]}" "$cairn" -r "$repo" create --no-progress b "$data" >/dev/null
      end=$(date +%s%N)
      echo "$d $s $(( (end - start) / 1000000 ))" >> "$work/results"
    done
  done
done

printf '%-10s' "flush ms"
for s in "${settings[@]}"; do printf '%12s' "$s"; done
echo
for d in $delays; do
  printf '%-10s' "$d"
  for s in "${settings[@]}"; do
    m=$(awk -v d="$d" -v s="$s" '$1 == d && $2 == s { print $3 / 1000 }' "$work/results" | median)
    printf '%12s' "$m"
  done
  echo
done
