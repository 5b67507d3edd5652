#!/bin/bash
# Build (once) a disk image laid out like an Ubuntu 24.04 server cloud image,
# offline, so the libvirt provider's default path (the artifact catalog's
# ubuntu-cloud-image, booted from its own disk, no direct kernel boot) can be
# tested on a machine that cannot download Ubuntu:
#
#   qcow2, GPT, partitions in disk order:
#     14  BIOS boot (EF02, 4 MiB)        grub-pc core image   (amd64 only)
#     15  EFI system (EF00, 106 MiB)     FAT32 label UEFI: \EFI\BOOT\BOOTX64.EFI
#                                        (amd64) or BOOTAA64.EFI (arm64), from
#                                        grub-install --removable
#      1  Linux root (8300, the rest)    ext4 label cloudimg-rootfs, the LAST
#                                        partition so cloud-init's growpart can
#                                        grow it to the VM disk
#   /etc/fstab mounts LABEL=cloudimg-rootfs on / and LABEL=UEFI on /boot/efi;
#   /boot/grub/grub.cfg (grub-mkconfig) boots root=LABEL=cloudimg-rootfs with
#   console=ttyS0 (amd64) or ttyAMA0 (arm64) and net.ifnames=0.
#
# (A real noble image also has a separate /boot partition 16; the root file
# system here keeps /boot.)
#
# The root file system is the one of the direct-kernel-boot test image
# (hack/libvirt-test-image.sh: Debian bookworm with kernel, initramfs,
# cloud-init NoCloud, cloud-guest-utils), copied into partition 1, grown to
# fill it and relabelled; grub-pc-bin, grub-efi-<arch>-bin and grub2-common
# are installed into it from Debian apt in a chroot.
#
# Inside, it is made like an Ubuntu 24.04 server cloud image where that can
# break khw, and the script checks each of these before it writes the image:
#   - no haproxy, conntrack, socat, jq: the test image bakes them in, Ubuntu's
#     image has none of them (its published .manifest does not list them),
#     so khw must install them itself; they are purged here;
#   - empty package lists (/var/lib/apt/lists): Ubuntu builds its cloud
#     images with a tmpfs over /var/lib/apt/lists in the image chroot
#     (livecd-rootfs, live-build/functions setup_mountpoint), so the first
#     apt-get install on a fresh VM fails with "Unable to locate package"
#     until apt-get update has run (e.g. MicrosoftDocs/azure-docs PR #58789);
#   - systemd-resolved enabled and /etc/resolv.conf a link to
#     ../run/systemd/resolve/stub-resolv.conf (nameserver 127.0.0.53), the
#     real DNS servers in /run/systemd/resolve/resolv.conf: noble's network
#     stack is netplan -> systemd-networkd -> systemd-resolved. ifupdown is
#     purged so that cloud-init renders its network-config for
#     systemd-networkd (enabled here), which hands the DNS servers to
#     resolved as netplan does;
#   - the unified cgroup v2 hierarchy (Debian 12's default, as noble's): no
#     systemd.unified_cgroup_hierarchy or cgroup_no_v1 on the command line;
#   - AppArmor: Debian's kernel enables the LSM by default, as Ubuntu's
#     does; the apparmor package (apparmor_parser, apparmor.service) is
#     installed so profiles load, as on Ubuntu;
#   - a package manager busy after the first boot: Ubuntu's
#     apt-daily-upgrade.timer starts unattended-upgrades in a fresh VM's first
#     minutes, and while it holds /var/lib/dpkg/lock-frontend any apt-get fails
#     at once ("Could not get lock ... held by process N (unattended-upgr)").
#     hack/standin/ has a stand-in for it: khw-standin-unattended-upgrades.timer
#     (enabled, 30 s after boot) starts a service that holds dpkg's locks for
#     60 s under the name unattended-upgr, and installs nothing;
#   - cloud.cfg's default user is Ubuntu's (cloud-init config/cloud.cfg.tmpl,
#     ubuntu branch: name ubuntu, groups adm cdrom dip lxd sudo, sudo
#     NOPASSWD, shell bash). khw's seed lists its own user ubuntu under
#     users: without "default", so on both images cloud-init creates that one.
# The image's package list, in the format of Ubuntu's .manifest ("package
# TAB version" lines, dpkg-query -W), is written beside it as manifest.
#
# Usage: hack/libvirt-cloud-image.sh [TEST-IMAGE-DIR]
#   TEST-IMAGE-DIR defaults to the last line of hack/libvirt-test-image.sh.
# Output directory: ${XDG_CACHE_HOME:-$HOME/.cache}/khw/libvirt/cloud-<arch>-<hash>
# where <hash> covers this script and the name of TEST-IMAGE-DIR (which holds
# the test image script's hash), so a changed recipe or root file system
# rebuilds and an unchanged one is reused. It holds disk.qcow2 and manifest. Prints that
# directory on its last line. Needs root (loop devices, mount, chroot) and
# sgdisk, mkfs.vfat, mtools, qemu-img (make libvirt-deps). ~1 min the first time.
# Loop devices and mounts are always released, also on failure.
set -euo pipefail

SELF=$(readlink -f "$0")
ARCH=${ARCH:-$(dpkg --print-architecture)}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/khw
SIZE_MIB=${SIZE_MIB:-3584} # an Ubuntu noble cloud image's virtual size: 3.5 GiB

IN=${1:-}
if [ -z "$IN" ]; then
	IN=$("$(dirname "$SELF")/libvirt-test-image.sh" | tail -1)
fi
IN=$(readlink -f "$IN")
if [ ! -s "$IN/disk.qcow2" ]; then
	echo "libvirt-cloud-image: $IN/disk.qcow2 missing; pass the directory hack/libvirt-test-image.sh prints" >&2
	exit 1
fi
case "$(basename "$IN")" in
image-"$ARCH"-*) ;;
image-*) echo "libvirt-cloud-image: $IN is not an $ARCH image (set ARCH to match it)" >&2; exit 1 ;;
esac
STANDIN=$(dirname "$SELF")/standin
HASH=$({ cat "$SELF" "$STANDIN"/*; basename "$IN"; } | sha256sum | cut -c1-16)
OUT=$CACHE/libvirt/cloud-$ARCH-$HASH

if [ -s "$OUT/disk.qcow2" ]; then
	echo "$OUT"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "libvirt-cloud-image: needs root (loop devices, mount, chroot)" >&2; exit 1; }
for t in sgdisk mkfs.vfat mcopy mdir qemu-img losetup partx blkid e2fsck resize2fs tune2fs chroot unshare; do
	command -v "$t" >/dev/null || { echo "libvirt-cloud-image: $t missing; run make libvirt-deps" >&2; exit 1; }
done

# Packages the direct-kernel test image bakes in that an Ubuntu server cloud
# image lacks (khw installs them at its steps), and ifupdown (see the header).
PURGE="haproxy conntrack socat jq ifupdown"

case "$ARCH" in
amd64) CONSOLE=ttyS0 EFIPKG=grub-efi-amd64-bin EFITARGET=x86_64-efi EFIBOOT=BOOTX64.EFI BIOS=1 ;;
arm64) CONSOLE=ttyAMA0 EFIPKG=grub-efi-arm64-bin EFITARGET=arm64-efi EFIBOOT=BOOTAA64.EFI BIOS= ;;
*) echo "libvirt-cloud-image: arch $ARCH not supported" >&2; exit 1 ;;
esac

mkdir -p "$CACHE/libvirt"
WORK=$(mktemp -d "$CACHE/libvirt/.build-cloud-XXXXXX")
mkdir -p "$WORK/out"
LOOP=
cleanup() {
	# The mounts live in the private mount namespace of the unshare below
	# and vanish with it; the loop device is the one thing left to release.
	if [ -n "$LOOP" ]; then
		partx -d "$LOOP" 2>/dev/null || true
		losetup -d "$LOOP" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# The partition table. Root is number 1 like Ubuntu's, but last on the disk.
truncate -s "${SIZE_MIB}M" "$WORK/disk.raw"
if [ -n "$BIOS" ]; then
	sgdisk -n 14:1M:+4M -t 14:EF02 -c 14:bios "$WORK/disk.raw" >&2
fi
sgdisk -n 15:5M:+106M -t 15:EF00 -c 15:esp \
	-n 1:111M:0 -t 1:8300 -c 1:root "$WORK/disk.raw" >&2

LOOP=$(losetup -f --show -P "$WORK/disk.raw")
for _ in $(seq 30); do
	[ -b "${LOOP}p1" ] && [ -b "${LOOP}p15" ] && break
	sleep 0.1
done
if [ ! -b "${LOOP}p1" ]; then
	# A kernel without GPT support (CONFIG_EFI_PARTITION) scans nothing:
	# let partx read the table and add the partitions (BLKPG).
	partx -a "$LOOP"
fi
[ -b "${LOOP}p1" ] || { echo "libvirt-cloud-image: ${LOOP}p1 did not appear after losetup -P" >&2; exit 1; }

# Root file system: the test image's ext4, grown to the partition.
qemu-img convert -n --target-is-zero -O raw "$IN/disk.qcow2" "${LOOP}p1"
e2fsck -f -p "${LOOP}p1" >&2 || [ $? -le 1 ] # 1: errors corrected
resize2fs -p "${LOOP}p1" >&2
tune2fs -L cloudimg-rootfs "${LOOP}p1" >/dev/null
mkfs.vfat -F 32 -n UEFI "${LOOP}p15" >/dev/null

# Everything mounted from here on lives in a private mount namespace, so a
# crash cannot leave a mount behind; the explicit umounts at its end flush
# the file systems before the loop device is detached.
echo "libvirt-cloud-image: installing GRUB (BIOS: ${BIOS:-no}, EFI: $EFITARGET) into $LOOP" >&2
# shellcheck disable=SC2016 # the inner shell expands its own arguments
unshare -m bash -euc '
	LOOP=$1 MNT=$2 CONSOLE=$3 EFIPKG=$4 EFITARGET=$5 BIOS=$6 PURGE=$7 MANIFEST=$8 STANDIN=$9
	# check ROOT: the static properties of an Ubuntu cloud image that khw
	# depends on (see the header); the VM test checks the same at run time.
	check() {
		local r=$1 bad= p
		for p in $PURGE; do
			if chroot "$r" dpkg-query -W --showformat="\${db:Status-Status}" "$p" 2>/dev/null | grep -qx installed; then
				bad="$bad; $p is installed"
			fi
		done
		for p in systemd-resolved apparmor cloud-init; do
			chroot "$r" dpkg-query -W --showformat="\${db:Status-Status}" "$p" 2>/dev/null | grep -qx installed ||
				bad="$bad; $p is not installed"
		done
		[ -z "$(find "$r/var/lib/apt/lists" -type f ! -name lock)" ] || bad="$bad; /var/lib/apt/lists is not empty"
		[ "$(readlink "$r/etc/resolv.conf")" = ../run/systemd/resolve/stub-resolv.conf ] ||
			bad="$bad; /etc/resolv.conf is not a link to ../run/systemd/resolve/stub-resolv.conf"
		for p in systemd-resolved.service systemd-networkd.service apparmor.service khw-standin-unattended-upgrades.timer; do
			[ "$(chroot "$r" systemctl is-enabled "$p" 2>/dev/null)" = enabled ] || bad="$bad; $p is not enabled"
		done
		[ -x "$r/usr/local/lib/khw-standin/unattended-upgrade" ] || bad="$bad; the unattended-upgrades stand-in is missing"
		if grep -Eq "systemd\.unified_cgroup_hierarchy|systemd\.legacy_systemd_cgroup_controller|cgroup_no_v1|apparmor=0|security=" "$r/boot/grub/grub.cfg"; then
			bad="$bad; grub.cfg sets a cgroup or LSM option on the kernel command line"
		fi
		chroot "$r" python3 -c "import yaml,sys; u=yaml.safe_load(open(\"/etc/cloud/cloud.cfg\"))[\"system_info\"][\"default_user\"]; sys.exit(u[\"name\"] != \"ubuntu\" or u[\"sudo\"] != [\"ALL=(ALL) NOPASSWD:ALL\"])" ||
			bad="$bad; cloud.cfg default_user is not ubuntu with sudo NOPASSWD"
		grep -q "^apparmor	" "$MANIFEST" && ! grep -q "^haproxy	" "$MANIFEST" || bad="$bad; the manifest does not list what is installed"
		if [ -n "$bad" ]; then
			echo "libvirt-cloud-image: the image does not look like an Ubuntu cloud image${bad}" >&2
			exit 1
		fi
		echo "libvirt-cloud-image: checked: no $PURGE; empty apt lists; resolv.conf -> stub; systemd-resolved, systemd-networkd, apparmor and the unattended-upgrades stand-in enabled; no cgroup/LSM override; default user ubuntu" >&2
	}
	mkdir -p "$MNT"
	mount "${LOOP}p1" "$MNT"
	# The ESP: this host kernel may lack vfat (mount says "unknown
	# filesystem type"), so grub-install writes into a tmpfs whose mount
	# SOURCE is the ESP partition. grub-install takes the device of
	# --efi-directory from that field of /proc/self/mountinfo
	# (grub-core/osdep/linux/getroot.c) and checks with its own FAT driver
	# that the partition is FAT, as on a real system; mcopy (mtools) then
	# copies what it wrote into the FAT file system.
	mkdir -p "$MNT/boot/efi"
	mount -t tmpfs "${LOOP}p15" "$MNT/boot/efi"
	mount -t proc proc "$MNT/proc"
	mount -t sysfs sys "$MNT/sys"
	mount --rbind /dev "$MNT/dev"

	cp /etc/resolv.conf "$MNT/etc/resolv.conf"
	printf "#!/bin/sh\nexit 101\n" >"$MNT/usr/sbin/policy-rc.d"
	chmod 0755 "$MNT/usr/sbin/policy-rc.d"
	pkgs="grub2-common $EFIPKG systemd-resolved apparmor"
	[ -z "$BIOS" ] || pkgs="$pkgs grub-pc-bin"
	chroot "$MNT" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	chroot "$MNT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
	# Not in an Ubuntu server cloud image: khw must install these itself.
	# ifupdown goes too, so cloud-init renders its network config for
	# systemd-networkd, which hands the DNS servers to systemd-resolved, as
	# netplan does on Ubuntu.
	chroot "$MNT" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq --autoremove $PURGE
	install -D -m 0755 "$STANDIN/unattended-upgrade" "$MNT/usr/local/lib/khw-standin/unattended-upgrade"
	install -m 0644 "$STANDIN/khw-standin-unattended-upgrades.service" "$STANDIN/khw-standin-unattended-upgrades.timer" "$MNT/etc/systemd/system/"
	chroot "$MNT" systemctl enable systemd-networkd.service systemd-resolved.service apparmor.service khw-standin-unattended-upgrades.timer >&2
	chroot "$MNT" apt-get clean
	# Empty package lists, as Ubuntu ships them (see the header).
	find "$MNT/var/lib/apt/lists" -mindepth 1 -maxdepth 1 ! -name partial ! -name lock -exec rm -rf {} +
	find "$MNT/var/lib/apt/lists/partial" -mindepth 1 -delete 2>/dev/null || true
	# The default user of Ubuntu'"'"'s cloud.cfg, and systemd-networkd as the
	# network renderer (cloud-init 22.4 would pick it anyway without ifupdown).
	chroot "$MNT" python3 - <<-"PY"
	import yaml
	p = "/etc/cloud/cloud.cfg"
	c = yaml.safe_load(open(p))
	c["system_info"]["default_user"] = {
	    "name": "ubuntu", "lock_passwd": True, "gecos": "Ubuntu",
	    "groups": ["adm", "cdrom", "dip", "lxd", "sudo"],
	    "sudo": ["ALL=(ALL) NOPASSWD:ALL"], "shell": "/bin/bash"}
	c["system_info"]["network"] = {"renderers": ["networkd"], "activators": ["networkd"]}
	with open(p + ".new", "w") as f:
	    f.write("# khw test cloud image (hack/libvirt-cloud-image.sh): Debian'"'"'s cloud.cfg with\n"
	            "# the default user of Ubuntu'"'"'s and systemd-networkd as the renderer.\n")
	    yaml.safe_dump(c, f, sort_keys=False)
	import os
	os.rename(p + ".new", p)
	PY
	chroot "$MNT" dpkg-query -W --showformat="\${Package}\t\${Version}\n" >"$MANIFEST"

	# What an Ubuntu cloud image has: the root and the ESP by label. The ESP
	# gets nofail: with four TCG VMs on two cores, udev took more than
	# the 90 s device timeout of systemd to announce LABEL=UEFI, and the node
	# stopped in emergency mode (nothing at boot needs /boot/efi).
	printf "LABEL=cloudimg-rootfs\t/\text4\tdiscard,errors=remount-ro\t0\t1\nLABEL=UEFI\t/boot/efi\tvfat\tumask=0077,nofail\t0\t1\n" >"$MNT/etc/fstab"
	# grub-mkconfig reads this after probing the devices, so GRUB_DEVICE
	# here wins over the build-time /dev/loopNp1 (and with
	# GRUB_DISABLE_LINUX_UUID the kernel gets root=LABEL=…, which also
	# holds after a kernel update inside the VM).
	cat >"$MNT/etc/default/grub" <<-EOF
	# khw test cloud image (hack/libvirt-cloud-image.sh)
	GRUB_DEFAULT=0
	GRUB_TIMEOUT=0
	GRUB_TIMEOUT_STYLE=hidden
	GRUB_DISTRIBUTOR=Debian
	GRUB_DEVICE=LABEL=cloudimg-rootfs
	GRUB_DISABLE_LINUX_UUID=true
	GRUB_DISABLE_LINUX_PARTUUID=true
	GRUB_DISABLE_RECOVERY=true
	GRUB_DISABLE_OS_PROBER=true
	GRUB_CMDLINE_LINUX_DEFAULT=""
	GRUB_CMDLINE_LINUX="console=$CONSOLE net.ifnames=0"
	GRUB_TERMINAL="console serial"
	GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
	EOF

	if [ -n "$BIOS" ]; then
		chroot "$MNT" grub-install --target=i386-pc --boot-directory=/boot "$LOOP" >&2
	fi
	chroot "$MNT" grub-install --target="$EFITARGET" --efi-directory=/boot/efi --boot-directory=/boot \
		--removable --no-nvram >&2
	MTOOLS_SKIP_CHECK=1 mcopy -s -Q -i "${LOOP}p15" "$MNT/boot/efi/EFI" ::/
	chroot "$MNT" grub-mkconfig -o /boot/grub/grub.cfg >&2
	if ! grep -q "root=LABEL=cloudimg-rootfs ro console=$CONSOLE net.ifnames=0" "$MNT/boot/grub/grub.cfg"; then
		echo "libvirt-cloud-image: grub.cfg has no root=LABEL=cloudimg-rootfs kernel line:" >&2
		grep -n "linux" "$MNT/boot/grub/grub.cfg" >&2 || true
		exit 1
	fi

	rm -f "$MNT/usr/sbin/policy-rc.d"
	ln -sfn ../run/systemd/resolve/stub-resolv.conf "$MNT/etc/resolv.conf"
	check "$MNT"
	umount -R "$MNT/dev"
	umount "$MNT/sys" "$MNT/proc" "$MNT/boot/efi" "$MNT"
' _ "$LOOP" "$WORK/mnt" "$CONSOLE" "$EFIPKG" "$EFITARGET" "$BIOS" "$PURGE" "$WORK/out/manifest" "$STANDIN" >&2

# Check the result from outside: the layout, the labels, the EFI loader.
sgdisk -p "$LOOP" >&2
last=$(sgdisk -p "$LOOP" | awk '$1 ~ /^[0-9]+$/ {print $2, $1}' | sort -n | tail -1 | cut -d' ' -f2)
[ "$last" = 1 ] || { echo "libvirt-cloud-image: partition $last is last on the disk, not the root partition 1" >&2; exit 1; }
[ "$(blkid -o value -s LABEL "${LOOP}p1")" = cloudimg-rootfs ] || { echo "libvirt-cloud-image: ${LOOP}p1 is not labelled cloudimg-rootfs" >&2; exit 1; }
MTOOLS_SKIP_CHECK=1 mdir -b -i "${LOOP}p15" ::/EFI/BOOT >&2
MTOOLS_SKIP_CHECK=1 mdir -b -i "${LOOP}p15" ::/EFI/BOOT | grep -qi "/$EFIBOOT\$" ||
	{ echo "libvirt-cloud-image: the ESP has no EFI/BOOT/$EFIBOOT" >&2; exit 1; }
sync
partx -d "$LOOP" 2>/dev/null || true
losetup -d "$LOOP"
LOOP=

qemu-img convert -O qcow2 "$WORK/disk.raw" "$WORK/out/disk.qcow2"
rm -rf "$OUT"
mv "$WORK/out" "$OUT"
echo "libvirt-cloud-image: done: $(du -sh "$OUT/disk.qcow2" | cut -f1) qcow2, virtual size ${SIZE_MIB} MiB" >&2
echo "$OUT"
