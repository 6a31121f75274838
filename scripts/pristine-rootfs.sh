#!/usr/bin/env bash
# A pristine host's root filesystem for the tests (tests/support/pristine.py): Debian 11
# "bullseye" minbase (python3 3.9, as Amazon Linux 2023's python3), openssh-server, sudo and
# a login user ec2-user with passwordless sudo, as a cloud image has; no gcc, make, rsync or
# pip packages (the prep playbook installs what a campaign needs).
#
#   scripts/pristine-rootfs.sh DEST
#
# DEST is made as a directory (an overlay's lower layer), built in DEST.tmp and renamed into
# place, so a killed build leaves no half tree. The Debian mirror is the one this machine's apt
# uses (its first deb822 or one-line "deb" source), so nothing here names an archive host.
set -euo pipefail
dest=${1:?usage: pristine-rootfs.sh DEST}
suite=bullseye
packages=python3,openssh-server,sudo,iproute2,procps,ca-certificates
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  mirror=$(awk '/^URIs:/ && $2 ~ /debian$/ {print $2; exit}' "$f")
  [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "pristine-rootfs: no Debian mirror in this machine's apt sources" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "pristine-rootfs: mmdebstrap not installed" >&2; exit 1; }
tmp="$dest.tmp"
rm -rf "$tmp"
mmdebstrap --quiet --variant=minbase --include="$packages" \
  --customize-hook='chroot "$1" useradd --create-home --shell /bin/bash ec2-user' \
  --customize-hook='chroot "$1" passwd -d ec2-user >/dev/null' \
  --customize-hook='echo "ec2-user ALL=(ALL) NOPASSWD:ALL" > "$1/etc/sudoers.d/90-cloud-init-users" && chmod 440 "$1/etc/sudoers.d/90-cloud-init-users"' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  "$suite" "$tmp" "$mirror"
rm -rf "$dest"
mv "$tmp" "$dest"
