#!/usr/bin/env bash
# What a slice of `check --verify-data` costs against the whole: 1 GiB of data (8 × 128 MiB of
# 2:1-compressible files), backed up once, then, interleaved, runs of
#   full     check --verify-data
#   part     check --subset N/10 (N = 1..10 in turn: every part once per 10 runs)
#   share    check --subset 10% (the packs this client verified longest ago)
#   plain    check (tables of contents only)
# on a local repository and behind the slow-link emulation (CAIRN_STORE_LATENCY 50 ms per
# operation, CAIRN_STORE_BANDWIDTH 400 Mbit/s per connection, 4 connections: the remote
# benchmark's). For each: the median wall time, and the bytes the process read (rchar from
# /proc/PID/io, taken when it exits: the repository's bytes plus a few MB of its own), as a
# share of the full check's.
#   scripts/bench-check.sh [--runs N]        (N runs of full/share/plain; 10 of part)
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; data kept).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N]" >&2; exit 2 ;;
  esac
done
cairn_build --example gendata
cairn_workdir bench-check
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
data="$work/data"
if [ ! -d "$data" ]; then
  mkdir -p "$data.tmp"
  for i in $(seq 1 8); do "$bin/examples/gendata" mixed "$data.tmp/f$i" 128M "$((i + 300))"; done
  mv "$data.tmp" "$data"
fi
repo="$work/repo"
if [ ! -d "$repo" ]; then
  "$cairn" init -r "$repo" >/dev/null
  "$cairn" -r "$repo" create data "$data" >/dev/null
fi
packs=$(find "$repo/packs" -type f | wc -l)
stored=$(du -sb "$repo/packs" | cut -f1)
echo "repository: $packs packs, $stored bytes (work directory $work)" >&2

# measure: "SECONDS RCHAR" of one run of cairn with the arguments.
measure() {
  python3 - "$cairn" "$@" <<'EOF'
import os, subprocess, sys, time
t = time.time()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
elapsed = time.time() - t
io = dict(l.split(': ') for l in open(f'/proc/{p.pid}/io').read().splitlines())
if p.wait() not in (0, 1):
    sys.exit(f"cairn {' '.join(sys.argv[2:])} failed")
print(f"{elapsed:.3f} {io['rchar']}")
EOF
}

results="$work/results"
: > "$results"
for mode in local slow; do
  if [ "$mode" = slow ]; then
    export CAIRN_STORE_LATENCY=50000 CAIRN_STORE_BANDWIDTH=400000000 CAIRN_STORE_CONNECTIONS=4
  else
    unset CAIRN_STORE_LATENCY CAIRN_STORE_BANDWIDTH CAIRN_STORE_CONNECTIONS
  fi
  # Warm: the data read once, so that every run starts from the page cache alike.
  cat "$repo"/packs/*/* > /dev/null
  part=1
  for r in $(seq 1 10); do
    if [ "$r" -le "$runs" ]; then
      echo "$mode full $(measure -r "$repo" check --verify-data)" >> "$results"
      echo "$mode share $(measure -r "$repo" check --subset 10%)" >> "$results"
      echo "$mode plain $(measure -r "$repo" check)" >> "$results"
    fi
    echo "$mode part $(measure -r "$repo" check --subset "$part/10")" >> "$results"
    part=$((part + 1))
  done
done

echo "| store | check | median time | time vs full | median bytes read | bytes vs full | largest part's bytes vs full |"
echo "|---|---|---|---|---|---|---|"
for mode in local slow; do
  full_t=$(awk -v m=$mode '$1==m && $2=="full" {print $3}' "$results" | median)
  full_b=$(awk -v m=$mode '$1==m && $2=="full" {print $4}' "$results" | median)
  for what in full part share plain; do
    t=$(awk -v m=$mode -v w=$what '$1==m && $2==w {print $3}' "$results" | median)
    b=$(awk -v m=$mode -v w=$what '$1==m && $2==w {print $4}' "$results" | median)
    most=$(awk -v m=$mode -v w=$what '$1==m && $2==w {print $4}' "$results" | sort -g | tail -1)
    printf '| %s | %s | %.2f s | %.1f%% | %.1f MB | %.1f%% | %s |\n' "$mode" "$what" "$t" \
      "$(echo "$t * 100 / $full_t" | bc -l)" "$(echo "$b / 1000000" | bc -l)" \
      "$(echo "$b * 100 / $full_b" | bc -l)" \
      "$([ "$what" = part ] && printf '%.1f%%' "$(echo "$most * 100 / $full_b" | bc -l)" || echo '')"
  done
done
