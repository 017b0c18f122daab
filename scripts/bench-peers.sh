#!/usr/bin/env bash
# cairn against restic and borg (rustic when `rustic` is on the PATH, borg 2 with BORG2=PATH)
# on the same data, one tool after another in the same run:
#   large: 1 GiB of 2:1-compressible data (8 × 128 MiB files)
#   small: 20,000 files of 4 KiB
# For each data set and tool: first create, unchanged second create, create after 1% of the
# files changed (small: 200 files rewritten; large: 1 MiB rewritten in one of the 8 files),
# full extract, plain check (structure and metadata, no file data read), check with data
# verification. Wall time, CPU time (user + sys) and peak RSS
# are medians over the repetitions; each operation is run for every tool before the next
# operation, and its input is read into the page cache right before it is timed. Repository
# size is after the three creates. Every tool runs with its defaults (restic and borg
# compress; everything is encrypted).
#
# Usage: scripts/bench-peers.sh [--runs N] [--only large|small]
# Installs restic and borgbackup from the distribution when missing (as root with apt-get).
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; it is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env

runs=3
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--runs N] [--only large|small]" >&2; exit 2 ;;
  esac
  shift
done

need=()
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]}; install them first" >&2
    exit 1
  fi
fi
tools=(cairn restic borg)
command -v rustic >/dev/null && tools+=(rustic)
# borg 2 is not packaged; BORG2=PATH (a borg 2.0 beta, e.g. from pip) adds it.
[ -n "${BORG2:-}" ] && tools+=(borg2)

. scripts/bench-data.sh
bench_setup peers

export CAIRN_PASSPHRASE=bench RESTIC_PASSWORD=bench BORG_PASSPHRASE=bench RUSTIC_PASSWORD=bench
export XDG_CACHE_HOME="$work/cache" RESTIC_CACHE_DIR="$work/cache/restic" BORG_BASE_DIR="$work/borg-base"
export BORG_RELOCATED_REPO_ACCESS_IS_OK=yes BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes

# The data: generated once, kept between runs of the script.
bench_data

# The 1% change, and its undo (so that every repetition backs up the same data).
change() {
  case "$1" in
    large)
      cp "$work/data/large/f3" "$work/f3.orig"
      dd if=/dev/urandom of="$work/data/large/f3" bs=1M count=1 seek=20 conv=notrunc status=none ;;
    small)
      mkdir -p "$work/small.orig"
      find "$work/data/small" -type f | sort | awk 'NR % 100 == 0' | while read -r f; do
        cp -p "$f" "$work/small.orig/$(basename "$f")"
        head -c 4096 /dev/urandom > "$f"
      done ;;
  esac
}
undo() {
  case "$1" in
    large) cp "$work/f3.orig" "$work/data/large/f3" ;;
    small) for f in "$work/small.orig"/*; do cp -p "$f" "$(find "$work/data/small" -name "$(basename "$f")")"; done ;;
  esac
}

# Tool command lines, set in CMD. $1 = repository, $2 = data set, $3 = archive/target name.
t_init() {
  case "$tool" in
    cairn) CMD=("$cairn" -r "$1" init) ;;
    restic) CMD=(restic -r "$1" init) ;;
    borg) CMD=(borg init -e repokey "$1") ;;
    rustic) CMD=(rustic -r "$1" init) ;;
    borg2) CMD=("$BORG2" -r "$1" repo-create -e repokey-aes-ocb) ;;
  esac
}
t_create() {
  case "$tool" in
    cairn) CMD=("$cairn" -r "$1" create --no-progress "$2" "$2") ;;
    restic) CMD=(restic -r "$1" backup -q "$2") ;;
    borg) CMD=(borg create "$1::$3" "$2") ;;
    rustic) CMD=(rustic -r "$1" backup "$2") ;;
    # One series (borg 2 keeps a files cache per archive name, as cairn does per series).
    borg2) CMD=("$BORG2" -r "$1" create "$2" "$2") ;;
  esac
}
t_extract() {
  mkdir -p "$3"
  case "$tool" in
    cairn) CMD=("$cairn" -r "$1" extract --no-progress "$2" --target "$3") ;;
    restic) CMD=(restic -r "$1" restore latest -q --target "$3") ;;
    borg) CMD=(bash -c 'cd "$1" && exec borg extract "$2"' _ "$3" "$1::$4") ;;
    rustic) CMD=(rustic -r "$1" restore latest "$3") ;;
    borg2)
      # The series' latest archive, by id (untimed).
      local id
      id=$("$BORG2" -r "$1" repo-list --last 1 --format '{id}{NL}')
      CMD=(bash -c 'cd "$1" && exec "$2" -r "$3" extract "aid:$4"' _ "$3" "$BORG2" "$1" "$id") ;;
  esac
}
t_check_plain() {
  case "$tool" in
    cairn) CMD=("$cairn" -r "$1" check --no-progress) ;;
    restic) CMD=(restic -r "$1" check) ;;
    borg) CMD=(borg check "$1") ;;
    rustic) CMD=(rustic -r "$1" check) ;;
    borg2) CMD=("$BORG2" -r "$1" check) ;;
  esac
}
t_check() {
  case "$tool" in
    cairn) CMD=("$cairn" -r "$1" check --no-progress --verify-data) ;;
    restic) CMD=(restic -r "$1" check --read-data) ;;
    borg) CMD=(borg check --verify-data "$1") ;;
    rustic) CMD=(rustic -r "$1" check --read-data) ;;
    borg2) CMD=("$BORG2" -r "$1" check --verify-data) ;;
  esac
}

# timed LABEL: runs CMD after a sync, appends "label wall cpu rss" to the results (in place
# of bench-data.sh's timed, which measures wall time only).
timed() {
  local label=$1
  local out="$work/time.$$"
  # What the previous command left for the kernel to write back (an extract's gigabyte) is
  # written first: otherwise the next tool's first fsync waits behind it (cairn's plain check,
  # which seals its lock, took 0.6-0.9 s after rustic's extract, and 0.15 s alone).
  sync
  if ! /usr/bin/time -f "%e %U %S %M" -o "$out" "${CMD[@]}" >/dev/null 2>"$work/last.err"; then
    echo "FAILED: $label: ${CMD[*]}" >&2
    tail -5 "$work/last.err" >&2
    return 1
  fi
  awk -v l="$label" '{ printf "%s %s %.2f %d\n", l, $1, $2 + $3, $4 }' "$out" >> "$work/results"
}

: > "$work/results"
: > "$work/sizes"
: > "$work/limit"
sets=(large small)
[ -n "$only" ] && sets=("$only")
for r in $(seq 1 "$runs"); do
  for set in "${sets[@]}"; do
    cd "$work/data"
    # The machine's limit for cairn's create, measured beside it: the disk's rate for writes
    # made as cairn stores a pack (O_DIRECT, 1 MiB at a time, fsync), and what a create of
    # nothing costs (opening the repository, deriving the key, committing).
    if [ "$set" = large ]; then
      dd if=/dev/zero of="$work/dd" bs=1M count=512 oflag=direct conv=fsync 2>&1 \
        | awk -v r="$r" '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print "disk " r " " $1 / $(i - 1) / 1e6 }' >> "$work/limit"
      rm -f "$work/dd"
      # The same 512 MiB the way cairn stores packs: 32 objects of 16 MiB, each written and
      # fsynced on its own, then renamed (a durable store pays a flush per object).
      mkdir -p "$work/ddp"
      start=$(date +%s%N)
      for i in $(seq 1 32); do
        dd if=/dev/zero of="$work/ddp/.p$i" bs=1M count=16 oflag=direct conv=fsync status=none
        mv "$work/ddp/.p$i" "$work/ddp/p$i"
      done
      end=$(date +%s%N)
      echo "packdisk $r $(awk -v ns=$((end - start)) 'BEGIN { print 536870912 / (ns / 1e9) / 1e6 }')" >> "$work/limit"
      rm -rf "$work/ddp"
      mkdir -p "$work/empty"
      rm -rf "$work/repos/empty-$r"
      "$cairn" -r "$work/repos/empty-$r" init >/dev/null 2>&1
      /usr/bin/time -f "fixed $r %e %U %S" -a -o "$work/limit" "$cairn" -r "$work/repos/empty-$r" create --no-progress e "$work/empty" >/dev/null 2>&1
    fi
    for tool in "${tools[@]}"; do
      repo="$work/repos/$tool-$set-$r-$(date +%s%N)"
      mkdir -p "$(dirname "$repo")"
      echo "$repo" > "$work/repo.$tool"
      t_init "$repo"
      "${CMD[@]}" >/dev/null 2>&1
      warm "$set"
      t_create "$repo" "$set" a1
      timed "$set $tool create"
      if [ "$tool" = cairn ] && [ "$set" = large ]; then
        echo "stored $r $(du -sb "$repo" | cut -f1)" >> "$work/limit"
      fi
    done
    for tool in "${tools[@]}"; do
      warm "$set"
      t_create "$(cat "$work/repo.$tool")" "$set" a2
      timed "$set $tool recreate-unchanged"
    done
    change "$set"
    for tool in "${tools[@]}"; do
      warm "$set"
      t_create "$(cat "$work/repo.$tool")" "$set" a3
      timed "$set $tool create-1%-changed"
      echo "$set $tool $(du -sb "$(cat "$work/repo.$tool")" | cut -f1)" >> "$work/sizes"
    done
    undo "$set"
    for tool in "${tools[@]}"; do
      repo=$(cat "$work/repo.$tool")
      warm "$repo"
      target="$work/restores/$tool-$set-$r-$(date +%s%N)"
      t_extract "$repo" "$set" "$target" a3
      # A restore of the large set fills 1 GiB of new page cache. In a virtual machine whose
      # host takes back memory the guest leaves free (free page reporting), each such page
      # costs a fault on the host, unless the guest freed it moments before: the same
      # extract took 1.1-1.5 s (1.1-1.5 s of system time) when it came after nothing was
      # deleted and 0.6 s (0.3 s) right after a gigabyte was. Touching and freeing 1.5 GiB of
      # memory (dd's buffer) was not enough: with it, the tool that came after another's
      # restore was removed still got the fast pages (rustic, after borg: 0.88-0.95 s three
      # runs out of three; by hand, without the delete, 1.5-1.8 s). So every tool gets the
      # same: 1.1 GiB of page cache written and deleted just before (a file written and
      # removed), and its restore removed just after.
      if [ "$set" = large ]; then
        dd if=/dev/zero of="$work/ballast" bs=1M count=1100 status=none || true
        rm -f "$work/ballast"
      fi
      timed "$set $tool extract"
      if [ "$set" = large ]; then rm -rf "$target"; fi
    done
    for tool in "${tools[@]}"; do
      repo=$(cat "$work/repo.$tool")
      warm "$repo"
      t_check_plain "$repo"
      timed "$set $tool check"
    done
    for tool in "${tools[@]}"; do
      repo=$(cat "$work/repo.$tool")
      warm "$repo"
      t_check "$repo"
      timed "$set $tool check-verify-data"
    done
  done
done

echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), medians of $runs runs; cairn $("$cairn" --version | cut -d' ' -f2), $(restic version | cut -d' ' -f1-2), $(borg --version)$(command -v rustic >/dev/null && echo ", $(rustic --version)")$([ -n "${BORG2:-}" ] && echo ", $("$BORG2" --version)")"
echo
echo "| data | operation | tool | wall | CPU | peak RSS |"
echo "|---|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { key = $1 " " $3 " " $2; w[key] = w[key] " " $4; c[key] = c[key] " " $5; r[key] = r[key] " " $6; if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END { for (i = 1; i <= k; i++) { key = order[i]; split(key, p, " "); printf "| %s | %s | %s | %.2f s | %.2f s | %.0f MB |\n", p[1], p[2], p[3], median(w[key]), median(c[key]), median(r[key]) / 1024 } }' "$work/results"
echo
echo "| data | tool | repository size |"
echo "|---|---|---|"
awk '{ key = $1 " " $2; s[key] = $3; if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END { for (i = 1; i <= k; i++) { split(order[i], p, " "); printf "| %s | %s | %.0f MiB |\n", p[1], p[2], s[order[i]] / 1048576 } }' "$work/sizes"

# cairn's create of the large set against the limit: what nothing costs, plus the larger of
# its remaining CPU over 2 cores and its stored bytes at the disk's rate (medians).
if grep -q '^disk' "$work/limit"; then
  echo
  awk "$MEDIAN_AWK"'
    $1 == "disk" { d = d " " $3 }
    $1 == "packdisk" { pd = pd " " $3 }
    $1 == "fixed" { fw = fw " " $3; fc = fc " " ($4 + $5) }
    $1 == "stored" { st = st " " $3 }
    $1 == "large" && $2 == "cairn" && $3 == "create" { w = w " " $4; c = c " " $5 }
    END {
      disk = median(d); fixed = median(fw); cpu = (median(c) - median(fc)) / 2
      store = median(st) / 1e6 / disk
      limit = fixed + (cpu > store ? cpu : store)
      printf "- cairn create, large: %.2f s against a limit of %.2f s (%.2fx): nothing costs %.2f s; then %.2f s of CPU on 2 cores, %.0f MB to store at the disk'"'"'s %.0f MB/s (dd, O_DIRECT in 1 MiB writes, fsync) = %.2f s\n", median(w), limit, median(w) / limit, fixed, cpu, median(st) / 1e6, disk, store
      if (pd != "") {
        pdisk = median(pd); pstore = median(st) / 1e6 / pdisk
        plimit = fixed + (cpu > pstore ? cpu : pstore)
        printf "- the same with the disk'"'"'s rate for 16 MiB objects each fsynced (%.0f MB/s): %.2f s to store, a limit of %.2f s (%.2fx)\n", pdisk, pstore, plimit, median(w) / plimit
      }
    }' /dev/stdin <<< "$(cat "$work/limit" "$work/results")"
fi
