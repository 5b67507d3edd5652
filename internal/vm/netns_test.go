package vm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireRoot skips loudly: these tests make namespaces, mounts and cgroups.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (needs root): creates network namespaces, bind mounts and cgroups")
	}
}

func randomCluster(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// rootNSAddrs returns `ip -4 -o addr` of the root namespace (the test
// process' namespace).
func rootNSAddrs(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -4 addr: %v: %s", err, out)
	}
	return string(out)
}

func rootNSLinks(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	return string(out)
}

func TestNetworkNamespaceDialAndDestroy(t *testing.T) {
	requireRoot(t)
	cluster := randomCluster(t)
	gw := netip.MustParsePrefix("192.168.122.1/24")
	before := rootNSAddrs(t)
	t.Cleanup(func() { _ = DeleteNetwork(cluster) })

	if err := EnsureNetwork(cluster, gw); err != nil {
		t.Fatal(err)
	}
	// Idempotent.
	if err := EnsureNetwork(cluster, gw); err != nil {
		t.Fatalf("second EnsureNetwork: %v", err)
	}
	if _, err := os.Stat(NetnsPath(cluster)); err != nil {
		t.Fatalf("namespace file: %v", err)
	}

	l, err := NetnsListen(NetnsPath(cluster), "tcp", "192.168.122.1:0")
	if err != nil {
		t.Fatalf("listen on the gateway inside the namespace: %v", err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "hello from "+c.LocalAddr().String())
		c.Close()
	}()

	// The gateway address must not be reachable from the root namespace:
	// nothing there owns or routes 192.168.122.1 … unless the host already
	// has it, in which case this check says nothing and we skip it.
	if !strings.Contains(before, "192.168.122.1/") {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var d net.Dialer
		if c, err := d.DialContext(ctx, "tcp", l.Addr().String()); err == nil {
			c.Close()
			t.Errorf("dialing %s from the root namespace succeeded; the node network leaks into the host", l.Addr())
		}
		cancel()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NetnsDialer(NetnsPath(cluster))(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial inside namespace: %v", err)
	}
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from " + l.Addr().String(); string(got) != want {
		t.Errorf("read %q, want %q", got, want)
	}

	if _, err := NetnsDialer(NetnsPath(cluster))(ctx, "tcp", "lb:22"); err == nil {
		t.Errorf("dialing a host name must be refused (only IP literals are dialed inside the namespace)")
	}

	after := rootNSAddrs(t)
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, "192.168.") && !strings.Contains(before, line) {
			t.Errorf("root namespace gained a 192.168 address: %s", line)
		}
	}
	if strings.Contains(rootNSLinks(t), " "+BridgeName+":") {
		t.Errorf("bridge %s appeared in the root namespace", BridgeName)
	}

	l.Close()
	if err := DeleteNetwork(cluster); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(NetnsPath(cluster)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still exists after DeleteNetwork (err %v)", NetnsPath(cluster), err)
	}
	if err := DeleteNetwork(cluster); err != nil {
		t.Errorf("DeleteNetwork of a missing namespace: %v", err)
	}
}
