package vm

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/khw-dev/khw/internal/config"
)

// NodeUser is the login user khw creates on every node (nspawn: uid/gid
// 1000; libvirt: by cloud-init), with sudo NOPASSWD, matching
// remote.DefaultUser.
const NodeUser = "ubuntu"

// NodePrefix returns node n's IP with the prefix length of network.cidr,
// e.g. 192.168.122.11/24: the address every provider configures on the node
// (the libvirt provider writes it into cloud-init's network-config). Errors
// name the bad network.cidr or nodes[].ip.
func NodePrefix(c *config.Cluster, n config.Node) (string, error) { return nodePrefix(c, n) }

// nodePrefix is the node IP with the node network's prefix length.
func nodePrefix(c *config.Cluster, n config.Node) (string, error) {
	_, bits, err := networkBits(c)
	if err != nil {
		return "", err
	}
	if !n.Addr().IsValid() {
		return "", fmt.Errorf("node %s: ip %q is not an IPv4 address; fix nodes[].ip in cluster.yaml", n.Name, n.IP)
	}
	return n.Addr().String() + "/" + strconv.Itoa(bits), nil
}

func networkBits(c *config.Cluster) (string, int, error) {
	p, err := netip.ParsePrefix(c.Network.CIDR)
	if err != nil {
		return "", 0, fmt.Errorf("network.cidr %q: %w; set it like 192.168.122.0/24", c.Network.CIDR, err)
	}
	return p.String(), p.Bits(), nil
}

// Addresses maps the node names of c to their cluster.yaml IPs: what
// every provider's Addresses returns.
func Addresses(c *config.Cluster) map[string]netip.Addr {
	m := map[string]netip.Addr{}
	for _, n := range c.Nodes {
		m[n.Name] = n.Addr()
	}
	return m
}
