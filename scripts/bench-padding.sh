#!/usr/bin/env bash
# What `init --padding buckets` (the default) costs: repository size and create time with and
# without it, beside restic and borg on the same data sets as scripts/bench-peers.sh (1 GiB of
# 2:1-compressible data in 8 files; 20,000 files of 4 KiB), interleaved, medians of N runs.
#   scripts/bench-padding.sh [--runs N]
# restic and borg come from the distribution when missing (apt-get, as root); BORG2=PATH adds
# a borg 2 binary (its repositories are made with `repo-create -e repokey-aes-ocb`; 2.0.0b14
# builds from PyPI against Debian 12's OpenSSL 3.0 with Cython < 3.1).
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept, and the
# data in it is reused by later runs, as bench-peers.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    *) echo "usage: $0 [--runs N]" >&2; exit 2 ;;
  esac
  shift
done
need=()
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
if [ ${#need[@]} -gt 0 ]; then apt-get install -y -qq "${need[@]}" >/dev/null; fi
. scripts/bench-data.sh
bench_setup padding
bench_data
export CAIRN_PASSPHRASE=bench RESTIC_PASSWORD=bench BORG_PASSPHRASE=bench
export XDG_CACHE_HOME="$work/cache" RESTIC_CACHE_DIR="$work/cache/restic" BORG_BASE_DIR="$work/borg-base"
tools=("cairn none" "cairn buckets" restic borg)
[ -n "${BORG2:-}" ] && tools+=(borg2)
: > "$work/results"
cd "$work/data"
for r in $(seq 1 "$runs"); do
  for set in large small; do
    for tool in "${tools[@]}"; do
      repo="$work/repos/$set-${tool/ /-}-$r-$(date +%s%N)"
      case "$tool" in
        "cairn none") init=("$cairn" -r "$repo" init --padding none); create=("$cairn" -r "$repo" create --no-progress "$set" "$set") ;;
        "cairn buckets") init=("$cairn" -r "$repo" init); create=("$cairn" -r "$repo" create --no-progress "$set" "$set") ;;
        restic) init=(restic -r "$repo" init); create=(restic -r "$repo" backup -q "$set") ;;
        borg) init=(borg init -e repokey "$repo"); create=(borg create "$repo::$set" "$set") ;;
        borg2) init=("$BORG2" -r "$repo" repo-create -e repokey-aes-ocb); create=("$BORG2" -r "$repo" create "$set" "$set") ;;
      esac
      "${init[@]}" >/dev/null 2>&1
      warm "$set"
      start=$(date +%s%N)
      "${create[@]}" >/dev/null
      end=$(date +%s%N)
      # The bytes of the repository's files: `du` would add directory entries, 4 KiB each,
      # which are 268 MB for borg 2's two-level object tree and 1 MB for restic's.
      size=$(find "$repo" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
      echo "$set ${tool/ /-} $(( (end - start) / 1000000 )) $size" >> "$work/results"
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs; $(restic version | cut -d' ' -f1-2), $(borg --version)"
echo
echo "| data | tool | create | repository | vs cairn without padding |"
echo "|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { k = $1 " " $2; t[k] = t[k] " " $3; s[k] = s[k] " " $4; if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  END { for (i = 1; i <= m; i++) { split(order[i], p, " "); base = median(s[p[1] " cairn-none"]);
    printf "| %s | %s | %.2f s | %.1f MiB | %+.2f%% |\n", p[1], p[2], median(t[order[i]]) / 1000, median(s[order[i]]) / 1048576, 100 * (median(s[order[i]]) - base) / base } }' "$work/results"
