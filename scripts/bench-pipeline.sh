#!/usr/bin/env bash
# Reproduces the seed's table: cairn create with the pack store in a background thread
# (async, the default) against storing synchronously (CAIRN_PACK_ASYNC=no), over an emulated
# slow store (CAIRN_STORE_LATENCY µs per operation, CAIRN_STORE_BANDWIDTH bit/s). One pack in
# flight, the seed's contract (CAIRN_PACK_INFLIGHT=1: an emulated store counts as remote, for
# which cairn would otherwise choose more).
#
#   row 1, store-bound: many 4 KiB files over a slow link (3 MB/s + 100 ms);
#   row 2, balanced: large 2:1-compressible files, the bandwidth chosen so that storing takes
#          about as long as assembling (A, measured without emulation).
#
# For each row: data and stored size, emulation, A, S, sync, async (medians of interleaved
# runs), speedup, the bound (A+S)/max(A,S) and async / max(A,S). S is what storing costs:
# every store operation's emulated time (operations × latency + bytes / bandwidth) plus the
# store thread's hashing, measured from CAIRN_PACK_TRACE=time. Then the <HS> trace of one
# async run.
#
# Usage: scripts/bench-pipeline.sh [--full] [--runs N]
#   default: row 1 with 8,192 files (2 MB packs), row 2 with 1 GiB (8 × 128 MiB, 16 MB packs,
#            10 ms latency); about 2 minutes
#   --full:  the seed's sizes and 50 MB packs: 262,144 files; 10 GiB (160 × 64 MiB) — hours
#            over the slow link
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept).
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --runs) runs="$2"; shift ;;
    *) echo "usage: $0 [--full] [--runs N]" >&2; exit 2 ;;
  esac
  shift
done

# Two builds: an example turns on the dev-dependencies (and with them the `testing`
# feature), which the cairn that is measured must not have.
cargo build --release --locked --quiet --bin cairn && cargo build --release --locked --quiet --example gendata
bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
cairn="$bin/cairn"
gen="$bin/examples/gendata"
work="${BENCH_DIR:-$(mktemp -d /var/tmp/cairn-bench-pipeline.XXXXXX)}"
mkdir -p "$work"
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
unset CAIRN_STORE_LATENCY CAIRN_STORE_BANDWIDTH CAIRN_PACK_ASYNC CAIRN_PACK_TRACE CAIRN_PACK_SIZE

if [ $full = 1 ]; then
  r1_files=262144; r1_pack=""; r2_count=160; r2_size=64M; r2_pack=""; r2_lat=30000
else
  # Scaled down: smaller packs keep the pack count high enough for the pipeline to matter,
  # and a shorter latency keeps balance possible (33 packs × 30 ms alone would exceed A).
  r1_files=8192; r1_pack=2000000; r2_count=8; r2_size=128M; r2_pack=16000000; r2_lat=10000
fi

echo "work directory: $work" >&2
if [ ! -d "$work/row1" ]; then "$gen" files "$work/row1" "$r1_files" 4K 1; fi
if [ ! -d "$work/row2" ]; then
  mkdir -p "$work/row2"
  for i in $(seq 1 "$r2_count"); do "$gen" mixed "$work/row2/f$i" "$r2_size" "$((i + 100))"; done
fi

# run DIR PACKSIZE ASYNC LATENCY BANDWIDTH -> prints seconds; its repository is named in
# $work/last (runs happen in subshells). Repositories are kept until the end: deleting many
# files slows ext4 down for minutes.
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
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f\n", e - s }'
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

stored_bytes() { du -sb "$1" | cut -f1; }

# Seconds the store thread spent hashing packs, from a timed trace: the sum of (S − H).
hashing() { tr ' ' '\n' < "$1.trace" | awk '/^H/ { h = substr($0, 2) } /^S/ { t += substr($0, 2) - h } END { printf "%.3f\n", t }'; }

row() {
  local label=$1 dir=$2 pack=$3 lat=$4 bw=$5
  local as=() ss=() ys=()
  for _ in $(seq 1 "$runs"); do as+=("$(run "$dir" "$pack" yes "" "")"); done
  local a last_repo stored ops hash
  a=$(printf '%s\n' "${as[@]}" | median)
  last_repo=$(cat "$work/last")
  stored=$(stored_bytes "$last_repo")
  ops=$(wc -l < "$last_repo.ops")
  hash=$(hashing "$last_repo")
  if [ "$bw" = auto ]; then
    # Balanced: the bandwidth at which storing (latency, transfer, hashing) takes about A.
    bw=$(awk -v b="$stored" -v a="$a" -v o="$ops" -v l="$lat" -v h="$hash" 'BEGIN { t = a - o * l / 1e6 - h; if (t < 0.2 * a) t = 0.2 * a; printf "%.0f", b * 8 / t }')
  fi
  for _ in $(seq 1 "$runs"); do
    ss+=("$(run "$dir" "$pack" no "$lat" "$bw")")
    ys+=("$(run "$dir" "$pack" yes "$lat" "$bw")")
  done
  last_repo=$(cat "$work/last")
  ops=$(wc -l < "$last_repo.ops")
  hash=$(hashing "$last_repo")
  local s sync asy data
  s=$(awk -v b="$stored" -v o="$ops" -v l="$lat" -v w="$bw" -v h="$hash" 'BEGIN { printf "%.2f", o * l / 1e6 + b * 8 / w + h }')
  sync=$(printf '%s\n' "${ss[@]}" | median)
  asy=$(printf '%s\n' "${ys[@]}" | median)
  data=$(du -sb "$dir" | cut -f1)
  echo "  $label: $ops store operations, $hash s hashing; A runs: ${as[*]}; sync: ${ss[*]}; async: ${ys[*]}" >&2
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
row "balanced: $r2_count × $r2_size files" "$work/row2" "$r2_pack" "$r2_lat" auto
echo
echo "trace of one async run (row 2; < store started, H hashing, S storing, > finished):"
rm -rf "$work/repo-trace"
"$cairn" -r "$work/repo-trace" init >/dev/null
env CAIRN_PACK_TRACE=yes CAIRN_PACK_INFLIGHT=1 CAIRN_STORE_LATENCY="$r2_lat" ${r2_pack:+CAIRN_PACK_SIZE=$r2_pack} "$cairn" -r "$work/repo-trace" create --no-progress b "$work/row2" 2>&1 >/dev/null | grep -E '^[<HS>]+$' || true
