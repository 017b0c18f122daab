#!/usr/bin/env bash
# What each --compression costs and saves: repository size, create and extract times, for
# lz4, zstd levels 1, 3 and 10, auto and none, on the data sets of scripts/bench-peers.sh
# (large: 1 GiB of random blocks and zeros; small: 20,000 files of 4 KiB) and on real text
# and code (/usr/include, about 130 MB of C headers, as found on the machine).
# Wall time medians of N runs, codecs interleaved in each run; data read into the page cache
# right before each timing.
#   scripts/bench-compression.sh [--runs N]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
[ "${1:-}" = "--runs" ] && runs="$2"
. scripts/bench-data.sh
bench_setup compression
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
unset CAIRN_PACK_SIZE CAIRN_THREADS CAIRN_PACK_ASYNC CAIRN_STORE_LATENCY CAIRN_STORE_BANDWIDTH
text=/usr/include
codecs=(lz4 zstd,1 zstd,3 zstd,10 auto none)
: > "$work/results"
: > "$work/sizes"
cd "$work/data"
for r in $(seq 1 "$runs"); do
  for set in large small text; do
    src="$set"
    [ "$set" = text ] && src="$text"
    for c in "${codecs[@]}"; do
      repo="$work/repos/compression-$set-$c-$r-$(date +%s%N)"
      "$cairn" -r "$repo" init --padding none >/dev/null
      warm "$src"
      timed "$set create $c" "$cairn" -r "$repo" create --no-progress -C "$c" "$set" "$src"
      echo "$set $c $(du -sb "$repo/packs" | cut -f1)" >> "$work/sizes"
      sync
      warm "$repo"
      target="$work/restores/$set-$c-$r-$(date +%s%N)"
      timed "$set extract $c" "$cairn" -r "$repo" extract --no-progress "$set" --target "$target"
      # Eight large files go at once (the disk would not hold them all); the many small
      # files stay until the end (ext4 creates files slowly for minutes after a mass delete).
      [ "$set" = large ] && rm -rf "$target"
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs"
echo
echo "| data | compression | packs | create | extract |"
echo "|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  FNR == NR { s[$1 " " $2] = $3; next }
  { k = $1 " " $3; t[k, $2] = t[k, $2] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END { for (i = 1; i <= m; i++) { k = order[i]; split(k, p, " ");
    printf "| %s | %s | %.1f MB | %.2f s | %.2f s |\n", p[1], p[2], s[k] / 1e6, median(t[k, "create"]) / 1000, median(t[k, "extract"]) / 1000 } }' \
  "$work/sizes" "$work/results"
rm -rf "$work/repos"/compression-* "$work/restores"
