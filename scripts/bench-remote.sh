#!/usr/bin/env bash
# cairn create (and extract) over remote stores: the pack store synchronous
# (CAIRN_PACK_ASYNC=no), 1, 2, 4 and 8 packs in flight (CAIRN_PACK_INFLIGHT=N), and the number
# cairn chooses itself for a remote store (the default), against
#   - an emulated high-latency object store: a local directory behind 50 ms per operation and
#     400 Mbit/s per connection, with 4 connections (CAIRN_STORE_LATENCY / _BANDWIDTH /
#     _CONNECTIONS);
#   - a real OpenSSH SFTP server on 127.0.0.1 (scripts/sftp-up.sh), directly and behind a
#     50 ms round trip (ssh's ProxyCommand through scripts/delay-proxy.py);
#   - `cairn serve` through the same OpenSSH server (ssh:// repositories), directly and behind
#     the same 50 ms round trip;
#   - a real S3 server on 127.0.0.1: rclone serve s3 (scripts/s3-up.sh), and Garage when its
#     binary is there (scripts/test-garage.sh installs it; GARAGE=path to use another).
# Data: 8 × 128 MiB of 2:1-compressible files (about 517 MiB stored), 16 MB packs (33 packs,
# so the pipeline matters). Runs are interleaved; medians are reported.
#
# Usage: scripts/bench-remote.sh [--runs N] [--only emulated|sftp|sftp-wan|serve|serve-wan|s3|garage[,...]]
# BENCH_MODES="auto" (say) times only some of the modes (the others are shown as 0).
# CAIRN_BENCH_BIN=path runs that cairn binary instead of building this checkout's.
# BENCH_DIR picks the work directory (default: a new one under /var/tmp; data is kept,
# repositories are deleted after each run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env

runs=3
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --only) only="$2"; shift ;;
    *) echo "usage: $0 [--runs N] [--only emulated|sftp|sftp-wan|serve|serve-wan|s3|garage]" >&2; exit 2 ;;
  esac
  shift
done

cairn_build --example gendata
gen="$bin/examples/gendata"
cairn_workdir bench-remote
export CAIRN_PASSPHRASE=bench XDG_CACHE_HOME="$work/cache"
echo "work directory: $work" >&2

data="$work/data"
if [ ! -d "$data" ]; then
  mkdir -p "$data.tmp"
  for i in $(seq 1 8); do "$gen" mixed "$data.tmp/f$i" 128M "$((i + 100))"; done
  mv "$data.tmp" "$data"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
servers="$work/servers"
mkdir -p "$servers"
export SFTP_DIR="$servers/sshd" SFTP_PORT S3_DIR="$servers/s3" S3_PORT
export GARAGE_DIR="$servers/garage" GARAGE_S3_PORT GARAGE_RPC_PORT GARAGE_ADMIN_PORT
SFTP_PORT=$(free_port); S3_PORT=$(free_port)
GARAGE_S3_PORT=$(free_port); GARAGE_RPC_PORT=$(free_port); GARAGE_ADMIN_PORT=$(free_port)
# scripts/test.sh keeps the rclone binary it downloaded here.
export RCLONE_BINARY="${HOME}/.cache/cairn-test-servers/rclone"
garage_bin="${GARAGE:-${HOME}/.cache/cairn-test-servers/garage/bin/garage}"
stop() {
  bash scripts/sftp-down.sh >/dev/null 2>&1 || true
  bash scripts/s3-down.sh >/dev/null 2>&1 || true
  bash scripts/garage-down.sh --wipe >/dev/null 2>&1 || true
}
trap stop EXIT

# target NAME -> "URL-base|environment" on stdout; starts its server.
targets=()
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
if want emulated; then targets+=(emulated); fi
if { want sftp || want sftp-wan || want serve || want serve-wan; } && bash scripts/sftp-up.sh >/dev/null; then
  want sftp && targets+=(sftp)
  cp "$SFTP_DIR/ssh_config" "$SFTP_DIR/ssh_config_wan"
  echo "  ProxyCommand python3 $PWD/scripts/delay-proxy.py 25 %h %p" >> "$SFTP_DIR/ssh_config_wan"
  want sftp-wan && targets+=(sftp-wan)
  want serve && targets+=(serve)
  want serve-wan && targets+=(serve-wan)
fi
if want s3 && bash scripts/s3-up.sh >/dev/null; then targets+=(s3); fi
if want garage && [ -x "$garage_bin" ] && GARAGE="$garage_bin" bash scripts/garage-up.sh >/dev/null; then targets+=(garage); fi

# repo_url TARGET NAME
repo_url() {
  case "$1" in
    emulated) echo "$work/repos/$2" ;;
    sftp|sftp-wan) echo "sftp://sftptest$SFTP_DIR/data/$2" ;;
    serve|serve-wan) echo "ssh://sftptest$SFTP_DIR/data/$2" ;;
    s3) echo "s3://127.0.0.1:$S3_PORT/backup-test/$2" ;;
    garage) echo "s3://127.0.0.1:$GARAGE_S3_PORT/backup-test/$2" ;;
  esac
}
# with TARGET CMD...: runs CMD with the target's environment.
with() {
  local t=$1; shift
  case "$t" in
    emulated) env CAIRN_STORE_LATENCY=50000 CAIRN_STORE_BANDWIDTH=400000000 CAIRN_STORE_CONNECTIONS=4 "$@" ;;
    sftp) env CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config" "$@" ;;
    sftp-wan) env CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config_wan" "$@" ;;
    serve) env CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config" CAIRN_REMOTE_PATH="$cairn" "$@" ;;
    serve-wan) env CAIRN_RSH="ssh -F $SFTP_DIR/ssh_config_wan" CAIRN_REMOTE_PATH="$cairn" "$@" ;;
    s3) env AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret "$@" ;;
    garage) env AWS_ACCESS_KEY_ID=GK0123456789abcdef01234567 \
        AWS_SECRET_ACCESS_KEY=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef "$@" ;;
  esac
}
# delete_repo TARGET URL: removes a benchmark repository through the server's own files (a
# few dozen files: no mass delete). Garage's objects stay until its state is wiped at the end.
delete_repo() {
  case "$1" in
    emulated) rm -rf "$2" ;;
    sftp|sftp-wan|serve|serve-wan) rm -rf "$SFTP_DIR/data/${2##*/}" ;;
    s3) rm -rf "$S3_DIR/data/backup-test/${2##*/}" ;;
    garage) ;;
  esac
}
mkdir -p "$work/repos" "$work/restore"

secs() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.2f\n", e - s }'; }

# run TARGET MODE -> prints "create-seconds extract-seconds" (extract only for MODE=auto)
run() {
  local t=$1 mode=$2 name url start mid end ex=-
  name="r$(date +%s%N)"
  url=$(repo_url "$t" "$name")
  with "$t" "$cairn" -r "$url" init >/dev/null
  cat "$data"/* >/dev/null # warm the page cache right before timing
  local menv=()
  case "$mode" in
    sync) menv=(CAIRN_PACK_ASYNC=no) ;;
    auto) menv=(CAIRN_PACK_TRACE=yes) ;;
    *) menv=(CAIRN_PACK_INFLIGHT="$mode") ;;
  esac
  start=$(date +%s.%N)
  with "$t" env "${menv[@]}" CAIRN_PACK_SIZE=16000000 \
      "$cairn" -r "$url" create --no-progress b "$data" >/dev/null 2>"$work/trace"
  mid=$(date +%s.%N)
  if [ "$mode" = auto ]; then
    # What the pacer chose as it went ("[in flight: 4]" in the trace; it starts at 2).
    echo "  $t chose: $(grep -o 'in flight: [0-9]*' "$work/trace" | cut -d' ' -f3 | tr '\n' ' ')" >&2
    local dest="$work/restore/$name"
    with "$t" "$cairn" -r "$url" extract --no-progress b --target "$dest" >/dev/null
    end=$(date +%s.%N)
    ex=$(secs "$mid" "$end")
    cmp -s "$data/f1" "$dest/${data#/}/f1" || { echo "restore of f1 differs ($t)" >&2; exit 1; }
    rm -rf "$dest"
  fi
  delete_repo "$t" "$url"
  echo "$(secs "$start" "$mid") $ex"
}

echo
echo "cairn $("$cairn" --version | cut -d' ' -f2), $(nproc) cores, $(date -u +%Y-%m-%d), $(du -sh "$data" | cut -f1) in 8 files, 16 MB packs, medians of $runs interleaved runs"
echo
echo "| store | create sync | 1 in flight | 2 | 4 | 8 | chosen (default) | chosen / best fixed | extract |"
echo "|---|---|---|---|---|---|---|---|---|"
# shellcheck disable=SC2206 # words on purpose
modes=(${BENCH_MODES:-sync 1 2 4 8 auto})
for t in "${targets[@]}"; do
  declare -A times=()
  ex=()
  for r in $(seq 1 "$runs"); do
    # Interleaved, and each run in another order.
    for i in "${!modes[@]}"; do
      m=${modes[$(( (i + r) % ${#modes[@]} ))]}
      out=$(run "$t" "$m")
      times[$m]="${times[$m]:-} ${out% *}"
      [ "$m" = auto ] && ex+=("${out#* }")
    done
  done
  for m in "${modes[@]}"; do echo "  $t $m:${times[$m]}" >&2; done
  declare -A med=()
  for m in sync 1 2 4 8 auto; do med[$m]=0; done
  for m in "${modes[@]}"; do med[$m]=$(printf '%s\n' ${times[$m]} | median); done
  e=$(printf '%s\n' "${ex[@]}" | median)
  case "$t" in
    emulated) label="emulated: 50 ms + 400 Mbit/s per connection, 4 connections" ;;
    sftp) label="SFTP, OpenSSH on 127.0.0.1" ;;
    sftp-wan) label="SFTP, OpenSSH on 127.0.0.1 behind a 50 ms round trip" ;;
    serve) label="cairn serve over OpenSSH on 127.0.0.1" ;;
    serve-wan) label="cairn serve over OpenSSH on 127.0.0.1 behind a 50 ms round trip" ;;
    s3) label="S3, rclone serve s3 on 127.0.0.1" ;;
    garage) label="S3, Garage on 127.0.0.1" ;;
  esac
  awk -v l="$label" -v s="${med[sync]}" -v a="${med[1]}" -v b="${med[2]}" -v c="${med[4]}" \
      -v d="${med[8]}" -v x="${med[auto]}" -v e="$e" 'BEGIN {
    best = 0; n = split(a " " b " " c " " d, f, " ")
    for (i = 1; i <= n; i++) if (f[i] > 0 && (best == 0 || f[i] < best)) best = f[i]
    if (best == 0) best = x
    printf "| %s | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s | %.2f s | %.2fx | %.2f s |\n", l, s, a, b, c, d, x, x / best, e }'
  unset times med
done
