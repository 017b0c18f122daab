# Sourced by the scripts (`. "$(dirname "$0")/lib.sh"` after they cd to the project): the one
# clean environment, the one build step and the shared helpers, so that no script measures or
# demonstrates with a setting the caller's shell left behind.
#
#   cairn_clean_env        unsets every CAIRN_* variable but the scripts' own inputs
#                          (CAIRN_BENCH_*): a leftover CAIRN_PACK_INFLIGHT, CAIRN_REPO or
#                          CAIRN_STORE_LATENCY would change what is measured
#   cairn_build [OPTS]     builds the cairn that ships (release, without the test hooks), and
#                          after --example NAME (repeatable) those examples (a separate build:
#                          an example turns on the dev-dependencies and with them the test
#                          hooks), after --features F with those features; sets `bin` (the
#                          release directory) and `cairn` (CAIRN_BENCH_BIN when set)
#   cairn_workdir NAME     sets `work`: BENCH_DIR, or a new /var/tmp/cairn-NAME.XXXXXX (kept)
#   median                 the median of the numbers on standard input, one per line

cairn_clean_env() {
  local v
  for v in $(compgen -e); do
    case "$v" in
      CAIRN_BENCH_*) ;;
      CAIRN_*) unset "$v" ;;
    esac
  done
}

cairn_build() {
  local examples=() features=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --example) examples+=("$2"); shift ;;
      --features) features=(--features "$2"); shift ;;
      *) echo "cairn_build: unknown option $1" >&2; return 2 ;;
    esac
    shift
  done
  cargo build --release --locked --quiet --bin cairn "${features[@]}"
  local e
  for e in "${examples[@]}"; do
    cargo build --release --locked --quiet --example "$e"
  done
  bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
  cairn="${CAIRN_BENCH_BIN:-$bin/cairn}"
}

cairn_workdir() {
  work="${BENCH_DIR:-$(mktemp -d "/var/tmp/cairn-$1.XXXXXX")}"
  mkdir -p "$work"
}

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
