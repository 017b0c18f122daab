#!/usr/bin/env bash
# Browsing a backup without restoring it, on the data sets of scripts/bench-peers.sh:
#   - extract of the large set (1 GiB, 8 files) against reading every file through `mount`
#     (`cat` of each, one at a time, as a user copying files out would);
#   - `ls -lR` of a fresh mount of the small set (20,000 files), reading the archive's items
#     included;
#   - export-tar of the large set to a pipe.
# Wall time medians of N runs, interleaved; the repository is read into the page cache right
# before each timing. Needs root and /dev/fuse for the mount rows.
#   scripts/bench-browse.sh [--runs N]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=5
[ "${1:-}" = "--runs" ] && runs="$2"
. scripts/bench-data.sh
bench_setup browse
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
export CAIRN_REPO="$work/browse-repo"
if [ ! -d "$CAIRN_REPO" ]; then
  "$cairn" init >/dev/null
  (cd "$work/data" && "$cairn" create --no-progress large large >/dev/null && "$cairn" create --no-progress small small >/dev/null)
fi
# Every timed step starts from the same page cache: written back, emptied (as root), and
# then the repository read in. Without that, whichever step follows an extract pays for the
# gigabyte of restored pages it left: reads through FUSE fill the page cache too, and were
# measured up to 2x slower right after an extract than right after a drop.
settle() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 1 > /proc/sys/vm/drop_caches; fi
  warm "$CAIRN_REPO"
}
mnt="$work/mnt"
mkdir -p "$mnt" "$work/restores"
: > "$work/results"
cleanup() { fusermount -u "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
extract() {
  settle
  timed "extract" "$cairn" extract --no-progress large --target "$work/restores/$r-$(date +%s%N)"
  sync
}
read_mount() {
  settle
  "$cairn" mount large "$mnt" >/dev/null
  timed "read-through-mount" warm "$mnt"
  "$cairn" umount "$mnt"
}
for r in $(seq 1 "$runs"); do
  if [ $((r % 2)) -eq 1 ]; then extract; read_mount; else read_mount; extract; fi
  settle
  "$cairn" mount small "$mnt" >/dev/null
  timed "ls-lR-20000-files" ls -lR "$mnt"
  "$cairn" umount "$mnt"
  settle
  timed "export-tar" sh -c "\"$cairn\" export-tar large - | cat >/dev/null"
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs; $(du -sh "$work/data/large" | cut -f1) large set, 20,000-file small set"
echo
echo "| operation | time |"
echo "|---|---|"
awk "$MEDIAN_AWK"'
  { t[$1] = t[$1] " " $2; if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 } }
  END { for (i = 1; i <= m; i++) printf "| %s | %.2f s |\n", order[i], median(t[order[i]]) / 1000 }' "$work/results"
rm -rf "$work/restores"
