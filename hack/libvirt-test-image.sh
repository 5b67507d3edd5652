#!/bin/bash
# Build (once) the bootable VM image the libvirt provider's integration test
# and hack/e2e-libvirt.sh use, without downloading a cloud image: a Debian
# bookworm root file system with a kernel, initramfs, udev, ifupdown and
# cloud-init (NoCloud), as an ext4 file system without partition table
# (root=/dev/vda) in a qcow2 file, plus the kernel and initrd for libvirt's
# direct kernel boot.
#
# Base: the nspawn node root file system khw already caches
# (internal/vm/nspawn EnsureRootfs: ~/.cache/khw/nspawn/rootfs-bookworm-<arch>, it
# holds every package khw nodes need: haproxy, iptables, conntrack, socat …)
# copied and completed in a chroot; without it, debootstrap makes one.
#
# Output directory: ${XDG_CACHE_HOME:-$HOME/.cache}/khw/libvirt/image-<hash>
# where <hash> is the sha256 of this script, so a changed recipe rebuilds and
# an unchanged one is reused:  disk.qcow2  vmlinuz  initrd.img  cmdline
# Prints that directory on its last line. Needs root. ~3-6 min the first time.
set -euo pipefail

ARCH=${ARCH:-$(dpkg --print-architecture)}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/khw
HASH=$(sha256sum "$0" | cut -c1-16)
OUT=$CACHE/libvirt/image-$ARCH-$HASH
SIZE=${SIZE:-3G}

if [ -s "$OUT/disk.qcow2" ] && [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ]; then
	echo "$OUT"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "libvirt-test-image: needs root (chroot, mkfs)" >&2; exit 1; }
for t in mkfs.ext4 qemu-img chroot unshare; do
	command -v "$t" >/dev/null || { echo "libvirt-test-image: $t missing; run make libvirt-deps" >&2; exit 1; }
done

case "$ARCH" in
amd64) KPKG=linux-image-amd64 CONSOLE=ttyS0 ;;
arm64) KPKG=linux-image-arm64 CONSOLE=ttyAMA0 ;;
*) echo "libvirt-test-image: arch $ARCH not supported" >&2; exit 1 ;;
esac

mkdir -p "$CACHE/libvirt"
WORK=$(mktemp -d "$CACHE/libvirt/.build-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/root

BASE=$CACHE/nspawn/rootfs-bookworm-$ARCH
MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
if [ -x "$BASE/usr/bin/systemctl" ]; then
	echo "libvirt-test-image: copying the cached node root $BASE" >&2
	cp -a "$BASE" "$ROOT"
else
	echo "libvirt-test-image: debootstrap bookworm ($ARCH) from $MIRROR (~5 min)" >&2
	debootstrap --variant=minbase --arch="$ARCH" \
		--include=systemd,systemd-sysv,dbus,openssh-server,iproute2,iptables,conntrack,socat,haproxy,jq,sudo,ca-certificates,procps,kmod,curl \
		bookworm "$ROOT" "$MIRROR" >&2
fi
chmod 0755 "$ROOT"

# Complete it in a chroot inside a private mount namespace: /proc, /sys and
# /dev mounts vanish with it. policy-rc.d keeps package scripts from starting
# services.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 0755 "$ROOT/usr/sbin/policy-rc.d"
unshare -m bash -euc '
	ROOT=$1 KPKG=$2
	mount -t proc proc "$ROOT/proc"
	mount -t sysfs sys "$ROOT/sys"
	mount --rbind /dev "$ROOT/dev"
	chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	chroot "$ROOT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"$KPKG" initramfs-tools udev ifupdown cloud-init cloud-guest-utils e2fsprogs \
		openssh-server sudo iproute2 net-tools haproxy iptables conntrack socat jq ca-certificates procps kmod curl
	chroot "$ROOT" apt-get clean
' _ "$ROOT" "$KPKG" >&2
rm -f "$ROOT/usr/sbin/policy-rc.d"

# Every VM made from the image gets its own identity on first boot:
# systemd makes a machine-id, cloud-init the SSH host keys.
: >"$ROOT/etc/machine-id"
rm -f "$ROOT/var/lib/dbus/machine-id" "$ROOT"/etc/ssh/ssh_host_*
rm -rf "$ROOT/var/lib/cloud"
: >"$ROOT/etc/resolv.conf"
echo localhost >"$ROOT/etc/hostname"
printf '/dev/vda\t/\text4\tdefaults,errors=remount-ro\t0\t1\n' >"$ROOT/etc/fstab"
mkdir -p "$ROOT/etc/cloud/cloud.cfg.d"
cat >"$ROOT/etc/cloud/cloud.cfg.d/90-khw.cfg" <<'EOF'
# khw test image: the NoCloud seed ISO (label cidata) is the only source.
datasource_list: [NoCloud, None]
EOF
mkdir -p "$ROOT/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultTimeoutStopSec=15s\n' >"$ROOT/etc/systemd/system.conf.d/khw.conf"
# Serial console login prompt (handy with virsh console).
ln -sf /lib/systemd/system/serial-getty@.service "$ROOT/etc/systemd/system/getty.target.wants/serial-getty@$CONSOLE.service"

KERNEL=$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -1)
INITRD=$(ls "$ROOT"/boot/initrd.img-* | sort -V | tail -1)
mkdir -p "$WORK/out"
cp "$KERNEL" "$WORK/out/vmlinuz"
cp "$INITRD" "$WORK/out/initrd.img"
echo "root=/dev/vda rw console=$CONSOLE net.ifnames=0" >"$WORK/out/cmdline"

truncate -s "$SIZE" "$WORK/disk.raw"
mkfs.ext4 -q -L khw-root -d "$ROOT" "$WORK/disk.raw"
qemu-img convert -O qcow2 "$WORK/disk.raw" "$WORK/out/disk.qcow2"

rm -rf "$OUT"
mv "$WORK/out" "$OUT"
echo "libvirt-test-image: done: $(du -sh "$OUT/disk.qcow2" | cut -f1) disk, kernel $(basename "$KERNEL")" >&2
echo "$OUT"
