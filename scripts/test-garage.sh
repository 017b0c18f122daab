#!/usr/bin/env bash
# The S3 tests (store conformance, end to end, server killed during a create) against Garage,
# a production S3 server, in addition to the rclone server that scripts/test.sh uses.
# Installs Garage 2.5.0 once with cargo (about 10 minutes on 2 cores: 8m50s measured) into
# ~/.cache/cairn-test-servers/garage, starts it on free ports, runs the tests, stops it by pid.
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
GARAGE_VERSION=2.5.0
root="${XDG_CACHE_HOME:-$HOME/.cache}/cairn-test-servers/garage"
export GARAGE="$root/bin/garage"
if [ ! -x "$GARAGE" ] || ! "$GARAGE" --version 2>/dev/null | grep -q "v$GARAGE_VERSION"; then
  echo "test-garage: building Garage $GARAGE_VERSION (once; about 10 minutes)" >&2
  cargo install garage --locked --version "$GARAGE_VERSION" --root "$root"
fi
command -v curl >/dev/null || bash scripts/ci-setup.sh

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers="$(mktemp -d "${TMPDIR:-/tmp}/cairn-test-garage.XXXXXX")"
export GARAGE_DIR="$servers/garage"
export GARAGE_S3_PORT="$(free_port)" GARAGE_RPC_PORT="$(free_port)" GARAGE_ADMIN_PORT="$(free_port)"
stop() { bash scripts/garage-down.sh >/dev/null 2>&1 || true; rm -rf "$servers"; }
trap stop EXIT
bash scripts/garage-up.sh

export CAIRN_TEST_S3="s3://127.0.0.1:$GARAGE_S3_PORT/backup-test" CAIRN_TEST_S3_SERVER=garage
# Garage ignores If-None-Match: * too.
export CAIRN_TEST_S3_OVERWRITES_ON_CREATE=yes
export AWS_ACCESS_KEY_ID=GK0123456789abcdef01234567
export AWS_SECRET_ACCESS_KEY=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
unset CAIRN_TEST_SFTP
cargo test --locked --test remote "$@" s3 -- --nocapture
