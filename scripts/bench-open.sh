#!/usr/bin/env bash
# What opening a repository with a history costs over a far-away store: a repository with N
# backups (N index fragments, N archives; default 40) behind the emulated object store of
# bench-remote.sh (50 ms per operation, 400 Mbit/s per connection, 4 connections), and the
# commands a user runs every day:
#   list                          lists the archives (reads every archive object)
#   create, files cache present   an unchanged backup (reads every index fragment)
#   create, no files cache        the same on a new machine: the files cache is rebuilt from
#                                 the newest archive of the name (reads every archive object)
#   extract                       one small archive (reads every index fragment)
# Each is timed with the binary under test and, with --compare BIN, with BIN too, runs
# interleaved; medians are reported.
#
# Usage: scripts/bench-open.sh [--backups N] [--runs N] [--compare BIN]
# CAIRN_BENCH_BIN=path runs that cairn binary instead of building this checkout's.
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env

backups=40
runs=5
compare=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backups) backups="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --compare) compare="$2"; shift ;;
    *) echo "usage: $0 [--backups N] [--runs N] [--compare BIN]" >&2; exit 2 ;;
  esac
  shift
done

cairn_build
cairn_workdir bench-open
echo "work directory: $work" >&2
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"

repo="$work/repo-$backups"
if [ ! -d "$repo" ]; then
  "$cairn" -r "$repo.tmp" init >/dev/null
  mkdir -p "$work/src"
  for i in $(seq 1 "$backups"); do
    head -c 100000 /dev/urandom > "$work/src/f$i"
    "$cairn" -r "$repo.tmp" create --no-progress "day$i" "$work/src" >/dev/null
  done
  mv "$repo.tmp" "$repo"
fi
last="day$backups"

far=(env CAIRN_STORE_LATENCY=50000 CAIRN_STORE_BANDWIDTH=400000000 CAIRN_STORE_CONNECTIONS=4)

# time_step BIN STEP -> seconds
# Every run works on a fresh copy of the repository (backups add archives).
time_step() {
  local bin=$1 step=$2 start end run="$work/run"
  rm -rf "$run" "$work/out" && cp -a "$repo" "$run"
  case "$step" in
    create-cached) "$bin" -r "$run" create --no-progress "$last" "$work/src" >/dev/null ;; # the files cache
    create-rebuild) rm -rf "$work/cache" ;;
  esac
  start=$(date +%s.%N)
  case "$step" in
    list) "${far[@]}" "$bin" -r "$run" list >/dev/null ;;
    create-cached | create-rebuild)
      "${far[@]}" "$bin" -r "$run" create --no-progress "$last" "$work/src" >/dev/null ;;
    extract) "${far[@]}" "$bin" -r "$run" extract day1 --target "$work/out" >/dev/null ;;
  esac
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f\n", e - s }'
}


echo
echo "$backups backups behind 50 ms (4 connections), $(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs interleaved runs"
echo
if [ -n "$compare" ]; then
  echo "| step | this cairn | $(basename "$compare") |"
  echo "|---|---|---|"
else
  echo "| step | seconds |"
  echo "|---|---|"
fi
for step in list create-cached create-rebuild extract; do
  mine=() theirs=()
  for _ in $(seq 1 "$runs"); do
    mine+=("$(time_step "$cairn" "$step")")
    if [ -n "$compare" ]; then theirs+=("$(time_step "$compare" "$step")"); fi
  done
  m=$(printf '%s\n' "${mine[@]}" | median)
  if [ -n "$compare" ]; then
    t=$(printf '%s\n' "${theirs[@]}" | median)
    echo "| $step | $m s | $t s |"
  else
    echo "| $step | $m s |"
  fi
done
