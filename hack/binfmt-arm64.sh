#!/bin/sh
# Let this amd64 host run arm64 programs (debootstrap --arch=arm64 runs the
# second stage's dpkg and maintainer scripts inside the arm64 root) through
# Debian's qemu-user-static, by registering its binfmt_misc entry for
# aarch64 ELF files with the kernel: the line of
# /usr/lib/binfmt.d/qemu-aarch64.conf written to
# /proc/sys/fs/binfmt_misc/register (Documentation/admin-guide/binfmt-misc.rst).
# Its flag F opens the interpreter now, so it also works inside a chroot
# that has no qemu. Hosts with systemd do this at boot (systemd-binfmt);
# this machine has no systemd as PID 1.
#
#   hack/binfmt-arm64.sh            register (no-op when already registered)
#   hack/binfmt-arm64.sh --remove   unregister what this script registered,
#                                   and unmount binfmt_misc if it mounted it
#
# Marks under /run/khw-binfmt-arm64 record what it did, so --remove undoes
# only that (an entry registered by someone else stays).
set -eu
CONF=/usr/lib/binfmt.d/qemu-aarch64.conf
BM=/proc/sys/fs/binfmt_misc
MARK=/run/khw-binfmt-arm64

if [ "$(id -u)" != 0 ]; then
	echo "binfmt-arm64: needs root (binfmt_misc)" >&2
	exit 2
fi

if [ "${1:-}" = --remove ]; then
	if [ -e "$MARK/registered" ] && [ -e "$BM/qemu-aarch64" ]; then
		echo -1 >"$BM/qemu-aarch64"
		echo "binfmt-arm64: unregistered qemu-aarch64"
	fi
	if [ -e "$MARK/mounted" ]; then
		umount "$BM" && echo "binfmt-arm64: unmounted $BM"
	fi
	rm -rf "$MARK"
	exit 0
fi

if [ ! -r "$CONF" ]; then
	echo "binfmt-arm64: $CONF missing (fix: apt-get install qemu-user-static, or make libvirt-deps-arm64)" >&2
	exit 1
fi
mkdir -p "$MARK"
if [ ! -e "$BM/register" ]; then
	mount -t binfmt_misc binfmt_misc "$BM"
	touch "$MARK/mounted"
fi
if [ -e "$BM/qemu-aarch64" ]; then
	echo "binfmt-arm64: qemu-aarch64 already registered: $(head -1 "$BM/qemu-aarch64")"
	exit 0
fi
grep -v '^#' "$CONF" | head -1 >"$BM/register"
touch "$MARK/registered"
echo "binfmt-arm64: registered qemu-aarch64 ($(sed -n 's/^interpreter //p' "$BM/qemu-aarch64"), flags $(sed -n 's/^flags: //p' "$BM/qemu-aarch64"))"
