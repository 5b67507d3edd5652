package vm

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/vm/vmtest"
)

func TestNetworkNamespaceDialAndDestroy(t *testing.T) {
	vmtest.RequireRoot(t)
	cluster := vmtest.RandomCluster(t)
	gw := netip.MustParsePrefix("192.168.122.1/24")
	before := vmtest.RootNSAddrs(t)
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

	after := vmtest.RootNSAddrs(t)
	for _, line := range strings.Split(after, "\n") {
		if strings.Contains(line, "192.168.") && !strings.Contains(before, line) {
			t.Errorf("root namespace gained a 192.168 address: %s", line)
		}
	}
	if strings.Contains(vmtest.RootNSLinks(t), " "+BridgeName+":") {
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
