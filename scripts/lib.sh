# Sourced by the scripts (`. "$(dirname "$0")/lib.sh"` after they cd to the project): the one
# clean environment, the one build step and the shared helpers, so that no script measures or
# demonstrates with a setting the caller's shell left behind.
#
#   cairn_clean_env        unsets every CAIRN_* variable but the scripts' own inputs
#                          (CAIRN_BENCH_*): a leftover CAIRN_PACK_INFLIGHT, CAIRN_REPO or
#                          CAIRN_STORE_LATENCY would change what is measured
#   cairn_build [OPTS]     builds the cairn that ships (release, without the test hooks), and
#                          after --example NAME (repeatable) those examples (a separate build:
#                          an example turns on the dev-dependencies and with them the test
#                          hooks), after --features F with those features; sets `bin` (the
#                          release directory) and `cairn` (CAIRN_BENCH_BIN when set)
#   cairn_workdir NAME     sets `work`: BENCH_DIR, or a new /var/tmp/cairn-NAME.XXXXXX (kept)
#   median                 the median of the numbers on standard input, one per line

cairn_clean_env() {
  local v
  for v in $(compgen -e); do
    case "$v" in
      CAIRN_BENCH_*) ;;
      CAIRN_*) unset "$v" ;;
    esac
  done
}

cairn_build() {
  local examples=() features=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --example) examples+=("$2"); shift ;;
      --features) features=(--features "$2"); shift ;;
      *) echo "cairn_build: unknown option $1" >&2; return 2 ;;
    esac
    shift
  done
  cargo build --release --locked --quiet --bin cairn "${features[@]}"
  local e
  for e in "${examples[@]}"; do
    cargo build --release --locked --quiet --example "$e"
  done
  bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
  cairn="${CAIRN_BENCH_BIN:-$bin/cairn}"
}

cairn_workdir() {
  work="${BENCH_DIR:-$(mktemp -d "/var/tmp/cairn-$1.XXXXXX")}"
  mkdir -p "$work"
}

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# cairn_browser: Debian's Chromium (apt, when root) and playwright-core (npm, into a cache
# directory, again when tests/ui/package-lock.json changes), for the browser tests and
# pictures of `cairn ui`; exports NODE_PATH.
cairn_browser() {
  if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "needs /usr/bin/chromium (apt-get install chromium)" >&2
      return 1
    fi
  fi
  if ! command -v node >/dev/null; then
    echo "needs Node.js 20 or later, and npm" >&2
    return 1
  fi
  local modules="${XDG_CACHE_HOME:-$HOME/.cache}/cairn-test-browser"
  mkdir -p "$modules"
  if ! cmp -s tests/ui/package-lock.json "$modules/package-lock.json" || [ ! -d "$modules/node_modules/playwright-core" ]; then
    cp tests/ui/package.json tests/ui/package-lock.json "$modules/"
    (cd "$modules" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  export NODE_PATH="$modules/node_modules"
}

# cairn_ui_start DIR COMMAND...: starts `COMMAND... ui --listen 127.0.0.1:0` in the
# background (its output in DIR/ui.out and DIR/ui.err); sets ui_pid, and url to the address
# it printed (token included).
cairn_ui_start() {
  local dir="$1"
  shift
  "$@" ui --listen 127.0.0.1:0 > "$dir/ui.out" 2> "$dir/ui.err" &
  ui_pid=$!
  url=""
  for _ in $(seq 200); do
    url="$(grep -o 'http://[^ ]*' "$dir/ui.out" || true)"
    [ -n "$url" ] && return 0
    sleep 0.05
  done
  echo "cairn ui did not start:" >&2
  cat "$dir/ui.err" >&2
  return 1
}
