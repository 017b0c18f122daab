#!/usr/bin/env bash
# Restore against the machine's limit, on the data sets of scripts/bench-peers.sh (large: 1 GiB
# in 8 files; small: 20,000 files of 4 KiB): `extract` into a new directory and `export-tar`
# to a pipe, each against what nothing can go below on this machine
# (examples/restore_limit.rs, measured in the same runs):
#   fixed   an extract of an empty archive (open the repository, derive the key, read the
#           index and the archive);
#   read    the packs from the page cache into memory; decode: authenticate, decrypt,
#           decompress and check the id of every chunk, on all cores;
#   write   the set's files, with their sizes, from memory into a new directory on the same
#           file system (create, write, close; the faster of one thread and all cores);
#   pipe    the same bytes into a pipe that another thread reads.
# extract's limit = fixed + max((read + decode + write CPU) / cores, write wall time);
# export-tar's   = fixed + max((read + decode + pipe CPU) / cores, pipe wall time).
# Every step starts from the same page cache: dirty pages written back, the cache emptied
# (as root), the repository read in. Medians of N runs, steps interleaved.
#   scripts/bench-restore.sh [--runs N] [--only large|small]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=5
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--runs N] [--only large|small]" >&2; exit 2 ;;
  esac
  shift
done
cairn_build --example restore_limit
. scripts/bench-data.sh
bench_setup restore
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
sets=(large small)
[ -n "$only" ] && sets=("$only")
mkdir -p "$work/empty" "$work/restores/large" "$work/restores/small"
for set in "${sets[@]}"; do
  repo="$work/restore-repo-$set"
  if [ ! -d "$repo" ]; then
    "$cairn" -r "$repo" init >/dev/null
    (cd "$work/data" && "$cairn" -r "$repo" create --no-progress "$set" "$set" >/dev/null)
    "$cairn" -r "$repo" create --no-progress empty "$work/empty" >/dev/null
  fi
done
settle() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 1 > /proc/sys/vm/drop_caches; fi
  warm "$1"
}
: > "$work/results"
: > "$work/limits"
# One CPU figure per timed command: "LABEL cpu SECONDS" beside timed's wall time.
cpu_timed() {
  local label=$1; shift
  /usr/bin/time -f "$label cpu %U %S" -a -o "$work/cpu" "$@"
}
: > "$work/cpu"
for r in $(seq 1 "$runs"); do
  for set in "${sets[@]}"; do
    repo="$work/restore-repo-$set"
    steps=(limit extract tar fixed)
    [ $((r % 2)) -eq 0 ] && steps=(fixed tar extract limit)
    for step in "${steps[@]}"; do
      settle "$repo"
      case "$step" in
        limit)
          "$bin/examples/restore_limit" "$repo" "$work/data/$set" "$work/restores/$set" \
            | awk -v s="$set" '{ for (i = 1; i < NF; i += 2) print s, $i, $(i + 1) }' >> "$work/limits" ;;
        extract)
          timed "$set extract" cpu_timed "$set extract" "$cairn" -r "$repo" extract --no-progress "$set" \
            --target "$work/restores/$set/$r-$(date +%s%N)" ;;
        tar)
          timed "$set export-tar" sh -c "\"$cairn\" -r \"$repo\" export-tar \"$set\" - | cat >/dev/null" ;;
        fixed)
          timed "$set fixed" "$cairn" -r "$repo" extract --no-progress empty \
            --target "$work/restores/$set/empty-$r-$(date +%s%N)" ;;
      esac
    done
    # The large set's restores go after each run (3 GiB a run; the disk is shared): deleting
    # 8 large files does not slow the next run's creation as deleting many small ones would.
    if [ "$set" = large ]; then rm -rf "$work/restores/large"; mkdir "$work/restores/large"; sync; fi
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs"
echo
echo "| set | step | time | limit | against the limit | the limit's parts |"
echo "|---|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  FILENAME ~ /limits$/ { v[$1 " " $2] = v[$1 " " $2] " " $3; next }
  FILENAME ~ /cpu$/ { c[$1] = c[$1] " " ($4 + $5); next }
  { t[$1 " " $2] = t[$1 " " $2] " " $3 / 1000 }
  END {
    for (s = 1; s <= 2; s++) {
      set = s == 1 ? "large" : "small"
      if (!((set " fixed") in t)) continue
      fixed = median(t[set " fixed"]); cores = median(v[set " cores"])
      rd = median(v[set " read_cpu"]); dec = median(v[set " decode_cpu"])
      wc = median(v[set " write_cpu"]); ww = median(v[set " write"])
      pc = median(v[set " pipe_cpu"]); pw = median(v[set " pipe"])
      cpu = (rd + dec + wc) / cores; lim = fixed + (cpu > ww ? cpu : ww)
      e = median(t[set " extract"])
      printf "| %s | extract | %.2f s (CPU %.2f s) | %.2f s | %.2fx | fixed %.2f s; CPU (read %.2f + decode %.2f + write %.2f s) / %d cores = %.2f s; write %.2f s wall |\n", set, e, median(c[set]), lim, e / lim, fixed, rd, dec, wc, cores, cpu, ww
      cpu = (rd + dec + pc) / cores; lim = fixed + (cpu > pw ? cpu : pw)
      x = median(t[set " export-tar"])
      printf "| %s | export-tar to a pipe | %.2f s | %.2f s | %.2fx | fixed %.2f s; CPU (read %.2f + decode %.2f + pipe %.2f s) / %d cores = %.2f s; pipe %.2f s wall |\n", set, x, lim, x / lim, fixed, rd, dec, pc, cores, cpu, pw
    }
  }' "$work/limits" "$work/cpu" "$work/results"
rm -rf "$work/restores"
