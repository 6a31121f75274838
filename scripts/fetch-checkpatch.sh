#!/usr/bin/env bash
# Fetches the kernel's scripts/checkpatch.pl (with its spelling.txt and const_structs.checkpatch)
# into .cache/checkpatch/ from the Debian linux-source package of the installed headers' series,
# for tests/test_driver.py's style check of native/driver/pseudo_lock_sram. Debian ships
# checkpatch.pl only inside that 139 MB source tarball, so three files are extracted and the rest
# is deleted. Safe to run again (does nothing once the files are there). Never fails the setup:
# where the package can't be had it says why and the test skips with the same reason.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=.cache/checkpatch
[ -f "$dest/checkpatch.pl" ] && exit 0
say() { echo "fetch-checkpatch: not available: $*" >&2; mkdir -p "$dest"; echo "$*" > "$dest/unavailable"; exit 0; }
command -v apt-get >/dev/null || say "no apt-get on this host"
series=$(dpkg-query -W -f='${Version}' linux-headers-amd64 2>/dev/null | sed -E 's/^([0-9]+\.[0-9]+).*/\1/')
[ -n "$series" ] || say "linux-headers-amd64 is not installed (scripts/system-deps.sh installs it)"
pkg="linux-source-$series"
tmp=$(mktemp -d) || say "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
( cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1 ) || say "apt-get download $pkg failed"
dpkg-deb --fsys-tarfile "$tmp"/"$pkg"_*.deb | tar -x -C "$tmp" "./usr/src/$pkg.tar.xz" \
  || say "$pkg: no usr/src/$pkg.tar.xz in the package"
rm -f "$tmp"/"$pkg"_*.deb
files=(checkpatch.pl spelling.txt const_structs.checkpatch)
tar -xJf "$tmp/usr/src/$pkg.tar.xz" -C "$tmp" "${files[@]/#/$pkg/scripts/}" \
  || say "$pkg.tar.xz: scripts/checkpatch.pl not found"
mkdir -p "$dest"
for f in "${files[@]}"; do cp "$tmp/$pkg/scripts/$f" "$dest/$f"; done
rm -f "$dest/unavailable"
echo "fetch-checkpatch: $dest/checkpatch.pl from $pkg"
