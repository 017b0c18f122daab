#!/usr/bin/env bash
# The two cipher suites on the large set of scripts/bench-peers.sh (1 GiB: 8 files of random
# 4 KiB blocks between 4 KiB of zeros): create, extract and check --verify-data, each into a
# new repository made with `init --encryption repokey-aes256gcm` or
# `repokey-chacha20poly1305-blake3`. Two builds: the normal one (this CPU's AES-NI, SHA-NI and
# AVX2 as detected at run time), and one with AES, GHASH and SHA-256 forced into software
# (`--cfg aes_force_soft --cfg polyval_force_soft`, sha2's `force-soft`), standing for a CPU
# without those instructions. Wall time medians of N runs, everything interleaved in each run;
# data read into the page cache right before each timing.
#   scripts/bench-suites.sh [--runs N]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
[ "${1:-}" = "--runs" ] && runs="$2"
. scripts/bench-data.sh
bench_setup suites
bench_data
soft_target="${CARGO_TARGET_DIR:-$PWD/target}/soft-crypto"
RUSTFLAGS="--cfg aes_force_soft --cfg polyval_force_soft" CARGO_TARGET_DIR="$soft_target" \
  cargo build --release --locked --quiet --bin cairn --features bench-soft-sha
declare -A build=([native]="$cairn" [soft]="$soft_target/release/cairn")
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
suites=(aes256gcm chacha20poly1305-blake3)
: > "$work/results"
mkdir -p "$work/repos" "$work/restores"
cd "$work/data"
for r in $(seq 1 "$runs"); do
  for b in native soft; do
    for s in "${suites[@]}"; do
      bin="${build[$b]}"
      repo="$work/repos/suites-$b-$s-$r-$(date +%s%N)"
      "$bin" -r "$repo" init --encryption "repokey-$s" >/dev/null
      warm large
      timed "$b $s create" "$bin" -r "$repo" create --no-progress x large
      sync
      warm "$repo"
      target="$work/restores/$b-$s-$r"
      timed "$b $s extract" "$bin" -r "$repo" extract --no-progress x --target "$target"
      rm -rf "$target"
      warm "$repo"
      timed "$b $s verify" "$bin" -r "$repo" check --verify-data
      rm -rf "$repo"
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs, 1 GiB (the large set)"
echo
echo "| build | suite | create | extract | check --verify-data |"
echo "|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { k = $1 " " $2; t[k, $3] = t[k, $3] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END { for (i = 1; i <= m; i++) { k = order[i]; split(k, p, " ");
    printf "| %s | %s | %.2f s | %.2f s | %.2f s |\n", p[1], p[2], median(t[k, "create"]) / 1000,
      median(t[k, "extract"]) / 1000, median(t[k, "verify"]) / 1000 } }' "$work/results"
