#!/bin/sh
# Install what the libvirt provider's tests need (qemu, libvirtd, UEFI
# firmware for aarch64 and x86_64, debootstrap for the test image; sgdisk,
# mkfs.vfat and mtools for the disk hack/libvirt-cloud-image.sh lays out like
# an Ubuntu cloud image) WITHOUT letting the package scripts start any
# daemon: libvirtd started in the root network namespace would create virbr0
# (192.168.122.1) there, which khw's network rule forbids. Tests start
# libvirtd themselves inside a network namespace of their own.
#
#   hack/libvirt-deps.sh          the above
#   hack/libvirt-deps.sh --arm64  also qemu-user-static, so an amd64 host can
#                                 build the arm64 images (hack/binfmt-arm64.sh)
set -eu

PKGS="qemu-system-x86 qemu-system-arm qemu-utils qemu-efi-aarch64 ovmf
libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients
dnsmasq-base libxml2-utils debootstrap e2fsprogs iproute2 util-linux
gdisk dosfstools mtools"
if [ "${1:-}" = --arm64 ]; then PKGS="$PKGS qemu-user-static"; fi

missing=
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "libvirt-deps: all installed"
else
	if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
	# policy-rc.d exiting 101 makes invoke-rc.d / deb-systemd-invoke refuse to
	# start services (Debian policy 9.3.3.1). Keep one that is there already.
	made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\n# khw hack/libvirt-deps.sh: no daemons during install\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
		$SUDO chmod 0755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	echo "libvirt-deps: installing:$missing"
	rc=0
	# shellcheck disable=SC2086 # one package per word
	{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing; } || rc=$?
	if [ -n "$made_policy" ]; then
		$SUDO rm -f /usr/sbin/policy-rc.d
	fi
	[ "$rc" = 0 ] || exit "$rc"
fi

# The package's "default" network would be autostarted by any libvirtd; the
# tests start the networks they want explicitly.
if [ -e /etc/libvirt/qemu/networks/autostart/default.xml ]; then
	echo "libvirt-deps: disabling autostart of libvirt's default network"
	${SUDO:-} rm -f /etc/libvirt/qemu/networks/autostart/default.xml
fi

# Nothing may have started in the root network namespace.
for d in libvirtd virtlogd virtqemud dnsmasq; do
	if pgrep -x "$d" >/dev/null 2>&1; then
		echo "libvirt-deps: WARNING: $d is running (pids: $(pgrep -x "$d" | tr '\n' ' ')); stop it: khw's tests start their own inside a network namespace" >&2
	fi
done
if ip -br link | grep -q '^virbr'; then
	echo "libvirt-deps: ERROR: a virbr bridge exists in the root network namespace:" >&2
	ip -br addr | grep '^virbr' >&2
	exit 1
fi
echo "libvirt-deps: ok (no libvirt daemon or bridge in the root network namespace)"
