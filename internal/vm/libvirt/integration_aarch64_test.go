package libvirt

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
)

// testARM64Domain proves the aarch64 path is accepted by libvirt: the
// node domain XML (virt machine, UEFI pflash loader from the domain
// capabilities with a per-domain NVRAM, virtio disk/seed/NIC, serial
// console) is defined and started under TCG, and its UEFI firmware runs up
// to the boot manager (there is no arm64 OS image here, so nothing boots
// further). Then an offline snapshot is attempted and the domain removed
// with its NVRAM.
func testARM64Domain(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-aarch64"); err != nil {
		t.Skip("SKIPPED: qemu-system-aarch64 not installed (make libvirt-deps)")
	}
	ctx := context.Background()
	l, err := Connect("")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	loader, err := FirmwareLoader(l, config.ArchARM64, DomainQEMU)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("aarch64 UEFI loader: %s", loader)

	p, err := New(oneNodeCluster("lvta", "192.168.151"), Options{StateDir: t.TempDir(), DomainType: DomainQEMU, Pool: testPool, PoolPath: testPoolPath})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pool, err := p.ensurePool(l)
	if err != nil {
		t.Fatal(err)
	}
	// Blank volumes stand in for the node disk and seed.
	names := []string{"khw-lvta-arm64-disk.qcow2", "khw-lvta-arm64-seed.iso"}
	for i, n := range names {
		f := []string{"qcow2", "raw"}[i]
		doc, _ := PlainVolumeXML(n, 64<<20, f).Marshal()
		if _, err := l.StorageVolCreateXML(pool, doc, 0); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, n := range names {
			if v, err := l.StorageVolLookupByName(pool, n); err == nil {
				_ = l.StorageVolDelete(v, 0)
			}
		}
	}()
	// A throw-away network with no khw owner.
	nx, _ := NetworkXML(NetworkSpec{Name: "khw-lvta", Bridge: BridgeName("lvta"), Gateway: netip.MustParsePrefix("192.168.151.1/24")})
	ndoc, _ := nx.Marshal()
	nw, err := l.NetworkCreateXML(ndoc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.NetworkDestroy(nw) }()

	spec := DomainSpec{Name: "khw-lvta-arm64", Arch: config.ArchARM64, Type: DomainQEMU, MemoryMiB: 512, CPUs: 1,
		Pool: testPool, DiskVolume: names[0], SeedVolume: names[1], Network: "khw-lvta", MAC: NodeMAC("lvta", "arm64"),
		Loader: loader, Owner: Owner{Cluster: "lvta", Node: "arm64", StateDir: "/test"}}
	dx, err := DomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := dx.Marshal()
	d, err := l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate)
	if err != nil {
		t.Fatalf("libvirt refuses the aarch64 domain: %v\n%s", err, doc)
	}
	defer func() {
		_ = l.DomainDestroy(d)
		_ = l.DomainUndefineFlags(d, golibvirt.DomainUndefineNvram|golibvirt.DomainUndefineSnapshotsMetadata)
	}()
	var got libvirtxml.Domain
	live, _ := l.DomainGetXMLDesc(d, 0)
	if err := got.Unmarshal(live); err != nil {
		t.Fatal(err)
	}
	if got.OS.NVRam == nil || got.OS.NVRam.NVRam == "" || got.OS.Loader == nil || got.OS.Loader.Path != loader {
		t.Errorf("libvirt did not complete the UEFI setup: loader %+v nvram %+v", got.OS.Loader, got.OS.NVRam)
	} else {
		t.Logf("NVRAM %s from template %s", got.OS.NVRam.NVRam, got.OS.NVRam.Template)
	}

	t0 := time.Now()
	if _, err := l.DomainCreateWithFlags(d, uint32(golibvirt.DomainStartPaused)); err != nil {
		t.Fatalf("start the aarch64 domain: %v", err)
	}
	w := &markerWriter{marker: ProbeMarker[config.ArchARM64], seen: make(chan struct{})}
	go func() { _ = l.DomainOpenConsole(d, nil, w, 1) }()
	time.Sleep(300 * time.Millisecond)
	if err := l.DomainResume(d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
		t.Logf("aarch64 UEFI reached its boot manager under TCG after %s", since(t0))
	case <-time.After(4 * time.Minute):
		t.Errorf("aarch64 UEFI printed no %q within 4 min; last output %q", w.marker, w.tail())
	case <-ctx.Done():
	}
	if err := l.DomainDestroy(d); err != nil {
		t.Fatal(err)
	}
	// Internal snapshots of a pflash UEFI domain: libvirt 9.0 refuses them.
	sx, _ := SnapshotXML("t1", "")
	sdoc, _ := sx.Marshal()
	if s, err := l.DomainSnapshotCreateXML(d, sdoc, 0); err != nil {
		t.Logf("aarch64 pflash: offline internal snapshot refused: %v", err)
	} else {
		t.Logf("aarch64 pflash: offline internal snapshot works")
		_ = l.DomainSnapshotDelete(s, 0)
	}
	_ = l.DomainUndefineFlags(d, golibvirt.DomainUndefineNvram|golibvirt.DomainUndefineSnapshotsMetadata)

	// The same node with UEFI as a ROM (no NVRAM): boots to the boot
	// manager and takes, reverts and deletes an internal snapshot.
	rom := ArmROMFirmware
	if _, err := os.Stat(rom); err != nil {
		t.Skipf("SKIPPED the ROM variant: %s missing", rom)
	}
	spec.Loader, spec.LoaderROM = rom, true
	dx, err = DomainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ = dx.Marshal()
	d, err = l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate)
	if err != nil {
		t.Fatalf("libvirt refuses the aarch64 ROM domain: %v\n%s", err, doc)
	}
	t0 = time.Now()
	if _, err := l.DomainCreateWithFlags(d, uint32(golibvirt.DomainStartPaused)); err != nil {
		t.Fatalf("start the aarch64 ROM domain: %v", err)
	}
	w = &markerWriter{marker: ProbeMarker[config.ArchARM64], seen: make(chan struct{})}
	go func() { _ = l.DomainOpenConsole(d, nil, w, 1) }()
	time.Sleep(300 * time.Millisecond)
	if err := l.DomainResume(d); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.seen:
		t.Logf("aarch64 UEFI (ROM) reached its boot manager under TCG after %s", since(t0))
	case <-time.After(4 * time.Minute):
		t.Errorf("aarch64 UEFI (ROM) printed no %q within 4 min; last output %q", w.marker, w.tail())
	}
	_ = l.DomainDestroy(d)
	s, err := l.DomainSnapshotCreateXML(d, sdoc, 0)
	if err != nil {
		t.Fatalf("aarch64 ROM: internal snapshot: %v", err)
	}
	if err := l.DomainRevertToSnapshot(s, 0); err != nil {
		t.Errorf("aarch64 ROM: revert: %v", err)
	}
	if err := l.DomainSnapshotDelete(s, 0); err != nil {
		t.Errorf("aarch64 ROM: delete snapshot: %v", err)
	}
}
