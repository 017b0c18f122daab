#!/usr/bin/env bash
# Starts a single-node Garage (a production, distributed S3 server) on
# 127.0.0.1:${GARAGE_S3_PORT:-3900} for the S3 tests. The binary is $GARAGE, else `garage` on
# PATH, else ~/.cargo/bin/garage (scripts/test-garage.sh installs it).
# State in $GARAGE_DIR (default ${TMPDIR:-/tmp}/cairn-test-servers/garage); idempotent: a second
# run with the same directory reuses its configuration and data (a restart).
# Client settings: endpoint http://127.0.0.1:$GARAGE_S3_PORT, path-style, region us-east-1,
# bucket $S3_BUCKET, key and secret below.
set -euo pipefail
GARAGE="${GARAGE:-$(command -v garage || echo "$HOME/.cargo/bin/garage")}"
GARAGE_DIR="${GARAGE_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/garage}"
S3_PORT="${GARAGE_S3_PORT:-3900}"
RPC_PORT="${GARAGE_RPC_PORT:-3901}"
ADMIN_PORT="${GARAGE_ADMIN_PORT:-3903}"
# Garage's key format: id = GK + 24 hex, secret = 64 hex.
S3_ACCESS_KEY="${S3_ACCESS_KEY:-GK0123456789abcdef01234567}"
S3_SECRET_KEY="${S3_SECRET_KEY:-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}"
S3_BUCKET="${S3_BUCKET:-backup-test}"
[ -x "$GARAGE" ] || { echo "garage not found at $GARAGE (scripts/test-garage.sh installs it)" >&2; exit 1; }
mkdir -p "$GARAGE_DIR/meta" "$GARAGE_DIR/data"
CONF="$GARAGE_DIR/garage.toml"
if [ ! -f "$CONF" ]; then
  cat > "$CONF" <<CONFEOF
metadata_dir = "$GARAGE_DIR/meta"
data_dir = "$GARAGE_DIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$RPC_PORT"
rpc_public_addr = "127.0.0.1:$RPC_PORT"
rpc_secret = "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$S3_PORT"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$ADMIN_PORT"
admin_token = "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
CONFEOF
  chmod 600 "$CONF"   # garage refuses a configuration with world-readable secrets
fi
G() { "$GARAGE" -c "$CONF" "$@"; }

if [ -f "$GARAGE_DIR/garage.pid" ] && kill -0 "$(cat "$GARAGE_DIR/garage.pid")" 2>/dev/null; then
  echo "garage already running, pid $(cat "$GARAGE_DIR/garage.pid")"; exit 0
fi
RUST_LOG="${RUST_LOG:-garage=warn}" setsid "$GARAGE" -c "$CONF" server </dev/null >>"$GARAGE_DIR/garage.log" 2>&1 &
echo $! > "$GARAGE_DIR/garage.pid"

for _ in $(seq 1 100); do G status >/dev/null 2>&1 && break; sleep 0.1; done
if ! kill -0 "$(cat "$GARAGE_DIR/garage.pid")" 2>/dev/null || ! G status >/dev/null; then
  echo "garage did not come up; log:" >&2; tail -n 20 "$GARAGE_DIR/garage.log" >&2
  kill "$(cat "$GARAGE_DIR/garage.pid")" 2>/dev/null || true; rm -f "$GARAGE_DIR/garage.pid"; exit 1
fi

# One-time cluster setup: give this node a role, then import the key and create the bucket.
NODE_ID="$(G node id -q | cut -d@ -f1)"
LAYOUT="$(G layout show 2>&1 || true)"   # not `| grep -q`: SIGPIPE with pipefail
if grep -q "No nodes currently have a role" <<<"$LAYOUT"; then
  G layout assign -z dc1 -c 1G "$NODE_ID" >/dev/null
  G layout apply --version 1 >/dev/null
fi
# A new layout takes a moment to become active ("Layout not ready"): retry.
retry() { for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done; "$@"; }
G key info "$S3_ACCESS_KEY" >/dev/null 2>&1 || retry G key import --yes -n cairn-test "$S3_ACCESS_KEY" "$S3_SECRET_KEY" >/dev/null
G bucket info "$S3_BUCKET" >/dev/null 2>&1 || retry G bucket create "$S3_BUCKET" >/dev/null
retry G bucket allow --read --write --owner "$S3_BUCKET" --key "$S3_ACCESS_KEY" >/dev/null

for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" && break; sleep 0.1; done
echo "garage up: http://127.0.0.1:$S3_PORT (pid $(cat "$GARAGE_DIR/garage.pid")) bucket=$S3_BUCKET key=$S3_ACCESS_KEY secret=$S3_SECRET_KEY region=us-east-1 path-style"
