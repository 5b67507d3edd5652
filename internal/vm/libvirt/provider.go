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
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/config"
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
	// name none (01-machines wires the artifact catalog's Ubuntu cloud image).
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
		return d, false, &vm.ForeignOwnerError{Cluster: p.c.Name, Resource: "the libvirt domain " + name, Owner: o.StateDir, StateDir: p.opts.StateDir}
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
