package libvirt

import (
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// testNetworkReuse: a cluster on 192.168.122.0/24 joins libvirt's own
// "default" network instead of making one, and Destroy leaves it. A second
// state directory cannot take over the first one's domains.
func testNetworkReuse(t *testing.T, env *lvEnv, img Image) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out := virsh(t, "net-list", "--all", "--name"); !strings.Contains(out, "default") {
		t.Skipf("libvirt has no default network here:\n%s", out)
	}
	dir := t.TempDir()
	_, authLine, err := remote.EnsureKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	before := autostart(virsh(t, "net-info", "default"))
	c := oneNodeCluster("lvtr", "192.168.122")
	p, err := New(c, Options{StateDir: dir, AuthorizedKey: authLine, HostKey: testHostKeys(dir), Image: img, DomainType: DomainQEMU,
		Pool: testPool, PoolPath: testPoolPath, NetnsPath: env.nsPath, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Cleanup(func() { _ = p.Destroy(context.Background()) })
	if err := p.Create(ctx); err != nil {
		t.Fatal(err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(virsh(t, "dumpxml", "--inactive", "khw-lvtr-cp1")); err != nil {
		t.Fatal(err)
	}
	if got := dx.Devices.Interfaces[0].Source.Network.Network; got != "default" {
		t.Errorf("node network = %q, want the existing default", got)
	}
	if out := virsh(t, "net-list", "--all", "--name"); strings.Contains(out, "khw-lvtr") {
		t.Errorf("khw made a network although default holds the subnet:\n%s", out)
	}
	if after := autostart(virsh(t, "net-info", "default")); after != before {
		t.Errorf("khw changed the autostart of the reused default network from %q to %q", before, after)
	}

	other, err := New(c, Options{StateDir: t.TempDir(), AuthorizedKey: authLine, HostKey: testHostKeys(t.TempDir()), Image: img, DomainType: DomainQEMU,
		Pool: testPool, PoolPath: testPoolPath})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var foreign *vm.ForeignOwnerError
	if err := other.Create(ctx); !errors.As(err, &foreign) {
		t.Errorf("Create from another state directory = %v, want a ForeignOwnerError", err)
	}
	if err := other.Destroy(ctx); !errors.As(err, &foreign) {
		t.Errorf("Destroy from another state directory = %v, want a ForeignOwnerError", err)
	}
	if out := virsh(t, "list", "--all", "--name"); !strings.Contains(out, "khw-lvtr-cp1") {
		t.Errorf("the other state directory removed the domain")
	}

	if err := p.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if out := virsh(t, "net-list", "--all", "--name"); !strings.Contains(out, "default") {
		t.Errorf("Destroy removed libvirt's default network:\n%s", out)
	}
	if out := virsh(t, "list", "--all", "--name"); strings.Contains(out, "khw-lvtr") {
		t.Errorf("domain left: %s", out)
	}
}

var autostartRE = regexp.MustCompile(`Autostart:\s+(\S+)`)

// autostart returns the Autostart value of `virsh net-info` output.
func autostart(netInfo string) string {
	m := autostartRE.FindStringSubmatch(netInfo)
	if m == nil {
		return ""
	}
	return m[1]
}
