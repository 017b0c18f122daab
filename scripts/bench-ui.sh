#!/usr/bin/env bash
# cairn ui at scale: how long the archive list of a repository with 1,000 archives and the
# first page of an archive of 1,000,000 files take to come back, as the page asks for them.
#
#   scripts/bench-ui.sh [--runs N] [--files N] [--archives N]
#
# One repository: N archives (default 1,000) of a small directory, their times a day apart
# (create --timestamp), and one archive of N files (default 1,000,000: empty files, 1,000 to a
# directory). Each run starts `cairn ui` afresh and times, with curl: the archive list (the
# first request), the root of the big archive (its tree built: the first page the browser
# shows), a directory of 1,000 entries in it, and a later page; then the ui's peak memory;
# then, in headless Chromium (as scripts/ui-test.sh drives it; the ui started afresh), the page
# from its address to the archive list drawn, and from a click on the big archive to its root
# shown. Prints each run and the medians. The work directory is kept (BENCH_DIR to reuse one).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
runs=5 files=1000000 archives=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --files) files="$2"; shift ;;
    --archives) archives="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
XDG_CACHE_HOME_OUTER="${XDG_CACHE_HOME:-}"
cairn_clean_env
# The test hooks' cheap key derivation: a thousand creates would otherwise spend most of
# their time deriving the key.
cairn_build --features testing
cairn_workdir ui
export CAIRN_PASSPHRASE=bench CAIRN_TEST_CHEAP_KDF=1 XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/cache"
repo="$work/repo"
if [ ! -e "$work/made" ]; then
  rm -rf "$repo" "$work/big" "$work/small"
  "$cairn" -r "$repo" init >/dev/null
  python3 - "$work/big" "$files" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    dd = os.path.join(root, f"d{d:05}")
    os.makedirs(dd)
    for f in range(min(per, n - d * per)):
        os.close(os.open(os.path.join(dd, f"file-{f:04}.txt"), os.O_CREAT | os.O_WRONLY, 0o644))
PY
  "$cairn" -r "$repo" create big "$work/big" >/dev/null
  mkdir -p "$work/small"
  for i in $(seq "$archives"); do
    echo "$i" > "$work/small/counter"
    day=$(date -u -d "2024-01-01 + $i days" +%Y-%m-%dT03:00:00Z)
    "$cairn" -r "$repo" create --timestamp "$day" "daily" "$work/small" >/dev/null
  done
  touch "$work/made"
fi
big=""
ms() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000 }'; }
: > "$work/results"
# The browser, when playwright-core is where scripts/ui-test.sh installs it.
NODE_PATH="${XDG_CACHE_HOME_OUTER:-$HOME/.cache}/cairn-test-browser/node_modules"
[ -d "$NODE_PATH/playwright-core" ] && [ -x /usr/bin/chromium ] || NODE_PATH=""
export NODE_PATH
start_ui() {
  cairn_ui_start "$work" "$cairn" -r "$repo"
  pid=$ui_pid
}
for run in $(seq "$runs"); do
  start_ui
  base="${url%%/?token=*}"
  token="${url##*token=}"
  get() { curl -s -o "$work/answer" -w '%{time_total}' -H "X-Cairn-Token: $token" "$base$1"; }
  list=$(get /api/repos/0/archives)
  if [ -z "$big" ]; then
    big=$(python3 -c 'import json,sys; print(next(a["id"] for a in json.load(open(sys.argv[1]))["archives"] if a["name"] == "big"))' "$work/answer")
    count=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["archives"]))' "$work/answer")
  fi
  root=$(get "/api/repos/0/archives/$big/tree")
  dir_key=$(printf '%s/d00000' "${work#/}/big" | xxd -p | tr -d '\n')
  dir=$(get "/api/repos/0/archives/$big/tree?path=$dir_key&limit=1000")
  entries=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total"])' "$work/answer")
  later=$(get "/api/repos/0/archives/$big/tree?path=$dir_key&offset=500&limit=500")
  peak=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  browser="- -"
  if [ -n "$NODE_PATH" ]; then
    start_ui
    browser=$(node scripts/bench-ui-browser.cjs "$url" big)
    kill "$pid"; wait "$pid" 2>/dev/null || true
  fi
  read -r page_list page_tree <<< "$browser"
  echo "run $run: list of $count archives $(ms "$list") ms, big archive's root (tree built) $(ms "$root") ms, a directory of $entries entries $(ms "$dir") ms, a later page $(ms "$later") ms, peak $((peak / 1024)) MiB; in the browser: list drawn $page_list ms, root shown $page_tree ms"
  echo "$(ms "$list") $(ms "$root") $(ms "$dir") $(ms "$later") $((peak / 1024)) $page_list $page_tree" >> "$work/results"
done
col() { awk -v c="$1" '{ print $c }' "$work/results" | median; }
echo "median of $runs: archive list $(col 1) ms; root of $files files $(col 2) ms; directory page $(col 3) ms; later page $(col 4) ms; peak memory $(col 5) MiB"
[ -n "$NODE_PATH" ] && echo "in the browser: archive list drawn $(col 6) ms; root of the big archive shown $(col 7) ms"
echo "(work directory: $work)"
