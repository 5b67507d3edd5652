package libvirt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/vm"
)

// Finding is one result of Preflight.
type Finding struct {
	// Check names what was checked: libvirtd, emulator, kvm, uefi, memory,
	// disk, subnet, bridge-netfilter.
	Check string
	// OK is true when nothing needs doing. Warning marks a finding khw can
	// live with (e.g. TCG instead of KVM); a finding with neither stops
	// `khw up`.
	OK, Warning bool
	// Message says what was found; Fix what to do about it (empty when OK).
	Message, Fix string
}

func (f Finding) String() string {
	mark := "✗"
	switch {
	case f.OK:
		mark = "✓"
	case f.Warning:
		mark = "!"
	}
	s := mark + " " + f.Check + ": " + f.Message
	if f.Fix != "" {
		s += " (fix: " + f.Fix + ")"
	}
	return s
}

// Blocking reports whether any finding is neither OK nor a warning.
func Blocking(fs []Finding) bool {
	for _, f := range fs {
		if !f.OK && !f.Warning {
			return true
		}
	}
	return false
}

// Preflight checks that this host can run the cluster's nodes with libvirt
// and explains what is missing: libvirtd reachable with this user's
// permissions, QEMU for the node arch, KVM usable (a probe VM must print on
// its serial console within Options.ProbeTimeout; otherwise TCG is used,
// a warning), UEFI firmware for aarch64, free memory for all nodes, free
// space in the storage pool, and network.cidr not taken by a libvirt network
// with another host address or overlapping it. The domain type it settles on
// is kept for Create.
func (p *Provider) Preflight(ctx context.Context) []Finding {
	var out []Finding
	l, err := p.connect()
	if err != nil {
		fix := "install and start libvirtd (apt-get install libvirt-daemon-system), and make sure this user may use it (group libvirt)"
		return append(out, Finding{Check: "libvirtd", Message: err.Error(), Fix: fix})
	}
	ver, _ := l.ConnectGetLibVersion()
	out = append(out, Finding{Check: "libvirtd", OK: true, Message: fmt.Sprintf("%s reachable (libvirt %d.%d.%d)", p.opts.URI, ver/1000000, ver/1000%1000, ver%1000)})

	ai := Arches[p.c.Arch]
	if _, err := domainCaps(l, ai, DomainQEMU); err != nil {
		out = append(out, Finding{Check: "emulator", Message: fmt.Sprintf("libvirt cannot run %s guests: %v", ai.Arch, err),
			Fix: "install QEMU for " + ai.Arch + " (apt-get install " + qemuPackage(ai.Arch) + ")"})
	} else {
		out = append(out, Finding{Check: "emulator", OK: true, Message: "QEMU for " + ai.Arch + " present"})
	}

	typ, note, err := p.resolveDomainType(ctx, l)
	switch {
	case err != nil:
		out = append(out, Finding{Check: "kvm", Message: err.Error(), Fix: kvmFix})
	case typ == DomainQEMU && p.opts.DomainType == DomainQEMU:
		out = append(out, Finding{Check: "kvm", OK: true, Message: note}) // chosen in cluster.yaml: nothing to fix
	case typ == DomainQEMU && note != "":
		out = append(out, Finding{Check: "kvm", Warning: true, Message: note, Fix: kvmFix})
	default:
		out = append(out, Finding{Check: "kvm", OK: true, Message: note})
	}

	if ai.UEFI {
		if typ == "" {
			typ = DomainQEMU
		}
		if loader, err := FirmwareLoader(l, p.c.Arch, typ); err != nil {
			out = append(out, Finding{Check: "uefi", Message: err.Error(), Fix: "apt-get install qemu-efi-aarch64"})
		} else {
			out = append(out, Finding{Check: "uefi", OK: true, Message: "UEFI firmware " + loader})
		}
	}

	var needMiB uint64
	for _, n := range p.c.Nodes {
		needMiB += uint64(n.MemoryMiB)
	}
	if free, err := l.NodeGetFreeMemory(); err == nil {
		f := Finding{Check: "memory", OK: free>>20 >= needMiB, Message: fmt.Sprintf("nodes need %d MiB, the host has %d MiB free", needMiB, free>>20)}
		if !f.OK {
			f.Warning = true // page cache counts as used here; QEMU allocates lazily
			f.Fix = "stop other VMs, or lower nodes[].memoryMiB in cluster.yaml"
		}
		out = append(out, f)
	}

	needGiB := uint64(5 + 2*len(p.c.Nodes)) // base image + what each node writes during khw up
	if pool, err := l.StoragePoolLookupByName(p.opts.Pool); err == nil {
		if _, _, _, avail, err := l.StoragePoolGetInfo(pool); err == nil {
			f := Finding{Check: "disk", OK: avail>>30 >= needGiB, Message: fmt.Sprintf("pool %s has %d GiB free, about %d GiB needed", p.opts.Pool, avail>>30, needGiB)}
			if !f.OK {
				f.Fix = "free space under the pool's directory, or point the pool elsewhere"
			}
			out = append(out, f)
		}
	} else {
		out = append(out, Finding{Check: "disk", OK: true, Message: fmt.Sprintf("pool %s will be made at %s", p.opts.Pool, p.opts.PoolPath)})
	}

	out = append(out, p.subnetFinding(l))
	out = append(out, bridgeNetfilterFinding(p.opts.NetnsPath))
	return out
}

// bridgeNFCallIPTables is the switch of the br_netfilter module that sends
// frames crossing a Linux bridge through the host's iptables FORWARD chain
// (https://wiki.libvirt.org/Net.bridge.bridge-nf-call_and_sysctl.conf.html).
const bridgeNFCallIPTables = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// bridgeNetfilterFinding warns when bridged traffic goes through iptables in
// the namespace of libvirt's bridge (nsPath, or khw's own when empty). Pod
// packets between nodes cross the libvirt bridge with pod source addresses
// (10.200.x, not network.cidr); the FORWARD rules libvirt and Docker install
// are written for routed traffic and can drop them, which shows up much
// later as pods that cannot reach pods on other nodes (08-pod-network,
// 11-smoke). Docker loads br_netfilter and turns the switch on.
func bridgeNetfilterFinding(nsPath string) Finding {
	f := Finding{Check: "bridge-netfilter"}
	v, err := vm.ReadSysctl(nsPath, bridgeNFCallIPTables)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.OK, f.Message = true, "br_netfilter is not loaded: bridged traffic between nodes bypasses iptables"
	case err != nil:
		f.Warning, f.Message = true, "cannot read "+bridgeNFCallIPTables+": "+err.Error()
	case v == "0":
		f.OK, f.Message = true, "net.bridge.bridge-nf-call-iptables = 0: bridged traffic between nodes bypasses iptables"
	default:
		f.Warning = true
		f.Message = "net.bridge.bridge-nf-call-iptables = " + v + ": pod traffic between nodes crosses this host's iptables FORWARD rules (libvirt's, Docker's), which can drop it; pods on different nodes then cannot reach each other"
		f.Fix = "sysctl -w net.bridge.bridge-nf-call-iptables=0 (and in /etc/sysctl.d/ to keep it), or allow the pod CIDR in the FORWARD chain"
	}
	return f
}

const kvmFix = "enable virtualisation (VT-x/AMD-V, or KVM on ARM) in the firmware, load the kvm module, and let libvirt's QEMU user open /dev/kvm (group kvm, mode 0660); or set libvirt.domainType: qemu to silence this"

func qemuPackage(arch string) string {
	if arch == "aarch64" {
		return "qemu-system-arm"
	}
	return "qemu-system-x86"
}

// subnetFinding checks network.cidr against the libvirt networks.
func (p *Provider) subnetFinding(l *golibvirt.Libvirt) Finding {
	f := Finding{Check: "subnet"}
	cidr, err := netip.ParsePrefix(p.c.Network.CIDR)
	if err != nil {
		f.Message, f.Fix = err.Error(), "fix network.cidr"
		return f
	}
	gw, _ := netip.ParseAddr(p.c.Network.Gateway)
	nets, _, err := l.ConnectListAllNetworks(1, 0)
	if err != nil {
		f.Message = "cannot list libvirt networks: " + err.Error()
		return f
	}
	for _, n := range nets {
		x, err := networkXML(l, n)
		if err != nil {
			continue
		}
		for _, s := range NetworkSubnets(x) {
			switch {
			case s.Masked() == cidr.Masked() && s.Addr() == gw:
				f.OK, f.Message = true, fmt.Sprintf("%s is libvirt network %s; the nodes join it", cidr, n.Name)
				return f
			case s.Masked() == cidr.Masked():
				f.Message = fmt.Sprintf("%s is libvirt network %s with host address %s, not network.gateway %s", cidr, n.Name, s.Addr(), gw)
				f.Fix = "set network.gateway: " + s.Addr().String() + " in cluster.yaml"
				return f
			case s.Masked().Overlaps(cidr):
				f.Message = fmt.Sprintf("%s overlaps libvirt network %s (%s)", cidr, n.Name, s.Masked())
				f.Fix = "pick another network.cidr (and node IPs), or use that network's subnet exactly"
				return f
			}
		}
	}
	f.OK, f.Message = true, fmt.Sprintf("%s is free; khw makes network %s", cidr, p.OwnNetworkName())
	return f
}

// domainType returns the domain type for Create: Options.DomainType, or the
// probe's verdict (logged as a warning when it falls back to TCG).
func (p *Provider) domainType(ctx context.Context, l *golibvirt.Libvirt) (string, error) {
	typ, note, err := p.resolveDomainType(ctx, l)
	if err != nil {
		return "", fmt.Errorf("cluster %s: %w", p.c.Name, err)
	}
	if typ == DomainQEMU && note != "" && p.opts.DomainType != DomainQEMU {
		fmt.Fprintf(p.opts.Log, "WARNING: %s\n", note)
	}
	return typ, nil
}

// resolveDomainType decides kvm or qemu once per provider. note explains a
// fallback to TCG.
func (p *Provider) resolveDomainType(ctx context.Context, l *golibvirt.Libvirt) (typ, note string, err error) {
	p.mu.Lock()
	if p.domType != "" {
		typ, note = p.domType, p.typeNote
		p.mu.Unlock()
		if typ == DomainQEMU && note == "" && p.opts.DomainType == DomainQEMU {
			return typ, "domain type qemu (TCG) as configured", nil
		}
		if note == "" {
			note = "domain type " + typ + " as configured"
		}
		return typ, note, nil
	}
	p.mu.Unlock()
	start := time.Now()
	perr := ProbeDomainType(ctx, l, p.c.Arch, DomainKVM, p.opts.ProbeTimeout)
	if perr == nil {
		typ, note = DomainKVM, fmt.Sprintf("a KVM probe VM ran its firmware in %s; nodes use KVM", time.Since(start).Round(time.Millisecond))
	} else {
		typ, note = DomainQEMU, fmt.Sprintf("KVM is not usable (%v); nodes run under QEMU TCG emulation, about 15x slower (a node takes minutes to boot, the control plane longer); set libvirt.domainType: qemu to skip this probe, and loadBalancer.healthCheck: tcp, since HAProxy's https check does not pass on an emulated apiserver", perr)
	}
	p.mu.Lock()
	p.domType, p.typeNote, p.kvmProbed = typ, note, typ == DomainKVM
	p.mu.Unlock()
	return typ, note, nil
}

// BootHint explains a node that does not answer after boot, for the error
// of 01-machines: when the probe chose KVM, the probe only saw the firmware
// run, and under broken nested virtualisation guests hang later, before the
// kernel prints anything; TCG then works. Empty otherwise.
func (p *Provider) BootHint() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.kvmProbed {
		return ""
	}
	return "the nodes run under KVM because a probe VM ran its firmware; where nested virtualisation is broken, guests hang after the firmware (nothing on the serial console): if that is this host, set libvirt.domainType: qemu in cluster.yaml (TCG, about 15x slower)"
}

// domainCaps returns libvirt's domain capabilities for arch/machine and a
// domain type (virsh domcapabilities).
func domainCaps(l *golibvirt.Libvirt, ai ArchInfo, typ string) (*libvirtxml.DomainCaps, error) {
	doc, err := l.ConnectGetDomainCapabilities(nil, golibvirt.OptString{ai.Arch}, golibvirt.OptString{ai.Machine}, golibvirt.OptString{typ}, 0)
	if err != nil {
		return nil, err
	}
	var caps libvirtxml.DomainCaps
	if err := caps.Unmarshal(doc); err != nil {
		return nil, fmt.Errorf("parse domain capabilities: %w", err)
	}
	return &caps, nil
}

// FirmwareLoader returns the UEFI code image libvirt offers for arch (a
// cluster.yaml arch) under domain type typ: the first loader of the domain
// capabilities that is not a Secure Boot build (AAVMF_CODE.fd from
// qemu-efi-aarch64 on Debian and Ubuntu). An error says which package
// provides it.
func FirmwareLoader(l *golibvirt.Libvirt, arch, typ string) (string, error) {
	ai, ok := Arches[arch]
	if !ok {
		return "", fmt.Errorf("arch %q: use arm64 or amd64", arch)
	}
	caps, err := domainCaps(l, ai, typ)
	if err != nil {
		return "", fmt.Errorf("domain capabilities of %s %s (%s): %w", ai.Arch, ai.Machine, typ, err)
	}
	var values []string
	if caps.OS != nil && caps.OS.Loader != nil {
		values = caps.OS.Loader.Values
	}
	for _, v := range values {
		lv := strings.ToLower(v)
		if strings.Contains(lv, "secboot") || strings.Contains(lv, ".ms.") || strings.Contains(lv, "snakeoil") {
			continue
		}
		return v, nil
	}
	return "", fmt.Errorf("libvirt offers no UEFI firmware for %s %s (loaders: %v); install it: apt-get install qemu-efi-aarch64 (Debian/Ubuntu)", ai.Arch, ai.Machine, values)
}

// ProbeDomainType starts a throw-away transient domain of type typ (kvm or
// qemu) for arch with 128 MiB, no disk and its serial port on a console
// stream, paused, attaches to the console, resumes it, and waits up to
// timeout until the firmware has finished its power-on self test and looks
// for something to boot: SeaBIOS (with serial output) prints "Booting from"
// on x86_64, UEFI's boot manager prints "BdsDxe" on aarch64 (ProbeMarker).
// nil means guests really run. An error says why not: the domain does not
// start (no /dev/kvm, no access to it), or it starts but its firmware stops
// before that point (on a cloud VM with nested KVM, SeaBIOS prints its
// banner and then hangs). The domain is destroyed either way.
func ProbeDomainType(ctx context.Context, l *golibvirt.Libvirt, arch, typ string, timeout time.Duration) error {
	ai, ok := Arches[arch]
	if !ok {
		return fmt.Errorf("arch %q: use arm64 or amd64", arch)
	}
	if _, err := domainCaps(l, ai, typ); err != nil {
		return fmt.Errorf("libvirt has no %s support for %s: %w", typ, ai.Arch, err)
	}
	rnd := make([]byte, 4)
	_, _ = rand.Read(rnd)
	name := "khw-probe-" + typ + "-" + hex.EncodeToString(rnd)
	port := uint(0)
	d := &libvirtxml.Domain{
		Type:   typ,
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: 128, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS: &libvirtxml.DomainOS{
			Type: &libvirtxml.DomainOSType{Arch: ai.Arch, Machine: ai.Machine, Type: "hvm"},
		},
		OnPoweroff: "destroy", OnReboot: "destroy", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
			}},
		},
	}
	if typ == DomainKVM {
		d.CPU = &libvirtxml.DomainCPU{Mode: "host-passthrough"}
	} else {
		d.CPU = &libvirtxml.DomainCPU{Mode: "maximum"}
	}
	if ai.UEFI {
		loader, err := FirmwareLoader(l, arch, typ)
		if err != nil {
			return err
		}
		// stateless: no NVRAM file is made for the throw-away domain.
		d.OS.Loader = &libvirtxml.DomainLoader{Path: loader, Readonly: "yes", Type: "pflash", Stateless: "yes"}
	} else {
		d.OS.BIOS = &libvirtxml.DomainBIOS{UseSerial: "yes"}
	}
	doc, err := d.Marshal()
	if err != nil {
		return err
	}
	dom, err := l.DomainCreateXML(doc, golibvirt.DomainStartPaused)
	if err != nil {
		return fmt.Errorf("a %s probe VM does not start: %w", typ, err)
	}
	defer func() { _ = l.DomainDestroy(dom) }()

	w := &markerWriter{marker: ProbeMarker[arch], seen: make(chan struct{})}
	streamDone := make(chan error, 1)
	go func() { streamDone <- l.DomainOpenConsole(dom, nil, w, 1 /* VIR_DOMAIN_CONSOLE_FORCE */) }()
	// The console must be attached before the firmware prints.
	time.Sleep(300 * time.Millisecond)
	if err := l.DomainResume(dom); err != nil {
		return fmt.Errorf("resume the %s probe VM: %w", typ, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.seen:
		return nil
	case err := <-streamDone:
		select {
		case <-w.seen:
			return nil
		default:
		}
		return fmt.Errorf("the %s probe VM's console closed before its firmware printed %q (%v; output: %q)", typ, w.marker, err, w.tail())
	case <-t.C:
		if w.tail() == "" {
			return fmt.Errorf("a %s probe VM started but its firmware printed nothing in %s (the guest CPU does not run: broken or nested KVM)", typ, timeout)
		}
		return fmt.Errorf("a %s probe VM started but its firmware stopped before %q within %s (last output %q): broken or nested KVM", typ, w.marker, timeout, w.tail())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProbeMarker is the console text that shows a probe VM's firmware got
// through its power-on self test, per cluster.yaml arch.
var ProbeMarker = map[string]string{
	config.ArchAMD64: "Booting from",
	config.ArchARM64: "BdsDxe",
}

// markerWriter keeps the last 4 KiB written and closes seen once marker
// appeared.
type markerWriter struct {
	marker string
	mu     sync.Mutex
	buf    []byte
	once   sync.Once
	seen   chan struct{}
}

func (w *markerWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.buf = append(w.buf, b...)
	if len(w.buf) > 4096 {
		w.buf = w.buf[len(w.buf)-4096:]
	}
	found := strings.Contains(string(w.buf), w.marker)
	w.mu.Unlock()
	if found {
		w.once.Do(func() { close(w.seen) })
	}
	return len(b), nil
}

// tail returns the printable end of the output, for error messages.
func (w *markerWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, string(w.buf))
	s = strings.TrimSpace(s)
	if len(s) > 160 {
		s = s[len(s)-160:]
	}
	return s
}
