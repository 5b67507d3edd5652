package libvirt

import (
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"net/netip"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
)

// Domain types (the <domain type=…> attribute, formatdomain.html "Element and
// attribute overview").
const (
	// DomainKVM runs the guest with hardware virtualisation (/dev/kvm).
	DomainKVM = "kvm"
	// DomainQEMU runs the guest under QEMU's TCG emulator: ~15x slower, but
	// works without (or with a broken) KVM.
	DomainQEMU = "qemu"
)

// MetadataNS is the XML namespace of khw's <metadata> element in the domains
// and networks it defines; libvirt keeps one metadata element per namespace
// (formatdomain.html#general-metadata).
const MetadataNS = "https://khw.dev/xmlns/libvirt/v1"

// Owner is khw's <metadata> element: which cluster, node and state directory
// a libvirt object belongs to. It is how khw tells its objects from anyone
// else's (a network it reused is not khw's and is never deleted) and two
// state directories holding a cluster of the same name apart.
type Owner struct {
	Cluster  string `xml:"cluster,attr"`
	Node     string `xml:"node,attr,omitempty"`
	StateDir string `xml:"stateDir,attr"`
}

// ownerElement is Owner as written: <khw:owner xmlns:khw="MetadataNS" …/>.
// libvirt wants metadata elements in a namespace with a prefix;
// encoding/xml writes a prefixed name only when it is spelled out like this.
type ownerElement struct {
	XMLName xml.Name `xml:"khw:owner"`
	NS      string   `xml:"xmlns:khw,attr"`
	Owner
}

// metadataXML renders o as the inner XML of <metadata>.
func (o Owner) metadataXML() (string, error) {
	b, err := xml.Marshal(ownerElement{NS: MetadataNS, Owner: o})
	if err != nil {
		return "", fmt.Errorf("marshal khw metadata: %w", err)
	}
	return string(b), nil
}

// ParseOwner reads khw's Owner from the inner XML of a <metadata> element
// (libvirtxml.DomainMetadata.XML or NetworkMetadata.XML). ok is false when
// the metadata holds no khw owner element.
func ParseOwner(inner string) (Owner, bool) {
	dec := xml.NewDecoder(strings.NewReader(inner))
	for {
		tok, err := dec.Token()
		if err != nil {
			return Owner{}, false
		}
		se, isStart := tok.(xml.StartElement)
		if !isStart || se.Name.Space != MetadataNS || se.Name.Local != "owner" {
			continue
		}
		var o Owner
		if err := dec.DecodeElement(&o, &se); err != nil {
			return Owner{}, false
		}
		return o, true
	}
}

// DomainSpec is everything DomainXML needs for one node VM. Paths are paths
// on the libvirt host.
type DomainSpec struct {
	// Name is the libvirt domain name, khw-<cluster>-<node>.
	Name string
	// Arch is the node arch as in cluster.yaml: arm64 or amd64.
	Arch string
	// Type is DomainKVM or DomainQEMU (TCG).
	Type string
	// MemoryMiB and CPUs size the VM (nodes[].memoryMiB, nodes[].cpus).
	MemoryMiB int
	CPUs      int
	// Pool holds DiskVolume (the node's qcow2 overlay) and SeedVolume (its
	// cloud-init NoCloud ISO).
	Pool       string
	DiskVolume string
	SeedVolume string
	// Network is the libvirt network of the node NIC, MAC its address.
	Network string
	MAC     string
	// Kernel, Initrd and Cmdline select direct kernel boot when Kernel is
	// set (the test image; Ubuntu cloud images boot from their disk).
	Kernel, Initrd, Cmdline string
	// Loader is the UEFI firmware code (aarch64, e.g.
	// /usr/share/AAVMF/AAVMF_CODE.fd) from the domain capabilities; empty
	// lets libvirt pick firmware (<os firmware='efi'>). NVRAMTemplate is the
	// matching variable store template, or empty to let libvirt pick it.
	Loader        string
	NVRAMTemplate string
	// LoaderROM maps Loader as a read-only ROM (QEMU -bios, e.g.
	// /usr/share/qemu-efi-aarch64/QEMU_EFI.fd) instead of pflash with an
	// NVRAM: UEFI variables are not kept (the firmware boots the disk's
	// removable-media path \EFI\BOOT\BOOTAA64.EFI, which cloud images have),
	// and in exchange the domain has no pflash, which libvirt requires for
	// internal snapshots ("internal snapshots of a VM with pflash based
	// firmware are not supported").
	LoaderROM bool
	// Owner goes into <metadata>.
	Owner Owner
}

// ArchInfo is how one cluster.yaml arch maps to libvirt.
type ArchInfo struct {
	// Arch is the libvirt/QEMU arch name (x86_64, aarch64).
	Arch string
	// Machine is the QEMU machine type (q35, virt).
	Machine string
	// Console is the kernel's name of the first serial port (ttyS0,
	// ttyAMA0), for console= on a direct kernel boot.
	Console string
	// UEFI is true when khw boots this arch with UEFI firmware.
	UEFI bool
}

// Arches maps config.ArchAMD64 and config.ArchARM64 to libvirt: x86_64 q35
// (SeaBIOS or direct kernel boot) and aarch64 virt with UEFI (AAVMF), the
// machine types virt-install picks for those arches.
var Arches = map[string]ArchInfo{
	config.ArchAMD64: {Arch: "x86_64", Machine: "q35", Console: "ttyS0"},
	config.ArchARM64: {Arch: "aarch64", Machine: "virt", Console: "ttyAMA0", UEFI: true},
}

// DomainXML builds the domain definition of one node:
//   - <os>: hvm on x86_64 q35 or aarch64 virt; aarch64 gets UEFI (a
//     read-only pflash loader plus a per-domain NVRAM from the template);
//     kernel/initrd/cmdline when Kernel is set (direct kernel boot);
//   - <cpu>: host-passthrough under KVM (the guest sees the host CPU, as a
//     laptop with KVM wants), mode maximum under TCG (every feature QEMU can
//     emulate; the aarch64 virt default CPU would be 32-bit);
//   - virtio disk vda (the qcow2 overlay, from the pool), virtio disk vdb
//     read-only (the NoCloud seed ISO, excluded from snapshots), a virtio NIC
//     on Network with MAC, a serial port with a console on it, virtio-rng.
//
// Errors name the missing or bad field.
func DomainXML(s DomainSpec) (*libvirtxml.Domain, error) {
	ai, ok := Arches[s.Arch]
	switch {
	case !ok:
		return nil, fmt.Errorf("domain %s: arch %q: use %s or %s", s.Name, s.Arch, config.ArchARM64, config.ArchAMD64)
	case s.Name == "":
		return nil, fmt.Errorf("domain spec has no name")
	case s.Type != DomainKVM && s.Type != DomainQEMU:
		return nil, fmt.Errorf("domain %s: type %q: use %s or %s", s.Name, s.Type, DomainKVM, DomainQEMU)
	case s.MemoryMiB < 256:
		return nil, fmt.Errorf("domain %s: memory %d MiB is too small; give nodes[].memoryMiB >= 256 (1024 or more for Kubernetes)", s.Name, s.MemoryMiB)
	case s.CPUs < 1:
		return nil, fmt.Errorf("domain %s: %d CPUs; give nodes[].cpus >= 1", s.Name, s.CPUs)
	case s.Pool == "" || s.DiskVolume == "" || s.SeedVolume == "":
		return nil, fmt.Errorf("domain %s: storage pool, disk volume and seed volume are all required (have %q, %q, %q)", s.Name, s.Pool, s.DiskVolume, s.SeedVolume)
	case s.Network == "":
		return nil, fmt.Errorf("domain %s: no libvirt network for the NIC", s.Name)
	case s.Initrd != "" && s.Kernel == "", s.Cmdline != "" && s.Kernel == "":
		return nil, fmt.Errorf("domain %s: initrd or cmdline without a kernel; set the kernel too", s.Name)
	}
	if _, err := ParseMAC(s.MAC); err != nil {
		return nil, fmt.Errorf("domain %s: %w", s.Name, err)
	}
	meta, err := s.Owner.metadataXML()
	if err != nil {
		return nil, err
	}

	d := &libvirtxml.Domain{
		Type:          s.Type,
		Name:          s.Name,
		Metadata:      &libvirtxml.DomainMetadata{XML: meta},
		Memory:        &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: uint(s.CPUs)},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: ai.Arch, Machine: ai.Machine, Type: "hvm"},
			Kernel:  s.Kernel,
			Initrd:  s.Initrd,
			Cmdline: s.Cmdline,
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
	}
	if s.Kernel == "" {
		d.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	if ai.UEFI {
		switch {
		case s.Loader != "" && s.LoaderROM:
			d.OS.Loader = &libvirtxml.DomainLoader{Path: s.Loader, Readonly: "yes", Type: "rom"}
		case s.Loader != "":
			d.OS.Loader = &libvirtxml.DomainLoader{Path: s.Loader, Readonly: "yes", Type: "pflash"}
			d.OS.NVRam = &libvirtxml.DomainNVRam{Template: s.NVRAMTemplate}
		default:
			d.OS.Firmware = "efi"
		}
	}
	switch {
	case s.Type == DomainKVM:
		d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none"}
		if ai.Arch == "aarch64" {
			d.Features.GIC = &libvirtxml.DomainFeatureGIC{Version: "host"}
		}
	default:
		d.CPU = &libvirtxml.DomainCPU{Mode: "maximum", Check: "none"}
	}
	if ai.Arch == "x86_64" {
		d.Features.APIC = &libvirtxml.DomainFeatureAPIC{}
	}
	if ai.UEFI && s.LoaderROM {
		// libvirt ties ACPI on aarch64 to a UEFI it knows (pflash or
		// firmware='efi'); with the ROM the guest gets a device tree, and
		// QEMU's virt machine turns a power-button request into its GPIO
		// power key instead.
		d.Features.ACPI = nil
	}

	port := uint(0)
	d.Devices = &libvirtxml.DomainDeviceList{
		Disks: []libvirtxml.DomainDisk{
			{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
				Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Pool, Volume: s.DiskVolume}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
			},
			{
				Device:   "disk",
				Snapshot: "no",
				Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
				Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: s.Pool, Volume: s.SeedVolume}},
				Target:   &libvirtxml.DomainDiskTarget{Dev: "vdb", Bus: "virtio"},
				ReadOnly: &libvirtxml.DomainDiskReadOnly{},
			},
		},
		Interfaces: []libvirtxml.DomainInterface{{
			MAC:    &libvirtxml.DomainInterfaceMAC{Address: s.MAC},
			Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}},
		Serials: []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port},
		}},
		Consoles: []libvirtxml.DomainConsole{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
		}},
		RNGs: []libvirtxml.DomainRNG{{
			Model:   "virtio",
			Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
		}},
	}
	return d, nil
}

// NetworkSpec describes a libvirt network khw creates for a cluster.
type NetworkSpec struct {
	// Name is khw-<cluster>; Bridge the Linux bridge (at most 15 bytes, see
	// BridgeName).
	Name, Bridge string
	// Gateway is the host's address with the node prefix, e.g.
	// 192.168.122.1/24 (network.gateway and the bits of network.cidr).
	Gateway netip.Prefix
	Owner   Owner
}

// NetworkXML builds a NAT network (the nodes reach the outside through the
// host, as libvirt's default network does) on bridge Bridge with the
// gateway address and no DHCP: every node's static address comes from its
// cloud-init network-config. libvirt's dnsmasq still answers DNS on the
// gateway for the nodes.
func NetworkXML(s NetworkSpec) (*libvirtxml.Network, error) {
	if s.Name == "" || s.Bridge == "" {
		return nil, fmt.Errorf("network spec needs a name and a bridge (have %q, %q)", s.Name, s.Bridge)
	}
	if len(s.Bridge) > 15 {
		return nil, fmt.Errorf("network %s: bridge name %q is longer than 15 bytes (IFNAMSIZ)", s.Name, s.Bridge)
	}
	if !s.Gateway.IsValid() || !s.Gateway.Addr().Is4() || s.Gateway.Bits() > 30 {
		return nil, fmt.Errorf("network %s: gateway %v is not an IPv4 address with a prefix of /30 or larger; check network.gateway and network.cidr", s.Name, s.Gateway)
	}
	meta, err := s.Owner.metadataXML()
	if err != nil {
		return nil, err
	}
	return &libvirtxml.Network{
		Name:     s.Name,
		Metadata: &libvirtxml.NetworkMetadata{XML: meta},
		Forward:  &libvirtxml.NetworkForward{Mode: "nat"},
		Bridge:   &libvirtxml.NetworkBridge{Name: s.Bridge, STP: "on", Delay: "0"},
		IPs: []libvirtxml.NetworkIP{{
			Family:  "ipv4",
			Address: s.Gateway.Addr().String(),
			Prefix:  uint(s.Gateway.Bits()),
		}},
	}, nil
}

// BridgeName returns the bridge of cluster's network: "khwbr-" and 8 hex
// digits of the sha256 of the name, 14 bytes, within the 15 a Linux interface
// name allows (cluster names go up to 20).
func BridgeName(cluster string) string {
	sum := sha256.Sum256([]byte(cluster))
	return fmt.Sprintf("khwbr-%x", sum[:4])
}

// NetworkSubnets returns the IPv4 subnets of a libvirt network definition
// (each <ip address prefix|netmask>), masked, with the host address.
func NetworkSubnets(n *libvirtxml.Network) []netip.Prefix {
	var out []netip.Prefix
	for _, ip := range n.IPs {
		if ip.Family != "" && ip.Family != "ipv4" {
			continue
		}
		a, err := netip.ParseAddr(ip.Address)
		if err != nil || !a.Is4() {
			continue
		}
		bits := int(ip.Prefix)
		if ip.Netmask != "" {
			m, err := netip.ParseAddr(ip.Netmask)
			if err != nil || !m.Is4() {
				continue
			}
			b := m.As4()
			bits = 0
			for _, x := range b {
				for i := 7; i >= 0 && x&(1<<i) != 0; i-- {
					bits++
				}
			}
		} else if ip.Prefix == 0 {
			bits = 24 // libvirt's default for an IPv4 <ip> without prefix
		}
		out = append(out, netip.PrefixFrom(a, bits))
	}
	return out
}

// PoolXML builds a directory storage pool at path.
func PoolXML(name, path string) *libvirtxml.StoragePool {
	return &libvirtxml.StoragePool{
		Type:   "dir",
		Name:   name,
		Target: &libvirtxml.StoragePoolTarget{Path: path},
	}
}

// OverlayVolumeXML builds a node disk: a qcow2 volume of capacityBytes whose
// backing file is the base image at backingPath (format backingFormat,
// qcow2 or raw). The node writes only into its overlay; the base is shared.
func OverlayVolumeXML(name string, capacityBytes uint64, backingPath, backingFormat string) (*libvirtxml.StorageVolume, error) {
	if backingPath == "" {
		return nil, fmt.Errorf("volume %s: no backing image path", name)
	}
	if backingFormat != "qcow2" && backingFormat != "raw" {
		return nil, fmt.Errorf("volume %s: backing format %q: use qcow2 or raw", name, backingFormat)
	}
	if capacityBytes == 0 {
		return nil, fmt.Errorf("volume %s: capacity 0; set nodes[].diskGiB", name)
	}
	return &libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: capacityBytes},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
		BackingStore: &libvirtxml.StorageVolumeBackingStore{
			Path:   backingPath,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: backingFormat},
		},
	}, nil
}

// PlainVolumeXML builds an empty volume of sizeBytes in format (raw for the
// seed ISO, kernel and initrd; qcow2 or raw for an uploaded base image).
func PlainVolumeXML(name string, sizeBytes uint64, format string) *libvirtxml.StorageVolume {
	return &libvirtxml.StorageVolume{
		Name:       name,
		Capacity:   &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: sizeBytes},
		Allocation: &libvirtxml.StorageVolumeSize{Unit: "bytes", Value: 0},
		Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
}

// SnapshotXML builds a snapshot named name of a node. The node disk vda is
// snapshotted internally (inside its qcow2; a running node's memory is saved
// too, so a revert resumes it where it was); the read-only seed vdb is left
// out.
func SnapshotXML(name, description string) (*libvirtxml.DomainSnapshot, error) {
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		return nil, fmt.Errorf("snapshot name %q: use letters, digits, '-', '_' or '.'", name)
	}
	return &libvirtxml.DomainSnapshot{
		Name:        name,
		Description: description,
		Disks: &libvirtxml.DomainSnapshotDisks{Disks: []libvirtxml.DomainSnapshotDisk{
			{Name: "vda", Snapshot: "internal"},
			{Name: "vdb", Snapshot: "no"},
		}},
	}, nil
}

// NodeMAC returns the node's MAC address: 52:54:00 (the prefix QEMU and
// libvirt use for guests) and three bytes of sha256(<cluster>/<node>), so a
// node keeps its MAC across re-creation and cloud-init's network-config can
// match it.
func NodeMAC(cluster, node string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + node))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}

// ParseMAC checks that s is a colon-separated 6-byte MAC address and
// returns it in lower case.
func ParseMAC(s string) (string, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return "", fmt.Errorf("MAC %q: want six hex bytes separated by ':'", s)
	}
	for _, p := range parts {
		if len(p) != 2 || strings.Trim(strings.ToLower(p), "0123456789abcdef") != "" {
			return "", fmt.Errorf("MAC %q: %q is not a hex byte", s, p)
		}
	}
	return strings.ToLower(s), nil
}

// ArmROMFirmware is the aarch64 UEFI build QEMU can map as a ROM (-bios),
// from Debian's and Ubuntu's qemu-efi-aarch64 package.
const ArmROMFirmware = "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd"
