#!/usr/bin/env bash
# Builds cairn's Debian package with cargo-deb (installed into ~/.cargo/bin when missing):
# the release binary, a man page per command, completions for bash, zsh and fish, the
# systemd user units and the example profiles. Prints the package's path.
#
#   scripts/deb.sh           build it (then: sudo dpkg -i PATH)
#   scripts/deb.sh --test    also, as root: install it with dpkg -i, back up and restore a
#                            sample directory with the installed /usr/bin/cairn, check that
#                            every file is where it belongs, and remove the package again
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
cairn_clean_env
test_install=no
case "${1:-}" in
  --test) test_install=yes ;;
  "") ;;
  *) echo "usage: scripts/deb.sh [--test]" >&2; exit 2 ;;
esac

if ! command -v cargo-deb >/dev/null; then
  echo "deb: installing cargo-deb" >&2
  cargo install --locked --quiet cargo-deb
fi
cairn_build
assets="$bin/deb"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin/cairn" man "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1
"$bin/cairn" completions bash > "$assets/completions/cairn"
"$bin/cairn" completions zsh > "$assets/completions/_cairn"
"$bin/cairn" completions fish > "$assets/completions/cairn.fish"
out="${CARGO_TARGET_DIR:-$PWD/target}/debian"
rm -rf "$out"
cargo deb --no-build --locked --quiet --output "$out" >/dev/null
deb=$(ls "$out"/cairn_*.deb)
echo "$deb"
[ "$test_install" = yes ] || exit 0

if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null; then
  echo "deb: installing needs root and dpkg; the install test is skipped" >&2
  exit 0
fi
if dpkg -s cairn >/dev/null 2>&1; then
  echo "deb: a cairn package is installed already; this test installs and removes its own, so it leaves that one alone and stops" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-deb.XXXXXX")
cleanup() {
  dpkg -r cairn >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
dpkg -i "$deb" >/dev/null
fail() { echo "deb: $*" >&2; exit 1; }
[ "$(command -v cairn)" = /usr/bin/cairn ] || fail "cairn is not /usr/bin/cairn on the PATH"
/usr/bin/cairn --version | grep -q '^cairn ' || fail "cairn --version"
for f in /usr/share/man/man1/cairn.1.gz /usr/share/man/man1/cairn-create.1.gz \
  /usr/share/bash-completion/completions/cairn /usr/share/zsh/vendor-completions/_cairn \
  /usr/share/fish/vendor_completions.d/cairn.fish /usr/lib/systemd/user/cairn@.service \
  /usr/lib/systemd/user/cairn@.timer /usr/share/doc/cairn/examples/home.toml \
  /usr/share/doc/cairn/LICENSE-MIT; do
  [ -s "$f" ] || fail "$f is missing"
done
zcat /usr/share/man/man1/cairn-create.1.gz | grep -q 'exclude' || fail "the create man page is empty"
grep -q '^ExecStart=/usr/bin/cairn ' /usr/lib/systemd/user/cairn@.service || fail "the unit does not run /usr/bin/cairn"

# A backup and a restore with the installed binary.
mkdir -p "$work/sample/docs" "$work/sample/empty"
for i in $(seq 1 20); do printf 'note %d\n' "$i" > "$work/sample/docs/note-$i.txt"; done
head -c 3000000 /dev/urandom > "$work/sample/blob.bin"
ln -s docs/note-1.txt "$work/sample/link"
export CAIRN_PASSPHRASE=deb-test CAIRN_REPO="$work/repo" XDG_CACHE_HOME="$work/cache"
cd "$work"
/usr/bin/cairn init >/dev/null
/usr/bin/cairn create first sample >/dev/null
/usr/bin/cairn check --verify-data >/dev/null
/usr/bin/cairn extract first --target "$work/restored" >/dev/null
diff -r --no-dereference "$work/sample" "$work/restored/sample" || fail "the restore differs from the sample"
cd - >/dev/null
dpkg -r cairn >/dev/null
[ ! -e /usr/bin/cairn ] || fail "dpkg -r left /usr/bin/cairn"
echo "deb: installed with dpkg -i, backed up and restored with /usr/bin/cairn, removed" >&2
