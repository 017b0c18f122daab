#!/usr/bin/env bash
# Starts a private OpenSSH sshd (SFTP) on 127.0.0.1:${SFTP_PORT:-2222} for the SFTP tests.
# Everything lives in $SFTP_DIR (default: ${TMPDIR:-/tmp}/cairn-test-servers/sshd). Unattended: no prompts.
# Needs: apt-get install -y openssh-server openssh-sftp-server openssh-client
# Does NOT touch /etc/ssh or any system sshd (own config, own host key, own pid file).
set -euo pipefail
SFTP_DIR="${SFTP_DIR:-${TMPDIR:-/tmp}/cairn-test-servers/sshd}"
SFTP_PORT="${SFTP_PORT:-2222}"
SFTP_ROOT="${SFTP_ROOT:-$SFTP_DIR/data}"     # where tests may put repositories
SSHD=/usr/sbin/sshd                          # sshd must be started by absolute path
if [ ! -x "$SSHD" ]; then
  echo "sshd not found; run: apt-get install -y openssh-server openssh-sftp-server openssh-client" >&2
  exit 1
fi
mkdir -p "$SFTP_DIR" "$SFTP_ROOT"
chmod 700 "$SFTP_DIR"                         # StrictModes-friendly
USER_NAME="$(id -un)"

# 1. host key + client key (generated once, reused afterwards)
[ -f "$SFTP_DIR/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C sftp-test-host -f "$SFTP_DIR/ssh_host_ed25519_key"
[ -f "$SFTP_DIR/id_ed25519" ]           || ssh-keygen -q -t ed25519 -N '' -C sftp-test-client -f "$SFTP_DIR/id_ed25519"
cp "$SFTP_DIR/id_ed25519.pub" "$SFTP_DIR/authorized_keys"
chmod 600 "$SFTP_DIR/authorized_keys" "$SFTP_DIR/id_ed25519" "$SFTP_DIR/ssh_host_ed25519_key"

# 2. known_hosts pinned to our host key => StrictHostKeyChecking=yes works without prompts
echo "[127.0.0.1]:$SFTP_PORT $(cut -d' ' -f1,2 "$SFTP_DIR/ssh_host_ed25519_key.pub")" > "$SFTP_DIR/known_hosts"

# 3. sshd config: loopback only, key-only auth, no PAM, own pid file.
#    StrictModes defaults to 'no' here: with 'yes', sshd refuses the key whenever any parent dir of
#    authorized_keys is group/world-writable (e.g. a checkout under /tmp: "bad ownership or modes for directory /tmp").
cat > "$SFTP_DIR/sshd_config" <<CONF
ListenAddress 127.0.0.1
Port $SFTP_PORT
HostKey $SFTP_DIR/ssh_host_ed25519_key
PidFile $SFTP_DIR/sshd.pid
AuthorizedKeysFile $SFTP_DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $USER_NAME
UsePAM no
StrictModes ${SFTP_STRICT_MODES:-no}
PrintMotd no
LogLevel INFO
MaxStartups 64:30:128
MaxSessions 64
Subsystem sftp /usr/lib/openssh/sftp-server
CONF

# 4. client config so that 'ssh -F $SFTP_DIR/ssh_config sftptest' / 'sftp -F ... sftptest' just work
cat > "$SFTP_DIR/ssh_config" <<CONF
Host sftptest
  HostName 127.0.0.1
  Port $SFTP_PORT
  User $USER_NAME
  IdentityFile $SFTP_DIR/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $SFTP_DIR/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
CONF

# 5. already running?
if [ -f "$SFTP_DIR/sshd.pid" ] && kill -0 "$(cat "$SFTP_DIR/sshd.pid")" 2>/dev/null; then
  echo "sshd already running, pid $(cat "$SFTP_DIR/sshd.pid")"; exit 0
fi

# 6. privilege-separation dir: required when sshd runs as root (Debian: /run/sshd)
if [ "$(id -u)" = 0 ]; then mkdir -p /run/sshd && chmod 755 /run/sshd; fi

"$SSHD" -t -f "$SFTP_DIR/sshd_config"                  # config test, fails fast
"$SSHD" -f "$SFTP_DIR/sshd_config" -E "$SFTP_DIR/sshd.log"   # daemonizes, writes PidFile

# 7. wait until it accepts an SFTP session (max ~10 s)
for _ in $(seq 1 100); do
  if echo "pwd" | sftp -q -F "$SFTP_DIR/ssh_config" -b - sftptest >/dev/null 2>&1; then
    echo "sshd up on 127.0.0.1:$SFTP_PORT (pid $(cat "$SFTP_DIR/sshd.pid")), key $SFTP_DIR/id_ed25519, known_hosts $SFTP_DIR/known_hosts, data dir $SFTP_ROOT"
    exit 0
  fi
  sleep 0.1
done
echo "sshd did not come up; last log lines:" >&2; tail -n 20 "$SFTP_DIR/sshd.log" >&2
kill "$(cat "$SFTP_DIR/sshd.pid")" 2>/dev/null || true; rm -f "$SFTP_DIR/sshd.pid"; exit 1
