package libvirt

import (
	"fmt"
	"net/netip"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/khw-dev/khw/internal/vm"
)

// The cluster network: reuse the libvirt network that holds network.cidr,
// or make (and later delete) khw-<cluster>.

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
				return "", &vm.ForeignOwnerError{Cluster: p.c.Name, Resource: "the libvirt network " + n.Name, Owner: o.StateDir, StateDir: p.opts.StateDir}
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
