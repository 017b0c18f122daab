#!/usr/bin/env bash
# Stops the Garage started by scripts/garage-up.sh (only that pid). --wipe also deletes its state.
set -euo pipefail
GARAGE_DIR="${GARAGE_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/garage}"
PIDFILE="$GARAGE_DIR/garage.pid"
if [ -f "$PIDFILE" ]; then
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"; echo "garage (pid $pid) stopped"
else
  echo "no pid file at $PIDFILE; nothing to stop"
fi
if [ "${1:-}" = "--wipe" ]; then rm -rf "$GARAGE_DIR"; echo "garage state wiped"; fi
