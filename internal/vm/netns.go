package vm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/khw-dev/khw/internal/remote"
)

// NetnsDir is where named network namespaces are bind-mounted, the same place
// `ip netns add` uses (ip-netns(8)), so `ip netns exec khw-<cluster> …` and
// `nsenter --net=/run/netns/khw-<cluster>` find them.
const NetnsDir = "/run/netns"

// BridgeName is the bridge inside every cluster namespace. Each cluster has
// its own namespace, so the same name never clashes; it does not exist in
// the root namespace.
const BridgeName = "khw0"

// NetnsName returns the network namespace name of a cluster: khw-<cluster>.
func NetnsName(cluster string) string { return "khw-" + cluster }

// NetnsPath returns /run/netns/khw-<cluster>.
func NetnsPath(cluster string) string { return filepath.Join(NetnsDir, NetnsName(cluster)) }

// onNetnsThread runs enter and then fn on a goroutine locked to its OS
// thread, and switches that thread back to its original network namespace
// afterwards. Sockets fn creates belong to the namespace enter switched to
// for their whole life, whichever thread uses them later. If the thread
// cannot be switched back it stays locked, so the Go runtime ends it with the
// goroutine instead of reusing it elsewhere.
func onNetnsThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer orig.Close()
		err = enter()
		if err == nil {
			err = fn()
		}
		if serr := netns.Set(orig); serr != nil {
			// Leave the thread locked: it dies with this goroutine.
			errc <- errors.Join(err, fmt.Errorf("return to the original network namespace: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// inNetns runs fn on a thread switched into the network namespace at nsPath
// (see onNetnsThread).
func inNetns(nsPath string, fn func() error) error {
	enter := func() error {
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			return fmt.Errorf("open network namespace %s: %w; create it with `khw up` (provider nspawn)", nsPath, err)
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter network namespace %s: %w (khw needs root / CAP_SYS_ADMIN)", nsPath, err)
		}
		return nil
	}
	return onNetnsThread(enter, fn)
}

// NetnsDialer returns a remote.DialFunc that opens connections from inside
// the network namespace at nsPath.
//
// Technique: the dial runs on a dedicated goroutine locked to its OS thread,
// which setns(2)s into the namespace, creates and connects the socket with a
// net.Dialer, and setns(2)s back (see inNetns). A socket keeps the
// namespace it was created in, so the returned net.Conn keeps working from
// any goroutine. The host part of addr must be an IP literal: a name would be
// resolved, and Go may then dial on other goroutines (happy eyeballs) that
// are not in the namespace.
func NetnsDialer(nsPath string) remote.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s in %s: %w", addr, nsPath, err)
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return nil, fmt.Errorf("dial %s in %s: host %q is not an IP address; pass the node IP from cluster.yaml", addr, nsPath, host)
		}
		var conn net.Conn
		err = inNetns(nsPath, func() error {
			var d net.Dialer
			var derr error
			conn, derr = d.DialContext(ctx, network, addr)
			return derr
		})
		if err != nil && conn != nil {
			conn.Close()
			conn = nil
		}
		return conn, err
	}
}

// NetnsListen opens a listener inside the network namespace at nsPath (same
// technique as NetnsDialer). Used by tests and by tools that serve nodes.
func NetnsListen(nsPath, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(nsPath, func() error {
		var lerr error
		l, lerr = net.Listen(network, addr)
		return lerr
	})
	return l, err
}

// EnsureNetwork makes the cluster's network namespace khw-<cluster> (bind
// mount at /run/netns/khw-<cluster>, like `ip netns add`) with loopback up
// and a bridge BridgeName holding gateway (an address with prefix, e.g.
// 192.168.122.1/24). Everything lives only inside that namespace; the root
// namespace is not touched. It is idempotent: an existing namespace and
// bridge are reused and the gateway address is added when missing.
func EnsureNetwork(cluster string, gateway netip.Prefix) error {
	if !gateway.IsValid() || !gateway.Addr().Is4() {
		return fmt.Errorf("cluster %s: gateway %v is not an IPv4 address with prefix; set network.gateway and network.cidr in cluster.yaml", cluster, gateway)
	}
	name := NetnsName(cluster)
	path := NetnsPath(cluster)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := ensureNetnsRunDir(); err != nil {
			return err
		}
		if err := inNetnsCreate(name); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w; if it is stale, remove it with `ip netns delete %s`", path, err, name)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", path, err)
	}
	defer h.Close()

	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netns %s: find lo: %w", name, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("netns %s: set lo up: %w", name, err)
	}
	br, err := h.LinkByName(BridgeName)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("netns %s: find bridge %s: %w", name, BridgeName, err)
		}
		la := netlink.NewLinkAttrs()
		la.Name = BridgeName
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
			return fmt.Errorf("netns %s: add bridge %s: %w", name, BridgeName, err)
		}
		if br, err = h.LinkByName(BridgeName); err != nil {
			return fmt.Errorf("netns %s: find new bridge %s: %w", name, BridgeName, err)
		}
	} else if br.Type() != "bridge" {
		return fmt.Errorf("netns %s: link %s is a %s, not a bridge; delete the namespace with `khw down`", name, BridgeName, br.Type())
	}
	addrs, err := h.AddrList(br, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("netns %s: list addresses of %s: %w", name, BridgeName, err)
	}
	have := false
	for _, a := range addrs {
		p, ok := netip.AddrFromSlice(a.IP.To4())
		ones, _ := a.Mask.Size()
		if ok && p == gateway.Addr() && ones == gateway.Bits() {
			have = true
		}
	}
	if !have {
		ipn := &net.IPNet{IP: net.IP(gateway.Addr().AsSlice()), Mask: net.CIDRMask(gateway.Bits(), 32)}
		if err := h.AddrAdd(br, &netlink.Addr{IPNet: ipn}); err != nil {
			return fmt.Errorf("netns %s: add %s to %s: %w", name, gateway, BridgeName, err)
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("netns %s: set %s up: %w", name, BridgeName, err)
	}
	return nil
}

// ensureNetnsRunDir makes NetnsDir a mount point with shared propagation,
// as iproute2's `ip netns add` does before its first namespace (netns_add in
// ip/ipnetns.c: make-shared, else bind-mount the directory onto itself and
// make-shared). Without it, a later `ip netns add` by another tool binds
// the directory over itself and hides the namespace mounts made before,
// which then can no longer be unmounted by path (khw down fails with EBUSY).
func ensureNetnsRunDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", NetnsDir, err)
	}
	err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mount %s onto itself: %w", NetnsDir, err)
		}
		err = unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount: %w", NetnsDir, err)
	}
	return nil
}

// inNetnsCreate makes the named namespace on a throw-away locked thread:
// netns.NewNamed unshares the calling thread into the new namespace, and
// onNetnsThread switches it back.
func inNetnsCreate(name string) error {
	create := func() error {
		ns, err := netns.NewNamed(name)
		if err != nil {
			_ = os.Remove(filepath.Join(NetnsDir, name)) // only an empty placeholder can be left
			return fmt.Errorf("create network namespace %s: %w (khw needs root)", name, err)
		}
		return ns.Close()
	}
	return onNetnsThread(create, func() error { return nil })
}

// DeleteNetwork removes the cluster's namespace (and with it the bridge and
// any veth left in it). A missing namespace is not an error.
func DeleteNetwork(cluster string) error {
	path := NetnsPath(cluster)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("remove %s: %w: the namespace's mount is hidden under a later bind mount of %s (made by an older khw before another tool ran `ip netns add`); a reboot clears it, or `umount -l %s` when no other namespace there is in use", path, err, NetnsDir, NetnsDir)
		}
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// RemoveStaleVeth deletes the host side of a node's veth pair, named
// "vb-<machine>" by systemd-nspawn (when that fits the 15-character interface
// name limit; longer names are hashed and left to Start's retry), from the
// cluster's network namespace. After a forced power-off the kernel frees the
// dead node's network namespace, and with it the pair, only some seconds
// later (longer on a worker with many pods); until then a new
// systemd-nspawn for the node fails with "File exists". Call it only for a
// node that is not running. A missing link is not an error.
func RemoveStaleVeth(nsPath, machine string) error {
	name := "vb-" + machine
	if len(name) > 15 {
		return nil
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", nsPath, err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("delete the stale veth %s in %s: %w", name, nsPath, err)
	}
	return nil
}

// ReadSysctl reads the sysctl file at path (under /proc/sys) as seen from the
// network namespace at nsPath, or from khw's own namespace when nsPath is
// empty. Files under /proc/sys/net belong to the namespace of the thread
// that opens them, so the open runs on a thread inside nsPath (inNetns). The
// value comes back without its trailing newline; a missing file (e.g. a
// module that is not loaded) is an error wrapping fs.ErrNotExist.
func ReadSysctl(nsPath, path string) (string, error) {
	var b []byte
	read := func() error {
		var err error
		b, err = os.ReadFile(path)
		return err
	}
	var err error
	if nsPath == "" {
		err = read()
	} else {
		err = inNetns(nsPath, read)
	}
	return strings.TrimSpace(string(b)), err
}
