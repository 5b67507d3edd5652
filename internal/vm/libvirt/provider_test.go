package libvirt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/vm"
)

func TestDetectFormat(t *testing.T) {
	dir := t.TempDir()
	q := filepath.Join(dir, "a.qcow2")
	r := filepath.Join(dir, "a.raw")
	if err := os.WriteFile(q, []byte("QFI\xfb\x00\x00\x00\x03rest"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{q: "qcow2", r: "raw"} {
		if got, err := detectFormat(path); err != nil || got != want {
			t.Errorf("detectFormat(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := detectFormat(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "libvirt.image") {
		t.Errorf("missing image: %v", err)
	}
}

func TestNewFillsFromClusterYAML(t *testing.T) {
	c := config.Default("lab", config.ArchARM64, config.ProviderLibvirt)
	c.Libvirt = &config.Libvirt{URI: "qemu+unix:///system", Image: "/i.qcow2", Kernel: "/k", Initrd: "/r", Cmdline: "ro", DomainType: config.DomainTypeQEMU}
	t.Setenv(EnvNetns, "/run/netns/x")
	p, err := New(c, Options{StateDir: "/s"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.opts
	if o.URI != "qemu+unix:///system" || o.Image != (Image{Path: "/i.qcow2", Kernel: "/k", Initrd: "/r", Cmdline: "ro"}) ||
		o.DomainType != DomainQEMU || o.Pool != DefaultPool || o.PoolPath != DefaultPoolPath || o.NetnsPath != "/run/netns/x" {
		t.Errorf("options = %+v", o)
	}
	if p.DomainName("cp1") != "khw-lab-cp1" || p.DiskVolume("cp1") != "khw-lab-cp1.qcow2" || p.SeedVolume("cp1") != "khw-lab-cp1-seed.iso" || p.OwnNetworkName() != "khw-lab" {
		t.Errorf("names: %s %s %s %s", p.DomainName("cp1"), p.DiskVolume("cp1"), p.SeedVolume("cp1"), p.OwnNetworkName())
	}
	if a := p.Addresses(); len(a) != len(c.Nodes) || a["w3"].String() != "192.168.122.23" {
		t.Errorf("addresses = %v", a)
	}
	if err := p.Start(t.Context(), "nope"); !errors.Is(err, vm.ErrUnknownNode) {
		t.Errorf("Start(nope) = %v", err)
	}

	for _, bad := range []struct {
		c    *config.Cluster
		opts Options
		want string
	}{
		{c, Options{}, "state directory"},
		{c, Options{StateDir: "/s", DomainType: "xen"}, `"xen"`},
		{&config.Cluster{Name: "x", Arch: "riscv64"}, Options{StateDir: "/s"}, "riscv64"},
	} {
		if _, err := New(bad.c, bad.opts); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("New(%+v) = %v, want it to mention %s", bad.opts, err, bad.want)
		}
	}
}

func TestCreateNeedsKey(t *testing.T) {
	p, err := New(config.Default("lab", config.ArchAMD64, config.ProviderLibvirt), Options{StateDir: "/s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Create(t.Context()); err == nil || !strings.Contains(err.Error(), "SSH public key") {
		t.Errorf("Create without key = %v", err)
	}
}

func TestFindings(t *testing.T) {
	ok := Finding{Check: "libvirtd", OK: true, Message: "up"}
	warn := Finding{Check: "kvm", Warning: true, Message: "TCG", Fix: "enable VT-x"}
	bad := Finding{Check: "uefi", Message: "none", Fix: "apt-get install qemu-efi-aarch64"}
	if Blocking([]Finding{ok, warn}) || !Blocking([]Finding{ok, bad}) {
		t.Error("Blocking")
	}
	if got := warn.String(); got != "! kvm: TCG (fix: enable VT-x)" {
		t.Errorf("warn = %q", got)
	}
	if got := ok.String(); got != "✓ libvirtd: up" {
		t.Errorf("ok = %q", got)
	}
	if got := bad.String(); !strings.HasPrefix(got, "✗ uefi: none (fix: apt-get") {
		t.Errorf("bad = %q", got)
	}
}

func TestMarkerWriter(t *testing.T) {
	w := &markerWriter{marker: "Booting from", seen: make(chan struct{})}
	w.Write([]byte("\x1bc\x1b[2JSeaBIOS (version 1.16)\r\nBoot"))
	select {
	case <-w.seen:
		t.Fatal("marker seen too early")
	default:
	}
	w.Write([]byte("ing from Hard Disk...\r\n")) // split across writes
	select {
	case <-w.seen:
	default:
		t.Fatal("marker split over two writes not seen")
	}
	if tail := w.tail(); strings.ContainsAny(tail, "\x1b\r\n") || !strings.Contains(tail, "SeaBIOS") {
		t.Errorf("tail = %q", tail)
	}
}

// TestWriteNodeFiles: Create leaves the seed files and the XML it gave
// libvirt in D/libvirt/<node>, 0600 (user-data names the SSH key and the
// sudo rule), and rewrites only what changed.
func TestWriteNodeFiles(t *testing.T) {
	c := config.Default("lab", config.ArchAMD64, config.ProviderLibvirt)
	d := t.TempDir()
	p, err := New(c, Options{StateDir: d})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := c.Node("cp1")
	seed, err := SeedFiles(c, n, NodeMAC(c.Name, n.Name), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample khw", testHostKey(t, "cp1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.writeNodeFiles("cp1", seed, "<domain/>", "<volume/>"); err != nil {
		t.Fatal(err)
	}
	dir := NodeFilesDir(d, "cp1")
	if dir != filepath.Join(d, "libvirt", "cp1") {
		t.Errorf("NodeFilesDir = %s", dir)
	}
	want := map[string]string{"domain.xml": "<domain/>\n", "disk-volume.xml": "<volume/>\n"}
	for name, b := range seed {
		want[name] = string(b)
	}
	if len(want) < 5 {
		t.Fatalf("seed files: %v", seed)
	}
	for name, content := range want {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil || string(b) != content {
			t.Errorf("%s: %q, %v", name, b, err)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", name, st.Mode(), err)
		}
	}
	if ud, _ := os.ReadFile(filepath.Join(dir, "user-data")); !strings.Contains(string(ud), "AAAAC3NzaC1lZDI1NTE5AAAAIExample") {
		t.Errorf("user-data lacks the authorized key:\n%s", ud)
	}
}
