// Package libvirt is khw's libvirt provider: the nodes of a cluster as
// QEMU/KVM virtual machines managed by libvirtd, spoken to over its RPC
// protocol with github.com/digitalocean/go-libvirt (no virsh, no shelling
// out). Everything is described with libvirt.org/go/libvirtxml types.
//
// What it makes, all named after the cluster so `virsh list` shows whose it
// is:
//   - a NAT network khw-<cluster> on bridge khwbr-<hash> with the gateway of
//     cluster.yaml, unless a libvirt network already holds network.cidr
//     (libvirt's "default" holds 192.168.122.0/24): that one is reused and
//     never deleted;
//   - a directory storage pool "khw" (kept: it caches base images);
//   - per base image a volume khw-base-<sha256/16>.<format> (and its kernel
//     and initrd for direct kernel boot), shared by clusters and kept;
//   - per node a qcow2 overlay khw-<cluster>-<node>.qcow2 backed by the
//     base, a NoCloud seed khw-<cluster>-<node>-seed.iso, and a domain
//     khw-<cluster>-<node> carrying khw's owner metadata.
package libvirt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/vm"
)

// Defaults of Options.
const (
	DefaultPool     = "khw"
	DefaultPoolPath = "/var/lib/libvirt/images/khw"
)

// Image is a base disk image on the machine running khw, uploaded into the
// storage pool once (keyed by its sha256).
type Image struct {
	// Path is the qcow2 or raw disk image.
	Path string
	// Format is qcow2 or raw; empty: detected from the file's magic.
	Format string
	// Kernel, Initrd, Cmdline select direct kernel boot (see
	// config.Libvirt).
	Kernel, Initrd, Cmdline string
	// Source says where the image came from and how it was verified, for
	// the user (CatalogImage fills it in; empty for libvirt.image).
	Source string
}

// Options configures the provider.
type Options struct {
	// StateDir is the cluster's state directory D (recorded as the owner of
	// every domain and network khw makes).
	StateDir string
	// AuthorizedKey is the authorized_keys line for user ubuntu (from
	// remote.EnsureKey). Required by Create.
	AuthorizedKey string
	// HostKey returns the SSH host key khw generated for a node
	// (remote.EnsureHostKey); its seed installs it through cloud-init as the
	// node's only host key, and the caller pins it before the first boot.
	// Required by Create.
	HostKey func(node string) (*remote.HostKey, error)
	// URI is the libvirt URI (default cluster.yaml libvirt.uri, else
	// DefaultURI).
	URI string
	// Image is the base image (default from cluster.yaml libvirt.image …;
	// when neither names one, ResolveImage fetches the catalog's cloud
	// image).
	Image Image
	// ResolveImage returns the base image when Image.Path and cluster.yaml
	// name none (bringup wires the artifact catalog's Ubuntu cloud image).
	ResolveImage func(ctx context.Context) (Image, error)
	// DomainType is kvm or qemu (default cluster.yaml libvirt.domainType,
	// else the KVM probe of Preflight decides).
	DomainType string
	// Pool and PoolPath name the directory storage pool (defaults
	// DefaultPool, DefaultPoolPath).
	Pool, PoolPath string
	// NetnsPath, when set, makes Dialer connect from inside that network
	// namespace (vm.NetnsDialer): for tests and e2e that run libvirtd in a
	// namespace of their own. Empty: dial directly (on a real host the
	// node network is routed from the host through the libvirt bridge).
	NetnsPath string
	// ProbeTimeout bounds the KVM probe (default 20 s).
	ProbeTimeout time.Duration
	// Log receives progress and warnings (nil: discarded).
	Log io.Writer
}

// Provider implements vm.Provider with libvirt.
type Provider struct {
	c    *config.Cluster
	opts Options

	mu       sync.Mutex
	conn     *golibvirt.Libvirt
	domType  string
	netName  string
	typeNote string
	// kvmProbed: domType is kvm because the probe said so (BootHint).
	kvmProbed bool
	// imageSource is the last resolved catalog image's Source (BaseImage).
	imageSource string
}

// BaseImage says which catalog image the last Create used and how it was
// verified ("" when cluster.yaml names libvirt.image, or before Create).
func (p *Provider) BaseImage() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.imageSource
}

var _ vm.Provider = (*Provider)(nil)

// New returns the provider for cluster c. It fills Options from
// cluster.yaml's libvirt section where they are unset and checks the
// options, but does not connect to libvirtd yet.
func New(c *config.Cluster, opts Options) (*Provider, error) {
	if c == nil || c.Name == "" {
		return nil, errors.New("libvirt: cluster has no name")
	}
	if opts.StateDir == "" {
		return nil, fmt.Errorf("cluster %s: libvirt provider needs the state directory", c.Name)
	}
	if _, ok := Arches[c.Arch]; !ok {
		return nil, fmt.Errorf("cluster %s: arch %q: use %s or %s", c.Name, c.Arch, config.ArchARM64, config.ArchAMD64)
	}
	if l := c.Libvirt; l != nil {
		if opts.URI == "" {
			opts.URI = l.URI
		}
		if opts.Image.Path == "" {
			opts.Image = Image{Path: l.Image, Kernel: l.Kernel, Initrd: l.Initrd, Cmdline: l.Cmdline}
		}
		if opts.DomainType == "" {
			opts.DomainType = l.DomainType
		}
	}
	if opts.URI == "" {
		opts.URI = DefaultURI
	}
	if opts.NetnsPath == "" {
		opts.NetnsPath = os.Getenv(EnvNetns)
	}
	if opts.Pool == "" {
		opts.Pool = DefaultPool
	}
	if opts.PoolPath == "" {
		opts.PoolPath = DefaultPoolPath
	}
	if opts.ProbeTimeout == 0 {
		opts.ProbeTimeout = 20 * time.Second
	}
	if opts.DomainType != "" && opts.DomainType != DomainKVM && opts.DomainType != DomainQEMU {
		return nil, fmt.Errorf("cluster %s: domain type %q: use %s or %s", c.Name, opts.DomainType, DomainKVM, DomainQEMU)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	return &Provider{c: c, opts: opts, domType: opts.DomainType}, nil
}

// Name returns config.ProviderLibvirt.
func (p *Provider) Name() string { return config.ProviderLibvirt }

// DomainName is the libvirt domain of node: khw-<cluster>-<node>.
func (p *Provider) DomainName(node string) string { return DomainName(p.c.Name, node) }

// DomainName is the libvirt domain of node in cluster: khw-<cluster>-<node>,
// so `virsh list` shows whose VM it is.
func DomainName(cluster, node string) string { return "khw-" + cluster + "-" + node }

// DiskVolume is the node's overlay volume name.
func (p *Provider) DiskVolume(node string) string { return p.DomainName(node) + ".qcow2" }

// SeedVolume is the node's NoCloud seed volume name.
func (p *Provider) SeedVolume(node string) string { return p.DomainName(node) + "-seed.iso" }

// OwnNetworkName is the network khw creates when none holds the subnet:
// khw-<cluster>.
func (p *Provider) OwnNetworkName() string { return "khw-" + p.c.Name }

func (p *Provider) owner(node string) Owner {
	return Owner{Cluster: p.c.Name, Node: node, StateDir: p.opts.StateDir}
}

// conn returns the open connection, (re)connecting when needed.
func (p *Provider) connect() (*golibvirt.Libvirt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn.IsConnected() {
		return p.conn, nil
	}
	l, err := Connect(p.opts.URI)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", p.c.Name, err)
	}
	p.conn = l
	return l, nil
}

// Close ends the libvirt connection (the VMs keep running).
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Disconnect()
	p.conn = nil
	return err
}

func (p *Provider) node(name string) (config.Node, error) {
	n, ok := p.c.Node(name)
	if !ok {
		return n, fmt.Errorf("cluster %s: node %q: %w", p.c.Name, name, vm.ErrUnknownNode)
	}
	return n, nil
}

// lookupDomain returns node's domain; found is false when it does not
// exist. A domain of that name owned by another state directory is a
// *vm.ForeignOwnerError; one without khw metadata is refused too (khw never
// touches a VM it did not make).
func (p *Provider) lookupDomain(l *golibvirt.Libvirt, node string) (golibvirt.Domain, bool, error) {
	name := p.DomainName(node)
	d, err := l.DomainLookupByName(name)
	if isLibvirtErr(err, golibvirt.ErrNoDomain) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("node %s: look up domain %s: %w", node, name, err)
	}
	desc, err := l.DomainGetXMLDesc(d, golibvirt.DomainXMLInactive)
	if err != nil {
		return d, false, fmt.Errorf("node %s: read domain %s: %w", node, name, err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(desc); err != nil {
		return d, false, fmt.Errorf("node %s: parse domain %s: %w", node, name, err)
	}
	var o Owner
	ok := false
	if dx.Metadata != nil {
		o, ok = ParseOwner(dx.Metadata.XML)
	}
	if !ok {
		return d, false, fmt.Errorf("node %s: a libvirt domain %s exists that khw did not make (no khw metadata); rename or remove it (virsh undefine %s), or give this cluster another name", node, name, name)
	}
	if o.StateDir != p.opts.StateDir {
		return d, false, &vm.ForeignOwnerError{Cluster: p.c.Name, Namespace: "libvirt domain " + name, Owner: o.StateDir, StateDir: p.opts.StateDir}
	}
	// The nodes khw made say how they run: a later command (status, break,
	// lab) that did not probe or create learns kvm or qemu from them.
	if dx.Type == DomainKVM || dx.Type == DomainQEMU {
		p.mu.Lock()
		if p.domType == "" {
			p.domType = dx.Type
		}
		p.mu.Unlock()
	}
	return d, true, nil
}

func domainState(l *golibvirt.Libvirt, d golibvirt.Domain) (golibvirt.DomainState, error) {
	st, _, err := l.DomainGetState(d, 0)
	return golibvirt.DomainState(st), err
}

// Create makes the network (or finds the one to reuse), the storage pool,
// the base image volumes, and per node the overlay, the seed and the domain.
// Nodes are not started. Existing objects are kept; a node's seed is
// re-uploaded when its content changed (it only matters on a node's first
// boot, when cloud-init reads it).
func (p *Provider) Create(ctx context.Context) error {
	if p.opts.AuthorizedKey == "" {
		return fmt.Errorf("cluster %s: no SSH public key for the nodes; pass remote.EnsureKey's authorized_keys line in libvirt.Options.AuthorizedKey", p.c.Name)
	}
	if p.opts.HostKey == nil {
		return fmt.Errorf("cluster %s: no SSH host keys for the nodes; set libvirt.Options.HostKey (remote.EnsureHostKey per node)", p.c.Name)
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	for _, n := range p.c.Nodes {
		if _, _, err := p.lookupDomain(l, n.Name); err != nil {
			return err
		}
	}
	netName, err := p.ensureNetwork(l)
	if err != nil {
		return err
	}
	pool, err := p.ensurePool(l)
	if err != nil {
		return err
	}
	img, err := p.image(ctx)
	if err != nil {
		return err
	}
	base, err := p.ensureBase(ctx, l, pool, img)
	if err != nil {
		return err
	}
	domType, err := p.domainType(ctx, l)
	if err != nil {
		return err
	}
	ai := Arches[p.c.Arch]
	var loader string
	rom := false
	if ai.UEFI {
		// Prefer UEFI as a ROM when this host has it and libvirtd is local:
		// libvirt refuses internal snapshots (khw lab reset) of domains with
		// pflash firmware. Else the pflash loader libvirt offers.
		if _, serr := os.Stat(ArmROMFirmware); serr == nil && strings.HasPrefix(p.opts.URI, "qemu:///") {
			loader, rom = ArmROMFirmware, true
		} else if loader, err = FirmwareLoader(l, p.c.Arch, domType); err != nil {
			return fmt.Errorf("cluster %s: %w", p.c.Name, err)
		}
	}
	cmdline := img.Cmdline
	if base.kernel != "" && cmdline == "" {
		cmdline = "root=/dev/vda rw console=" + ai.Console
	}
	for _, n := range p.c.Nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.ensureNode(ctx, l, pool, base, n, DomainSpec{
			Name: p.DomainName(n.Name), Arch: p.c.Arch, Type: domType,
			MemoryMiB: n.MemoryMiB, CPUs: n.CPUs,
			Pool: p.opts.Pool, DiskVolume: p.DiskVolume(n.Name), SeedVolume: p.SeedVolume(n.Name),
			Network: netName, MAC: NodeMAC(p.c.Name, n.Name),
			Kernel: base.kernel, Initrd: base.initrd, Cmdline: cmdline,
			Loader: loader, LoaderROM: rom, Owner: p.owner(n.Name),
		}); err != nil {
			return err
		}
	}
	return nil
}

// image returns the base image to use.
func (p *Provider) image(ctx context.Context) (Image, error) {
	img := p.opts.Image
	if img.Path == "" {
		if p.opts.ResolveImage == nil {
			return img, fmt.Errorf("cluster %s: no base image: set libvirt.image in cluster.yaml (a qcow2 or raw disk image with cloud-init) or let khw fetch the Ubuntu cloud image from the artifact catalog", p.c.Name)
		}
		var err error
		if img, err = p.opts.ResolveImage(ctx); err != nil {
			return img, fmt.Errorf("cluster %s: base image: %w", p.c.Name, err)
		}
		p.mu.Lock()
		p.imageSource = img.Source
		p.mu.Unlock()
	}
	if img.Format == "" {
		f, err := detectFormat(img.Path)
		if err != nil {
			return img, fmt.Errorf("cluster %s: base image: %w", p.c.Name, err)
		}
		img.Format = f
	}
	return img, nil
}

// detectFormat returns qcow2 when path starts with the qcow2 magic "QFI\xfb",
// else raw.
func detectFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open image %s: %w; check libvirt.image in cluster.yaml", path, err)
	}
	defer f.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(f, magic); err != nil {
		return "", fmt.Errorf("read image %s: %w", path, err)
	}
	if bytes.Equal(magic, []byte{'Q', 'F', 'I', 0xfb}) {
		return "qcow2", nil
	}
	return "raw", nil
}

// ensureNetwork returns the libvirt network the nodes attach to: the one
// cluster.yaml names, else one whose IPv4 subnet equals network.cidr (its
// host address must be network.gateway, the nodes' default route), else
// khw-<cluster>, created and started here. An inactive network found is
// started.
func (p *Provider) ensureNetwork(l *golibvirt.Libvirt) (string, error) {
	cidr, err := netip.ParsePrefix(p.c.Network.CIDR)
	if err != nil {
		return "", fmt.Errorf("cluster %s: network.cidr %q: %w", p.c.Name, p.c.Network.CIDR, err)
	}
	gw, err := netip.ParseAddr(p.c.Network.Gateway)
	if err != nil || !cidr.Contains(gw) {
		return "", fmt.Errorf("cluster %s: network.gateway %q is not an address inside network.cidr %s", p.c.Name, p.c.Network.Gateway, cidr)
	}
	nets, _, err := l.ConnectListAllNetworks(1, 0)
	if err != nil {
		return "", fmt.Errorf("cluster %s: list libvirt networks: %w", p.c.Name, err)
	}
	want := ""
	if p.c.Libvirt != nil {
		want = p.c.Libvirt.Network
	}
	var found *golibvirt.Network
	for i, n := range nets {
		x, err := networkXML(l, n)
		if err != nil {
			return "", err
		}
		subs := NetworkSubnets(x)
		if want != "" {
			if n.Name != want {
				continue
			}
			if !hasSubnet(subs, cidr, gw) {
				return "", fmt.Errorf("cluster %s: libvirt network %s (libvirt.network) has subnets %v, not %s with host address %s; set network.cidr/network.gateway to match it", p.c.Name, want, subs, cidr, gw)
			}
			found = &nets[i]
			break
		}
		for _, s := range subs {
			if s.Masked() != cidr.Masked() {
				continue
			}
			if s.Addr() != gw {
				return "", fmt.Errorf("cluster %s: libvirt network %s holds %s but its host address is %s, not network.gateway %s; set network.gateway: %s in cluster.yaml", p.c.Name, n.Name, cidr, s.Addr(), gw, s.Addr())
			}
			if o, ok := ownerOf(x.Metadata); ok && n.Name == p.OwnNetworkName() && o.StateDir != p.opts.StateDir {
				return "", &vm.ForeignOwnerError{Cluster: p.c.Name, Namespace: "libvirt network " + n.Name, Owner: o.StateDir, StateDir: p.opts.StateDir}
			}
			found = &nets[i]
			break
		}
		if found != nil {
			break
		}
	}
	if want != "" && found == nil {
		return "", fmt.Errorf("cluster %s: libvirt network %q (libvirt.network) does not exist; create it or remove libvirt.network to let khw pick one", p.c.Name, want)
	}
	if found == nil {
		name := p.OwnNetworkName()
		x, err := NetworkXML(NetworkSpec{Name: name, Bridge: BridgeName(p.c.Name), Gateway: netip.PrefixFrom(gw, cidr.Bits()), Owner: p.owner("")})
		if err != nil {
			return "", err
		}
		doc, err := x.Marshal()
		if err != nil {
			return "", err
		}
		n, err := l.NetworkDefineXML(doc)
		if err != nil {
			return "", fmt.Errorf("cluster %s: define libvirt network %s (%s): %w", p.c.Name, name, cidr, err)
		}
		fmt.Fprintf(p.opts.Log, "libvirt: created network %s (%s, bridge %s)\n", name, cidr, BridgeName(p.c.Name))
		found = &n
	} else {
		fmt.Fprintf(p.opts.Log, "libvirt: nodes use the existing network %s (%s)\n", found.Name, cidr)
	}
	active, err := l.NetworkIsActive(*found)
	if err != nil {
		return "", fmt.Errorf("cluster %s: network %s: %w", p.c.Name, found.Name, err)
	}
	if active == 0 {
		if err := l.NetworkCreate(*found); err != nil {
			return "", fmt.Errorf("cluster %s: start libvirt network %s: %w (virsh net-start %s shows the same)", p.c.Name, found.Name, err, found.Name)
		}
		fmt.Fprintf(p.opts.Log, "libvirt: started network %s\n", found.Name)
	}
	if found.Name == p.OwnNetworkName() {
		// Only khw's own network is set to start with libvirtd; a reused
		// one keeps its owner's autostart setting.
		_ = l.NetworkSetAutostart(*found, 1)
	}
	p.mu.Lock()
	p.netName = found.Name
	p.mu.Unlock()
	return found.Name, nil
}

func hasSubnet(subs []netip.Prefix, cidr netip.Prefix, gw netip.Addr) bool {
	for _, s := range subs {
		if s.Masked() == cidr.Masked() && s.Addr() == gw {
			return true
		}
	}
	return false
}

func networkXML(l *golibvirt.Libvirt, n golibvirt.Network) (*libvirtxml.Network, error) {
	desc, err := l.NetworkGetXMLDesc(n, 0)
	if err != nil {
		return nil, fmt.Errorf("read libvirt network %s: %w", n.Name, err)
	}
	var x libvirtxml.Network
	if err := x.Unmarshal(desc); err != nil {
		return nil, fmt.Errorf("parse libvirt network %s: %w", n.Name, err)
	}
	return &x, nil
}

func ownerOf(m *libvirtxml.NetworkMetadata) (Owner, bool) {
	if m == nil {
		return Owner{}, false
	}
	return ParseOwner(m.XML)
}

// ensurePool returns the storage pool, defining (a dir pool at PoolPath),
// building and starting it when needed.
func (p *Provider) ensurePool(l *golibvirt.Libvirt) (golibvirt.StoragePool, error) {
	pool, err := l.StoragePoolLookupByName(p.opts.Pool)
	if isLibvirtErr(err, golibvirt.ErrNoStoragePool) {
		doc, merr := PoolXML(p.opts.Pool, p.opts.PoolPath).Marshal()
		if merr != nil {
			return pool, merr
		}
		pool, err = l.StoragePoolDefineXML(doc, 0)
		if err != nil {
			return pool, fmt.Errorf("define storage pool %s at %s: %w", p.opts.Pool, p.opts.PoolPath, err)
		}
		if err := l.StoragePoolBuild(pool, golibvirt.StoragePoolBuildNew); err != nil {
			return pool, fmt.Errorf("build storage pool %s (mkdir %s): %w", p.opts.Pool, p.opts.PoolPath, err)
		}
		_ = l.StoragePoolSetAutostart(pool, 1)
		fmt.Fprintf(p.opts.Log, "libvirt: created storage pool %s at %s\n", p.opts.Pool, p.opts.PoolPath)
	} else if err != nil {
		return pool, fmt.Errorf("look up storage pool %s: %w", p.opts.Pool, err)
	}
	active, err := l.StoragePoolIsActive(pool)
	if err != nil {
		return pool, err
	}
	if active == 0 {
		if err := l.StoragePoolCreate(pool, 0); err != nil {
			return pool, fmt.Errorf("start storage pool %s: %w", p.opts.Pool, err)
		}
	}
	if err := l.StoragePoolRefresh(pool, 0); err != nil {
		return pool, fmt.Errorf("refresh storage pool %s: %w", p.opts.Pool, err)
	}
	return pool, nil
}

// baseVolumes are the pool paths of the uploaded base image.
type baseVolumes struct {
	disk, format   string
	capacity       uint64
	kernel, initrd string
}

// ensureBase uploads the base image (and kernel/initrd) into the pool once:
// volumes khw-base-<first 16 hex of sha256>.<format>, …-vmlinuz, …-initrd.
func (p *Provider) ensureBase(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, img Image) (baseVolumes, error) {
	var b baseVolumes
	var err error
	b.format = img.Format
	b.disk, b.capacity, err = p.uploadOnce(ctx, l, pool, img.Path, "."+img.Format, img.Format)
	if err != nil {
		return b, err
	}
	if img.Kernel != "" {
		if b.kernel, _, err = p.uploadOnce(ctx, l, pool, img.Kernel, "-vmlinuz", "raw"); err != nil {
			return b, err
		}
	}
	if img.Initrd != "" {
		if b.initrd, _, err = p.uploadOnce(ctx, l, pool, img.Initrd, "-initrd", "raw"); err != nil {
			return b, err
		}
	}
	return b, nil
}

// uploadOnce uploads the file at path into volume khw-base-<hash><suffix>
// unless it exists, and returns the volume's path and capacity. For a qcow2
// image the capacity is its virtual size, which libvirt reads from the
// header after the upload.
func (p *Provider) uploadOnce(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, path, suffix, format string) (string, uint64, error) {
	sum, size, err := fileSHA256(path)
	if err != nil {
		return "", 0, err
	}
	name := "khw-base-" + sum[:16] + suffix
	vol, err := l.StorageVolLookupByName(pool, name)
	if isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		start := time.Now()
		doc, merr := PlainVolumeXML(name, uint64(size), format).Marshal()
		if merr != nil {
			return "", 0, merr
		}
		if vol, err = l.StorageVolCreateXML(pool, doc, 0); err != nil {
			return "", 0, fmt.Errorf("create volume %s in pool %s: %w", name, p.opts.Pool, err)
		}
		f, err := os.Open(path)
		if err != nil {
			return "", 0, err
		}
		err = l.StorageVolUpload(vol, &ctxReader{ctx: ctx, r: f}, 0, uint64(size), 0)
		f.Close()
		if err != nil {
			_ = l.StorageVolDelete(vol, golibvirt.StorageVolDeleteNormal)
			return "", 0, fmt.Errorf("upload %s into volume %s: %w", path, name, err)
		}
		if err := l.StoragePoolRefresh(pool, 0); err != nil {
			return "", 0, err
		}
		if vol, err = l.StorageVolLookupByName(pool, name); err != nil {
			return "", 0, err
		}
		fmt.Fprintf(p.opts.Log, "libvirt: uploaded %s (%d MiB) as volume %s in %s\n", path, size>>20, name, time.Since(start).Round(time.Millisecond))
	} else if err != nil {
		return "", 0, fmt.Errorf("look up volume %s: %w", name, err)
	}
	volPath, err := l.StorageVolGetPath(vol)
	if err != nil {
		return "", 0, err
	}
	_, capacity, _, err := l.StorageVolGetInfo(vol)
	if err != nil {
		return "", 0, err
	}
	return volPath, capacity, nil
}

// ctxReader stops an upload when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// ensureNode makes node n's overlay, seed and domain when missing.
func (p *Provider) ensureNode(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, base baseVolumes, n config.Node, spec DomainSpec) error {
	// Overlay: diskGiB, but never smaller than the base image.
	capacity := uint64(n.DiskGiB) << 30
	if capacity < base.capacity {
		capacity = base.capacity
	}
	v, err := OverlayVolumeXML(spec.DiskVolume, capacity, base.disk, base.format)
	if err != nil {
		return err
	}
	volDoc, err := v.Marshal()
	if err != nil {
		return err
	}
	if _, err := l.StorageVolLookupByName(pool, spec.DiskVolume); isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		if _, err := l.StorageVolCreateXML(pool, volDoc, 0); err != nil {
			return fmt.Errorf("node %s: create disk volume %s (%d GiB on %s): %w", n.Name, spec.DiskVolume, capacity>>30, base.disk, err)
		}
	} else if err != nil {
		return fmt.Errorf("node %s: look up volume %s: %w", n.Name, spec.DiskVolume, err)
	}

	hk, err := p.opts.HostKey(n.Name)
	if err != nil {
		return err
	}
	files, err := SeedFiles(p.c, n, spec.MAC, p.opts.AuthorizedKey, hk)
	if err != nil {
		return err
	}
	iso, err := SeedISO(files, "")
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := p.putSeed(ctx, l, pool, spec.SeedVolume, iso); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}

	dx, err := DomainXML(spec)
	if err != nil {
		return err
	}
	doc, err := dx.Marshal()
	if err != nil {
		return err
	}
	if err := p.writeNodeFiles(n.Name, files, doc, volDoc); err != nil {
		return err
	}
	if _, found, err := p.lookupDomain(l, n.Name); err != nil {
		return err
	} else if found {
		return nil
	}
	if _, err := l.DomainDefineXMLFlags(doc, golibvirt.DomainDefineValidate); err != nil {
		return fmt.Errorf("node %s: define domain %s: %w", n.Name, spec.Name, err)
	}
	fmt.Fprintf(p.opts.Log, "libvirt: defined %s (%s, %s, %d CPU, %d MiB, %d GiB)\n", spec.Name, Arches[p.c.Arch].Arch, spec.Type, spec.CPUs, spec.MemoryMiB, capacity>>30)
	return nil
}

// NodeFilesDir is D/libvirt/<node>: where Create leaves, for the person
// reading along, what it gave libvirt for the node: the cloud-init NoCloud
// files (user-data, meta-data, network-config; the seed ISO is made from
// them), the disk's overlay volume (disk-volume.xml, as `virsh vol-create`
// takes it) and the domain definition (domain.xml, as `virsh define` takes
// it). khw reads none of them back; Destroy removes them.
func NodeFilesDir(stateDir, node string) string {
	return filepath.Join(stateDir, "libvirt", node)
}

// writeNodeFiles writes the seed files, the domain and volume XML of node into
// NodeFilesDir (atomically, 0600: user-data holds the node's SSH
// authorized key and sudo rule), rewriting only what changed.
func (p *Provider) writeNodeFiles(node string, seed map[string][]byte, domainXML, volumeXML string) error {
	dir := NodeFilesDir(p.opts.StateDir, node)
	if err := fsutil.EnsureDir(dir); err != nil {
		return err
	}
	files := map[string][]byte{"domain.xml": []byte(domainXML + "\n"), "disk-volume.xml": []byte(volumeXML + "\n")}
	for name, b := range seed {
		files[name] = b
	}
	for name, b := range files {
		if _, err := fsutil.WriteIfChanged(filepath.Join(dir, name), b, fsutil.SecretMode); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
	}
	return nil
}

// putSeed writes iso into the seed volume unless it already holds exactly
// that.
func (p *Provider) putSeed(ctx context.Context, l *golibvirt.Libvirt, pool golibvirt.StoragePool, name string, iso []byte) error {
	vol, err := l.StorageVolLookupByName(pool, name)
	if err == nil {
		var cur bytes.Buffer
		if derr := l.StorageVolDownload(vol, &cur, 0, 0, 0); derr == nil && bytes.Equal(cur.Bytes(), iso) {
			return nil
		}
		if err := l.StorageVolDelete(vol, golibvirt.StorageVolDeleteNormal); err != nil {
			return fmt.Errorf("replace seed volume %s: %w", name, err)
		}
	} else if !isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
		return fmt.Errorf("look up seed volume %s: %w", name, err)
	}
	v := PlainVolumeXML(name, uint64(len(iso)), "raw")
	// The seed carries the node's private SSH host key.
	v.Target.Permissions = &libvirtxml.StorageVolumeTargetPermissions{Mode: "0600"}
	doc, err := v.Marshal()
	if err != nil {
		return err
	}
	vol, err = l.StorageVolCreateXML(pool, doc, 0)
	if err != nil {
		return fmt.Errorf("create seed volume %s: %w", name, err)
	}
	if err := l.StorageVolUpload(vol, &ctxReader{ctx: ctx, r: bytes.NewReader(iso)}, 0, uint64(len(iso)), 0); err != nil {
		return fmt.Errorf("upload seed volume %s: %w", name, err)
	}
	return nil
}

// Start powers node on (virsh start). A running node is left alone.
func (p *Provider) Start(ctx context.Context, node string) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	d, found, err := p.lookupDomain(l, node)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("node %s: no libvirt domain %s; run Create (khw up) first", node, p.DomainName(node))
	}
	st, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	switch st {
	case golibvirt.DomainRunning:
		return nil
	case golibvirt.DomainPaused:
		if err := l.DomainResume(d); err != nil {
			return fmt.Errorf("node %s: resume %s: %w", node, d.Name, err)
		}
		return nil
	}
	if err := l.DomainCreate(d); err != nil {
		return fmt.Errorf("node %s: start domain %s: %w", node, d.Name, err)
	}
	return nil
}

// Stop powers node off. Graceful: an ACPI power-button press (re-sent every
// 10 s, as one sent while the guest boots is lost), then wait until libvirt
// reports the domain shut off or ctx ends (then an error naming the force
// option). Force: virsh destroy, at once.
func (p *Provider) Stop(ctx context.Context, node string, force bool) error {
	if _, err := p.node(node); err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	d, found, err := p.lookupDomain(l, node)
	if err != nil || !found {
		return err
	}
	st, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if st == golibvirt.DomainShutoff {
		return nil
	}
	if force {
		if err := l.DomainDestroy(d); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
			return fmt.Errorf("node %s: power off (destroy) %s: %w", node, d.Name, err)
		}
		return nil
	}
	var lastPress time.Time
	for {
		if time.Since(lastPress) >= 10*time.Second {
			if err := l.DomainShutdownFlags(d, golibvirt.DomainShutdownAcpiPowerBtn); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
				return fmt.Errorf("node %s: ACPI shutdown of %s: %w", node, d.Name, err)
			}
			lastPress = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: still shutting down: %w; stop it with force (power off)", node, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		st, err := domainState(l, d)
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		if st == golibvirt.DomainShutoff {
			return nil
		}
	}
}

// Status reports each node: running (libvirt running or paused), stopped
// (defined, shut off) or absent. PID is 0 (libvirt does not expose the QEMU
// process id over its API).
func (p *Provider) Status(ctx context.Context) ([]vm.NodeStatus, error) {
	l, err := p.connect()
	if err != nil {
		return nil, err
	}
	var out []vm.NodeStatus
	for _, n := range p.c.Nodes {
		s := vm.NodeStatus{Name: n.Name, IP: n.Addr(), State: vm.StateAbsent}
		d, found, err := p.lookupDomain(l, n.Name)
		var foreign *vm.ForeignOwnerError
		switch {
		case errors.As(err, &foreign):
			// Another state directory's VM: absent for this cluster.
		case err != nil:
			return nil, err
		case found:
			st, err := domainState(l, d)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			if st == golibvirt.DomainRunning || st == golibvirt.DomainPaused {
				s.State = vm.StateRunning
			} else {
				s.State = vm.StateStopped
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// Addresses maps node names to their cluster.yaml IPs.
func (p *Provider) Addresses() map[string]netip.Addr {
	m := map[string]netip.Addr{}
	for _, n := range p.c.Nodes {
		m[n.Name] = n.Addr()
	}
	return m
}

// Dialer connects directly (the host routes the node network through the
// libvirt bridge), or from inside Options.NetnsPath when set.
func (p *Provider) Dialer() remote.DialFunc {
	if p.opts.NetnsPath != "" {
		return vm.NetnsDialer(p.opts.NetnsPath)
	}
	var d net.Dialer
	return d.DialContext
}

// Snapshot makes snapshot name of every node (SnapshotXML: vda internal in
// its qcow2; a running node's memory too). When one node fails, the
// snapshots this call made on the others are deleted again, so a checkpoint
// exists on all nodes or on none.
func (p *Provider) Snapshot(ctx context.Context, name string) error {
	sx, err := SnapshotXML(name, "khw checkpoint "+name+" of cluster "+p.c.Name)
	if err != nil {
		return err
	}
	doc, err := sx.Marshal()
	if err != nil {
		return err
	}
	l, err := p.connect()
	if err != nil {
		return err
	}
	doms, err := p.allDomains(l)
	if err != nil {
		return err
	}
	var made []golibvirt.DomainSnapshot
	for i, d := range doms {
		if _, err := l.DomainSnapshotLookupByName(d, name, 0); err == nil {
			err = fmt.Errorf("node %s: snapshot %q exists already; delete it first (khw lab reset uses it as it is)", p.c.Nodes[i].Name, name)
			return errors.Join(err, p.undo(l, made))
		}
		s, err := l.DomainSnapshotCreateXML(d, doc, 0)
		if err != nil {
			err = fmt.Errorf("node %s: snapshot %q of %s: %w", p.c.Nodes[i].Name, name, d.Name, err)
			return errors.Join(err, p.undo(l, made))
		}
		made = append(made, s)
	}
	return nil
}

func (p *Provider) undo(l *golibvirt.Libvirt, made []golibvirt.DomainSnapshot) error {
	var errs []error
	for _, s := range made {
		if err := l.DomainSnapshotDelete(s, 0); err != nil {
			errs = append(errs, fmt.Errorf("remove partial snapshot %s of %s: %w", s.Name, s.Dom.Name, err))
		}
	}
	return errors.Join(errs...)
}

// allDomains returns the domains of every node, failing when one is
// missing.
func (p *Provider) allDomains(l *golibvirt.Libvirt) ([]golibvirt.Domain, error) {
	var out []golibvirt.Domain
	for _, n := range p.c.Nodes {
		d, found, err := p.lookupDomain(l, n.Name)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("node %s: no libvirt domain %s; run Create (khw up) first", n.Name, p.DomainName(n.Name))
		}
		out = append(out, d)
	}
	return out, nil
}

// Revert puts every node back to snapshot name: disk, and for a snapshot
// of a running node its memory, so the node runs on from that moment. SSH
// connections opened before are dead without the client noticing (no FIN
// reaches it): close the remote.Pool and dial again. Every node must have
// the snapshot.
func (p *Provider) Revert(ctx context.Context, name string) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	doms, err := p.allDomains(l)
	if err != nil {
		return err
	}
	snaps := make([]golibvirt.DomainSnapshot, len(doms))
	for i, d := range doms {
		s, err := l.DomainSnapshotLookupByName(d, name, 0)
		if err != nil {
			return fmt.Errorf("node %s: no snapshot %q (%v); list them with virsh snapshot-list %s", p.c.Nodes[i].Name, name, err, d.Name)
		}
		snaps[i] = s
	}
	for i, s := range snaps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := l.DomainRevertToSnapshot(s, 0); err != nil {
			return fmt.Errorf("node %s: revert %s to snapshot %q: %w", p.c.Nodes[i].Name, doms[i].Name, name, err)
		}
	}
	return nil
}

// DeleteSnapshot removes snapshot name from every node that has it.
func (p *Provider) DeleteSnapshot(ctx context.Context, name string) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	return errors.Join(p.eachNodeDomain(l, func(n config.Node, d golibvirt.Domain, found bool) []error {
		if !found {
			return nil
		}
		s, err := l.DomainSnapshotLookupByName(d, name, 0)
		if isLibvirtErr(err, golibvirt.ErrNoDomainSnapshot) {
			return nil
		}
		if err == nil {
			err = l.DomainSnapshotDelete(s, 0)
		}
		if err != nil {
			return []error{fmt.Errorf("node %s: delete snapshot %q: %w", n.Name, name, err)}
		}
		return nil
	})...)
}

// eachNodeDomain calls fn for every node of cluster.yaml with its domain
// (found false when it has none) and returns the errors of the lookups and
// of fn, in node order. A node whose lookup fails (e.g. a domain of
// another state directory) is not passed to fn.
func (p *Provider) eachNodeDomain(l *golibvirt.Libvirt, fn func(n config.Node, d golibvirt.Domain, found bool) []error) []error {
	var errs []error
	for _, n := range p.c.Nodes {
		d, found, err := p.lookupDomain(l, n.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, fn(n, d, found)...)
	}
	return errs
}

// Destroy powers off and undefines every node domain (with its NVRAM and
// snapshot metadata), deletes the node volumes (overlay with its internal
// snapshots, seed), and the network when khw made it for this cluster (its
// metadata names this state directory). The pool and the base image
// volumes stay (a shared cache). Missing objects are skipped.
func (p *Provider) Destroy(ctx context.Context) error {
	l, err := p.connect()
	if err != nil {
		return err
	}
	errs := p.eachNodeDomain(l, func(n config.Node, d golibvirt.Domain, found bool) []error {
		if found {
			if st, _ := domainState(l, d); st != golibvirt.DomainShutoff {
				if err := l.DomainDestroy(d); err != nil && !isLibvirtErr(err, golibvirt.ErrOperationInvalid) {
					return []error{fmt.Errorf("node %s: power off %s: %w", n.Name, d.Name, err)}
				}
			}
			flags := golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata |
				golibvirt.DomainUndefineNvram | golibvirt.DomainUndefineCheckpointsMetadata
			if err := l.DomainUndefineFlags(d, flags); err != nil {
				return []error{fmt.Errorf("node %s: undefine %s: %w", n.Name, d.Name, err)}
			}
		}
		return p.deleteVolumes(l, n.Name)
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := p.deleteOwnNetwork(l); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(p.opts.StateDir, "libvirt"))
}

func (p *Provider) deleteVolumes(l *golibvirt.Libvirt, node string) []error {
	pool, err := l.StoragePoolLookupByName(p.opts.Pool)
	if isLibvirtErr(err, golibvirt.ErrNoStoragePool) {
		return nil
	}
	if err != nil {
		return []error{err}
	}
	_ = l.StoragePoolRefresh(pool, 0)
	var errs []error
	for _, name := range []string{p.DiskVolume(node), p.SeedVolume(node)} {
		v, err := l.StorageVolLookupByName(pool, name)
		if isLibvirtErr(err, golibvirt.ErrNoStorageVol) {
			continue
		}
		if err == nil {
			err = l.StorageVolDelete(v, golibvirt.StorageVolDeleteNormal)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: delete volume %s: %w", node, name, err))
		}
	}
	return errs
}

func (p *Provider) deleteOwnNetwork(l *golibvirt.Libvirt) error {
	name := p.OwnNetworkName()
	n, err := l.NetworkLookupByName(name)
	if isLibvirtErr(err, golibvirt.ErrNoNetwork) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up network %s: %w", name, err)
	}
	x, err := networkXML(l, n)
	if err != nil {
		return err
	}
	o, ok := ownerOf(x.Metadata)
	if !ok || o.StateDir != p.opts.StateDir {
		return nil // not made by khw for this state directory: leave it
	}
	if active, _ := l.NetworkIsActive(n); active != 0 {
		if err := l.NetworkDestroy(n); err != nil {
			return fmt.Errorf("stop network %s: %w", name, err)
		}
	}
	if err := l.NetworkUndefine(n); err != nil {
		return fmt.Errorf("undefine network %s: %w", name, err)
	}
	return nil
}

// ConsoleLogPath is where libvirt's QEMU driver on this host keeps a
// domain's log (QEMU's stderr and, with a serial log, the console).
func ConsoleLogPath(domain string) string {
	return filepath.Join("/var/log/libvirt/qemu", domain+".log")
}

// Slowdown implements vm.Timing: VMs boot and start services slower than
// nspawn nodes (factor 3 under KVM), and QEMU's TCG emulation is about 15×
// slower again (factor 15). The domain type is libvirt.domainType, else
// what the KVM probe decided (on Create), else that of this cluster's
// existing domains (read here when libvirtd answers); 15 while none of
// these is known, so that no wait is cut short.
func (p *Provider) Slowdown() int {
	p.mu.Lock()
	typ := p.domType
	p.mu.Unlock()
	if typ == "" {
		if l, err := p.connect(); err == nil {
			for _, n := range p.c.Nodes {
				if _, found, err := p.lookupDomain(l, n.Name); err == nil && found {
					break
				}
			}
		}
		p.mu.Lock()
		typ = p.domType
		p.mu.Unlock()
	}
	if typ == DomainKVM {
		return 3
	}
	return 15
}
