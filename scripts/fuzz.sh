#!/usr/bin/env bash
# Fuzzes the decoders of everything cairn reads from a repository with cargo-fuzz (libFuzzer).
#   scripts/fuzz.sh [--seconds N] [TARGET...]     default: 60 s per target, every target
# Installs cargo-fuzz if missing. Uses the machine's stable toolchain (RUSTC_BOOTSTRAP lets it
# take the sanitizer flags). Seeds come from `cargo run --example fuzz_seeds`. A crash leaves
# its input in fuzz/artifacts/TARGET/; copy it to fuzz/regressions/TARGET/ so that
# tests/engine/fuzz_regressions.rs replays it for good, then fix the bug.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift ;;
    *) targets+=("$1") ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=(pack_toc blob_open index_fragment archive key_and_config)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
export RUSTC_BOOTSTRAP=1
corpus="${FUZZ_CORPUS:-fuzz/corpus}"
# Reuse a build directory outside the clone when there is one, as CI does for cargo.
target_dir="${CARGO_TARGET_DIR:-$PWD/fuzz/target}/fuzz"
cargo run --quiet --example fuzz_seeds -- "$corpus"
cargo fuzz build -O --target-dir "$target_dir" 2>&1 | tail -1
for t in "${targets[@]}"; do
  mkdir -p "$corpus/$t"
  echo "fuzz: $t for $seconds s"
  log=$(mktemp)
  if ! cargo fuzz run -O --target-dir "$target_dir" "$t" "$corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 >"$log" 2>&1; then
    cat "$log"
    echo "fuzz: $t FOUND A CRASH (input saved under fuzz/artifacts/$t/)" >&2
    rm -f "$log"
    exit 1
  fi
  grep -E "^Done [0-9]+ runs" "$log" || tail -2 "$log"
  rm -f "$log"
done
