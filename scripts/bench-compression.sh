#!/usr/bin/env bash
# What each --compression costs and saves: repository size and create time for lz4, zstd
# levels 1 and 3, and auto at levels 1 to 3 (the default is auto,1), on the data sets of
# scripts/bench-peers.sh (large: 1 GiB of random blocks and zeros; small: 20,000 files of
# 4 KiB) and on real trees as found on the machine: /usr/include (C headers), the Rust
# sources in cargo's registry (code) and /usr/share (text, images, compressed manuals,
# locales). restic's and borg's repository sizes with their defaults are measured once per
# data set, beside them.
# Wall time medians of N runs, codecs interleaved in each run; data read into the page cache
# right before each timing. With --extract, each repository is also restored and timed.
#   scripts/bench-compression.sh [--runs N] [--only SET] [--extract] [--no-peers]
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; kept, data reused).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
only=""
extract=""
peers=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --only) only="$2"; shift ;;
    --extract) extract=yes ;;
    --no-peers) peers="" ;;
    *) echo "usage: $0 [--runs N] [--only SET] [--extract] [--no-peers]" >&2; exit 2 ;;
  esac
  shift
done
. scripts/bench-data.sh
bench_setup compression
bench_data
export CAIRN_PASSPHRASE=bench RESTIC_PASSWORD=bench BORG_PASSPHRASE=bench
export XDG_CACHE_HOME="$work/cache" RESTIC_CACHE_DIR="$work/cache/restic" BORG_BASE_DIR="$work/borg-base"
export BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
codecs=(lz4 zstd,1 zstd,3 auto,1 auto,2 auto,3)
declare -A src=([large]="$work/data/large" [small]="$work/data/small" [text]=/usr/include
  [code]="${CARGO_HOME:-$HOME/.cargo}/registry/src" [share]=/usr/share)
sets=()
for s in large small text code share; do
  [ -n "$only" ] && [ "$s" != "$only" ] && continue
  [ -d "${src[$s]}" ] && sets+=("$s") || echo "skipping $s: no ${src[$s]}" >&2
done
: > "$work/results"
: > "$work/sizes"
mkdir -p "$work/repos" "$work/restores"
for r in $(seq 1 "$runs"); do
  for set in "${sets[@]}"; do
    for c in "${codecs[@]}"; do
      repo="$work/repos/compression-$set-$c-$r-$(date +%s%N)"
      "$cairn" -r "$repo" init --padding none >/dev/null
      warm "${src[$set]}"
      timed "$set create $c" "$cairn" -r "$repo" create --no-progress -C "$c" "$set" "${src[$set]}"
      echo "$set $c $(du -sb "$repo/packs" | cut -f1)" >> "$work/sizes"
      if [ -n "$extract" ]; then
        sync
        warm "$repo"
        target="$work/restores/$set-$c-$r-$(date +%s%N)"
        timed "$set extract $c" "$cairn" -r "$repo" extract --no-progress "$set" --target "$target"
        # Big files go at once (the disk would not hold them all); many small files stay
        # until the end (ext4 creates files slowly for minutes after a mass delete).
        [ "$set" = large ] && rm -rf "$target"
      fi
      rm -rf "$repo"
    done
  done
done
# The peers' sizes with their defaults (restic: zstd "auto"; borg: lz4), once.
if [ -n "$peers" ]; then
  for set in "${sets[@]}"; do
    if command -v restic >/dev/null; then
      repo="$work/repos/restic-$set"
      restic -r "$repo" init -q >/dev/null && restic -r "$repo" backup -q "${src[$set]}" >/dev/null 2>&1 || true
      echo "$set restic $(du -sb "$repo/data" | cut -f1)" >> "$work/sizes"
      rm -rf "$repo"
    fi
    if command -v borg >/dev/null; then
      repo="$work/repos/borg-$set"
      borg init -e repokey "$repo" >/dev/null 2>&1 && borg create "$repo::a" "${src[$set]}" >/dev/null 2>&1 || true
      echo "$set borg $(du -sb "$repo/data" | cut -f1)" >> "$work/sizes"
      rm -rf "$repo"
    fi
  done
fi
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs"
echo
echo "| data | compression | stored | create | vs lz4 | extract |"
echo "|---|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  FNR == NR { s[$1 " " $2] = $3; if (!(($1 " " $2) in sseen)) { sseen[$1 " " $2] = 1; sorder[++sm] = $1 " " $2 } next }
  { k = $1 " " $3; t[k, $2] = t[k, $2] " " $4 }
  END { for (i = 1; i <= sm; i++) { k = sorder[i]; split(k, p, " ");
    c = median(t[k, "create"]); l = median(t[p[1] " lz4", "create"]);
    ct = (t[k, "create"] == "") ? "" : sprintf("%.2f s", c / 1000);
    rel = (t[k, "create"] == "" || l == 0) ? "" : sprintf("%.2f", c / l);
    ex = (t[k, "extract"] == "") ? "" : sprintf("%.2f s", median(t[k, "extract"]) / 1000);
    printf "| %s | %s | %.1f MB | %s | %s | %s |\n", p[1], p[2], s[k] / 1e6, ct, rel, ex } }' \
  "$work/sizes" "$work/results"
rm -rf "$work/restores"
