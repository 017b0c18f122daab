#!/usr/bin/env bash
# Stops the private sshd started by scripts/sftp-up.sh (only that pid; never by name).
set -euo pipefail
SFTP_DIR="${SFTP_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/sshd}"
PIDFILE="$SFTP_DIR/sshd.pid"
if [ -f "$PIDFILE" ]; then
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"                                  # listener exits; per-connection children end with their sessions
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
  echo "sshd (pid $pid) stopped"
else
  echo "no pid file at $PIDFILE; nothing to stop"
fi
