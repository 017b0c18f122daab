#!/usr/bin/env bash
# Installs what a fresh machine lacks for the test suite: setpriv and diff for the CLI
# tests, OpenSSH (server, sftp-server, client) for the SFTP tests, curl and ss for starting
# the S3 server, setfacl, setfattr, setcap and chattr for the whole-system metadata tests,
# fusermount for the mount tests (which are skipped without /dev/fuse), GNU tar and bsdtar
# for the export-tar tests.
# Idempotent; needs root and apt-get to install anything.
set -euo pipefail
if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi
need=()
command -v setpriv >/dev/null || need+=(util-linux)
command -v diff >/dev/null || need+=(diffutils)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
[ -x /usr/lib/openssh/sftp-server ] || need+=(openssh-sftp-server)
command -v ssh >/dev/null || need+=(openssh-client)
command -v curl >/dev/null || need+=(curl)
command -v ss >/dev/null || need+=(iproute2)
command -v setfacl >/dev/null || need+=(acl)
command -v setfattr >/dev/null || need+=(attr)
command -v setcap >/dev/null || need+=(libcap2-bin)
command -v chattr >/dev/null || need+=(e2fsprogs)
command -v useradd >/dev/null || need+=(passwd)
command -v fusermount >/dev/null || command -v fusermount3 >/dev/null || need+=(fuse3)
command -v tar >/dev/null || need+=(tar)
command -v bsdtar >/dev/null || need+=(libarchive-tools)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]} (install them, or the tests that need them are skipped)" >&2
  fi
fi
