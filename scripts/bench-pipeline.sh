#!/usr/bin/env bash
# Reproduces the seed's table: cairn create with the pack store in a background thread
# (async, the default) against storing synchronously (CAIRN_PACK_ASYNC=no), over an emulated
# slow store (CAIRN_STORE_LATENCY µs per operation, CAIRN_STORE_BANDWIDTH bit/s). One pack in
# flight, the seed's contract (CAIRN_PACK_INFLIGHT=1: an emulated store counts as remote, for
# which cairn would otherwise choose more).
#
#   row 1, store-bound: many 4 KiB files over a slow link (3 MB/s + 100 ms);
#   row 2, balanced: large 2:1-compressible files, the bandwidth chosen so that storing takes
#          about as long as assembling (measured without emulation: the writer's working time,
#          from its start to the last barrier, which is A without opening and committing).
#
#   row 3, balanced with packs half that size.
#
# For each row: data and stored size, emulation, A, S, sync, async (medians of runs that
# interleave A, sync and async), speedup, the bound (A+S)/max(A,S) and async / max(A,S). S is the store thread's busy
# time (from `<` to `>` for every pack: checking, hashing, storing), read from
# CAIRN_PACK_TRACE=time in the async runs. For each balanced row, where one async run's time
# goes (from the same trace): before the writer exists, filling the first pack, the caller
# waiting for stores, barriers, and the commit after the last pack. Then the <HS> trace of one
# async run.
#
# Usage: scripts/bench-pipeline.sh [--full] [--runs N]
#   default: row 1 with 8,192 files (2 MB packs), rows 2 and 3 with 1 GiB (8 × 128 MiB, 16 MB
#            and 8 MB packs, 10 ms latency); about 4 minutes
#   --gib N: rows 2 and 3 with N GiB (8·N × 128 MiB): opening the repository (the key's
#            derivation, a few store round trips) and committing do not grow with the data,
#            and cannot overlap a store, so they weigh less in larger backups
#   --full:  the seed's sizes and 50 MB packs: 262,144 files; 10 GiB (160 × 64 MiB) — hours
#            over the slow link
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env

full=0
runs=3
gib=1
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --runs) runs="$2"; shift ;;
    --gib) gib="$2"; shift ;;
    *) echo "usage: $0 [--full] [--runs N] [--gib N]" >&2; exit 2 ;;
  esac
  shift
done

cairn_build --example gendata
gen="$bin/examples/gendata"
cairn_workdir bench-pipeline
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"

if [ $full = 1 ]; then
  r1_files=262144; r1_pack=""; r2_count=160; r2_size=64M; r2_pack=50000000; r2_lat=30000
else
  # Scaled down: smaller packs keep the pack count high enough for the pipeline to matter,
  # and a shorter latency keeps balance possible (33 packs × 30 ms alone would exceed A).
  r1_files=8192; r1_pack=2000000; r2_count=$((8 * gib)); r2_size=128M; r2_pack=16000000; r2_lat=10000
fi

echo "work directory: $work" >&2
rm -f "$work/breakdown" "$work/async-runs"
if [ ! -d "$work/row1" ]; then "$gen" files "$work/row1" "$r1_files" 4K 1; fi
row2="$work/row2-$r2_count-$r2_size"
if [ ! -d "$row2" ]; then
  mkdir -p "$row2.tmp"
  for i in $(seq 1 "$r2_count"); do "$gen" mixed "$row2.tmp/f$i" "$r2_size" "$((i + 100))"; done
  mv "$row2.tmp" "$row2"
fi

# run DIR PACKSIZE ASYNC LATENCY BANDWIDTH -> prints seconds; its repository is named in
# $work/last (runs happen in subshells). The repository itself is deleted once measured (a few
# hundred packs at most: not the mass delete that slows ext4 down); its size, store log and
# trace are kept beside it.
run() {
  local dir=$1 pack=$2 async=$3 lat=$4 bw=$5
  local last_repo
  last_repo="$work/repo-$(date +%s%N)"
  echo "$last_repo" > "$work/last"
  "$cairn" -r "$last_repo" init >/dev/null
  cat $(find "$dir" -type f) >/dev/null # warm the page cache right before timing
  local start end
  start=$(date +%s.%N)
  env ${pack:+CAIRN_PACK_SIZE=$pack} CAIRN_PACK_ASYNC="$async" CAIRN_PACK_INFLIGHT=1 \
      ${lat:+CAIRN_STORE_LATENCY=$lat} ${bw:+CAIRN_STORE_BANDWIDTH=$bw} \
      CAIRN_STORE_LOG="$last_repo.ops" CAIRN_PACK_TRACE=time \
      "$cairn" -r "$last_repo" create --no-progress b "$dir" >/dev/null 2>"$last_repo.trace"
  end=$(date +%s.%N)
  du -sb "$last_repo" | cut -f1 > "$last_repo.size"
  rm -rf "$last_repo"
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f\n", e - s }'
}


stored_bytes() { cat "$1.size"; }

# The events of a timed trace, one per line ("[in flight: N]" notes left out).
events() { tr ' ' '\n' < "$1.trace" | grep -E '^[<HS>BWwFf][0-9.]+$' || true; }
# Seconds the store thread spent hashing packs: the sum of (S − H).
hashing() { events "$1" | awk '/^H/ { h = substr($0, 2) } /^S/ { t += substr($0, 2) - h } END { printf "%.3f\n", t }'; }
# Packs stored, and the store thread's busy time: the sum of (> − <).
packs() { events "$1" | grep -c '^<' || true; }
busy() { events "$1" | awk '/^</ { s = substr($0, 2) } /^>/ { t += substr($0, 2) - s } END { printf "%.3f\n", t }'; }
# The writer's working time: from its start (B) to the last barrier (F).
assembling() { events "$1" | awk '/^B/ { b = substr($0, 2) } /^F/ { f = substr($0, 2) } END { printf "%.3f\n", f - b }'; }

# Where one async run of WALL seconds went, from its timed trace.
where_time_goes() {
  events "$1" | awk -v label="$2" -v wall="$3" -v lat="$4" -v ops="$5" '
    { c = substr($0, 1, 1); t = substr($0, 2) + 0 }
    c == "B" { b = t }
    c == "<" { if (first == "") first = t; st = t; if (inf) sync++ }
    c == ">" { busy += t - st; if (inf) syncs += t - st }
    c == "H" { h = t }
    c == "S" { hash += t - h }
    c == "W" { w0 = t }
    c == "w" { if (inf) bw += t - w0; else { wait += t - w0; nw++ } }
    c == "F" { f0 = t; inf = 1; nf++; sync = 0 }
    c == "f" { bar += t - f0; inf = 0; lastf = t }
    END {
      printf "- %s, one async run of %.2f s:\n", label, wall
      printf "  - before the pack writer exists (open, key, index, files cache): %.2f s\n", b
      printf "  - filling the first pack, with nothing to store yet: %.2f s\n", first - b
      printf "  - the caller waiting for the store in flight at hand-offs: %.2f s (%d times)\n", wait, nw
      printf "  - barriers: %d, %.2f s (waiting for the store in flight %.2f s, storing the partial pack %.2f s)\n", nf, bar, bw, syncs
      printf "  - after the last barrier (index, archive, lock; %d store operations in all at %d ms): %.2f s\n", ops, lat / 1000, wall - lastf
      printf "  - store thread busy %.2f s, of it hashing %.2f s\n", busy, hash
    }' >> "$work/breakdown"
}

row() {
  local label=$1 dir=$2 pack=$3 lat=$4 bw=$5 bw0=$5
  local as=() ss=() ys=() bs=()
  # One calibration run without emulation: the stored size, the packs, and (balanced rows)
  # the writer's working time that picks the bandwidth. A itself is measured below,
  # interleaved with sync and async, so that a machine that gets busier or quieter during the
  # row weighs on all three alike.
  run "$dir" "$pack" yes "" "" >/dev/null
  local a last_repo stored ops hash npacks
  last_repo=$(cat "$work/last")
  stored=$(stored_bytes "$last_repo")
  hash=$(hashing "$last_repo")
  npacks=$(packs "$last_repo")
  if [ "$bw" = auto ]; then
    # Balanced: the bandwidth at which storing the packs (latency, transfer, hashing) takes
    # about as long as assembling them: the writer's working time in the A run, from its
    # start to the last barrier. What comes before (the key's derivation, opening) and after
    # (the commit) cannot overlap a store, and is in A, sync and async alike.
    local aw
    aw=$(assembling "$last_repo")
    bw=$(awk -v b="$stored" -v a="$aw" -v o="$npacks" -v l="$lat" -v h="$hash" 'BEGIN { t = a - o * l / 1e6 - h; if (t < 0.2 * a) t = 0.2 * a; printf "%.0f", b * 8 / t }')
  fi
  local y mid_trace="" mid_wall=""
  for _ in $(seq 1 "$runs"); do
    as+=("$(run "$dir" "$pack" yes "" "")")
    ss+=("$(run "$dir" "$pack" no "$lat" "$bw")")
    y=$(run "$dir" "$pack" yes "$lat" "$bw")
    ys+=("$y")
    last_repo=$(cat "$work/last")
    bs+=("$(busy "$last_repo")")
    echo "$y $last_repo" >> "$work/async-runs"
  done
  ops=$(wc -l < "$last_repo.ops")
  hash=$(hashing "$last_repo")
  local s sync asy data
  a=$(printf '%s\n' "${as[@]}" | median)
  s=$(printf '%s\n' "${bs[@]}" | median)
  sync=$(printf '%s\n' "${ss[@]}" | median)
  asy=$(printf '%s\n' "${ys[@]}" | median)
  data=$(du -sb "$dir" | cut -f1)
  # The breakdown of the run whose time is the median.
  read -r mid_wall mid_trace < <(tail -n "$runs" "$work/async-runs" | sort -n | awk -v n="$runs" 'NR == int((n + 1) / 2)')
  if [ "$bw0" = auto ]; then where_time_goes "$mid_trace" "$label" "$mid_wall" "$lat" "$ops"; fi
  echo "  $label: $ops store operations, $npacks packs, $hash s hashing; A runs: ${as[*]}; sync: ${ss[*]}; async: ${ys[*]}; store busy: ${bs[*]}" >&2
  awk -v label="$label" -v d="$data" -v st="$stored" -v lat="$lat" -v bw="$bw" -v a="$a" -v s="$s" -v sy="$sync" -v as="$asy" 'BEGIN {
    m = (a > s) ? a : s
    printf "| %s | %.0f MiB | %.0f MiB | %.1f MB/s + %d ms | %.2f s | %.2f s | %.2f s | %.2f s | %.2fx | %.2fx | %.2f |\n",
      label, d / 1048576, st / 1048576, bw / 8e6, lat / 1000, a, s, sy, as, sy / as, (a + s) / m, as / m
  }'
}

echo
echo "cairn $("$cairn" --version | cut -d' ' -f2), $(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs interleaved runs"
echo
echo "| row | data | stored | emulated store | assembly A | store S | sync | async | speedup | bound (A+S)/max | async/max(A,S) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row "store-bound: $r1_files × 4 KiB files" "$work/row1" "$r1_pack" 100000 24000000
row "balanced: $r2_count × $r2_size files, $((r2_pack / 1000000)) MB packs" "$row2" "$r2_pack" "$r2_lat" auto
row "balanced: $r2_count × $r2_size files, $((r2_pack / 2000000)) MB packs" "$row2" "$((r2_pack / 2))" "$r2_lat" auto
echo
echo "Where the time goes (CAIRN_PACK_TRACE=time):"
cat "$work/breakdown"
echo
echo "trace of one async run (row 2; < store started, H hashing, S storing, > finished):"
rm -rf "$work/repo-trace"
"$cairn" -r "$work/repo-trace" init >/dev/null
env CAIRN_PACK_TRACE=yes CAIRN_PACK_INFLIGHT=1 CAIRN_STORE_LATENCY="$r2_lat" ${r2_pack:+CAIRN_PACK_SIZE=$r2_pack} "$cairn" -r "$work/repo-trace" create --no-progress b "$row2" 2>&1 >/dev/null | grep -E '^[<HS>]+$' || true
