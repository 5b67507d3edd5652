package vm

import "github.com/khw-dev/khw/internal/config"

// NodePrefix returns node n's IP with the prefix length of network.cidr,
// e.g. 192.168.122.11/24: the address every provider configures on the node
// (the libvirt provider writes it into cloud-init's network-config). Errors
// name the bad network.cidr or nodes[].ip.
func NodePrefix(c *config.Cluster, n config.Node) (string, error) { return nodePrefix(c, n) }
