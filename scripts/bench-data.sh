# Sourced by the benchmark scripts that share scripts/bench-peers.sh's data sets (after
# scripts/lib.sh).
#   bench_setup NAME   builds cairn and the data generator; sets $bin, $cairn, $gen and $work
#                      (BENCH_DIR, or a new directory /var/tmp/cairn-bench-NAME.*, kept)
#   bench_data         makes, once per work directory: $work/data/large (8 files of 128 MiB,
#                      4 KiB random blocks interleaved with 4 KiB of zeros) and
#                      $work/data/small (20,000 files of 4 KiB)
#   warm DIR...        reads DIR's files into the page cache
#   timed LABEL CMD... runs CMD, appends "LABEL ms" (wall time) to $work/results
#   $MEDIAN_AWK        an awk function, median(LIST): the median of a space-separated list
bench_setup() {
  cairn_build --example gendata
  gen="$bin/examples/gendata"
  cairn_workdir "bench-$1"
  echo "work directory: $work" >&2
}

bench_data() {
  if [ ! -d "$work/data/large" ]; then
    mkdir -p "$work/data/large"
    for i in $(seq 1 8); do "$gen" mixed "$work/data/large/f$i" 128M "$((i + 10))"; done
  fi
  if [ ! -d "$work/data/small" ]; then "$gen" files "$work/data/small" 20000 4K 7; fi
}

warm() { find "$@" -type f -exec cat {} + >/dev/null; }
timed() {
  local label=$1; shift
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>"$work/last.err" || { echo "FAILED: $label: $*" >&2; tail -3 "$work/last.err" >&2; return 1; }
  end=$(date +%s%N)
  echo "$label $(( (end - start) / 1000000 ))" >> "$work/results"
}
MEDIAN_AWK='function median(s,   a, c, i, j, x) {
  c = split(s, a, " ")
  for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] + 0 < a[i] + 0) { x = a[i]; a[i] = a[j]; a[j] = x }
  return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
}'
