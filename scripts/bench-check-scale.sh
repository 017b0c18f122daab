#!/usr/bin/env bash
# What check needs at scale, against what create needed for the same data: a tree of
# 1,000,000 files of 1 KiB (1,000 a directory) backed up into about 20,000 packs
# (CAIRN_PACK_SIZE, since 1 GiB of data fills only 64 packs of the default size), then
# check, check --verify-data and check --subset 1/10, each with its wall time and peak RSS.
#   scripts/bench-check-scale.sh [--files N] [--pack-size BYTES]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; the tree is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
files=1000000
pack_size=28000
while [ $# -gt 0 ]; do
  case $1 in
    --files) files="$2"; shift 2 ;;
    --pack-size) pack_size="$2"; shift 2 ;;
    *) echo "usage: $0 [--files N] [--pack-size BYTES]" >&2; exit 2 ;;
  esac
done
[ -x /usr/bin/time ] || apt-get install -y -qq time >/dev/null
cairn_build --example gendata
cairn_workdir bench-check-scale
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
tree="$work/t$files"
if [ ! -d "$tree" ]; then "$bin/examples/gendata" files "$tree.tmp" "$files" 1K 5 && mv "$tree.tmp" "$tree"; fi
repo="$work/repo"
rm -rf "$repo" "$work/cache"
"$cairn" init -r "$repo" >/dev/null
results="$work/results"
: > "$results"
# measured LABEL CMD...: "LABEL seconds peak-RSS-KiB".
measured() {
  local label=$1; shift
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$work/rss" "$@" >/dev/null 2>"$work/last.err" || {
    [ $? -le 1 ] || { echo "FAILED: $label: $*" >&2; tail -3 "$work/last.err" >&2; return 1; }; }
  end=$(date +%s%N)
  echo "$label $(echo "($end - $start) / 1000000000" | bc -l) $(tail -1 "$work/rss")" >> "$results"
}
find "$tree" -type f -print0 | xargs -0 cat > /dev/null
(cd "$work" && CAIRN_PACK_SIZE=$pack_size measured create "$cairn" -r "$repo" create --no-progress t "t$files")
packs=$(find "$repo/packs" -type f | wc -l)
measured check "$cairn" -r "$repo" check --no-progress
measured check-verify-data "$cairn" -r "$repo" check --no-progress --verify-data
measured check-subset-1/10 "$cairn" -r "$repo" check --no-progress --subset 1/10
echo "$(nproc) cores, $(date -u +%Y-%m-%d); $files files of 1 KiB, $packs packs"
echo
echo "| step | time | peak RSS | RSS vs create |"
echo "|---|---|---|---|"
create_rss=$(awk '$1 == "create" { print $3 }' "$results")
awk -v c="$create_rss" '{ printf "| %s | %.1f s | %.0f MB | %.2f × |\n", $1, $2, $3 / 1024, $3 / c }' "$results"
