#!/usr/bin/env bash
# cairn ui end to end in a real browser: Debian's Chromium, headless, driven by
# playwright-core (tests/ui/ui.cjs). Makes a sample directory, a repository with two
# archives and a profile, starts `cairn ui`, and has the browser list the archives, find,
# diff, browse to a file, restore it (the same bytes), back up now (the CLI then lists the
# new archive), while requests without the token, from another origin or with a foreign Host
# are refused. Installs chromium (apt) and playwright-core (npm, into a cache directory)
# when missing.
# (scripts/ui-screenshots.sh makes the pictures of docs/ui.md.)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib.sh
cairn_clean_env
cairn_browser
target="${CARGO_TARGET_DIR:-target}"
# The cairn the integration tests run (test hooks on): in CI already built by the test step.
cargo test --locked --quiet --no-run --test cli
cairn="$target/debug/cairn"

work="$(mktemp -d "${TMPDIR:-/tmp}/cairn-ui-test.XXXXXX")"
ui_pid=""
stop() {
  if [ -n "$ui_pid" ]; then kill "$ui_pid" 2>/dev/null || true; wait "$ui_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap stop EXIT
export CAIRN_PASSPHRASE="ui test passphrase" CAIRN_TEST_CHEAP_KDF=1 XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/cache"
mkdir -p "$work/src/docs" "$work/config/cairn"
echo "first version" > "$work/src/notes.txt"
head -c 200000 /dev/urandom > "$work/src/docs/report.bin"
printf 'repository = "%s"\n[create]\npaths = ["%s"]\n' "$work/repo" "$work/src" > "$work/config/cairn/home.toml"
"$cairn" -r "$work/repo" init >/dev/null
"$cairn" --profile home create --timestamp "$(date -u -d '2 days ago' +%Y-%m-%dT%H:%M:%SZ)" one >/dev/null
echo "second version, longer" > "$work/src/notes.txt"
head -c 100000 /dev/urandom > "$work/src/docs/more.bin"
"$cairn" --profile home create --timestamp "$(date -u -d '1 day ago' +%Y-%m-%dT%H:%M:%SZ)" two >/dev/null

cairn_ui_start "$work" "$cairn"
node tests/ui/ui.cjs "$url" "$work"
# Back up now made an archive that the command line lists.
listed="$("$cairn" --profile home list)"
if [ "$(echo "$listed" | wc -l)" != 3 ] || ! echo "$listed" | grep -q '^home-'; then
  echo "ui-test: cairn list does not show the archive back up now made:" >&2
  echo "$listed" >&2
  exit 1
fi
echo "ui-test: ok"
