#!/usr/bin/env bash
# Far stores at the link's speed: create and extract with cairn's defaults over SFTP
# (OpenSSH, scripts/sftp-up.sh), `cairn serve` over the same ssh (ssh:// repositories) and S3
# (rclone serve s3, scripts/s3-up.sh), each server reached through an emulated link
# (examples/slow_link.rs: a rate shared by every connection in each direction, and a delay
# each way; a connection costs one round trip to set up). Each step is reported against the
# bytes that crossed the link in its direction at the link's rate (the link's counters).
# Data: the first N files of the large set (scripts/bench-data.sh; 128 MiB each, 2:1
# compressible; 8 is the whole GiB). Runs interleaved, medians reported.
#
# Usage: scripts/bench-far.sh [--runs N] [--files N] [--links "MBIT:RTT_MS ..."] [--only sftp,serve,s3]
#   default: --runs 3 --files 8 --links "400:10"; the slow link of issue 50 is "20:40"
#   (1 GiB crosses it in about 4 minutes each way: --files 1 for a quicker look)
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; data is kept,
# repositories are deleted after each run). CAIRN_BENCH_BIN=path runs that cairn binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
runs=3
files=8
links="400:10"
only="sftp,serve,s3"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --files) files="$2"; shift ;;
    --links) links="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--runs N] [--files N] [--links \"MBIT:RTT_MS ...\"] [--only sftp,serve,s3]" >&2; exit 2 ;;
  esac
  shift
done
cairn_build --example slow_link
. scripts/bench-data.sh
bench_setup far
bench_data
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
# The data: hard links to the first N files of the large set.
data="$work/far-data-$files"
if [ ! -d "$data" ]; then
  mkdir -p "$data.tmp"
  for f in $(ls "$work/data/large" | sort | head -n "$files"); do ln "$work/data/large/$f" "$data.tmp/$f"; done
  mv "$data.tmp" "$data"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers="$work/servers"
mkdir -p "$servers"
export SFTP_DIR="$servers/sshd" SFTP_PORT S3_DIR="$servers/s3" S3_PORT
SFTP_PORT=$(free_port); S3_PORT=$(free_port)
export RCLONE_BINARY="${HOME}/.cache/cairn-test-servers/rclone"
link_pids=()
stop() {
  local p
  for p in "${link_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  bash scripts/sftp-down.sh >/dev/null 2>&1 || true
  bash scripts/s3-down.sh >/dev/null 2>&1 || true
}
trap stop EXIT
want() { [[ ",$only," == *",$1,"* ]]; }
if want sftp || want serve; then bash scripts/sftp-up.sh >/dev/null; fi
if want s3; then bash scripts/s3-up.sh >/dev/null; fi

# link_up NAME TARGET_PORT RTT_MS MBIT: starts a link to TARGET_PORT; sets $link_port.
link_up() {
  local half
  half=$(awk -v r="$3" 'BEGIN { print r / 2 }')
  rm -f "$servers/$1.port"
  "$bin/examples/slow_link" 0 "$2" "$half" "$4" "$servers/$1.counts" > "$servers/$1.port" &
  link_pids+=($!)
  while [ ! -s "$servers/$1.port" ]; do sleep 0.05; done
  link_port=$(cat "$servers/$1.port")
}
# counts NAME: the bytes the link NAME carried so far, "UP DOWN".
counts() { sleep 0.1; cat "$servers/$1.counts" 2>/dev/null || echo "0 0"; }

mkdir -p "$work/restore"
: > "$work/results"
for spec in $links; do
  mbit=${spec%%:*}; rtt=${spec#*:}
  if want sftp || want serve; then
    link_up "ssh-$mbit-$rtt" "$SFTP_PORT" "$rtt" "$mbit"
    ssh_port=$link_port
    sed "s/^  Port .*/  Port $ssh_port/" "$SFTP_DIR/ssh_config" > "$SFTP_DIR/ssh_config_$ssh_port"
    # The same host key, under the link's port.
    awk -v p="$ssh_port" '{ sub(/\]:[0-9]+/, "]:" p); print }' "$SFTP_DIR/known_hosts" >> "$SFTP_DIR/known_hosts"
  fi
  if want s3; then
    link_up "s3-$mbit-$rtt" "$S3_PORT" "$rtt" "$mbit"
    s3_port=$link_port
  fi
  for r in $(seq 1 "$runs"); do
    for t in sftp serve s3; do
      want "$t" || continue
      name="r$(date +%s%N)"
      case "$t" in
        sftp) url="sftp://sftptest$SFTP_DIR/data/$name"; counter="ssh-$mbit-$rtt"
          envs=(CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config_$ssh_port") ;;
        serve) url="ssh://sftptest$SFTP_DIR/data/$name"; counter="ssh-$mbit-$rtt"
          envs=(CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config_$ssh_port" CAIRN_REMOTE_PATH="$cairn") ;;
        s3) url="s3://127.0.0.1:$s3_port/backup-test/$name"; counter="s3-$mbit-$rtt"
          envs=(AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret) ;;
      esac
      env "${envs[@]}" "$cairn" -r "$url" init >/dev/null
      warm "$data"
      read -r u0 d0 < <(counts "$counter")
      start=$(date +%s%N)
      env "${envs[@]}" "$cairn" -r "$url" create --no-progress b "$data" >/dev/null
      mid=$(date +%s%N)
      read -r u1 d1 < <(counts "$counter")
      dest="$work/restore/$name"
      env "${envs[@]}" "$cairn" -r "$url" extract --no-progress b --target "$dest" >/dev/null
      end=$(date +%s%N)
      read -r u2 d2 < <(counts "$counter")
      cmp -s "$data/f1" "$dest/${data#/}/f1" || { echo "restore of f1 differs ($t)" >&2; exit 1; }
      rm -rf "$dest"
      case "$t" in
        sftp|serve) rm -rf "${SFTP_DIR:?}/data/$name" ;;
        s3) rm -rf "${S3_DIR:?}/data/backup-test/$name" ;;
      esac
      echo "$t $mbit $rtt create $(( (mid - start) / 1000000 )) $((u1 - u0))" >> "$work/results"
      echo "$t $mbit $rtt extract $(( (end - mid) / 1000000 )) $((d2 - d1))" >> "$work/results"
      echo "  run $r $t $mbit Mbit/s $rtt ms: create $(( (mid - start) / 1000000 )) ms, extract $(( (end - mid) / 1000000 )) ms" >&2
    done
  done
done
echo
echo "$(nproc) cores, $(date -u +%Y-%m-%d), $(du -shL "$data" | cut -f1) in $files files, medians of $runs runs"
echo
echo "| store | link | step | time | bytes over the link | at the link's rate | against it |"
echo "|---|---|---|---|---|---|---|"
awk "$MEDIAN_AWK"'
  { k = $1 " " $2 " " $3 " " $4; t[k] = t[k] " " $5 / 1000; b[k] = b[k] " " $6; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
  END {
    for (i = 1; i <= n; i++) {
      split(order[i], f, " ")
      time = median(t[order[i]]); bytes = median(b[order[i]]); ideal = bytes * 8 / (f[2] * 1e6)
      name = f[1] == "sftp" ? "SFTP" : f[1] == "serve" ? "cairn serve (ssh://)" : "S3 (rclone)"
      printf "| %s | %d Mbit/s, %d ms | %s | %.1f s | %.0f MB | %.1f s | %.2fx |\n", name, f[2], f[3], f[4], time, bytes / 1e6, ideal, time / ideal
    }
  }' "$work/results"
