#!/usr/bin/env bash
# The pictures of docs/ui.md and the README: `cairn ui` over a repository with a month of
# daily backups of a changing directory (C headers, some edited, some added each day) and a
# second profile, in headless Chromium (as scripts/ui-test.sh drives it).
#
#   scripts/ui-screenshots.sh [DIR]     # DIR: where the PNG files go (default docs/)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath "${1:-docs}")"
. scripts/lib.sh
cairn_clean_env
cairn_browser
cargo build --locked --quiet --features testing --bin cairn
cairn="${CARGO_TARGET_DIR:-target}/debug/cairn"
work="$(mktemp -d "${TMPDIR:-/tmp}/cairn-ui-shots.XXXXXX")"
ui_pid=""
stop() {
  if [ -n "$ui_pid" ]; then kill "$ui_pid" 2>/dev/null || true; wait "$ui_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap stop EXIT
export CAIRN_PASSPHRASE="screenshots" CAIRN_TEST_CHEAP_KDF=1 XDG_CONFIG_HOME="$work/config" XDG_CACHE_HOME="$work/cache"
home="$work/home/alice"
mkdir -p "$home/projects" "$home/notes" "$work/config/cairn"
cp -r /usr/include/linux "$home/projects/headers"
printf 'repository = "%s"\n[create]\npaths = ["%s"]\n' "$work/repo" "$home" > "$work/config/cairn/home.toml"
printf 'repository = "%s"\n[create]\npaths = ["%s/notes"]\n' "$work/db-repo" "$home" > "$work/config/cairn/notes.toml"
"$cairn" -r "$work/repo" init >/dev/null
"$cairn" -r "$work/db-repo" init >/dev/null
mapfile -t files < <(find "$home/projects/headers" -type f | sort)
for day in $(seq 30 -1 1); do
  # Each day some files change and something new arrives; now and then a bigger addition.
  for k in 1 2 3; do
    f="${files[$(( (day * 37 + k * 101) % ${#files[@]} ))]}"
    echo "/* edited $day.$k */" >> "$f"
  done
  echo "notes of day $day" > "$home/notes/day-$day.txt"
  if [ $((day % 7)) = 0 ]; then head -c $((400000 + day * 20000)) /dev/urandom > "$home/projects/photo-$day.jpg"; fi
  when="$(date -u -d "$day days ago 02:00" +%Y-%m-%dT%H:%M:%SZ)"
  "$cairn" --profile home create --timestamp "$when" home >/dev/null
done
"$cairn" --profile notes create notes >/dev/null
cairn_ui_start "$work" "$cairn"
node - "$url" "$out" "$home" <<'JS'
const { chromium } = require('playwright-core');
const path = require('node:path');
const [url, out, home] = process.argv.slice(2);
(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1200, height: 860 } });
  await page.goto(url);
  await page.waitForSelector('#archives tbody tr');
  await page.screenshot({ path: path.join(out, 'ui-archives.png') });
  await page.fill('#find', 'day-2*.txt');
  await page.click('#find-form button');
  await page.waitForSelector('#found tr');
  const boxes = page.locator('#archives tbody input[type=checkbox]');
  await boxes.nth(0).check();
  await boxes.nth(6).check();
  await page.click('#diff');
  await page.waitForSelector('#diff-list tr');
  await page.locator('#results').screenshot({ path: path.join(out, 'ui-find-diff.png') });
  await page.click('#archives tbody a.archive >> nth=0');
  for (const dir of [...home.split('/').filter(Boolean), 'projects', 'headers']) {
    await page.click(`#entries a.dir:text-is("${dir}/")`);
    await page.waitForSelector(`#crumbs a:text-is("${dir}")`);
  }
  await page.screenshot({ path: path.join(out, 'ui-browse.png') });
  await page.locator('#entries tbody input[type=checkbox]').nth(3).check();
  await page.locator('#entries tbody input[type=checkbox]').nth(5).check();
  await page.click('#restore');
  await page.fill('#target', path.join(path.dirname(home), 'restored'));
  await page.screenshot({ path: path.join(out, 'ui-restore-ask.png') });
  await page.click('#confirm-ok');
  await page.waitForFunction(() => document.getElementById('job').dataset.state === 'ok');
  await page.screenshot({ path: path.join(out, 'ui-restore.png') });
  await browser.close();
})().catch((e) => { console.error(e); process.exit(1); });
JS
echo "ui-screenshots: written to $out"
