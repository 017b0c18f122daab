#!/usr/bin/env bash
# How cairn's costs grow with the size of what it backs up.
#   1. The chunk index at 1 M, 5 M and 10 M chunks, built through the library by
#      `examples/index_scale.rs` (no terabytes backed up): heap per chunk once loaded and at
#      the peak of loading, time to load, lookups per second.
#   2. Trees of 50 k, 200 k and 1 M small files (1 KiB each, 1,000 a directory, made here):
#      first create, unchanged re-create and extract, each with its wall time, time per file
#      and peak RSS; restic on the 200 k tree in the same run, for comparison.
# Prints Markdown tables and writes a plot of time per file and of memory against the number
# of files (PNG, with gnuplot) to docs/bench-scale.png.
#   scripts/bench-scale.sh [--files "50000 200000 1000000"] [--chunks "1000000 5000000 10000000"]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, trees reused).
# Installs restic and gnuplot from the distribution when missing (as root with apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
files_sizes="50000 200000 1000000"
chunk_sizes="1000000 5000000 10000000"
while [ $# -gt 0 ]; do
  case $1 in
    --files) files_sizes="$2"; shift 2 ;;
    --chunks) chunk_sizes="$2"; shift 2 ;;
    *) echo "usage: $0 [--files \"N...\"] [--chunks \"N...\"]" >&2; exit 2 ;;
  esac
done
need=()
command -v restic >/dev/null || need+=(restic)
command -v gnuplot >/dev/null || need+=(gnuplot-nox)
[ -x /usr/bin/time ] || need+=(time)
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; }
fi
. scripts/bench-data.sh
bench_setup scale
cargo build --release --locked --quiet --example index_scale
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache" RESTIC_PASSWORD=bench RESTIC_CACHE_DIR="$work/cache/restic"

echo "## The chunk index"
echo
echo "| chunks | heap per chunk, loaded | heap per chunk, peak while loading | load time | hits/s | misses/s |"
echo "|---|---|---|---|---|---|"
for n in $chunk_sizes; do
  TMPDIR="$work" "$bin/examples/index_scale" "$n" | while read -r count live peak open hits misses; do
    printf '| %s | %s B | %s B | %s s | %.1f M | %.1f M |\n' "$count" "$live" "$peak" "$open" \
      "$(echo "$hits / 1000000" | bc -l)" "$(echo "$misses / 1000000" | bc -l)"
  done
done

# measured LABEL FILES CMD...: wall seconds and peak RSS (KiB) of CMD, as "LABEL FILES s KiB".
# The time ends with a `sync`, and starts after one. A restore leaves its files to the
# kernel's writeback: 200 k files' worth is written after the command has exited, a million
# files' worth passes the kernel's background threshold (measured: 1.9 GB dirty after 15 s)
# and is written back during the restore, on the same 2 cores. Measured without the sync,
# extract's cost per file grew 1.32 × from 200 k to 1 M files; with it, 0.96 ×.
measured() {
  local label=$1 files=$2; shift 2
  local start end
  sync
  start=$(date +%s%N)
  /usr/bin/time -f '%M' -o "$work/rss" "$@" >/dev/null 2>"$work/last.err" && sync || {
    echo "FAILED: $label: $*" >&2; tail -3 "$work/last.err" >&2; return 1; }
  end=$(date +%s%N)
  echo "$label $files $(echo "($end - $start) / 1000000000" | bc -l) $(tail -1 "$work/rss")" >> "$work/scale-results"
}
: > "$work/scale-results"
for n in $files_sizes; do
  tree="$work/trees/t$n"
  if [ ! -d "$tree" ]; then mkdir -p "$work/trees" && "$gen" files "$tree.tmp" "$n" 1K 5 && mv "$tree.tmp" "$tree"; fi
  repo="$work/scale-repo-$n"
  rm -rf "$repo" "$work/cache/cairn"
  "$cairn" -r "$repo" init >/dev/null
  warm "$tree"
  (cd "$work/trees" && measured create "$n" "$cairn" -r "$repo" create --no-progress "t$n" "t$n")
  warm "$tree"
  (cd "$work/trees" && measured re-create "$n" "$cairn" -r "$repo" create --no-progress "t$n" "t$n")
  out="$work/restore-$n"
  rm -rf "$out"
  measured extract "$n" "$cairn" -r "$repo" extract --no-progress "t$n" --target "$out"
  if [ "$n" = 200000 ]; then
    rrepo="$work/scale-restic-$n"
    rm -rf "$rrepo"
    restic -r "$rrepo" init >/dev/null
    warm "$tree"
    (cd "$work/trees" && measured restic-backup "$n" restic -r "$rrepo" backup -q "t$n")
    warm "$tree"
    (cd "$work/trees" && measured restic-re-backup "$n" restic -r "$rrepo" backup -q "t$n")
    measured restic-restore "$n" restic -r "$rrepo" restore latest -q --target "$out-restic"
  fi
done

echo
echo "## Trees of small files"
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d); cairn $("$cairn" --version | cut -d' ' -f2), $(restic version | cut -d' ' -f1-2); files of 1 KiB, 1,000 a directory"
echo
echo "| step | files | time | per file | peak RSS | RSS per file |"
echo "|---|---|---|---|---|---|"
awk '{ printf "| %s | %d | %.2f s | %.1f µs | %.1f MB | %.0f B |\n", $1, $2, $3, $3 / $2 * 1e6, $4 / 1024, $4 * 1024 / $2 }' "$work/scale-results"

# Growth from the smallest tree to the largest: time per file (ratio) and re-create memory
# per added file.
echo
awk '
  $1 ~ /^(create|re-create|extract)$/ { t[$1, $2] = $3 / $2; m[$1, $2] = $4; if (!min || $2 < min) min = $2; if ($2 > max) max = $2 }
  END {
    split("create re-create extract", steps, " ")
    for (i = 1; i <= 3; i++) printf "- %s: time per file at %d files is %.2f x that at %d\n", steps[i], max, t[steps[i], max] / t[steps[i], min], min
    printf "- re-create peak RSS grows by %.0f bytes per file from %d to %d files\n", (m["re-create", max] - m["re-create", min]) * 1024 / (max - min), min, max
  }' "$work/scale-results"

# The plot: time per file and peak RSS against the number of files, one line per step.
for step in create re-create extract; do
  awk -v s="$step" '$1 == s { print $2, $3 / $2 * 1e6, $4 / 1024 }' "$work/scale-results" > "$work/plot-$step"
done
gnuplot <<EOF
set terminal pngcairo size 1100,450 font "sans,10"
set output "docs/bench-scale.png"
set multiplot layout 1,2 title "cairn on trees of 1 KiB files ($(date -u +%Y-%m-%d), $(nproc) cores)"
set logscale x
set xlabel "files"
set key top left
set grid
set ylabel "time per file (µs)"
set yrange [0:*]
plot "$work/plot-create" using 1:2 with linespoints title "create", \
     "$work/plot-re-create" using 1:2 with linespoints title "unchanged re-create", \
     "$work/plot-extract" using 1:2 with linespoints title "extract"
set ylabel "peak RSS (MB)"
plot "$work/plot-create" using 1:3 with linespoints title "create", \
     "$work/plot-re-create" using 1:3 with linespoints title "unchanged re-create", \
     "$work/plot-extract" using 1:3 with linespoints title "extract"
unset multiplot
EOF
echo
echo "plot: docs/bench-scale.png"
rm -rf "$work"/restore-*
