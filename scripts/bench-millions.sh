#!/usr/bin/env bash
# Ten million files against one million: every step a user runs on a large tree, with its
# wall time, time per file and peak RSS, for trees of small files (48 bytes, each unique) in
# two shapes: `deep` (100 files in each leaf of a tree six directories deep) and `flat`
# (100,000 files in each directory). Steps: create, unchanged re-create, list of the archive,
# find of one name in both archives, diff of the two archives, check, browsing a mount
# (`find -printf` of every path and size; RSS and CPU are the mount's), extract. Beside them, what the
# file system itself takes for the tree, without cairn: `walk` (find -printf of every path
# and size: each directory listed, each entry stat'ed) and `read` (every file opened and read,
# by find and cat), the floor under create's time.
#   scripts/bench-millions.sh [--files "1000000 10000000"] [--shapes "deep flat"] [--steps "create check"]
# --steps runs only the steps named (create always runs: the others read its archive; list,
# find, diff, mount and extract read the re-create's too, which they then run).
# The trees live on ext4 file systems in sparse image files, loop-mounted (root needed), with
# inline data: a 48-byte file then takes its 256-byte inode and no block, so ten million
# files need about 3 GB instead of 40. The source and the restore each get a new file system,
# so extract does not run on one that has just deleted millions of files (ext4 creates files
# several times more slowly for minutes after that). The repository and cache are on the
# work directory's file system.
# BENCH_DIR picks the work directory (default: a new one under /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
sizes="1000000 10000000"
shapes="deep flat"
steps="walk read create re-create list find diff check mount extract"
while [ $# -gt 0 ]; do
  case $1 in
    --files) sizes="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "usage: $0 [--files \"N...\"] [--shapes \"deep flat\"] [--steps \"STEP...\"]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "$0: needs root (loop-mounted file systems)" >&2; exit 2; }
[ -x /usr/bin/time ] || apt-get install -y -qq time >/dev/null
. scripts/bench-data.sh
bench_setup millions
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
results="$work/millions-results"
: > "$results"
mounted=()
cleanup() {
  local m
  fusermount -u "$work/mnt" 2>/dev/null || true
  for m in "${mounted[@]}"; do
    if mountpoint -q "$m"; then unscratch "$(basename "$m")" || true; fi
  done
  rm -f "$work"/*.img
}
trap cleanup EXIT
# wanted STEP: whether STEP runs (the steps that read archive b need the re-create).
wanted() {
  case " $steps " in *" $1 "*) return 0 ;; esac
  case $1 in
    create) return 0 ;;
    re-create) case " $steps " in *" list "*|*" find "*|*" diff "*|*" mount "*|*" extract "*) return 0 ;; esac ;;
  esac
  return 1
}

# scratch NAME FILES: a new ext4 file system for FILES files at $work/NAME.
scratch() {
  local name=$1 files=$2
  local img="$work/$name.img"
  rm -f "$img"
  truncate -s $((files * 400 + (1 << 30))) "$img"
  mkfs.ext4 -q -F -O inline_data -I 256 -N $((files + files / 50 + 10000)) \
    -E lazy_itable_init=1,nodiscard "$img"
  mkdir -p "$work/$name"
  # Direct I/O from the loop device to the image: without it, every block of the file system
  # is cached twice (the device's and the image file's pages), and at ten million files the
  # kernel then evicts inodes it needs again.
  local dev
  dev=$(losetup -f --show --direct-io=on "$img")
  mount -o noinit_itable "$dev" "$work/$name"
  mounted+=("$work/$name")
}
unscratch() {
  local dev
  dev=$(findmnt -n -o SOURCE "$work/$1")
  umount "$work/$1"
  losetup -d "$dev" 2>/dev/null || true
  rm -f "$work/$1.img"
}
# measured STEP SHAPE FILES CMD...: wall seconds (between two syncs) and peak RSS (KiB).
measured() {
  local step=$1 shape=$2 files=$3; shift 3
  local start end
  sync
  start=$(date +%s%N)
  /usr/bin/time -f '%M %U %S' -o "$work/rss" "$@" >/dev/null 2>"$work/last.err" && sync || {
    echo "FAILED: $step: $*" >&2; tail -3 "$work/last.err" >&2; return 1; }
  end=$(date +%s%N)
  echo "$step $shape $files $(echo "($end - $start) / 1000000000" | bc -l) $(tail -1 "$work/rss")" >> "$results"
  echo "  $step: $(echo "($end - $start) / 1000000000" | bc -l | cut -c1-6) s; KiB, user s, system s: $(tail -1 "$work/rss")" >&2
}
# browse: every path and size under a fresh mount of archive b; the time is the walk's, the
# RSS the mount process's (in the foreground, under /usr/bin/time, stopped with SIGTERM).
browse() {
  local shape=$1 files=$2 mnt="$work/mnt" pid start end i
  mkdir -p "$mnt"
  sync
  /usr/bin/time -f '%M %U %S' -o "$work/rss" "$cairn" -r "$repo" mount -f "$b" "$mnt" >/dev/null 2>"$work/mount.err" &
  pid=$!
  for i in $(seq 1 600); do mountpoint -q "$mnt" && break; sleep 0.1; done
  start=$(date +%s%N)
  find "$mnt" -printf '%s %p\n' >/dev/null
  end=$(date +%s%N)
  pkill -TERM -P "$pid" || true
  wait "$pid" || true
  echo "mount-browse $shape $files $(echo "($end - $start) / 1000000000" | bc -l) $(tail -1 "$work/rss")" >> "$results"
  echo "  mount-browse: $(echo "($end - $start) / 1000000000" | bc -l | cut -c1-6) s; KiB, user s, system s: $(tail -1 "$work/rss")" >&2
}

for shape in $shapes; do
  for n in $sizes; do
    echo "$shape, $n files" >&2
    repo="$work/repo"
    rm -rf "$repo" "$work/cache"
    "$cairn" init -r "$repo" >/dev/null
    scratch src "$n"
    "$gen" tree "$work/src/t" "$n" 48 "$shape" 7
    sync
    # The tree is read from the disk by the first step (walk), not from what making it left.
    if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; fi
    cd "$work/src"
    if wanted walk; then measured walk "$shape" "$n" find t -printf '%s %p\n'; fi
    if wanted read; then measured read "$shape" "$n" sh -c 'find t -type f -exec cat {} + >/dev/null'; fi
    measured create "$shape" "$n" "$cairn" -r "$repo" create --no-progress a t
    # The same series again, as a nightly backup runs: its files cache says every file is
    # unchanged, and no file is read.
    if wanted re-create; then
      measured re-create "$shape" "$n" "$cairn" -r "$repo" create --no-progress a t
    fi
    cd - >/dev/null
    ids=$("$cairn" -r "$repo" list --json-lines | sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p')
    a="aid:$(echo "$ids" | sed -n 1p)" b="aid:$(echo "$ids" | sed -n 2p)"
    if wanted list; then measured list "$shape" "$n" "$cairn" -r "$repo" list "$b"; fi
    if wanted find; then measured find "$shape" "$n" "$cairn" -r "$repo" find f00000042; fi
    if wanted diff; then measured diff "$shape" "$n" "$cairn" -r "$repo" diff "$a" "$b"; fi
    if wanted check; then measured check "$shape" "$n" "$cairn" -r "$repo" check --no-progress; fi
    if wanted mount; then browse "$shape" "$n"; fi
    unscratch src
    if wanted extract; then
      scratch dst "$n"
      measured extract "$shape" "$n" "$cairn" -r "$repo" extract --no-progress "$b" --target "$work/dst/r"
      unscratch dst
    fi
    du -sm "$repo" "$work/cache" | awk -v s="$shape" -v n="$n" '{ printf "  %s: %d MB\n", $2, $1 }' >&2
  done
done

echo "$(nproc) cores, $(date -u +%Y-%m-%d); cairn $("$cairn" --version | cut -d' ' -f2); files of 48 bytes on ext4 (inline data, loop-mounted)"
echo
echo "| shape | step | files | time | per file | CPU (user + system) per file | peak RSS | RSS per file |"
echo "|---|---|---|---|---|---|---|---|"
awk '{ printf "| %s | %s | %d | %.1f s | %.2f µs | %.2f + %.2f µs | %.0f MB | %.0f B |\n", $2, $1, $3, $4, $4 / $3 * 1e6, $6 / $3 * 1e6, $7 / $3 * 1e6, $5 / 1024, $5 * 1024 / $3 }' "$results"
echo
echo "Growth from the smallest to the largest tree: time per file, and peak RSS added per added file:"
awk '
  { t[$2, $1, $3] = $4 / $3; m[$2, $1, $3] = $5; if (!min || $3 < min) min = $3; if ($3 > max) max = $3
    if (!(($2, $1) in seen)) { seen[$2, $1] = 1; order[++k] = $2 SUBSEP $1 } }
  END {
    for (i = 1; i <= k; i++) {
      split(order[i], p, SUBSEP)
      if (((p[1], p[2], min) in t) && ((p[1], p[2], max) in t))
        printf "- %s %s: time per file %.2f x; RSS %.0f MB to %.0f MB, %.0f B per added file (%d to %d files)\n", p[1], p[2],
          t[p[1], p[2], max] / t[p[1], p[2], min], m[p[1], p[2], min] / 1024, m[p[1], p[2], max] / 1024,
          (m[p[1], p[2], max] - m[p[1], p[2], min]) * 1024 / (max - min), min, max
    }
  }' "$results"
