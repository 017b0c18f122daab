#!/usr/bin/env bash
# Stops the server started by scripts/s3-up.sh (only that pid). Pass --wipe to delete the stored data too.
set -euo pipefail
S3_DIR="${S3_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/s3}"
PIDFILE="$S3_DIR/rclone.pid"
if [ -f "$PIDFILE" ]; then
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"; echo "rclone serve s3 (pid $pid) stopped"
else
  echo "no pid file at $PIDFILE; nothing to stop"
fi
if [ "${1:-}" = "--wipe" ]; then rm -rf "$S3_DIR/data"; echo "data wiped"; fi
