#!/usr/bin/env bash
# A long create over a slow link, watched by a compact that waits for its lock: the create
# must keep its lock (its refresh never waits behind the packs in flight), and the compact
# must run only once it is done.
#   scripts/slow-link-lock.sh [--minutes N] [BINARY]      (default 10 minutes; the build here)
# The link is the slow-store emulation: 1 Mbit/s, one connection, four packs of 16 MiB in
# flight (64 MiB queued: 9 minutes). Lock timing is shortened by the same factor for both
# clients (refresh 30 s, stale 3 min, as 5 and 30 min by default): a refresh queued behind the
# packs would leave the lock unchanged for far longer than the stale interval.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
minutes=10
bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift ;;
    *) bin="$1" ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  cairn_build
  bin="$cairn"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-slow-link.XXXXXX")
trap 'rm -rf "$work"' EXIT
# 1 Mbit/s is 7.5 MB a minute.
mb=$((minutes * 15 / 2))
mkdir -p "$work/data"
head -c "$((mb * 1000 * 1000))" /dev/urandom > "$work/data/big"
export CAIRN_REPO="$work/repo" CAIRN_PASSPHRASE=slow XDG_CACHE_HOME="$work/cache-create"
export CAIRN_LOCK_REFRESH_SECS=30 CAIRN_LOCK_STALE_SECS=180
"$bin" init >/dev/null
start=$(date +%s)
CAIRN_STORE_BANDWIDTH=1000000 CAIRN_PACK_INFLIGHT=4 \
  "$bin" create --no-progress slow "$work/data" >"$work/create.out" 2>&1 &
create=$!
while [ ! -d "$work/repo/packs" ] || [ -z "$(find "$work/repo/packs" -type f -print -quit)" ]; do
  kill -0 "$create" 2>/dev/null || break
  sleep 1
done
XDG_CACHE_HOME="$work/cache-compact" "$bin" --lock-wait "$((minutes * 120))" compact \
  >"$work/compact.out" 2>&1 &
compact=$!
create_status=0
wait "$create" || create_status=$?
compact_status=0
wait "$compact" || compact_status=$?
echo "create: exit $create_status after $(( $(date +%s) - start )) s ($mb MB at 1 Mbit/s): $(tail -1 "$work/create.out")"
echo "compact: exit $compact_status: $(grep -c 'removed a stale lock' "$work/compact.out" || true) stale locks removed; $(tail -1 "$work/compact.out")"
[ "$create_status" = 0 ] && [ "$compact_status" = 0 ] && ! grep -q 'removed a stale lock' "$work/compact.out"
