package libvirt

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
)

// validateWithSchema runs libvirt's own RelaxNG check (virt-xml-validate
// from libvirt-clients) on doc when the tool is installed: the strongest
// witness that libvirt accepts the document short of defining it.
func validateWithSchema(t *testing.T, kind, doc string) {
	t.Helper()
	tool, err := exec.LookPath("virt-xml-validate")
	_, lerr := exec.LookPath("xmllint")
	if err != nil || lerr != nil {
		t.Logf("virt-xml-validate or xmllint not installed (make libvirt-deps); schema check of the %s skipped", kind)
		return
	}
	p := filepath.Join(t.TempDir(), kind+".xml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, p, kind).CombinedOutput()
	if err != nil {
		t.Errorf("virt-xml-validate %s: %v\n%s\n%s", kind, err, out, doc)
	}
}

func testSpec(arch, typ string) DomainSpec {
	return DomainSpec{
		Name: "khw-lab-cp1", Arch: arch, Type: typ, MemoryMiB: 2048, CPUs: 2,
		Pool: "khw", DiskVolume: "khw-lab-cp1.qcow2", SeedVolume: "khw-lab-cp1-seed.iso",
		Network: "khw-lab", MAC: NodeMAC("lab", "cp1"),
		Owner: Owner{Cluster: "lab", Node: "cp1", StateDir: "/home/me/.local/state/khw/lab"},
	}
}

func TestDomainXML(t *testing.T) {
	tests := []struct {
		name                  string
		arch, typ             string
		kernel                bool
		loader                string
		rom                   bool
		wantArch, wantMachine string
		wantCPUMode           string
		wantLoader            string
		wantFirmware          string
		wantGIC               string
		wantAPIC              bool
	}{
		{name: "arm64 kvm uefi", arch: config.ArchARM64, typ: DomainKVM, loader: "/usr/share/AAVMF/AAVMF_CODE.fd",
			wantArch: "aarch64", wantMachine: "virt", wantCPUMode: "host-passthrough", wantLoader: "/usr/share/AAVMF/AAVMF_CODE.fd", wantGIC: "host"},
		{name: "arm64 tcg firmware auto", arch: config.ArchARM64, typ: DomainQEMU,
			wantArch: "aarch64", wantMachine: "virt", wantCPUMode: "maximum", wantFirmware: "efi"},
		{name: "arm64 tcg uefi rom", arch: config.ArchARM64, typ: DomainQEMU, loader: ArmROMFirmware, rom: true,
			wantArch: "aarch64", wantMachine: "virt", wantCPUMode: "maximum", wantLoader: ArmROMFirmware},
		{name: "amd64 kvm", arch: config.ArchAMD64, typ: DomainKVM,
			wantArch: "x86_64", wantMachine: "q35", wantCPUMode: "host-passthrough", wantAPIC: true},
		{name: "amd64 tcg direct kernel", arch: config.ArchAMD64, typ: DomainQEMU, kernel: true,
			wantArch: "x86_64", wantMachine: "q35", wantCPUMode: "maximum", wantAPIC: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(tc.arch, tc.typ)
			s.Loader, s.LoaderROM = tc.loader, tc.rom
			if tc.kernel {
				s.Kernel, s.Initrd, s.Cmdline = "/var/lib/libvirt/images/khw/k", "/var/lib/libvirt/images/khw/i", "root=/dev/vda rw console=ttyS0"
			}
			d, err := DomainXML(s)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			validateWithSchema(t, "domain", doc)
			var got libvirtxml.Domain
			if err := got.Unmarshal(doc); err != nil {
				t.Fatalf("parse back: %v\n%s", err, doc)
			}
			if got.Name != "khw-lab-cp1" || got.Type != tc.typ {
				t.Errorf("name/type = %q/%q", got.Name, got.Type)
			}
			if got.OS.Type.Arch != tc.wantArch || got.OS.Type.Machine != tc.wantMachine || got.OS.Type.Type != "hvm" {
				t.Errorf("os type = %+v, want %s %s hvm", got.OS.Type, tc.wantArch, tc.wantMachine)
			}
			if got.CPU == nil || got.CPU.Mode != tc.wantCPUMode {
				t.Errorf("cpu = %+v, want mode %s", got.CPU, tc.wantCPUMode)
			}
			if tc.rom {
				if got.OS.Loader == nil || got.OS.Loader.Path != tc.wantLoader || got.OS.Loader.Type != "rom" || got.OS.NVRam != nil || got.Features.ACPI != nil {
					t.Errorf("ROM loader = %+v nvram = %+v acpi = %v, want a rom loader without NVRAM and ACPI", got.OS.Loader, got.OS.NVRam, got.Features.ACPI != nil)
				}
			} else if tc.wantLoader != "" {
				if got.OS.Loader == nil || got.OS.Loader.Path != tc.wantLoader || got.OS.Loader.Readonly != "yes" || got.OS.Loader.Type != "pflash" || got.OS.NVRam == nil {
					t.Errorf("loader = %+v nvram = %+v, want read-only pflash %s with an nvram", got.OS.Loader, got.OS.NVRam, tc.wantLoader)
				}
			} else if got.OS.Loader != nil {
				t.Errorf("unexpected loader %+v", got.OS.Loader)
			}
			if got.OS.Firmware != tc.wantFirmware {
				t.Errorf("firmware = %q, want %q", got.OS.Firmware, tc.wantFirmware)
			}
			if gic := got.Features.GIC; (gic == nil) != (tc.wantGIC == "") || (gic != nil && gic.Version != tc.wantGIC) {
				t.Errorf("gic = %+v, want %q", gic, tc.wantGIC)
			}
			if (got.Features.APIC != nil) != tc.wantAPIC || (got.Features.ACPI == nil) != tc.rom {
				t.Errorf("features apic=%v acpi=%v", got.Features.APIC != nil, got.Features.ACPI != nil)
			}
			if tc.kernel {
				if got.OS.Kernel != s.Kernel || got.OS.Initrd != s.Initrd || got.OS.Cmdline != s.Cmdline || len(got.OS.BootDevices) != 0 {
					t.Errorf("direct kernel boot: %+v", got.OS)
				}
			} else if len(got.OS.BootDevices) != 1 || got.OS.BootDevices[0].Dev != "hd" || got.OS.Kernel != "" {
				t.Errorf("disk boot: %+v", got.OS)
			}
			if got.Memory.Value != 2048 || got.Memory.Unit != "MiB" || got.VCPU.Value != 2 {
				t.Errorf("memory %+v vcpu %+v", got.Memory, got.VCPU)
			}
			disks := got.Devices.Disks
			if len(disks) != 2 {
				t.Fatalf("%d disks, want 2", len(disks))
			}
			vda, vdb := disks[0], disks[1]
			if vda.Target.Dev != "vda" || vda.Target.Bus != "virtio" || vda.Driver.Type != "qcow2" ||
				vda.Source.Volume == nil || vda.Source.Volume.Pool != "khw" || vda.Source.Volume.Volume != "khw-lab-cp1.qcow2" || vda.ReadOnly != nil {
				t.Errorf("vda = %+v source %+v", vda, vda.Source)
			}
			if vdb.Target.Dev != "vdb" || vdb.ReadOnly == nil || vdb.Snapshot != "no" || vdb.Driver.Type != "raw" ||
				vdb.Source.Volume == nil || vdb.Source.Volume.Volume != "khw-lab-cp1-seed.iso" {
				t.Errorf("seed disk = %+v source %+v", vdb, vdb.Source)
			}
			nic := got.Devices.Interfaces
			if len(nic) != 1 || nic[0].Source.Network == nil || nic[0].Source.Network.Network != "khw-lab" ||
				nic[0].MAC.Address != NodeMAC("lab", "cp1") || nic[0].Model.Type != "virtio" {
				t.Errorf("interfaces = %+v", nic)
			}
			if len(got.Devices.Serials) != 1 || got.Devices.Serials[0].Source.Pty == nil ||
				len(got.Devices.Consoles) != 1 || got.Devices.Consoles[0].Target.Type != "serial" {
				t.Errorf("serial %+v console %+v", got.Devices.Serials, got.Devices.Consoles)
			}
			o, ok := ParseOwner(got.Metadata.XML)
			if !ok || o != s.Owner {
				t.Errorf("owner metadata = %+v %v, want %+v (xml %q)", o, ok, s.Owner, got.Metadata.XML)
			}
		})
	}
}

func TestDomainXMLRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*DomainSpec)
		want   string
	}{
		{"arch", func(s *DomainSpec) { s.Arch = "riscv64" }, `arch "riscv64"`},
		{"type", func(s *DomainSpec) { s.Type = "xen" }, `type "xen"`},
		{"memory", func(s *DomainSpec) { s.MemoryMiB = 64 }, "nodes[].memoryMiB"},
		{"cpus", func(s *DomainSpec) { s.CPUs = 0 }, "nodes[].cpus"},
		{"no seed", func(s *DomainSpec) { s.SeedVolume = "" }, "seed volume"},
		{"no network", func(s *DomainSpec) { s.Network = "" }, "network"},
		{"initrd only", func(s *DomainSpec) { s.Initrd = "/x" }, "without a kernel"},
		{"mac", func(s *DomainSpec) { s.MAC = "52:54:00:zz:00:01" }, `"zz"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(config.ArchAMD64, DomainQEMU)
			tc.mutate(&s)
			_, err := DomainXML(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestNetworkXML(t *testing.T) {
	gw := netip.MustParsePrefix("192.168.122.1/24")
	owner := Owner{Cluster: "lab", StateDir: "/s"}
	n, err := NetworkXML(NetworkSpec{Name: "khw-lab", Bridge: BridgeName("lab"), Gateway: gw, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := n.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validateWithSchema(t, "network", doc)
	var got libvirtxml.Network
	if err := got.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	if got.Name != "khw-lab" || got.Bridge.Name != BridgeName("lab") || got.Forward.Mode != "nat" {
		t.Errorf("network = %+v bridge %+v forward %+v", got, got.Bridge, got.Forward)
	}
	if len(got.IPs) != 1 || got.IPs[0].Address != "192.168.122.1" || got.IPs[0].Prefix != 24 || got.IPs[0].DHCP != nil {
		t.Errorf("ips = %+v, want 192.168.122.1/24 without dhcp", got.IPs)
	}
	if subs := NetworkSubnets(&got); len(subs) != 1 || subs[0] != gw {
		t.Errorf("subnets = %v, want %v", subs, gw)
	}
	if o, ok := ParseOwner(got.Metadata.XML); !ok || o != owner {
		t.Errorf("owner = %+v %v", o, ok)
	}
	if len(BridgeName("a-twenty-char-name-x")) > 15 || BridgeName("a") == BridgeName("b") {
		t.Errorf("bridge names: %q %q %q", BridgeName("a-twenty-char-name-x"), BridgeName("a"), BridgeName("b"))
	}
	for _, bad := range []NetworkSpec{
		{Name: "x", Bridge: "b", Gateway: netip.MustParsePrefix("192.168.1.1/31")},
		{Name: "x", Bridge: "this-bridge-name-is-too-long", Gateway: gw},
		{Name: "", Bridge: "b", Gateway: gw},
	} {
		if _, err := NetworkXML(bad); err == nil {
			t.Errorf("NetworkXML(%+v) accepted", bad)
		}
	}
}

func TestNetworkSubnets(t *testing.T) {
	// libvirt's default network writes a netmask, not a prefix.
	var n libvirtxml.Network
	if err := n.Unmarshal(`<network><name>default</name><forward mode='nat'/><bridge name='virbr0'/>
<ip address='192.168.122.1' netmask='255.255.255.0'><dhcp><range start='192.168.122.2' end='192.168.122.254'/></dhcp></ip>
<ip family='ipv6' address='fd00::1' prefix='64'/></network>`); err != nil {
		t.Fatal(err)
	}
	got := NetworkSubnets(&n)
	if len(got) != 1 || got[0] != netip.MustParsePrefix("192.168.122.1/24") {
		t.Errorf("subnets = %v", got)
	}
}

func TestVolumeAndPoolXML(t *testing.T) {
	v, err := OverlayVolumeXML("khw-lab-cp1.qcow2", 20<<30, "/var/lib/libvirt/images/khw/base.qcow2", "qcow2")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := v.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validateWithSchema(t, "storagevol", doc)
	var got libvirtxml.StorageVolume
	if err := got.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	if got.Name != "khw-lab-cp1.qcow2" || got.Capacity.Value != 20<<30 || got.Capacity.Unit != "bytes" || got.Target.Format.Type != "qcow2" {
		t.Errorf("volume = %+v capacity %+v", got, got.Capacity)
	}
	if got.BackingStore == nil || got.BackingStore.Path != "/var/lib/libvirt/images/khw/base.qcow2" || got.BackingStore.Format.Type != "qcow2" {
		t.Errorf("backing store = %+v", got.BackingStore)
	}
	for _, bad := range []struct {
		path, format string
		size         uint64
	}{{"", "qcow2", 1}, {"/b", "vmdk", 1}, {"/b", "raw", 0}} {
		if _, err := OverlayVolumeXML("x", bad.size, bad.path, bad.format); err == nil {
			t.Errorf("OverlayVolumeXML accepted %+v", bad)
		}
	}

	seed := PlainVolumeXML("khw-lab-cp1-seed.iso", 1<<20, "raw")
	doc, err = seed.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validateWithSchema(t, "storagevol", doc)
	var gotSeed libvirtxml.StorageVolume
	if err := gotSeed.Unmarshal(doc); err != nil || gotSeed.Capacity.Value != 1<<20 || gotSeed.Target.Format.Type != "raw" || gotSeed.BackingStore != nil {
		t.Errorf("seed volume = %+v (%v)", gotSeed, err)
	}

	p := PoolXML("khw", "/var/lib/libvirt/images/khw")
	doc, err = p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validateWithSchema(t, "storagepool", doc)
	var gotPool libvirtxml.StoragePool
	if err := gotPool.Unmarshal(doc); err != nil || gotPool.Type != "dir" || gotPool.Name != "khw" || gotPool.Target.Path != "/var/lib/libvirt/images/khw" {
		t.Errorf("pool = %+v (%v)", gotPool, err)
	}
}

func TestSnapshotXML(t *testing.T) {
	s, err := SnapshotXML("04-etcd", "khw lab checkpoint before 04-etcd")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	validateWithSchema(t, "domainsnapshot", doc)
	var got libvirtxml.DomainSnapshot
	if err := got.Unmarshal(doc); err != nil {
		t.Fatal(err)
	}
	if got.Name != "04-etcd" || got.Description != "khw lab checkpoint before 04-etcd" {
		t.Errorf("snapshot = %+v", got)
	}
	want := map[string]string{"vda": "internal", "vdb": "no"}
	if got.Disks == nil || len(got.Disks.Disks) != len(want) {
		t.Fatalf("disks = %+v", got.Disks)
	}
	for _, d := range got.Disks.Disks {
		if want[d.Name] != d.Snapshot {
			t.Errorf("disk %s snapshot %q, want %q", d.Name, d.Snapshot, want[d.Name])
		}
	}
	for _, bad := range []string{"", "a b", "x/y"} {
		if _, err := SnapshotXML(bad, ""); err == nil {
			t.Errorf("SnapshotXML(%q) accepted", bad)
		}
	}
}

func TestNodeMAC(t *testing.T) {
	a, b := NodeMAC("lab", "cp1"), NodeMAC("lab", "cp2")
	if a == b || a != NodeMAC("lab", "cp1") || !strings.HasPrefix(a, "52:54:00:") {
		t.Errorf("NodeMAC: %s %s", a, b)
	}
	if _, err := ParseMAC(a); err != nil {
		t.Error(err)
	}
	if m, err := ParseMAC("52:54:00:AB:cd:01"); err != nil || m != "52:54:00:ab:cd:01" {
		t.Errorf("ParseMAC upper: %q %v", m, err)
	}
}

func TestParseOwnerIgnoresForeign(t *testing.T) {
	if _, ok := ParseOwner(`<app:owner xmlns:app="https://example.com/x" cluster="c" stateDir="/s"/>`); ok {
		t.Error("foreign namespace parsed as khw owner")
	}
	if o, ok := ParseOwner(`<other xmlns="urn:x"/><khw:owner xmlns:khw="` + MetadataNS + `" cluster="c" node="n" stateDir="/s"/>`); !ok || o.Cluster != "c" || o.Node != "n" || o.StateDir != "/s" {
		t.Errorf("owner = %+v %v", o, ok)
	}
}
