#!/usr/bin/env bash
# The test suite: what the README's test command runs and CI runs.
# Starts a private OpenSSH SFTP server and an S3 server (rclone) on 127.0.0.1 for the
# remote-store tests, installing them when missing, and stops them (by pid) at the end.
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ci-setup.sh

servers="$(mktemp -d "${TMPDIR:-/tmp}/cairn-test-servers.XXXXXX")"
export SFTP_DIR="$servers/sshd" SFTP_PORT="$((20000 + RANDOM % 10000))"
export S3_DIR="$servers/s3" S3_PORT="$((30000 + RANDOM % 10000))"
# rclone is downloaded once and kept here for later runs.
rclone_cache="${XDG_CACHE_HOME:-$HOME/.cache}/cairn-test-servers/rclone"
export RCLONE_BINARY="$rclone_cache"
stop() {
  bash scripts/sftp-down.sh >/dev/null 2>&1 || true
  bash scripts/s3-down.sh >/dev/null 2>&1 || true
  rm -rf "$servers"
}
trap stop EXIT

if bash scripts/sftp-up.sh; then
  export CAIRN_TEST_SFTP="sftp://sftptest$SFTP_DIR/data" CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config"
else
  echo "test: no SFTP server; the SFTP tests will say they were skipped" >&2
fi
if bash scripts/s3-up.sh; then
  export CAIRN_TEST_S3="s3://127.0.0.1:$S3_PORT/backup-test" AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret
  # rclone's S3 server ignores If-None-Match: * (docs/design.md, "S3"): the suite checks it says so.
  export CAIRN_TEST_S3_OVERWRITES_ON_CREATE=yes
  if [ ! -x "$rclone_cache" ]; then mkdir -p "$(dirname "$rclone_cache")" && cp "$S3_DIR/bin/rclone" "$rclone_cache"; fi
else
  echo "test: no S3 server; the S3 tests will say they were skipped" >&2
fi

cargo test --workspace --locked "$@"

# The hostile-host and damage tests once more, in the cipher suite that `init` does not pick
# on this CPU (the run above used the one it picks).
probe="$servers/suite-probe"
CAIRN_PASSPHRASE=probe CAIRN_TEST_CHEAP_KDF=1 "${CARGO_TARGET_DIR:-target}/debug/cairn" -r "$probe" init >/dev/null
if grep -q '"repokey-aes256gcm"' "$probe/config"; then
  other=repokey-chacha20poly1305-blake3
else
  other=repokey-aes256gcm
fi
echo "test: the hostile-host and damage tests again, with --encryption $other" >&2
CAIRN_TEST_ENCRYPTION="$other" cargo test --locked --test security "$@"
CAIRN_TEST_ENCRYPTION="$other" cargo test --locked --test data "$@" reliability_damage
